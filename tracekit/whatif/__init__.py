"""What-if analysis of a realized run (Lin et al., "Understanding Stragglers in Large Model Training
Using What-if Analysis", OSDI 2025): replay the run's dependency graph with idealized durations and
attribute the slowdown to op types, data-parallel ranks, pipeline stages and workers.

Modules, one idea each:

- ``graph``: the dependency graph value (nodes, in-rank and cross-rank edges, synchronizing groups).
- ``replay``: the timing engine that replays a graph with chosen durations.
- ``case``: a run ready to replay (graph + one row per op instance), the shared input of every analysis.
- ``optable``: the op-table Parquet + YAML reader (the paper artifact's input format).
- ``megatron``: the dependency model of a Megatron-LM step recorded in an op-table.
- ``pipeline``: the dependency model of a realized pipeline schedule (tracekit's Kineto path).
- ``clock``: per-host clock offsets from the causality of cross-rank dependencies.
- ``inputs``: either input format to a ``ReplayCase`` (clocks aligned for Kineto runs).
- ``named``: the gap to the named schedule's simulated prediction, split into its causes.
- ``attribution``: ideal durations, slowdown S, its attribution, M_S and M_W.

Not for: finding straggling ranks by their durations alone (``tracekit.stragglers``).
"""
