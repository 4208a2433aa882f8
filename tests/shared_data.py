"""Where the tests find the workplace's shared folder of real traces: ``../shared`` beside the checkout (as CI
clones it), else ``/work/shared``. Tests that read it skip, saying so, when neither exists."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = next((p for p in (REPO.parent / "shared", Path("/work/shared")) if p.is_dir()), REPO.parent / "shared")
