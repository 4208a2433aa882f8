"""Peak memory of `ddltrace import` on hostile Chrome traces (gzip bombs) against a clean file's (issue 21.4).

    .venv/bin/python benchmarks/import_hostile_memory.py [--scale 1.0] [--keep DIR]

Each file is written here, streamed through gzip (the bombs are ~1 MB on disk), and imported by `ddltrace import`
in its own fresh process; printed per file: its size on disk and decompressed, the exit status and the import's
first line, the wall time, and the importing process's peak resident memory (VmHWM, whole process, MiB) with its
difference from the clean file's. The files (``--scale`` multiplies every size):

- clean: 10^6 complete (X) events, times as Kineto writes them (epoch µs with ns digits);
- bad times: the same 10^6 events, 10 % of them with a NaN (the literal Python's json writes), a negative or a
  huge (1e300) time, a third each;
- spaces: ``{"traceEvents": [`` + 1 GiB of spaces + ``]}``;
- name 256 MiB / name 1 GiB: one X event whose name is that many bytes.

The writers are used by tests/test_import_hostile.py at small sizes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

MiB = 1 << 20
GiB = 1 << 30
_BLOCK = 4 * MiB
#: Run in the child: `ddltrace import FILE --out OUT`, then its peak resident memory on stderr (VmHWM, KiB; not
#: ru_maxrss, which keeps the high-water mark of the process before exec).
_CHILD = r"""
import sys
from ddltrace.cli import main
try:
    rc = main(["import", sys.argv[1], "--out", sys.argv[2], "--progress", "never"])
finally:
    hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]
    print(f"VmHWM_KiB={hwm}", file=sys.stderr)
sys.exit(rc)
"""


class _GzipWriter:
    """A gzip file written in pieces; ``level`` 9 makes a GiB of one byte ~1 MB (~1000:1, 25 s here), level 1
    ~4.5 MB (3.5 x faster)."""

    def __init__(self, path: Path, level: int):
        self.fh = open(path, "wb")
        self.deflate = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        self.size = 0

    def write(self, data: bytes) -> None:
        self.size += len(data)
        self.fh.write(self.deflate.compress(data))

    def repeat(self, byte: bytes, count: int) -> None:
        block = byte * min(count, _BLOCK)
        while count > 0:
            self.write(block if count >= len(block) else block[:count])
            count -= len(block)

    def close(self) -> int:
        """Finish the file; the decompressed size (bytes)."""
        self.fh.write(self.deflate.flush())
        self.fh.close()
        return self.size


def write_spaces(path: Path, spaces: int, level: int = 9) -> int:
    """``{"traceEvents": [`` + ``spaces`` spaces + ``]}``; the decompressed size."""
    out = _GzipWriter(path, level)
    out.write(b'{"traceEvents": [')
    out.repeat(b" ", spaces)
    out.write(b"]}")
    return out.close()


def write_long_name(path: Path, length: int, level: int = 9) -> int:
    """One X event whose name is ``length`` bytes ('a'), then one ordinary event; the decompressed size."""
    out = _GzipWriter(path, level)
    out.write(b'{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 1000, "dur": 5, "name": "')
    out.repeat(b"a", length)
    out.write(b'"}, {"ph": "X", "pid": 1, "tid": 1, "ts": 2000, "dur": 7, "name": "after"}]}')
    return out.close()


def write_events(path: Path, count: int, bad_every: int = 0, level: int = 6) -> int:
    """``count`` X events as Kineto writes them; with ``bad_every`` = k, every k-th event has a NaN ts, a negative
    dur or a 1e300 ts (in turn). The decompressed size."""
    out = _GzipWriter(path, level)
    out.write(b'{"schemaVersion": 1, "traceEvents": [\n')
    bad = (b'"ts": NaN, "dur": 3.000', b'"ts": 1712195495519689.047, "dur": -3.000', b'"ts": 1e300, "dur": 3.000')
    lines = []
    for i in range(count):
        if bad_every and i % bad_every == 0:
            times = bad[(i // bad_every) % 3]
        else:
            times = b'"ts": %d.%03d, "dur": %d.%03d' % (1712195495519689 + i, i % 1000, 1 + i % 50, i % 997)
        lines.append(b'  {"ph": "X", "cat": "kernel", "name": "kernel_%d", "pid": 0, "tid": 7, %s,\n'
                     b'   "args": {"device": 0, "stream": 7, "correlation": %d}}' % (i % 40, times, i))
        if len(lines) == 10000:
            out.write(b",\n".join(lines) + (b",\n" if i + 1 < count else b""))
            lines = []
    if lines:
        out.write(b",\n".join(lines))
    out.write(b'\n]}\n')
    return out.close()


def import_peak(path: Path, out: Path, timeout: float | None = None) -> dict:
    """`ddltrace import path --out out` in a fresh process: exit status, output, wall seconds, peak RSS (MiB)."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(out)], capture_output=True, text=True,
                          timeout=timeout)
    wall = time.perf_counter() - started
    marker = [line for line in proc.stderr.splitlines() if line.startswith("VmHWM_KiB=")]
    stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("VmHWM_KiB="))
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": stderr, "wall_s": wall,
            "peak_mib": int(marker[-1].split("=")[1]) / 1024 if marker else float("nan")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size (default 1: the full bombs)")
    parser.add_argument("--keep", type=Path, help="write the files here and keep them (default: a temporary folder)")
    args = parser.parse_args(argv)
    if not args.scale > 0:
        parser.error("--scale must be > 0")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="ddltrace-hostile-"))
    folder.mkdir(parents=True, exist_ok=True)
    events = max(1, int(1_000_000 * args.scale))
    cases = [("clean", lambda p: write_events(p, events)),
             ("bad times (10 %)", lambda p: write_events(p, events, bad_every=10)),
             ("spaces", lambda p: write_spaces(p, int(GiB * args.scale))),
             ("name 256 MiB", lambda p: write_long_name(p, int(256 * MiB * args.scale))),
             ("name 1 GiB", lambda p: write_long_name(p, int(GiB * args.scale)))]
    print(f"{'file':<18} {'on disk':>10} {'decompressed':>13} {'rc':>3} {'wall s':>7} {'peak MiB':>9} "
          f"{'vs clean':>9}  first line")
    clean = None
    try:
        for index, (label, write) in enumerate(cases):
            path = folder / f"case{index}.json.gz"
            size = write(path)
            result = import_peak(path, folder / f"store{index}")
            shutil.rmtree(folder / f"store{index}", ignore_errors=True)
            clean = result["peak_mib"] if clean is None else clean
            first = (result["stdout"] or result["stderr"]).strip().splitlines()[:1]
            print(f"{label:<18} {path.stat().st_size / MiB:>7.2f} MiB {size / MiB:>9.0f} MiB {result['rc']:>3} "
                  f"{result['wall_s']:>7.1f} {result['peak_mib']:>9.0f} {result['peak_mib'] - clean:>+9.0f}  "
                  f"{first[0][:110] if first else ''}", flush=True)
            if not args.keep:
                path.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print("peak MiB: the importing process's VmHWM (whole process, libraries included); vs clean: minus the clean "
          "file's; wall s: the whole `ddltrace import` process, start-up included")
    return 0


if __name__ == "__main__":
    sys.exit(main())
