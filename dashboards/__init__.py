"""Charts and the offline HTML page: the analyses' tables drawn with altair (and polars), no torch.

Modules, one view each, every view taking plain frames with a declared schema:

- ``timeline``: the realized schedule above its ideal replay (Gantt, or a busy heatmap at scale);
- ``utilization``: bubble fraction per rank, realized against ideal;
- ``overlap``: communication hidden under compute, per rank and communication class;
- ``stragglers``: slowdown against peers per rank and kind, and the what-if attribution bars;
- ``comparison``: simulated bubble fraction against micro-batches per schedule, the run marked;

and the machinery: ``encoding`` (palette, inline data and its row cap, rank bands), ``page`` (the
self-contained HTML), ``export`` (PNG / SVG), ``build`` (from a loaded run to the page).

Not for: computing anything a chart shows (``tracekit``'s analyses do, and never draw).
"""
