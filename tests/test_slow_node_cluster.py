"""The slow-node detector on a simulated cluster (collectors/cluster.py): a real mpi4py job on 3 nodes x 2 ranks,
each step a CPU-bound busy loop of COMPUTE seconds (wall clock) then an all-reduce across all ranks; on the slow
node (matched by its host name) the loop runs SLOW times as long. The detector names that node and its two ranks;
the same job with no slow node gives no finding.

Needs root, iproute2, util-linux and MPICH (the `mpich` wheel); skips with the reason where any is missing."""

from __future__ import annotations

import sys
import textwrap

import pytest
from cluster_jobs import NEEDS_CLUSTER, run_on_cluster

from ddltrace.analyses.findings import detect
from ddltrace.analyses.node_traffic import rank_hosts
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.thresholds import Thresholds
from ddltrace.collectors import cluster as cl

pytestmark = NEEDS_CLUSTER

STEPS, COMPUTE, SLOW = 8, 0.05, 2.0  # steps, seconds of busy loop per step, the slow node's factor

JOB = textwrap.dedent("""
    import socket
    import sys
    import time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    steps, compute, slow_host, factor = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    busy = compute * (factor if socket.gethostname() == slow_host else 1.0)
    grad, total = np.ones(1024), np.empty(1024)
    comm.Barrier()
    for _ in range(steps):
        t = time.perf_counter()
        while time.perf_counter() - t < busy:  # CPU-bound work
            pass
        comm.Allreduce(grad, total)
    comm.Barrier()
""")


def _run_job(cluster, path, slow_host):
    run_on_cluster(cluster, path, [sys.executable, str(path.parent / "job.py"), str(STEPS), str(COMPUTE), slow_host,
                                   str(SLOW)], ppn=2)
    return analyze_store(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(cluster hosts, the balanced run, the run with node 2 slow), on one 3-node cluster."""
    tmp = tmp_path_factory.mktemp("slow_node")
    (tmp / "job.py").write_text(JOB)
    with cl.Cluster(3) as cluster:
        hosts = [n.host for n in cluster.nodes]
        yield hosts, _run_job(cluster, tmp / "balanced", "none"), _run_job(cluster, tmp / "slow", hosts[2])


def test_the_slow_node_is_named(runs):
    hosts, _, slow = runs
    ranks = sorted(r for r, h in rank_hosts(slow.store).items() if h == hosts[2])
    assert len(ranks) == 2
    findings, _ = detect([slow], Thresholds())
    found = [f for f in findings if f.id == "slow_node"]
    assert len(found) == 1, findings
    assert found[0].ranks == ranks and hosts[2] in found[0].title
    assert not [f for f in findings if f.id == "straggler"]
    ev = found[0].evidence
    # each node's compute per step is its busy loop's (wall clock; the loop may overrun when descheduled)
    assert ev[f"compute per step {hosts[2]}"].value >= SLOW * COMPUTE * 1e9
    assert ev["reference_compute_per_step"].value >= COMPUTE * 1e9
    assert ev["excess_over_reference"].value >= 0.5


def test_no_finding_on_the_balanced_run(runs):
    _, balanced, _ = runs
    findings, skipped = detect([balanced], Thresholds())
    assert not [f for f in findings if f.id in ("slow_node", "straggler")], findings
    assert not [s for s in skipped if s.analysis == "slow_node"]
