"""CNTK: the profiler CNTK documents, switched on when ``cntk`` is imported. Untested: CNTK 2.7 does not install
on Python >= 3.7, so no CNTK job has run under this bootstrap (docs/FRAMEWORKS.md).

``cntk.debugging.start_profiler(dir, sync_gpu)`` then ``enable_profiler()`` (CNTK 2.x) start it; at exit
``stop_profiler()`` writes the detail JSON into this process's folder, which the ``cntk`` importer reads.
CNTK's distributed training is MPI: the rank comes from the MPI launcher's environment.
"""

from __future__ import annotations

import atexit
import os

from _ddltrace_boot import after_import


def install(proc) -> None:
    after_import("cntk", lambda cntk: _start(proc, cntk))


def _start(proc, cntk) -> None:
    folder = proc.path("cntk")
    cntk.debugging.start_profiler(dir=folder, sync_gpu=True)
    cntk.debugging.enable_profiler()
    proc.note("CNTK profiles the whole run (its profiler has no step window)")

    def stop() -> None:
        cntk.debugging.stop_profiler()
        for name in sorted(os.listdir(folder)):
            proc.add_file(os.path.join("cntk", name))

    atexit.register(stop)
