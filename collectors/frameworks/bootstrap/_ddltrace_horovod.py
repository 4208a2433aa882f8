"""Horovod: its own timeline (``HOROVOD_TIMELINE``, written by rank 0 for every rank's tensors) plus the
underlying framework's profiler (PyTorch's, or TensorFlow's when that bootstrap is present) on every rank.

The timeline variable is read by ``hvd.init()``; the bootstrap sets it, before the job's code runs, to a file in
rank 0's folder (the rank from horovodrun / mpirun's environment). The timeline covers the whole run.
"""

from __future__ import annotations

import importlib
import os

TIMELINE = "horovod_timeline.json"


def install(proc) -> None:
    if proc.meta["rank"] == 0:
        os.environ["HOROVOD_TIMELINE"] = proc.path(TIMELINE)
        proc.add_file(TIMELINE, "horovod")
        proc.note("the Horovod timeline covers the whole run (rank 0's view of every rank's tensors)")
    for name in ("_ddltrace_torch", "_ddltrace_tf"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.install(proc)
