"""The cgroup v1 groups a collector makes for a job (:mod:`.cpu_quota`, :mod:`.disk_throttle`): :class:`GroupOwner`
holds one for a ``with`` block; removing one kills every process still in it, then removes the groups, children
first; the groups of owners no longer alive are removed by the next owner. The owner's name (:func:`owner_tag`,
:func:`owner_gone`) also names the loop disks of :mod:`.loop_disk`."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

from ddltrace.collectors.scoped import Scoped

_COUNT = iter(range(1 << 30))


class GroupOwner(Scoped):
    """A cgroup ``root`` under ``controller`` named ``<prefix><owner pid>-<n>`` (``tag``), with the wrapper script
    that puts processes in it (:attr:`wrapper`, in a folder of its own), for the length of a ``with`` block: the
    groups left by owners no longer alive are removed first, and this one (every process in it killed) at the
    block's end and at interpreter exit. Subclasses make the group and call :meth:`_write_wrapper` in
    :meth:`_make`."""

    def __init__(self, controller: Path, prefix: str):
        self.controller, self.prefix = controller, prefix
        self.tag = owner_tag(prefix)
        self.root = controller / self.tag
        self._dir: Path | None = None
        self.wrapper: Path | None = None

    def __enter__(self):
        remove_stale(self.controller, self.prefix)
        atexit.register(self.close)
        return super().__enter__()

    def _write_wrapper(self, name: str, text: str) -> None:
        """The wrapper script ``name`` holding ``text``, executable, in a temporary folder named after the tag."""
        self._dir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
        self.wrapper = self._dir / name
        self.wrapper.write_text(text)
        self.wrapper.chmod(0o755)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the group."""
        return [str(self.wrapper), *argv]

    def close(self) -> None:
        """Kill what is left in the group, remove it and the wrapper (safe to call twice; the exit hook stays until
        everything is removed, so a Ctrl-C during the removal still leaves it to the exit)."""
        remove_group(self.root)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        atexit.unregister(self.close)


def owner_tag(prefix: str) -> str:
    """A name ``<prefix><owner pid>-<n>`` for something this process makes and removes (unique in the process): a
    later owner tells from it whether its owner is still alive (:func:`owner_gone`)."""
    return f"{prefix}{os.getpid()}-{next(_COUNT)}"


def owner_gone(name: str, prefix: str) -> bool:
    """Whether ``name`` is an :func:`owner_tag` of ``prefix`` whose owner process is no longer alive."""
    found = re.match(rf"^{re.escape(prefix)}(\d+)-\d+$", name)
    return bool(found) and not Path(f"/proc/{found.group(1)}").exists()


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
    for path in controller.iterdir():
        if path.is_dir() and owner_gone(path.name, prefix):
            remove_group(path)
            gone.append(path.name)
            for folder in Path(tempfile.gettempdir()).glob(f"{path.name}-*"):
                shutil.rmtree(folder, ignore_errors=True)
    return gone
