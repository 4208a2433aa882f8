"""Disk: sequential write and read (r_d, w_d in seconds per byte) and random 4 KiB reads (IOPS), bypassing the
page cache, on a file the benchmark creates (and removes) in a directory the user chooses.

The write is timed as an overwrite of a file written out once beforehand (as fio's write job runs once its file
exists), so w_d is the device's write rate, not the file system's block allocation. The page cache is bypassed
with O_DIRECT (buffers from mmap are page-aligned, as it requires). Where the file system refuses O_DIRECT
(tmpfs, some overlay and network file systems), the documented alternative is used: write then ``fdatasync``
and ``posix_fadvise(POSIX_FADV_DONTNEED)``, which drops the file's clean pages so the following reads go to
the device; the method used is recorded.
"""

from __future__ import annotations

import errno
import mmap
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ddltrace.collectors.microbench.measure import Measurement, repeat
from ddltrace.errors import DdltraceError

BLOCK = 1024 * 1024
"""Bytes per sequential I/O."""
RANDOM_BLOCK = 4096
"""Bytes per random read."""
HEADROOM = 64 * 1024 * 1024
"""Free space left on the file system beyond the test file."""


@dataclass
class DiskResult:
    """r_d and w_d in seconds per byte, IOPS of random reads, and how the page cache was bypassed."""

    r_d: Measurement
    w_d: Measurement
    iops: Measurement
    method: str
    file_bytes: int
    path: str


def check_path(directory: str | os.PathLike, file_bytes: int) -> Path:
    """The directory to test in, or DdltraceError saying why it cannot be used (missing, not a directory, not
    writable, not enough free space)."""
    path = Path(directory)
    if not path.exists():
        raise DdltraceError(f"{path}: disk benchmark directory does not exist")
    if not path.is_dir():
        raise DdltraceError(f"{path}: disk benchmark path is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        reason = "read-only file system" if _read_only(path) else "permission denied"
        raise DdltraceError(f"{path}: cannot create the disk benchmark's file there ({reason})")
    free = shutil.disk_usage(path).free
    if free < file_bytes + HEADROOM:
        raise DdltraceError(f"{path}: not enough room for the disk benchmark ({free / 2**20:.0f} MiB free, "
                            f"{(file_bytes + HEADROOM) / 2**20:.0f} MiB needed; choose --disk-path or --quick)")
    return path


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _open(path: Path, flags: int) -> tuple[int, bool]:
    """Open with O_DIRECT if the file system allows it; (fd, direct)."""
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct, 0o600), True
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
    return os.open(path, flags, 0o600), False


def drop_cache(fd: int) -> None:
    """Drop the open file's pages from the page cache, so that the next reads reach the disk: written out first
    (``fdatasync``: DONTNEED drops clean pages only), then ``posix_fadvise(POSIX_FADV_DONTNEED)``."""
    os.fdatasync(fd)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _write_all(fd: int, file_bytes: int, buf: mmap.mmap) -> int:
    written = 0
    while written < file_bytes:
        written += os.write(fd, buf)
    return written


def _write_file(path: Path, file_bytes: int, buf: mmap.mmap) -> tuple[float, bool]:
    """Seconds per byte of a sequential overwrite of the file's ``file_bytes`` (ended by fsync), and whether
    O_DIRECT was used. A file shorter than that is first written out in full, untimed: a write into blocks the
    file system has not yet allocated also pays for the allocation (on ext4 here O_DIRECT then reaches 0.6 of an
    overwrite), which fio's sequential-write job does not pay either once its file exists."""
    fd, direct = _open(path, os.O_WRONLY | os.O_CREAT)
    try:
        if os.fstat(fd).st_size < file_bytes:
            _write_all(fd, file_bytes, buf)
            os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        t0 = time.perf_counter()
        written = _write_all(fd, file_bytes, buf)
        os.fsync(fd)
        elapsed = time.perf_counter() - t0
        if not direct:
            drop_cache(fd)
    finally:
        os.close(fd)
    return elapsed / written, direct


def _read_file(path: Path, buf: mmap.mmap) -> float:
    fd, direct = _open(path, os.O_RDONLY)
    try:
        if not direct:
            drop_cache(fd)
        t0, total = time.perf_counter(), 0
        while True:
            n = os.readv(fd, [buf])
            if n <= 0:
                break
            total += n
        return (time.perf_counter() - t0) / max(total, 1)
    finally:
        os.close(fd)


def _random_reads(path: Path, file_bytes: int, seconds: float) -> float:
    fd, direct = _open(path, os.O_RDONLY)
    buf = mmap.mmap(-1, RANDOM_BLOCK)
    rng = random.Random(12345)
    blocks = file_bytes // RANDOM_BLOCK
    try:
        if not direct:
            drop_cache(fd)
        count, t0 = 0, time.perf_counter()
        while True:
            os.preadv(fd, [buf], rng.randrange(blocks) * RANDOM_BLOCK)
            count += 1
            if count % 64 == 0 and time.perf_counter() - t0 >= seconds:
                break
        return count / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        buf.close()


def measure(directory: str | os.PathLike, file_bytes: int, repeats: int = 3, random_seconds: float = 0.3,
            progress=None) -> DiskResult:
    """Write, read and randomly read a file of ``file_bytes`` in ``directory`` (removed afterwards)."""
    file_bytes = max(BLOCK, file_bytes - file_bytes % BLOCK)
    path = check_path(directory, file_bytes) / f".ddltrace-disk-probe-{os.getpid()}"
    buf = mmap.mmap(-1, BLOCK)
    buf.write(os.urandom(BLOCK))  # incompressible, for file systems that compress
    methods = set()
    try:
        def write_once() -> float:
            per_byte, direct = _write_file(path, file_bytes, buf)
            methods.add("O_DIRECT" if direct else "fdatasync+POSIX_FADV_DONTNEED")
            return per_byte

        if progress:
            progress("disk write")
        w_d = repeat(write_once, repeats=repeats, unit="s/B")
        if progress:
            progress("disk read")
        r_d = repeat(lambda: _read_file(path, buf), repeats=repeats, unit="s/B")
        if progress:
            progress("disk random read")
        iops = repeat(lambda: _random_reads(path, file_bytes, random_seconds), repeats=repeats, unit="1/s")
    except PermissionError as exc:
        raise DdltraceError(f"{directory}: no permission to write the disk benchmark's file ({exc.strerror})") from exc
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DdltraceError(f"{directory}: ran out of room during the disk benchmark ({exc.strerror})") from exc
        if exc.errno == errno.EROFS:
            raise DdltraceError(f"{directory}: cannot write the disk benchmark's file ({exc.strerror})") from exc
        raise DdltraceError(f"{directory}: the disk benchmark's I/O failed ({exc.strerror or exc})") from exc
    finally:
        buf.close()
        path.unlink(missing_ok=True)
    return DiskResult(r_d, w_d, iops, " and ".join(sorted(methods)), file_bytes, str(directory))
