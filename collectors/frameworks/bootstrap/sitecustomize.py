"""Started by ``ddltrace run --framework NAME``: switch the framework's profiler on from outside the job.

Python imports ``sitecustomize`` at start-up from the first folder on its path that has one; ddltrace puts
this folder first on PYTHONPATH, then runs the ``sitecustomize`` that would otherwise have run (Debian's, a
virtual environment's), so nothing the job relied on is lost. Standard library only.
"""

import os
import sys


def _start() -> None:
    if not os.environ.get("DDLTRACE_FRAMEWORK"):
        return
    try:
        import _ddltrace_boot

        _ddltrace_boot.install()
    except Exception as exc:  # the job runs on, unprofiled, and says why
        print(f"ddltrace: framework bootstrap failed in pid {os.getpid()}: {exc!r}", file=sys.stderr)


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path (the one this file shadows)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for folder in sys.path:
        candidate = os.path.join(folder or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(folder or os.getcwd()) == here or not os.path.isfile(candidate):
            continue
        spec = importlib.util.spec_from_file_location("_ddltrace_next_sitecustomize", candidate)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            print(f"ddltrace: {candidate} failed: {exc!r}", file=sys.stderr)
        return


_start()
_chain()
