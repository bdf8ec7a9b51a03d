"""GPU timelines of Kineto traces: kernel classes, label projection, busy/idle breakdown, overlap."""

HTA_VERSION = "0.5.0"
"""The Holistic Trace Analysis release whose definitions ``tracekit.gpu.hta_compat`` follows (here,
without polars, for the command-line help that names it)."""
