"""A small tmpfs mounted for a test (a full disk, a full /dev/shm), unmounted whatever happens; the test is
skipped where it cannot be mounted (not root, no mount)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's ``size=``: "16k", "64k") mounted on the folder ``path``, made here."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full file system needs a small tmpfs: mounting one needs root")
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
