"""The output layer: JSON payloads, tables and plain sentences of every analysis, in one place.

Each module turns the parts of a ``tracekit.run_analysis.RunAnalysis`` into a
``tracekit.present.result.Result`` for one command (``report``, ``stragglers``, ``whatif``); the
CLI prints them (``tracekit.cli.output``) and the dashboard reuses their tables and sentences.

Not for: computing figures (``tracekit.run_analysis``) or drawing charts (``dashboards``).
"""
