"""A node killed in the middle of a 2-node run whose record folder is shared: every rank's time after its last MPI
call is in its span, to the last sample that saw its process alive. Before, the run's ranks (the surviving node's
too, stopped by the launcher when the node died, 3 s after their last call) had spans of 0.1 s: ``info``'s time span
read 103 ms of a 3.7 s run. And the dead node's agent, whose link closed as it died, is said to have ended (before:
"its agent's link broke").

Needs root, iproute2, util-linux and MPICH; skips with the reason where any is missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from cluster_jobs import MPIEXEC, NEEDS_CLUSTER

from ddltrace.collectors import cluster as cl
from ddltrace.store import TraceStore
from ddltrace.summary import summarize

pytestmark = NEEDS_CLUSTER

JOB = textwrap.dedent("""
    import sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    comm.Barrier()
    for _ in range(50):
        comm.Allreduce(np.ones(1000), np.empty(1000))
    open(f"{sys.argv[1]}/rank{comm.rank}.ready", "w").close()
    time.sleep(30)
    comm.Barrier()
""")


def test_a_killed_nodes_run_keeps_every_ranks_time_after_its_last_call(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    (ready := tmp_path / "ready").mkdir()
    with cl.Cluster(2) as cluster:
        run = subprocess.Popen([sys.executable, "-m", "ddltrace", "run", "--no-progress", "--launcher",
                                cluster.mpiexec(MPIEXEC, ppn=2), "--out", str(tmp_path / "store"), "--",
                                sys.executable, str(tmp_path / "job.py"), str(ready)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(list(ready.glob("*.ready"))) < 4 and run.poll() is None:
                time.sleep(0.1)
            time.sleep(3.0)  # every rank 3 s into its sleep, after its last call
            killed_ns = time.time_ns()
            cluster.kill(1)
            out, _ = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        victim = cluster.nodes[1].host
    store = TraceStore.open(tmp_path / "store")
    assert store.ranks == [0, 1, 2, 3], out
    summary = summarize(store)
    for rank in store.ranks:
        info = store.rank_info(rank)
        assert info["ended"] == "abrupt" and info["open_calls"] == [], (rank, info)
        tl = store.timeline([rank])
        calls = tl[tl["source"] == "pmpi"]
        last_call = int((calls["start_ns"] + calls["dur_ns"]).max())
        seen = info["seen_alive_until_ns"]
        if info["host"] == victim:  # seen alive by its agent's last save (every 2 s) before the node died
            assert last_call + 0.5e9 <= seen <= killed_ns + 0.5e9, (rank, info)
        else:  # the surviving node's agent saw its ranks until the launcher stopped them, after the kill
            assert killed_ns - 1e9 <= seen <= store.run["end_ns"], (rank, seen - killed_ns, out)
            assert summary.ranks[rank].span_ns >= 2.5e9, (rank, summary.ranks[rank].span_ns)
    assert summary.span_ns >= 2.5e9, out
    assert any(n.startswith("rank 0, 1, 2, 3 ended abruptly outside any MPI call") for n in store.manifest["notes"])
    # the dead node's agent closed its link as it died: no note says the link broke (tests/test_node_link_lost.py)
    notes = [n for n in store.manifest["notes"] if n.startswith(f"node {victim}:")]
    assert not any("broke" in n for n in notes), notes
    assert any(n.startswith(f"node {victim}: its agent ended before it was done") for n in notes), notes
    assert store.run["node_links"][victim]["lost"] == "closed"
