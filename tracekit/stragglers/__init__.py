"""Who is slow, on what, and how much step time it costs.

- ``scoring``: per rank and action kind, median compute duration against peers with comparable
  work, a robust score and its threshold, persistent vs one-off slowness, and the step time a
  straggler costs (by what-if replay, ``tracekit.whatif``).

Not for: replay or attribution by stage and op type (``tracekit.whatif``).
"""
