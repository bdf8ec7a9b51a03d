"""Reading a pipeline's process group inside a job: its global ranks, or None, never an exception."""

from __future__ import annotations

import json
import subprocess
import sys

_JOB = """
import json, socket
import torch.distributed as dist
from collectors import hooks
from collectors.groups import group_ranks

before = group_ranks(None)  # no process group yet
with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
print(json.dumps({
    "before": before,
    "default": group_ranks(None),
    "new_group": group_ranks(dist.new_group([0])),
    "not_a_group": group_ranks("not a group"),
    "problems": hooks.problems(),
}))
dist.destroy_process_group()
"""


def test_group_ranks_reads_real_groups_and_turns_anything_else_into_none() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _JOB], capture_output=True, text=True, timeout=120, check=True
    )

    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert (out["before"], out["default"], out["new_group"], out["not_a_group"]) == (None, [0], [0], None)
    (problem,) = out["problems"]
    assert problem.startswith("could not read the pipeline's process group (")
    assert "could not read the pipeline's process group" in done.stderr  # said on stderr, the job ran on
