"""Cost of the PMPI wrapper: ns added per intercepted call, and the slowdown of many small Allreduce.

Two C programs built with this Python's mpicc run with and without the wrapper preloaded (recording on):

1. one rank calls MPI_Test on MPI_REQUEST_NULL (almost free in the library) N times: the difference in
   CPU time per call (thread CPU clock, so other load on the machine does not count) is what the wrapper
   adds (two clock reads, a slot, the record, the page faults of a growing record file), in ns;
2. one rank posts 4 MPI_Irecv and 4 MPI_Isend of 8 B to itself and completes them with one MPI_Waitall
   (``MPI_STATUSES_IGNORE``), N / 20 times: what the wrapper adds per round (9 call records and the Waitall's 8
   ``ddltrace_request_done`` records, with the status array it lends the call), and from it, less 9 calls at the
   per-call figure of case 1, the cost of one completion record;
3. 4 ranks call MPI_Allreduce K times on 8 B and on 64 KiB: time per Allreduce with vs without.

Each case runs REPEAT times alternating with/without; the minimum is kept (least disturbed by other load).
Reference figures are the issue's targets (IPM's overhead: <= 100 ns per call, <= 1 % slowdown at 64 KiB).

    .venv/bin/python benchmarks/pmpi_overhead.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ddltrace.collectors.mpi_env import find_tool, mpiexec_command
from ddltrace.collectors.pmpi import build_wrapper

PROGRAM = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long n = atol(argv[2]);
    double t;
    if (!strcmp(argv[1], "test")) {
        MPI_Request r = MPI_REQUEST_NULL; int flag;
        struct timespec a, b;
        for (long i = 0; i < 1000; i++) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        for (long i = 0; i < n; i++) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        t = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    } else if (!strcmp(argv[1], "waitall")) {
        MPI_Request r[8]; char sent[4][8] = {{0}}, got[4][8];
        struct timespec a, b;
        for (long i = 0; i < n + 1000; i++) {
            if (i == 1000) clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
            for (int j = 0; j < 4; j++) {
                MPI_Irecv(got[j], 8, MPI_BYTE, 0, j, MPI_COMM_SELF, &r[j]);
                MPI_Isend(sent[j], 8, MPI_BYTE, 0, j, MPI_COMM_SELF, &r[4 + j]);
            }
            MPI_Waitall(8, r, MPI_STATUSES_IGNORE);
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        t = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    } else {
        long count = atol(argv[3]) / 8;
        double *a = calloc(count, 8), *b = calloc(count, 8);
        for (long i = 0; i < 20; i++) MPI_Allreduce(a, b, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        t = MPI_Wtime();
        for (long i = 0; i < n; i++) MPI_Allreduce(a, b, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        t = MPI_Wtime() - t;
    }
    if (rank == 0) printf("%.9f\n", t / n);
    MPI_Finalize();
    return 0;
}
"""


def _run(cmd, env) -> float:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    return float(out.split()[0])


def _alternate(np_ranks: int, argv: list[str], lib: Path, records: Path, repeat: int) -> tuple[list, list]:
    """Times (s) of ``repeat`` runs of the program without and with the wrapper, alternating; the record files the
    wrapped runs wrote are removed."""
    cmd, env = mpiexec_command(np_ranks, argv)
    on = dict(env, LD_PRELOAD=str(lib), DDLTRACE_PMPI_DIR=str(records))
    base, wrapped = [], []
    for _ in range(repeat):
        base.append(_run(cmd, env))
        wrapped.append(_run(cmd, on))
    for old in records.glob("*.pmpi"):
        old.unlink()
    return base, wrapped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2_000_000, help="MPI_Test calls per run")
    ap.add_argument("--np", type=int, default=4)
    args = ap.parse_args(argv)
    lib = build_wrapper()
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "bench"
        (Path(tmp) / "bench.c").write_text(PROGRAM)
        subprocess.run([find_tool("mpicc"), "-O2", "-o", str(exe), str(Path(tmp) / "bench.c")], check=True)
        shm = Path("/dev/shm")
        records = Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else tmp, prefix="ddltrace-bench-"))
        base, wrapped = _alternate(1, [str(exe), "test", str(args.calls)], lib, records, args.repeat)
        added_ns = (min(wrapped) - min(base)) * 1e9
        print(f"MPI_Test(MPI_REQUEST_NULL): {min(base) * 1e9:.1f} ns without, {min(wrapped) * 1e9:.1f} ns with "
              f"the wrapper -> added {added_ns:.1f} ns per call; reference (target, IPM-class) 100 ns; "
              f"ratio {added_ns / 100:.2f}")
        base, wrapped = _alternate(1, [str(exe), "waitall", str(args.calls // 20)], lib, records, args.repeat)
        round_ns = (min(wrapped) - min(base)) * 1e9
        print(f"4 MPI_Irecv + 4 MPI_Isend to itself + MPI_Waitall of the 8: {min(base) * 1e9:.0f} ns without, "
              f"{min(wrapped) * 1e9:.0f} ns with the wrapper per round -> added {round_ns:.0f} ns (9 call records "
              f"and 8 completion records); one completion record (less 9 calls at {added_ns:.1f} ns) "
              f"{(round_ns - 9 * added_ns) / 8:.1f} ns; reference (target) none set")
        for size, k in ((8, 2000), (65536, 300)):
            base, wrapped = _alternate(args.np, [str(exe), "allreduce", str(k), str(size)], lib, records,
                                       args.repeat)
            slow = (min(wrapped) / min(base) - 1) * 100
            spread = max(base) / min(base)
            bound = added_ns * 1e-9 / min(base) * 100
            print(f"MPI_Allreduce {size} B on {args.np} ranks ({os.cpu_count()} cores): {min(base) * 1e6:.2f} us "
                  f"without, {min(wrapped) * 1e6:.2f} us with -> slowdown {slow:+.2f} % (run-to-run spread "
                  f"{spread:.2f}x: {'noise-dominated' if spread > 1.1 else 'quiet'}); cost bound from the per-call "
                  f"figure {bound:.3f} %; reference (target) {'1 %' if size >= 65536 else 'none set'}"
                  + (f"; ratio {slow / 1:.2f}" if size >= 65536 else ""))
        records.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
