"""tracekit: measure what a pipeline-parallel training run really did, from its profiler traces."""

__version__ = "0.1.0"
