"""What changed between two runs of the same job, priced in step time: the pure computations that
``tracekit.run_diff`` (``tracekit.diff(base, new)``) puts together.

- ``shape``: whether the two runs can be compared (schedule, depth, world size, micro-batches, layout);
- ``steps``: each run's step times, the measured change and its noise band;
- ``host``: each run's wait for a CPU core per step, and whether it accounts for the change;
- ``explain``: the change decomposed by counterfactual replay of NEW into groups and links;
- ``work``: work one run has and the other not, and per-rank bubble and overlap changes.

Not for: reading traces (``tracekit.run_analysis``) or presenting (``tracekit.present.diff``).
"""
