"""ddltrace's disk probe against fio with direct I/O: same file, same block size, measured in one run.

fio writes and reads a file sequentially in 1 MiB blocks (``--direct=1 --ioengine=psync``, the write ended by
fsync) and reads it randomly in 4 KiB blocks (queue depth 1); ddltrace's probe does the same on the same file
(O_DIRECT where the file system allows it). Ratios are ddltrace / fio (target >= 0.9). Skips with a message
when fio is not installed (Debian: apt-get install fio).

    .venv/bin/python benchmarks/calib_disk.py [--dir DIR] [--size-mib 256] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ddltrace.collectors.microbench import disk
from ddltrace.collectors.microbench.measure import OtherCpu


def fio(path: Path, rw: str, bs: str, size_mib: int, seconds: float | None = None) -> dict:
    cmd = ["fio", "--name=probe", f"--filename={path}", f"--rw={rw}", f"--bs={bs}", f"--size={size_mib}M",
           "--direct=1", "--ioengine=psync", "--output-format=json"]
    if rw == "write":
        cmd.append("--end_fsync=1")
    if seconds:
        cmd += [f"--runtime={seconds}", "--time_based"]
    job = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)["jobs"][0]
    return job["write" if rw == "write" else "read"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--random-seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the tools (best kept)")
    args = parser.parse_args()
    if shutil.which("fio") is None:
        print("skipped: fio is not installed (Debian: apt-get install fio)")
        return 0
    size = args.size_mib * 2**20
    directory = disk.check_path(args.dir, size)
    path = directory / f".calib-disk-{os.getpid()}"
    buf = mmap.mmap(-1, disk.BLOCK)
    buf.write(os.urandom(disk.BLOCK))
    best = {k: 0.0 for k in ("fio_w", "fio_r", "fio_iops", "dd_w", "dd_r", "dd_iops")}
    try:
        with OtherCpu() as oc:
            for _ in range(args.rounds):
                best["fio_w"] = max(best["fio_w"], fio(path, "write", "1M", args.size_mib)["bw_bytes"])
                best["fio_r"] = max(best["fio_r"], fio(path, "read", "1M", args.size_mib)["bw_bytes"])
                best["fio_iops"] = max(best["fio_iops"],
                                       fio(path, "randread", "4k", args.size_mib, args.random_seconds)["iops"])
                per_byte, direct = disk._write_file(path, size, buf)
                best["dd_w"] = max(best["dd_w"], 1 / per_byte)
                best["dd_r"] = max(best["dd_r"], 1 / disk._read_file(path, buf))
                best["dd_iops"] = max(best["dd_iops"], disk._random_reads(path, size, args.random_seconds))
    finally:
        path.unlink(missing_ok=True)
        buf.close()
    print(f"file: {path} ({args.size_mib} MiB), ddltrace page-cache bypass: "
          f"{'O_DIRECT' if direct else 'fdatasync + POSIX_FADV_DONTNEED'}; fio --direct=1 --ioengine=psync")
    print(f"{'test':26} {'ddltrace':>14} {'fio':>14} {'ratio':>7}")
    for label, ours, ref, unit, scale in (("sequential write, 1 MiB", "dd_w", "fio_w", "MB/s", 1e6),
                                          ("sequential read, 1 MiB", "dd_r", "fio_r", "MB/s", 1e6),
                                          ("random read, 4 KiB, QD1", "dd_iops", "fio_iops", "IOPS", 1)):
        print(f"{label:26} {best[ours] / scale:9.0f} {unit:4} {best[ref] / scale:9.0f} {unit:4} "
              f"{best[ours] / best[ref]:7.3f}")
    print(f"other processes kept {oc.other_cpu_s / oc.wall_s:.2f} cores busy on average (noisy machine if > 0.25)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
