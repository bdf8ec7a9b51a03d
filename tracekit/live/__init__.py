"""Live straggler watch: the aggregator side of ``tracekit record --live`` (docs/live.md).

- ``summaries``: the ranks' step summaries, validated, as a realized-actions frame;
- ``assess``: one interval judged with the offline analysis's own functions (stragglers, price, bubble);
- ``tracker``: alerts across intervals, persistent vs transient, capture on anomaly;
- ``aggregator``: the process that receives, judges and writes ``live.jsonl``;
- ``view``, ``metrics``: the terminal view and the Prometheus endpoint;
- ``session``: what ``tracekit record --live`` runs around the job.

Not for the ranks' side (``collectors.live``, ``collectors.live_wire``).
"""
