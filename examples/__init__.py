"""Example training jobs to capture: real pipeline schedules on CPU (gloo), outside the installed packages.

- ``python -m examples.pipeline_job``: a small model split into stages, any schedule tracekit labels;
- ``python -m examples.megatron_job``: a tiny Megatron-core GPT with pipeline parallelism;
- ``examples/small_model.py``: the model size the benchmarks and the bundled samples use.

Run them from the repository root. They stand for a user's job: they import torch (and dualpipe,
megatron-core), never ``collectors`` or ``tracekit``.
"""
