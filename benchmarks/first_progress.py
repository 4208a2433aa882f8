"""How soon ``ddltrace analyze`` of a store of many ranks says something: seconds from process start to its
first progress line on stderr (issue 16: within a second for 1024 ranks).

    .venv/bin/python benchmarks/first_progress.py [--ranks 1024] [--events-per-rank 2000] [--repeat 3]
                                                  [--data /work/data/first_progress] [--keep]

The store: the ring of :mod:`ddltrace.analyses.synthetic_ring` (as benchmarks/report_scale.py), ``--ranks`` ranks of
``--events-per-rank`` MPI calls, written into ``--data`` (outside the repository; deleted at the end unless
``--keep``) before any timing. Then, ``--repeat`` times, a fresh ``ddltrace analyze STORE`` (the installed command,
default options): seconds of wall time from just before the process is started to its first line on stderr
(interpreter start, module imports and opening the store included), and to its exit; the fastest of each is shown.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_speed import _ddltrace_command  # noqa: E402
from report_scale import write_store  # noqa: E402


def first_line(argv: list[str]) -> tuple[float, float, str]:
    """Seconds from starting ``argv`` to its first stderr line, seconds to its exit, and that line."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = child.stderr.readline()
    first = time.perf_counter() - started
    child.stderr.read()
    if child.wait():
        raise SystemExit(f"{' '.join(argv)}: exit {child.returncode}")
    return first, time.perf_counter() - started, line.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--events-per-rank", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path("/work/data/first_progress"))
    parser.add_argument("--keep", action="store_true", help="keep the store in --data")
    args = parser.parse_args()
    store = args.data / f"ring{args.ranks}x{args.events_per_rank}"
    write_store(store, args.ranks, args.events_per_rank)
    load = os.getloadavg()
    try:
        runs = [first_line([*_ddltrace_command(), "analyze", str(store)]) for _ in range(args.repeat)]
    finally:
        if not args.keep:
            shutil.rmtree(args.data, ignore_errors=True)
    print(f"store: {args.ranks} ranks x {args.events_per_rank:,} events ({args.ranks * args.events_per_rank:,})")
    print(f"machine: {os.cpu_count()} CPUs ({platform.machine()}, Python {platform.python_version()}), "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; fastest of {args.repeat} fresh `ddltrace analyze STORE`")
    print(f"  first progress line on stderr: {min(r[0] for r in runs):.2f} s after the process was started "
          f"(all runs: {', '.join(f'{r[0]:.2f}' for r in runs)} s)")
    print(f"  whole analyze: {min(r[1] for r in runs):.2f} s")
    print(f"  the line: {runs[0][2]}")


if __name__ == "__main__":
    main()
