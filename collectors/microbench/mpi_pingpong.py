"""MPI ping-pong between two ranks, as the OSU latency benchmark does: one-way time = round trip / 2.

Run by :func:`measure` as ``mpiexec -n 2 python -m ddltrace.collectors.microbench.mpi_pingpong SIZES...``;
rank 0 prints one JSON object: size (bytes) -> list of one-way seconds, one per repeat.
"""

from __future__ import annotations

import json
import subprocess
import sys

from ddltrace.collectors.mpi_env import mpiexec_command

SIZES = (1, 8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20)


def _main(sizes: list[int], repeats: int, min_time: float) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    other = 1 - rank
    out = {}
    for size in sizes:
        buf = np.zeros(max(size, 1), dtype=np.uint8)

        def rounds(count: int, buf=buf) -> float:
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(count):
                if rank == 0:
                    comm.Send(buf, dest=other, tag=1)
                    comm.Recv(buf, source=other, tag=1)
                else:
                    comm.Recv(buf, source=other, tag=1)
                    comm.Send(buf, dest=other, tag=1)
            return (MPI.Wtime() - t0) / count / 2

        once = rounds(10)
        count = comm.bcast(int(max(10, min(100000, min_time / (2 * max(once, 1e-7))))), root=0)
        out[size] = [rounds(count) for _ in range(repeats)]
    if rank == 0:
        print(json.dumps(out), flush=True)


def measure(sizes=SIZES, repeats: int = 3, min_time: float = 0.01, timeout: float = 120) -> tuple[dict, str]:
    """{size: [one-way seconds per repeat]} from a 2-rank MPI job, or ({}, why it did not run)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return {}, "mpi4py is not installed: no MPI ping-pong"
    try:
        cmd, env = mpiexec_command(2, [sys.executable, "-m", __name__, str(repeats), str(min_time),
                                       *map(str, sizes)])
    except Exception as exc:  # noqa: BLE001 - DdltraceError when mpiexec is missing
        return {}, f"no MPI ping-pong: {exc}"
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {}, f"MPI ping-pong did not finish within {timeout:g} s"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {}, f"MPI ping-pong failed (exit {proc.returncode}): {err}"
    return {int(k): v for k, v in json.loads(lines[-1]).items()}, ""


if __name__ == "__main__":
    _main([int(s) for s in sys.argv[3:]], int(sys.argv[1]), float(sys.argv[2]))
