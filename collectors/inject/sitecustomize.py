"""Injected by ``tracekit record``: start watching for pipeline schedules in every Python process.

``tracekit record`` prepends this file's directory to PYTHONPATH and sets TRACEKIT_OUT, so every
Python process of the job (the launcher, torchrun's agent, each rank) runs this at start-up. It
only installs an import hook (collectors.hooks); torch is not imported here, and a process that
never imports a pipeline schedule pays for one dict lookup per import. A Python without torch
says so in one line and captures nothing. Then it runs the
sitecustomize this one shadows, if any, so the user's own start-up code still runs.
"""

import os
import sys


def _start_watching() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import collectors.hooks
    except ImportError:
        # A job run by another interpreter than tracekit's: find collectors beside this file,
        # at the end of sys.path so it shadows nothing of the job's.
        sys.path.append(os.path.dirname(os.path.dirname(here)))
        import collectors.hooks
    collectors.hooks.install()


def _run_shadowed_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    search = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", search)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_tracekit_shadowed_sitecustomize"] = module
    spec.loader.exec_module(module)


def _leave_no_torch_note() -> None:
    """Tell ``tracekit record`` which Python lacked torch (collectors.launch.NO_TORCH_PREFIX); never raises."""
    try:
        note = os.path.join(os.environ["TRACEKIT_OUT"], f".tracekit-no-torch-{os.getpid()}")
        with open(note, "w", encoding="utf-8") as file:
            file.write(sys.executable)
    except Exception:  # noqa: BLE001, S110 - a full or read-only disk must not stop the job
        pass


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


if os.environ.get("TRACEKIT_OUT"):
    try:
        if _has_torch():
            _start_watching()
        else:
            print(
                f"tracekit: {sys.executable} has no torch: this process captures nothing "
                "(install torch in the job's environment, e.g. pip install 'tracekit[collect]')",
                file=sys.stderr,
            )
            _leave_no_torch_note()
    except Exception as error:  # noqa: BLE001 - the job must start even if the collector cannot
        print(f"tracekit: capture disabled in pid {os.getpid()}: {error!r}", file=sys.stderr)
_run_shadowed_sitecustomize()
