"""The synthetic data set of Hashemi et al. (paper 002, section 4.2) and the two ways workers read it.

The file is tab-separated text as CNTK's UCIFastReader reads it: one sample per line, two float features
then an integer label (``x0<TAB>x1<TAB>label``). It is generated deterministically from a seed: features
are standard normal, the label is 1 where ``x0 - 0.5 * x1 + 0.3 * noise > 0`` (learnable, not separable).

Reading goes through :class:`StorageReader`, which reads ``block`` bytes per call and sleeps ``delay``
seconds per call: the per-read latency of a shared file system. With ``cold``, it first drops the file's pages from
the page cache (``fdatasync``, then ``posix_fadvise(POSIX_FADV_DONTNEED)``), so that every read reaches the disk, as
each node's read of shared storage does, instead of the pages an earlier worker on this machine left cached; the
bytes the reader's process then fetched from the device (``/proc/self/io`` read_bytes, readahead included) are
counted. Two readers, as in the paper:

- :func:`read_sequential`: the worker reads the whole file and keeps a random 1/w of its lines (CNTK's
  reader; the caller makes workers take turns);
- :func:`read_parallel`: the worker reads only its own byte range (the fix the paper proposes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ddltrace.collectors.microbench.disk import drop_cache


def make_dataset(path: str | Path, samples: int, seed: int) -> Path:
    """Write the ``samples``-line TSV at ``path`` (atomically) unless it exists; returns the path."""
    path = Path(path)
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, 2))
    label = (x[:, 0] - 0.5 * x[:, 1] + 0.3 * rng.normal(size=samples) > 0).astype(int)
    lines = [f"{a:.6f}\t{b:.6f}\t{c}\n" for a, b, c in zip(x[:, 0], x[:, 1], label, strict=True)]
    from ddltrace.store import atomic_output  # (here: a rank that only reads the file loads no pyarrow)

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as f:  # synced before the rename: no dirty pages left for a cold reader's flush
        f.write("".join(lines).encode())
    return path


@dataclass
class ReadStats:
    """What one reader did: bytes read, read calls, lines kept, time spent (ns, wall clock), and for a cold reader
    the bytes its process fetched from the device meanwhile (None: not cold, or /proc/self/io unreadable)."""

    bytes: int = 0
    reads: int = 0
    lines: int = 0
    start_ns: int = 0
    end_ns: int = 0
    device_bytes: int | None = None


class StorageReader:
    """Reads a file ``block`` bytes per call, sleeping ``delay`` seconds per call (shared-storage latency); with
    ``cold``, from the disk, the file's cached pages dropped first."""

    def __init__(self, path: str | Path, block: int, delay: float, cold: bool = False):
        self.path, self.block, self.delay, self.cold = Path(path), block, delay, cold
        self.stats = ReadStats()

    def read_range(self, begin: int, end: int) -> bytes:
        """Bytes [begin, end) of the file, read block by block."""
        parts = []
        with open(self.path, "rb", buffering=0) as f:
            if self.cold:
                drop_cache(f.fileno())
                before = _device_bytes()
            f.seek(begin)
            pos = begin
            while pos < end:
                chunk = f.read(min(self.block, end - pos))
                if self.delay > 0:
                    time.sleep(self.delay)
                self.stats.reads += 1
                if not chunk:
                    break
                parts.append(chunk)
                pos += len(chunk)
        data = b"".join(parts)
        self.stats.bytes += len(data)
        if self.cold and before is not None and (after := _device_bytes()) is not None:
            self.stats.device_bytes = (self.stats.device_bytes or 0) + after - before
        return data


def _device_bytes() -> int | None:
    """Bytes this process has caused to be fetched from storage (``read_bytes`` of /proc/self/io), or None."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))
    except (OSError, StopIteration, ValueError):
        return None


def parse_lines(text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(x float64 (n, 2), y int64 (n,)) from TSV text of whole lines."""
    values = np.array(text.split(), dtype=np.float64).reshape(-1, 3)
    return np.ascontiguousarray(values[:, :2]), values[:, 2].astype(np.int64)


def read_sequential(reader: StorageReader, worker: int, workers: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Read the whole file and keep this worker's random 1/w of the lines (a seeded partition, disjoint)."""
    reader.stats.start_ns = time.time_ns()
    x, y = parse_lines(reader.read_range(0, reader.path.stat().st_size))
    owner = np.random.default_rng(seed).permutation(len(y)) % workers
    keep = owner == worker
    reader.stats.lines = int(keep.sum())
    reader.stats.end_ns = time.time_ns()
    return x[keep], y[keep]


def read_parallel(reader: StorageReader, worker: int, workers: int) -> tuple[np.ndarray, np.ndarray]:
    """Read only this worker's byte range: lines starting in [size*k/w, size*(k+1)/w)."""
    reader.stats.start_ns = time.time_ns()
    size = reader.path.stat().st_size
    begin, end = size * worker // workers, size * (worker + 1) // workers
    # A line belongs to the range its first byte falls in: look one byte back to know whether `begin`
    # starts a line, and read on past `end` to finish the last line.
    with open(reader.path, "rb") as f:
        start = _line_start(f, begin)
        stop = _line_start(f, end) if end < size else size
    x, y = parse_lines(reader.read_range(start, stop)) if stop > start else (np.empty((0, 2)), np.empty(0, int))
    reader.stats.lines = len(y)
    reader.stats.end_ns = time.time_ns()
    return x, y


def _line_start(f, offset: int) -> int:
    """The offset of the first line that starts at or after ``offset``."""
    if offset == 0:
        return 0
    f.seek(offset - 1)
    if f.read(1) == b"\n":
        return offset
    f.readline()
    return f.tell()
