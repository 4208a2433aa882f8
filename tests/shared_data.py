"""Where the tests find the workplace's shared folder of real traces: ``../shared`` beside the checkout (as CI
clones it), else ``/work/shared``. Tests that read it skip, saying so, when neither exists."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = next((p for p in (REPO.parent / "shared", Path("/work/shared")) if p.is_dir()), REPO.parent / "shared")

#: Traces written by others that are not in the repository (tests/data/wild/PROVENANCE.md says where each comes
#: from): found in ../shared/wild_traces once the workplace holds them there, or in tests/data/wild where a
#: developer placed them by hand (git ignores the data files there).
CORPUS_DIRS = (SHARED / "wild_traces", REPO / "tests" / "data" / "wild")


def corpus(folder: str, name: str) -> Path:
    """The corpus file ``folder/name`` where it exists, else its path under tests/data/wild (absent)."""
    paths = [d / folder / name for d in CORPUS_DIRS]
    return next((p for p in paths if p.is_file()), paths[-1])


def needs(path: Path):
    """Skip a test, saying so, when a corpus file is absent on this machine."""
    import pytest

    return pytest.mark.skipif(not path.is_file(), reason=f"{path.parent.name}/{path.name} absent (see "
                                                         "tests/data/wild/PROVENANCE.md for where it comes from)")
