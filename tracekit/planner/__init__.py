"""The planner: recommend a pipeline strategy (depth, schedule, micro-batches) for a cluster and a model.

``spec`` holds the inputs, ``presets`` the built-in models and clusters, ``layers`` the per-layer
parameters, FLOPs, activations and all-to-all volumes, ``costs`` turns those into per-action
times for the timing engine, ``memory`` the per-rank memory, ``candidates`` the enumeration with
feasibility reasons, ``calibrate`` the scale factors from a captured run, ``plan`` simulates and
ranks, and ``markdown`` renders a plan for people. Not for: measuring a run (``tracekit.analysis``).
"""
