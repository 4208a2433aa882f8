"""A folder the command under test cannot write: mode 0o555, and as root the command run without the capabilities
that let root write anywhere (``setpriv``); the test is skipped where that cannot be arranged."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def read_only_folder(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """(the folder ``tmp_path / "locked"``, the prefix to run a command with so that the folder's mode applies to
    it); the folder is writable again after the block."""
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: a folder's mode cannot be made to apply")
    drop = "-dac_override,-dac_read_search"
    prefix = ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}"] if os.geteuid() == 0 else []
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        yield locked, prefix
    finally:
        locked.chmod(0o755)
