"""Generate ``sample_traces/tiny-store``: a small, deterministic store for trying ``ddltrace info`` and export.

It models 4 ranks of a parameter-server job (rank 0 the server, ranks 1-3 workers) with a sequential
initialisation (each worker reads the input after the previous one, the others wait in MPI_Barrier) and
20 steps of compute / push / pull per worker, plus CPU counters. The numbers come from a seeded random
generator, so the store is the same on every run. Usage: ``python make_sample_store.py OUT``.
"""

from __future__ import annotations

import sys

import numpy as np

from ddltrace.store import write_store
from ddltrace.timeline import make_counters, make_timeline

MS = 1_000_000  # ns per millisecond


def build(seed: int = 7, workers: int = 3, steps: int = 20) -> tuple[list[dict], list[dict]]:
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    counters: list[dict] = []
    read_ns = 40 * MS
    init_end = (workers + 1) * read_ns
    for rank in range(workers + 1):
        rows.append(dict(rank=rank, name="MPI_Init", category="other", start_ns=0, dur_ns=2 * MS, source="sample"))
        if rank > 0:  # worker `rank` reads after workers 1..rank-1, then waits for the rest
            read_start = 2 * MS + (rank - 1) * read_ns
            rows.append(dict(rank=rank, name="MPI_Barrier", category="barrier", start_ns=2 * MS,
                             dur_ns=read_start - 2 * MS, source="sample"))
            rows.append(dict(rank=rank, name="read_input", category="io", start_ns=read_start,
                             dur_ns=read_ns, bytes=262_144, source="sample"))
            after = read_start + read_ns
            rows.append(dict(rank=rank, name="MPI_Barrier", category="barrier", start_ns=after,
                             dur_ns=init_end - after, source="sample"))
        else:
            rows.append(dict(rank=0, name="MPI_Barrier", category="barrier", start_ns=2 * MS,
                             dur_ns=init_end - 2 * MS, source="sample"))
    for rank in range(1, workers + 1):
        t = init_end
        for step in range(steps):
            compute = int(rng.normal(6 * MS, 0.3 * MS))
            rows.append(dict(rank=rank, name="forward_backward", category="compute", start_ns=t, dur_ns=compute,
                             step=step, source="sample"))
            t += compute
            rows.append(dict(rank=rank, name="MPI_Send", category="comm", start_ns=t, dur_ns=int(0.4 * MS),
                             bytes=320_032, peer=0, tag=1, step=step, source="sample"))
            t += int(0.4 * MS)
            wait = int(rng.uniform(0.5, 3.0) * MS)
            rows.append(dict(rank=rank, name="MPI_Recv", category="wait", start_ns=t, dur_ns=wait,
                             bytes=320_032, peer=0, tag=2, step=step, source="sample"))
            t += wait
        rows.append(dict(rank=rank, name="MPI_Finalize", category="other", start_ns=t, dur_ns=MS, source="sample"))
    t = init_end
    for update in range(steps * workers):
        busy = int(rng.normal(2.5 * MS, 0.2 * MS))
        rows.append(dict(rank=0, name="apply_update", category="compute", start_ns=t, dur_ns=busy,
                         step=update // workers, source="sample"))
        t += busy + int(0.3 * MS)
    rows.append(dict(rank=0, name="MPI_Finalize", category="other", start_ns=t, dur_ns=MS, source="sample"))
    for rank in range(workers + 1):
        for i in range(30):
            counters.append(dict(rank=rank, name="cpu_percent", t_ns=i * 10 * MS,
                                 value=float(rng.uniform(20, 100))))
    for i in range(30):
        counters.append(dict(rank=-1, name="mem_used_bytes", t_ns=i * 10 * MS, value=float(2e9 + i * 1e6)))
    return rows, counters


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    rows, counters = build()
    store = write_store(argv[0], make_timeline(rows), make_counters(counters), overwrite=True,
                        run={"command": "python ps_job.py (synthetic sample)", "framework": "mpi4py",
                             "world_size": 4, "hosts": ["node0"], "batch_size": 32,
                             "generator": "sample_traces/make_sample_store.py"},
                        rank_info={r: {"host": "node0", "role": "server" if r == 0 else "worker", "ended": "normal"}
                                   for r in range(4)})
    print(f"wrote {store.path}: {len(rows)} events on {len(store.ranks)} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
