"""The lines the TensorFlow profiler (xprof) derives on a device plane, and the steps they mark.

A device plane of an XPlane (and the device "process" of its trace-viewer JSON) holds the stream lines, where the
kernels and copies ran, and lines derived from them that annotate the same instants: ``Steps`` (one event per
training step, named by its number), ``TensorFlow Ops`` / ``Framework Ops``, ``TensorFlow Name Scope`` /
``Framework Name Scope``, ``XLA Modules``, ``XLA Ops``, ``Async XLA Ops``, ``Source code``, ... (the names of
``tsl/profiler/utils/xplane_schema``). None of them is device time. The ``Steps`` line gives step boundaries: a
stream event of that device that starts within a step's span belongs to that step.
"""

from __future__ import annotations

import numpy as np

#: Derived lines of a device plane: annotations of its stream lines, never device time.
DERIVED_LINES = frozenset({
    "Steps", "Sparse Core Steps", "Sparse Core Modules", "Sparse Core Ops", "Sparse Core Syncs",
    "TensorFlow Ops", "TensorFlow Name Scope", "Framework Ops", "Framework Name Scope",
    "XLA Modules", "XLA Ops", "Async XLA Ops", "Launch Stats", "Source code", "Host Offload Ops",
    "Tensor Core Sync Flag", "_counters_",
})
#: The derived line whose events are the training steps.
STEP_LINE = "Steps"
#: How the import report counts the derived lines' events.
DROPPED = "derived device lines (Steps, TensorFlow/Framework Ops and Name Scope, XLA, Source code): " \
          "annotations of the stream lines, not device time"


def step_number(name: str, position: int) -> int:
    """A ``Steps`` event's step: its name when it is a number (xprof names it so), else its position on the line."""
    return int(name) if name.isascii() and name.isdigit() and len(name) < 18 else position


def steps_of_rows(row_device: np.ndarray, row_start: np.ndarray, step_device: np.ndarray,
                  step_start: np.ndarray, step_end: np.ndarray, step_num: np.ndarray) -> np.ndarray:
    """The step of each row (-1: none): the ``Steps`` event of the row's device (same integer code) whose span
    [start, end) holds the row's start. Times in any one unit; ``row_device`` -1 for rows on no device."""
    steps = np.full(len(row_start), -1, dtype=np.int64)
    for device in np.unique(step_device):
        mine = np.flatnonzero(step_device == device)
        mine = mine[np.argsort(step_start[mine], kind="stable")]
        rows = np.flatnonzero(row_device == device)
        at = np.searchsorted(step_start[mine], row_start[rows], side="right") - 1
        inside = (at >= 0) & (row_start[rows] < step_end[mine][np.maximum(at, 0)])
        steps[rows[inside]] = step_num[mine][at[inside]]
    return steps
