"""DNN description files the model command tests write (``ddltrace-dnn/1``, docs/MODELS.md)."""

from __future__ import annotations

import json
from pathlib import Path


def write_convs_dnn(folder: Path) -> Path:
    """``folder/convs.json``: one conv layer of 8,000 neurons, fan-in 27, 864 weights, after 3,000 input values,
    with a gemm and an fft algorithm timed at batches 32 and 64 (gemm 1 ms and 1,000 B of workspace per sample,
    fft 0.3 ms and 2,000,000 B per sample); its path."""
    def costs(t, m):
        return {str(b): {"time_s": t * b, "workspace_bytes": m * b} for b in (32, 64)}

    dnn = {"format": "ddltrace-dnn/1", "name": "convs", "input": {"neurons": 3000}, "layers": [
        {"name": "c1", "type": "conv", "neurons": 8000, "fan_in": 27, "weights": 864,
         "algorithms": {"gemm": costs(1e-3, 1e3), "fft": costs(3e-4, 2e6)}}]}
    path = folder / "convs.json"
    path.write_text(json.dumps(dnn))
    return path
