"""The compiled parts: the trace reader's event scanner (tracekit/trace/_eventscan.c) and the
union of sorted spans (tracekit/analysis/_spans.c).

Optional: without a C compiler the install still succeeds; traces are then read by polars' JSON
reader, several times slower (docs/performance.md, "hta_compare"), and spans are merged by polars
queries.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.trace._eventscan",
            sources=["tracekit/trace/_eventscan.c"],
            depends=["tracekit/arrow_c_abi.h"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra"],
            optional=True,
        ),
        Extension(
            "tracekit.analysis._spans",
            sources=["tracekit/analysis/_spans.c"],
            depends=["tracekit/arrow_c_abi.h"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra"],
            optional=True,
        ),
    ]
)
