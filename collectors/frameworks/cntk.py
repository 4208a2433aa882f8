"""CNTK: the bootstrap (bootstrap/_ddltrace_cntk.py) calls ``cntk.debugging.start_profiler`` and
``enable_profiler`` when the job imports ``cntk``, and ``stop_profiler`` at exit; each rank writes its detail
JSON into its own folder and the ``cntk`` importer reads it. Untested here: CNTK does not install on Python 3.11.
"""

from __future__ import annotations

from pathlib import Path

NOTE = "CNTK support is untested (CNTK does not install on current Python); see docs/FRAMEWORKS.md"


def env(fw_dir: Path, steps: tuple[int, int]) -> dict[str, str]:
    """No variables: the bootstrap starts the profiler."""
    return {}
