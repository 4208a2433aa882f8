"""Horovod: rank 0 writes Horovod's timeline (``HOROVOD_TIMELINE``, set by the bootstrap in every rank just
before ``hvd.init()``; with PyTorch, ``DYNAMIC`` and started / stopped by rank 0 around the step window) and every
rank runs the PyTorch (or TensorFlow) bootstrap for its framework's own events. Ranks come from horovodrun /
mpirun (HOROVOD_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK), else ``hvd.rank()``. Use it with ``--np`` or
``--launcher`` to record the MPI calls too. Tested with horovodrun + Gloo + PyTorch (docs/FRAMEWORKS.md).
"""

from __future__ import annotations

from pathlib import Path

NOTE = ("Horovod: tested with horovodrun + Gloo + PyTorch only (MPI, TensorFlow, MXNet and elastic runs are "
        "untested); see docs/FRAMEWORKS.md")


def env(fw_dir: Path, steps: tuple[int, int]) -> dict[str, str]:
    """``HOROVOD_TIMELINE_MARK_CYCLES=0`` keeps the timeline small; ``HOROVOD_TIMELINE`` is set by the bootstrap."""
    return {"HOROVOD_TIMELINE_MARK_CYCLES": "0"}
