"""Why the reference ps-sgd job hung across simulated nodes with MPICH's UCX network module (issue #14, item 1).

Two jobs on a fresh 2-node simulated cluster (collectors/cluster.py), one rank per node, each under a 30 s
limit, once per MPICH network module given (default ``ucx`` and ``ofi``, see :meth:`Cluster.mpiexec`):

- ``reduced``: rank 1 (node 1) sends two small messages back to back to rank 0 (node 0), which receives them
  with ``MPI_ANY_SOURCE``, then answers; three rounds (what ps-sgd's worker does: a push, then the next pull);
- ``ps-sgd``: the reference job itself (one server, one worker, emulated compute, one epoch of 4096 samples).

Prints ``completed`` or ``HUNG`` per case; for a hung case, what the nodes' TCP sockets held while it hung
(``ss``: bytes queued for receive and send, bytes each side sent and received), which tells a message lost in
the network from one lost inside the MPI library. Needs root, iproute2 and the mpich wheel.

    .venv/bin/python scripts/cluster_any_source.py [ucx|ofi ...]
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddltrace.collectors.cluster import Cluster
from ddltrace.collectors.mpi_env import find_tool

REDUCED = """
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
for _ in range(3):
    if comm.rank == 0:
        buf = np.empty(44)
        comm.Recv(buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
        comm.Recv(buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
        comm.Send(np.ones(41), dest=1, tag=12)
    else:
        comm.Send(np.ones(44), dest=0, tag=13)   # a push ...
        comm.Send(np.ones(1), dest=0, tag=11)    # ... and the next pull, as ps_sgd's worker does
        comm.Recv(np.empty(41), source=0, tag=12)
"""
LIMIT_S = 30


def sockets(cluster: Cluster) -> list[str]:
    """The rank-to-rank TCP connections on each node (not hydra's, to the bridge address): queues and bytes."""
    lines = []
    for node in cluster.nodes:
        text = subprocess.run(["ip", "netns", "exec", node.netns, "ss", "-tni"], capture_output=True,
                              text=True).stdout
        for head, info in zip(text.splitlines()[1::2], text.splitlines()[2::2], strict=False):
            state, recv_q, send_q, local, peer = head.split()[:5]
            if peer.startswith(cluster.host_addr + ":"):
                continue
            counts = dict(re.findall(r"(bytes_(?:sent|received|acked)):(\d+)", info))
            lines.append(f"    {node.host} {local} -> {peer} {state} Recv-Q {recv_q} Send-Q {send_q} "
                         f"sent {counts.get('bytes_sent', 0)} received {counts.get('bytes_received', 0)}")
    return lines


def run_case(cluster: Cluster, netmod: str, job: list[str]) -> str:
    launcher = shlex.split(cluster.mpiexec(find_tool("mpiexec"), ppn=1, netmod=netmod))
    proc = subprocess.Popen(launcher + job, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + LIMIT_S
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if proc.poll() is None:
        held = sockets(cluster)
        proc.kill()
        proc.communicate()
        return "\n".join([f"HUNG ({LIMIT_S} s); the ranks' sockets while hung:", *held])
    out = proc.communicate()[0]
    return "completed" if proc.returncode == 0 else f"failed ({proc.returncode}): {out.strip()[-300:]}"


def main(netmods: list[str]) -> int:
    tmp = Path(tempfile.mkdtemp())
    (tmp / "reduced.py").write_text(REDUCED)
    jobs = {"reduced": [sys.executable, str(tmp / "reduced.py")],
            "ps-sgd": [sys.executable, "-m", "ddltrace.collectors.workloads.ps_sgd", "--out", str(tmp / "ps"),
                       "--compute", "emulated", "--epochs", "1", "--samples", "4096"]}
    with Cluster(2) as cluster:
        for netmod in netmods:
            for name, job in jobs.items():
                print(f"netmod {netmod:<4} {name:<8} {run_case(cluster, netmod, job)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["ucx", "ofi"]))
