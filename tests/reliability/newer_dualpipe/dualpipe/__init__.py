"""A stand-in for a newer release of DeepSeek's ``dualpipe`` whose internals differ from 1.0.0's.

Only for tests: it shadows the installed package (through PYTHONPATH) so the collector's wrappers
meet method signatures and attributes they do not know.
"""

from dualpipe.dualpipe import DualPipe

__all__ = ["DualPipe"]
