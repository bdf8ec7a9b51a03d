"""Whose fault a failed ``tracekit record`` command was, as far as the capture can tell: one line.

When a training command exits non-zero (a rank raised, torchrun reported a child error, a gloo
timeout under load), the job's own error output names the cause, and ``record``'s summary only
showed the exit status beside the rank table. A user then cannot tell whether the capture had a
part in it. The collector never raises into the job: what goes wrong inside it is caught, the part
switched off and counted as a collector problem in the manifest (``Manifest.collector_problems``).
So a failure with no collector problem in any rank is the job's own, and this module says so.

Not for a command stopped by a signal ``record`` passed on (the interruption line says what
happened), nor for a job that succeeded.
Standard library only: importing this module must not import torch.
"""

from __future__ import annotations

from collectors.manifest import Manifest


def failure_line(manifest: Manifest) -> str | None:
    """One line on a failed command's cause as tracekit sees it; None if it did not fail or was interrupted."""
    status = manifest.exit_code
    if status is None or status == 0 or manifest.interruption is not None:
        return None
    failed = f"the command failed (exit status {status})"
    where = "its own error output above names the cause (for torchrun: the Root Cause section)"
    if manifest.collector_problems:
        return (
            f"{failed}; tracekit's collector switched parts of itself off ({len(manifest.collector_problems)}"
            f" collector problem(s), listed above) but never raises into the job: {where}"
        )
    return (
        f"{failed} and tracekit's collector reported no fault in any rank: the failure is the job's; {where}"
    )
