"""PyTorch: ``torch.profiler`` started and stopped by the bootstrap (bootstrap/_ddltrace_torch.py).

Nothing to set in the environment but what every framework gets (``record_shapes`` comes with
``DDLTRACE_FW_RECORD_SHAPES``, ``--record-shapes``): in every Python process of the job, once ``torch`` is imported, the
bootstrap registers a global optimizer step post-hook (PyTorch >= 2.0) that counts training steps, starts the
profiler one warm-up step before the window (``schedule(wait=0, warmup=1, active=N)``), records the window
and writes the Kineto trace. The rank comes from torchrun's ``RANK`` or from ``init_process_group``.
"""

from __future__ import annotations

from pathlib import Path


def env(fw_dir: Path, steps: tuple[int, int]) -> dict[str, str]:
    """No variables: the bootstrap does it all."""
    return {}
