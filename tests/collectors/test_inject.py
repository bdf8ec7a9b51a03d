"""The injected sitecustomize: cheap at start-up, and it never hides the job's own sitecustomize."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from collectors.launch import INJECT_DIR, capture_env


def _python(code: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_shadowed_sitecustomize_still_runs(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    env = capture_env(tmp_path / "out", "1:3", "run", base={**os.environ, "PYTHONPATH": str(tmp_path)})

    ran = _python("import os; print(os.environ.get('USER_SITE_RAN'))", env)

    assert env["PYTHONPATH"].split(os.pathsep) == [str(INJECT_DIR), str(tmp_path)]
    assert ran == "yes"


def test_start_up_imports_no_torch(tmp_path: Path) -> None:
    env = capture_env(tmp_path / "out", "1:3", "run")

    loaded = _python(
        "import sys; print(sorted(m for m in ('torch', 'collectors.capture') if m in sys.modules))", env
    )

    assert loaded == "[]"


def test_schedules_are_patched_when_imported(tmp_path: Path) -> None:
    env = capture_env(tmp_path / "out", "1:3", "run")
    code = (
        "import torch.distributed.pipelining.schedules as s, dualpipe;"
        "print(hasattr(s._wait_batch_p2p, '__tracekit_original__'),"
        " hasattr(dualpipe.DualPipe._weight_chunk, '__tracekit_original__'))"
    )

    assert _python(code, env) == "True True"
