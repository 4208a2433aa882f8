"""``ddltrace run --out`` on node-local disk across 2 simulated nodes (each node's disk: collectors/cluster.py's
``local_disk``, a folder of its own mounted over the store's folder): every node keeps its part (its ranks'
record files, its agent's samples) and sends it to the launching process over the node agent's link at the end.
A node killed in the middle of the run leaves a store that names it and the folder its part is in, and
``ddltrace merge`` joins that part later.

Needs root, iproute2, util-linux and MPICH; skips with the reason where any is missing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from cluster_jobs import MPIEXEC, NEEDS_CLUSTER, run_on_cluster

from ddltrace import store as store_module
from ddltrace.cli import main
from ddltrace.collectors import cluster as cl
from ddltrace.store import TraceStore

pytestmark = NEEDS_CLUSTER

JOB = textwrap.dedent("""
    import sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    comm.Barrier()
    for _ in range(int(sys.argv[1])):
        comm.Allreduce(np.ones(1000), np.empty(1000))
    time.sleep(float(sys.argv[2]))
    comm.Barrier()
""")


def test_node_local_parts_are_gathered_at_the_end(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    local = tmp_path / "local"
    local.mkdir()
    with cl.Cluster(2) as cluster:
        disks = cluster.local_disk(local)
        run_on_cluster(cluster, local / "store", [sys.executable, str(tmp_path / "job.py"), "50", "0.5"], ppn=2,
                       options=("--launcher-addr", cluster.host_addr))
        # each node wrote on its own disk only: its ranks' record files and its agent's folder
        on_disk = {}
        for node, disk in zip(cluster.nodes, disks, strict=True):
            records = list(disk.glob(".store.*/records"))
            assert len(records) == 1 and len(list(records[0].glob("rank-*.pmpi"))) == 2
            assert [p.name for p in (records[0] / "nodes").iterdir()] == [node.host]
            on_disk[node.host] = sum(p.stat().st_size for p in records[0].rglob("*") if p.is_file())
        hosts = [n.host for n in cluster.nodes]
    store = TraceStore.open(local / "store")
    assert store.ranks == [0, 1, 2, 3]
    assert [store.rank_info(r)["host"] for r in store.ranks] == [hosts[0]] * 2 + [hosts[1]] * 2
    for rank in store.ranks:  # every rank's 50 all-reduces, gathered from its node
        tl = store.timeline([rank])
        assert (tl["name"].str.startswith("MPI_Allreduce")).sum() == 50
    links = store.run["node_links"]
    assert {h: (link["state"], link["shared"]) for h, link in links.items()} == dict.fromkeys(hosts,
                                                                                              ("complete", False))
    assert {h: link["bytes"] for h, link in links.items()} == on_disk  # what each node sent: all it had
    names = set(store.counters([-1])["name"])
    assert {f"cpu_percent@{h}" for h in hosts} <= names
    assert "missing_nodes" not in store.run


def test_a_killed_node_is_named_with_its_part_and_merge_joins_it(tmp_path, capsys, monkeypatch):
    (tmp_path / "job.py").write_text(JOB)
    local = tmp_path / "local"
    local.mkdir()
    with cl.Cluster(2) as cluster:
        disks = cluster.local_disk(local)
        run = _run_with_local_out(cluster, local, tmp_path / "job.py", ppn=2, seconds="30")
        deadline = time.monotonic() + 60
        # node 1 crashes once its ranks have done their all-reduces (their record files hold them)
        while time.monotonic() < deadline and run.poll() is None:
            if len(list(disks[1].glob(".store.*/records/rank-*.pmpi"))) == 2 and \
                    len(list(disks[1].glob(".store.*/records/nodes/*/ranks/*"))) == 2:
                break
            time.sleep(0.1)
        time.sleep(2.0)
        cluster.kill(1)
        out, _ = run.communicate(timeout=120)
        victim = cluster.nodes[1].host
        part = next(disks[1].glob(".store.*"))  # the run's work folder on node 1's disk
        copied = tmp_path / "node1-part"
        shutil.copytree(part, copied)  # what a user does: copy the folder from the node
    store = TraceStore.open(local / "store")
    assert store.ranks == [0, 1], out
    part_on_node = str(local / part.relative_to(disks[1]))  # the same folder, as the node sees it
    assert store.run["missing_nodes"] == {victim: part_on_node}
    assert any(n.startswith(f"missing node {victim}:") and "ddltrace merge" in n for n in store.manifest["notes"])
    assert main(["info", str(local / "store")]) == 0
    info = capsys.readouterr().out
    assert f"missing     node {victim}: its part was not gathered; it is on that node in {part_on_node}" in info
    published, real_publish = [], store_module.publish  # each store's manifest as it is published

    def publish(staging, path, **kwargs):
        published.append((Path(path), json.loads((staging / "manifest.json").read_text())))
        return real_publish(staging, path, **kwargs)

    monkeypatch.setattr("ddltrace.store.publish", publish)
    assert main(["merge", str(local / "store"), str(copied), "--out", str(tmp_path / "joined")]) == 0
    joined = TraceStore.open(tmp_path / "joined")
    manifest = dict(published)[tmp_path / "joined"]
    assert "missing_nodes" not in manifest["run"] and manifest["clock"]["offsets_ns"].keys() >= {"2", "3"}
    assert joined.ranks == [0, 1, 2, 3]
    assert [joined.rank_info(r)["host"] for r in (2, 3)] == [victim, victim]
    for rank in (2, 3):  # the killed node's ranks, from its part: their all-reduces, to their death
        tl = joined.timeline([rank])
        assert (tl["name"].str.startswith("MPI_Allreduce")).sum() == 50
        assert joined.rank_info(rank)["ended"] != "normal"
        assert str(rank) in joined.manifest["clock"]["offsets_ns"]
    assert "missing_nodes" not in joined.run
    assert any(n.startswith(f"node {victim}: its part joined") for n in joined.manifest["notes"])
    # a folder that is not a missing node's part is refused, naming it
    assert main(["merge", str(tmp_path / "joined"), str(copied), "--out", str(tmp_path / "again")]) == 2
    assert str(copied) in capsys.readouterr().err


def test_a_killed_node_agent_leaves_no_false_note_and_merge_restores_its_node(tmp_path, capsys):
    """Only node 1's agent is killed (SIGKILL) while its rank runs on: the rank wrote its record file on the node's
    disk, so no note may say it wrote none (before the merge: the part was not gathered; after it: the rank is in
    the store), and no note may point into merge's temporary folder."""
    (tmp_path / "job.py").write_text(JOB)
    local = tmp_path / "local"
    local.mkdir()
    copied = tmp_path / "node1-part"
    out, victim = _run_with_node1_agent_killed(local, tmp_path / "job.py", copied, seconds="2")
    store = TraceStore.open(local / "store")
    assert store.ranks == [0] and list(store.run["missing_nodes"]) == [victim], out
    notes = store.manifest["notes"]
    assert any(n.startswith(f"missing node {victim}:") for n in notes), notes
    assert not any("wrote no record file" in n for n in notes), notes  # it wrote one, on its node's disk
    assert any(n.startswith("ranks [1]: no record file gathered") and victim in n for n in notes), notes
    assert main(["merge", str(local / "store"), str(copied), "--out", str(tmp_path / "joined")]) == 0
    joined = TraceStore.open(tmp_path / "joined")
    assert joined.ranks == [0, 1] and joined.rank_info(1)["host"] == victim
    assert (joined.timeline([1])["name"].str.startswith("MPI_Allreduce")).sum() == 50
    assert not any("record file" in n for n in joined.manifest["notes"]), joined.manifest["notes"]
    assert not any(".join." in n for n in joined.manifest["notes"]), joined.manifest["notes"]  # merge's tmp folder
    assert f"node {victim}: its agent left no samples (no agent.json); its log is empty" in joined.manifest["notes"]


def test_the_job_s_workload_entry_survives_the_merge_of_a_node_s_part(tmp_path, capsys):
    """The reference ps-sgd job (server on node 0, its one worker on node 1), node 1's agent killed so that its
    part is left on its disk: the store recorded what the job was told (w = 1, server rank 0), and the store that
    ``ddltrace merge`` joins the part into keeps that entry (it had none: a merge wrote only the run), the same
    configuration the job wrote in its ground truth, its path still found from the merged store."""
    from ddltrace.analyses.run_analysis import analyze_store, ground_truth_path

    local, truth = tmp_path / "local", tmp_path / "truth"
    local.mkdir()
    job = ["-m", "ddltrace.collectors.workloads.ps_sgd", "--out", str(truth), "--samples", "2048", "--batch", "64",
           "--hidden", "10", "--epochs", "1", "--compute", "emulated", "--sample-time", "0.001"]
    copied = tmp_path / "node1-part"
    out, _ = _run_with_node1_agent_killed(local, job, copied)
    config = json.loads((truth / "ground_truth.json").read_text())["config"]
    assert (config["workers"], config["server_rank"]) == (1, 0)
    store = TraceStore.open(local / "store")
    assert store.ranks == [0] and store.run["missing_nodes"], out
    assert store.manifest["workload"]["config"] == config
    assert main(["merge", str(local / "store"), str(copied), "--out", str(tmp_path / "joined")]) == 0
    joined = TraceStore.open(tmp_path / "joined")
    assert joined.ranks == [0, 1] and joined.manifest["workload"] == {
        **store.manifest["workload"], "ground_truth": os.path.relpath(truth / "ground_truth.json", tmp_path / "joined")}
    assert ground_truth_path(joined) == (truth / "ground_truth.json").resolve()
    assert sum(n.startswith("ps-sgd workload") for n in joined.manifest["notes"]) == 1, joined.manifest["notes"]
    run = analyze_store(joined)
    assert (run.workers, run.server_ranks, run.worker_ranks, run.workers_inferred) == (1, [0], [1], None)


def _run_with_node1_agent_killed(local: Path, job: Path | list[str], copied: Path, **job_args) -> tuple[str, str]:
    """``job`` on a 2-node cluster, one rank a node, writing to ``local`` on each node's disk, node 1's agent
    SIGKILLed once its rank is past MPI_Init; the run must still succeed. Node 1's part (left on its disk) is copied
    to ``copied``. Returns the run's output and node 1's host name."""
    with cl.Cluster(2) as cluster:
        disks = cluster.local_disk(local)
        run = _run_with_local_out(cluster, local, job, ppn=1, **job_args)
        try:
            _kill_agent_once_past_mpi_init(cluster, disks[1], run)
            out, _ = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert run.returncode == 0, out
        shutil.copytree(next(disks[1].glob(".store.*")), copied)
        return out, cluster.nodes[1].host


def _kill_agent_once_past_mpi_init(cluster: cl.Cluster, disk: Path, run: subprocess.Popen) -> None:
    """SIGKILL node 1's agent once its rank is past MPI_Init (its record file is on the node's ``disk``)."""
    agent, deadline = None, time.monotonic() + 60
    while agent is None and time.monotonic() < deadline and run.poll() is None:
        if list(disk.glob(".store.*/records/rank-*.pmpi")):
            agent = next((pid for pid in cluster.nodes[1].pids()
                          if _argv(pid)[1:2] == [str(Path(cl.__file__).parent / "node_agent.py")]), None)
        time.sleep(0.1)
    assert agent is not None, "node 1's agent not found"
    os.kill(agent, signal.SIGKILL)


def _run_with_local_out(cluster: cl.Cluster, local: Path, job: Path | list[str], *, ppn: int,
                        seconds: str = "") -> subprocess.Popen:
    """``ddltrace run --launcher`` of ``job`` (a script: 50 all-reduces, then ``seconds`` of sleep; or the
    arguments of Python) with ``--out`` under ``local``, each node's own disk there; its output (stdout and stderr
    together) on the pipe."""
    args = job if isinstance(job, list) else [str(job), "50", seconds]
    return subprocess.Popen([sys.executable, "-m", "ddltrace", "run", "--no-progress", "--launcher",
                             cluster.mpiexec(MPIEXEC, ppn=ppn), "--launcher-addr", cluster.host_addr,
                             "--out", str(local / "store"), "--", sys.executable, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []
