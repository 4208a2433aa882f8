"""`make demo-cluster`: the reference ps-sgd job on a simulated 3-node cluster (collectors/cluster.py), the
server alone on node 0 and one worker on each of nodes 1 and 2, node 2's link shaped to 100 Mbit/s; traced by
`ddltrace run --launcher` (node agents on every node) and reported (`ddltrace report`): the report names node
2's slow link. Needs root, iproute2, util-linux and the mpich wheel.

    .venv/bin/python scripts/demo_cluster.py [--out demo-cluster] [--samples N] [--rate-bit R]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from ddltrace.cli import main as ddltrace
from ddltrace.collectors.cluster import Cluster
from ddltrace.collectors.mpi_env import find_tool

JOB = "ddltrace.collectors.workloads.ps_sgd"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo-cluster", help="folder for the store, the report and the job's "
                                                               "ground truth (replaced)")
    parser.add_argument("--samples", type=int, default=4096, help="data set size of the job (default 4096)")
    parser.add_argument("--rate-bit", type=float, default=100e6, help="node 2's link in bit/s (default 100e6)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    mpiexec = find_tool("mpiexec")
    if mpiexec is None:
        sys.exit("demo-cluster: MPICH's mpiexec not found (pip install mpich)")
    with Cluster(3, rates_bit={2: args.rate_bit}, prefix="node") as cluster:
        print(f"demo-cluster: nodes {', '.join(n.host for n in cluster.nodes)}; {cluster.nodes[2].host}'s link "
              f"shaped to {args.rate_bit / 1e6:g} Mbit/s; server (rank 0) on {cluster.nodes[0].host}, one worker "
              "on each other node", flush=True)
        code = ddltrace(["run", "--no-progress", "--launcher", cluster.mpiexec(mpiexec, ppn=1), "--launcher-addr",
                         cluster.host_addr, "--out", str(out / "store"), "--", sys.executable, "-m", JOB,
                         "--out", str(out / "truth"), "--compute", "emulated", "--epochs", "1",
                         "--samples", str(args.samples)])
    if code != 0:
        return code
    return ddltrace(["report", str(out / "store"), "--out", str(out / "report")])


if __name__ == "__main__":
    sys.exit(main())
