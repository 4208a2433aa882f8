"""A data disk of its own on this machine: an ext4 file system in a file, attached as a loop device and mounted, so
that a disk throttle (:mod:`.disk_throttle`) can slow a job's reads of its data and nothing else (needs root,
util-linux's ``losetup``, ``mkfs.ext4`` and ``mount``).

A throttle of the root disk slows every read that reaches it, a throttled process's reads of its own code too:
this VM's kernel pages out page-cache pages left idle for about a minute (DAMON's ``pageout`` scheme), so the
job's ranks kept fetching their Python modules and the code pages of numpy and MPI through the throttle, at
random moments, initialisations included. On a loop device only the data is behind the throttle.

The backing file ``<folder>/.ddlloop<pid>-<n>.img`` is sparse; the mount point is a temporary folder. When the
``with`` block ends (also at exit, and for an owner that died, by the next :class:`LoopDisk` made) the file
system is unmounted, the loop device detached and the file and the mount point removed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ddltrace.collectors.cgroup_v1 import owner_gone, owner_tag
from ddltrace.collectors.scoped import Scoped
from ddltrace.errors import DdltraceError

_PREFIX = "ddlloop"
TOOLS = ("losetup", "mkfs.ext4", "mount", "umount")


def missing() -> str | None:
    """Why a loop disk cannot be made here, or None."""
    if os.geteuid() != 0:
        return "a loop disk needs root (losetup, mount)"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    return f"a loop disk needs {', '.join(absent)} (util-linux, e2fsprogs)" if absent else None


def _run(argv: list[str], what: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise DdltraceError(f"loop disk: {what} failed ({' '.join(argv)}: {done.stderr.strip()[-300:]})")
    return done.stdout.strip()


class LoopDisk(Scoped):
    """An ext4 file system of ``size_mib`` MiB in a file in ``folder``, mounted at :attr:`mount`; :attr:`device`
    is its loop device (``/dev/loopN``)."""

    def __init__(self, folder: str | os.PathLike, size_mib: int = 256):
        why = missing()
        if why:
            raise DdltraceError(why)
        if not Path(folder).is_dir():
            raise DdltraceError(f"{folder}: no such folder for the loop disk's file")
        self.size_mib = size_mib
        self.tag = owner_tag(_PREFIX)
        self.image = Path(folder).resolve() / f".{self.tag}.img"
        self.device: str | None = None
        self.mount: Path | None = None

    def __enter__(self) -> LoopDisk:
        remove_stale(self.image.parent)
        atexit.register(self.close)
        return super().__enter__()

    def _make(self) -> None:
        with open(self.image, "wb") as f:
            f.truncate(self.size_mib * 2**20)
        self.device = _run(["losetup", "--find", "--show", str(self.image)], "attaching the loop device")
        _run(["mkfs.ext4", "-q", "-F", self.device], "making its file system")
        self.mount = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
        _run(["mount", self.device, str(self.mount)], "mounting it")

    def close(self) -> None:
        """Unmount, detach, remove the file and the mount point (safe to call twice; the exit hook stays until
        everything is removed, so a Ctrl-C during the removal still leaves it to the exit)."""
        _remove(self.image, self.device, self.mount)
        self.device = self.mount = None
        atexit.unregister(self.close)


def _remove(image: Path, device: str | None, mount: Path | None) -> None:
    if mount is not None:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)  # busy: detached when released
        with contextlib.suppress(OSError):
            mount.rmdir()
    if device is not None:
        subprocess.run(["losetup", "-d", device], capture_output=True)
    image.unlink(missing_ok=True)


def _attached() -> dict[str, str]:
    """Backing file -> loop device, of every attached loop device."""
    out = {}
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            out[backing.read_text().strip().removesuffix(" (deleted)")] = f"/dev/{backing.parent.parent.name}"
    return out


def remove_stale(folder: str | os.PathLike) -> list[str]:
    """Remove the loop disks whose owners are no longer alive, attached anywhere or left in ``folder`` (unmounted,
    detached, their files and mount points removed); their files' names."""
    gone = []
    attached = _attached()
    images = {Path(path) for path in attached} | {p.resolve() for p in Path(folder).glob(f".{_PREFIX}*.img")}
    for image in sorted(images):
        tag = image.name[1:].removesuffix(".img")
        if not (image.name.startswith(".") and image.name.endswith(".img") and owner_gone(tag, _PREFIX)):
            continue
        device = attached.get(str(image))
        mounts = [Path(line.split()[1]) for line in Path("/proc/mounts").read_text().splitlines()
                  if device and line.split()[0] == device]
        for mount in mounts or [None]:
            _remove(image, device, mount)
        for left in Path(tempfile.gettempdir()).glob(f"{tag}-*"):
            with contextlib.suppress(OSError):
                left.rmdir()
        gone.append(image.name)
    return gone
