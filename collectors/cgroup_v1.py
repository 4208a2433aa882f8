"""Removing the cgroup v1 groups a collector made (:mod:`.cpu_quota`, :mod:`.disk_throttle`): every process still
in them killed, then the groups removed, children first; and the groups of owners no longer alive."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path


def remove_group(root: Path) -> None:
    """Kill every process in ``root`` and in its child groups, then remove them (nothing when ``root`` is gone)."""
    if not root.exists():
        return
    groups = sorted((p for p in root.iterdir() if p.is_dir()), reverse=True) + [root]
    for _ in range(20):
        left = False
        for group in groups:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    left = True
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
        if not left:
            break
        time.sleep(0.05)
    for group in groups:
        with contextlib.suppress(OSError):
            group.rmdir()


def remove_stale(controller: Path, prefix: str) -> list[str]:
    """Remove the groups ``<controller>/<prefix><owner pid>-<n>`` whose owner is no longer alive, and the folders
    ``<temp dir>/<group name>-*`` they kept their wrapper in; the names of the groups removed."""
    gone = []
    if not controller.exists():
        return gone
    name = re.compile(rf"^{re.escape(prefix)}(\d+)-\d+$")
    for path in controller.iterdir():
        found = name.match(path.name)
        if found and path.is_dir() and not Path(f"/proc/{found.group(1)}").exists():
            remove_group(path)
            gone.append(path.name)
            for folder in Path(tempfile.gettempdir()).glob(f"{path.name}-*"):
                shutil.rmtree(folder, ignore_errors=True)
    return gone
