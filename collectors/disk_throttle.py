"""A slower disk on this machine: every process of a job in one cgroup (v1 ``blkio`` controller) whose reads (and
optionally writes) of the disk a path lies on are throttled to a rate in bytes per second (needs root and a cgroup
v1 ``blkio`` hierarchy; ``blkio.throttle.read_bps_device``).

The throttle slows what reaches the device: a read served from the page cache is not slowed, so a job that should
see the slower disk must read cold (the reference job's ``--cold-read``: its file's pages dropped before each
worker reads; ``ddltrace calibrate``'s disk section reads with O_DIRECT). The kernel throttles per cgroup, so the
job's processes share the rate as they would share one slower disk. Buffered writes are written back by the
kernel's flusher threads, outside the cgroup: a write limit slows only O_DIRECT and synchronous writes.

The device is the whole disk holding ``path`` (its ``st_dev``, the parent disk of a partition), found when the
throttle is made. Processes enter through :attr:`DiskThrottle.wrapper`, a shell script that writes its own pid
into the cgroup before it runs its arguments (children stay in it); the cgroup is removed, and every process still
in it killed, when the ``with`` block ends, at interpreter exit, and, for an owner that died, by the next
:class:`DiskThrottle` made on this machine.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ddltrace.collectors import cgroup_v1
from ddltrace.errors import DdltraceError

BLKIO_ROOT = Path("/sys/fs/cgroup/blkio")
_PREFIX = "ddlblkio"

_WRAPPER = """#!/bin/sh
# ddltrace disk throttle {tag}: run "$@" with the reads of {device} at {read_bps} B/s (writes: {write_bps})
echo $$ > "{root}/cgroup.procs" || {{ echo "ddltrace disk throttle: cannot enter {root}" >&2; exit 97; }}
exec "$@"
"""


def missing() -> str | None:
    """Why a disk throttle cannot be set here, or None."""
    if os.geteuid() != 0:
        return "a disk throttle needs root (cgroup v1 blkio controller)"
    if not (BLKIO_ROOT / "blkio.throttle.read_bps_device").exists():
        return (f"a disk throttle needs the cgroup v1 blkio controller at {BLKIO_ROOT} "
                "(blkio.throttle.read_bps_device absent)")
    return None


def device_of(path: str | os.PathLike) -> str:
    """``major:minor`` of the whole disk that ``path`` lies on (a partition's parent disk), or DdltraceError naming
    the path when it is on no block device (tmpfs, overlay, a network file system)."""
    try:
        dev = os.stat(path).st_dev
    except OSError as exc:
        raise DdltraceError(f"{path}: cannot find its disk ({exc.strerror})") from None
    number = f"{os.major(dev)}:{os.minor(dev)}"
    sysfs = Path("/sys/dev/block") / number
    if not sysfs.exists():
        raise DdltraceError(f"{path}: on device {number}, which is no block device (tmpfs, overlay or a network "
                            "file system): a disk throttle cannot slow it")
    if (sysfs / "partition").exists():  # the throttle takes whole disks; a partition's disk is its parent in sysfs
        return (sysfs.resolve().parent / "dev").read_text().strip()
    return number


class DiskThrottle(cgroup_v1.GroupOwner):
    """Every process started through :attr:`wrapper` reads the disk that ``path`` lies on at ``read_bps`` bytes per
    second at most, all of them together (and writes it at ``write_bps``, where given)."""

    def __init__(self, path: str | os.PathLike, read_bps: int, write_bps: int | None = None):
        for name, rate in (("read", read_bps), ("write", write_bps)):
            if rate is not None and not (isinstance(rate, int) and rate > 0):
                raise DdltraceError(f"disk throttle: the {name} rate must be a whole number of bytes per second > 0, "
                                    f"got {rate!r}")
        why = missing()
        if why:
            raise DdltraceError(why)
        self.device = device_of(path)
        self.read_bps, self.write_bps = read_bps, write_bps
        super().__init__(BLKIO_ROOT, _PREFIX)

    def _make(self) -> None:
        self.root.mkdir()
        limits = (("read_bps_device", self.read_bps), ("write_bps_device", self.write_bps))
        for name, rate in limits:
            if rate:
                try:
                    (self.root / f"blkio.throttle.{name}").write_text(f"{self.device} {rate}\n")
                except OSError as exc:
                    raise DdltraceError(f"disk throttle: the kernel refused {name} {self.device} {rate} "
                                        f"({exc.strerror})") from None
        self._write_wrapper("in-throttle", _WRAPPER.format(tag=self.tag, root=self.root, device=self.device,
                                                           read_bps=self.read_bps,
                                                           write_bps=self.write_bps or "not limited"))

    def bytes_done(self) -> dict[str, int]:
        """The bytes the cgroup's processes have read and written on the throttled device so far
        (``blkio.throttle.io_service_bytes``: {"Read": ..., "Write": ...}; zeros before any I/O)."""
        out = {"Read": 0, "Write": 0}
        with contextlib.suppress(OSError):
            for line in (self.root / "blkio.throttle.io_service_bytes").read_text().splitlines():
                fields = line.split()
                if len(fields) == 3 and fields[0] == self.device and fields[1] in out:
                    out[fields[1]] = int(fields[2])
        return out


def remove_stale() -> list[str]:
    """Remove the cgroups that throttles of processes no longer alive left behind; their names."""
    return cgroup_v1.remove_stale(BLKIO_ROOT, _PREFIX)
