"""GPU timelines of Kineto traces: kernel classes, label projection, busy/idle breakdown, overlap."""
