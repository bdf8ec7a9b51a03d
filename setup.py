"""The one compiled part: the trace reader's event scanner (tracekit/trace/_eventscan.c).

Optional: without a C compiler the install still succeeds and traces are read by polars' JSON
reader instead, several times slower (docs/performance.md, "hta_compare").
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.trace._eventscan",
            sources=["tracekit/trace/_eventscan.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra"],
            optional=True,
        )
    ]
)
