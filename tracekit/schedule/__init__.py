"""Pipeline schedules as data, and the engine that times them.

``action`` (the shared action type), ``model`` (``Schedule``), one module per generator (``gpipe``,
``one_f_one_b`` with ZB-H1, ``interleaved_1f1b``, ``zb_h2``, ``zbv``, ``dualpipe`` with DualPipeV),
``registry`` (names), ``costs``, ``dependencies`` (the one dependency rule), ``timing`` (the timing
engine's core, shared with the what-if replay), ``engine`` (``simulate``), ``metrics`` (bubbles, memory), ``realized``
(a run's own order and costs) and ``sweep`` (comparisons). docs/schedules.md documents them.
"""
