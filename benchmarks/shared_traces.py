"""Where the benchmarks find the workplace's shared folder of real traces: ``../shared`` beside the checkout (as a
CI clone has it), else ``/work/shared`` (the same rule as tests/shared_data.py)."""

from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
SHARED = next((p for p in (_REPO.parent / "shared", Path("/work/shared")) if p.is_dir()), _REPO.parent / "shared")
