"""Reproduce the hang of the reference ps-sgd job across simulated nodes (issue #14, item 1), reduced.

Rank 1 (node 1) sends two small messages back to back to rank 0 (node 0), which receives them with
``MPI_ANY_SOURCE`` or with ``source=1``, then answers; three rounds. Each case runs under a 15 s limit on a
fresh 2-node simulated cluster (collectors/cluster.py) and prints ``completed`` or ``HUNG``, for the UCX
transport lists given (default: ``tcp,self,sm`` and ``tcp``). Needs root, iproute2 and the mpich wheel.

    .venv/bin/python scripts/cluster_any_source.py [UCX_TLS ...]
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from ddltrace.collectors.cluster import Cluster
from ddltrace.collectors.mpi_env import find_tool

JOB = """
import sys
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
source = MPI.ANY_SOURCE if sys.argv[1] == "any" else 1
comm.Barrier()
for _ in range(3):
    if comm.rank == 0:
        buf = np.empty(44)
        comm.Recv(buf, source=source, tag=MPI.ANY_TAG)
        comm.Recv(buf, source=source, tag=MPI.ANY_TAG)
        comm.Send(np.ones(41), dest=1, tag=12)
    else:
        comm.Send(np.ones(44), dest=0, tag=13)   # a push ...
        comm.Send(np.ones(1), dest=0, tag=11)    # ... and the next pull, as ps_sgd's worker does
        comm.Recv(np.empty(41), source=0, tag=12)
"""


def main(tls_lists: list[str]) -> int:
    job = Path(tempfile.mkdtemp()) / "any_source.py"
    job.write_text(JOB)
    with Cluster(2) as cluster:
        for tls in tls_lists:
            for mode in ("source=1", "any"):
                launcher = shlex.split(cluster.mpiexec(find_tool("mpiexec"), ppn=1))
                launcher[launcher.index("tcp,self,sm")] = tls
                try:
                    proc = subprocess.run(launcher + [sys.executable, str(job), mode.split("=")[0]],
                                          capture_output=True, text=True, timeout=15)
                    state = "completed" if proc.returncode == 0 else f"failed ({proc.returncode})"
                except subprocess.TimeoutExpired:
                    state = "HUNG (15 s)"
                print(f"UCX_TLS={tls:<12} receive {mode:<9} {state}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["tcp,self,sm", "tcp"]))
