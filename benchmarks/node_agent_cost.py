"""CPU cost of the node agent at 10 Hz, in % of one core per node (issue #14: <= 1 %, as the single-node
sampler).

A job of ``--ranks-per-node`` mpi4py ranks that each sleep ``--seconds`` runs on a ``--nodes``-node simulated
cluster (collectors/cluster.py) under ``ddltrace run --launcher``; each node's agent reports the CPU time
(user + system, os.times) it used while sampling over the wall time it sampled (``run.node_agents`` in the
store's manifest), and, apart, its CPU time in all (Python start-up, imports, writing its part). Needs root,
iproute2 and the mpich wheel.

    .venv/bin/python benchmarks/node_agent_cost.py [--hz 10] [--seconds 20] [--nodes 2] [--ranks-per-node 2]
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

JOB = "import sys, time\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\ntime.sleep(float(sys.argv[1]))\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    args = ap.parse_args(argv)

    from ddltrace.collectors.cluster import Cluster
    from ddltrace.collectors.launcher import RunConfig, run_job
    from ddltrace.collectors.mpi_env import find_tool

    tmp = Path(tempfile.mkdtemp(prefix="node_agent_cost-"))
    (tmp / "job.py").write_text(JOB)
    with Cluster(args.nodes) as cluster:
        result = run_job(RunConfig(argv=[sys.executable, str(tmp / "job.py"), str(args.seconds)], out=tmp / "store",
                                   launcher=cluster.mpiexec(find_tool("mpiexec"), args.ranks_per_node),
                                   sample_hz=args.hz, stream=io.StringIO()))
    if result.exit_code != 0:
        print(f"the job failed (exit code {result.exit_code}); notes: {result.notes}", file=sys.stderr)
        return 1
    agents = result.store.run["node_agents"]
    print(f"node agent at {args.hz:g} Hz, {args.ranks_per_node} ranks per node sleeping {args.seconds:g} s "
          f"(store {tmp / 'store'}):")
    worst = 0.0
    for host, a in sorted(agents.items()):
        percent = 100 * a["cpu_s_sampling"] / a["wall_s_sampling"]
        worst = max(worst, percent)
        print(f"  {host}: {percent:.2f} % of one core while sampling ({a['cpu_s_sampling']:.3f} CPU s over "
              f"{a['wall_s_sampling']:.1f} s); {a['cpu_s_total']:.2f} CPU s in all (start-up and writing "
              "included)")
    print(f"worst node: {worst:.2f} % of one core; target <= 1 %: ratio {worst / 1.0:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
