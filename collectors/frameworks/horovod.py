"""Horovod: rank 0 writes Horovod's timeline (``HOROVOD_TIMELINE``, set by the bootstrap in rank 0 only, before
``hvd.init()``) and every rank runs the PyTorch (or TensorFlow) bootstrap for its framework's own events.
Ranks come from horovodrun / mpirun (HOROVOD_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK). Use it with ``--np``
or ``--launcher`` to record the MPI calls too.
"""

from __future__ import annotations

from pathlib import Path

NOTE = "Horovod support is untested here (no Horovod build in this environment); see docs/FRAMEWORKS.md"


def env(fw_dir: Path, steps: tuple[int, int]) -> dict[str, str]:
    """``HOROVOD_TIMELINE_MARK_CYCLES=0`` keeps the timeline small; the file name is set per rank at start."""
    return {"HOROVOD_TIMELINE_MARK_CYCLES": "0"}
