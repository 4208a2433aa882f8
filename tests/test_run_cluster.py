"""``ddltrace run`` across the nodes of a simulated cluster (collectors/cluster.py): a real mpi4py job on 2
nodes x 2 ranks through MPICH's hydra entering the nodes as ssh would. Each node's agent samples its own
node: both nodes' counters under their host names, the bytes the job sent from one node to the other on
that node's eth0 counters, and a clock offset injected on one node removed by the PMPI ping-pong.

Needs root, iproute2, util-linux and MPICH (the `mpich` wheel); skips with the reason where any is missing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from clock_truth import check_rank_clocks, cli_output
from cluster_jobs import MPIEXEC, NEEDS_CLUSTER, run_on_cluster

from ddltrace.cli import main
from ddltrace.collectors import cluster as cl
from ddltrace.store import TraceStore

pytestmark = NEEDS_CLUSTER

SENT = 24_000_000  # bytes rank 0 (node 0) sends to rank 2 (node 1)
OFFSET_NS = 5_000_000  # node 1's clock is 5 ms ahead (test hook)

JOB = textwrap.dedent("""
    import sys
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    size = int(sys.argv[1])
    comm.Barrier()
    if comm.rank == 0:
        comm.Send(np.ones(size, dtype=np.uint8), dest=2)
    elif comm.rank == 2:
        buf = np.empty(size, dtype=np.uint8)
        comm.Recv(buf, source=0)
        assert buf.sum() == size
    comm.Barrier()
""")


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    """One job on a fresh 2-node cluster, run by `ddltrace run --launcher` (the CLI): (cluster, store, out)."""
    tmp = tmp_path_factory.mktemp("cluster_run")
    (tmp / "job.py").write_text(JOB)
    with cl.Cluster(2) as cluster, pytest.MonkeyPatch.context() as mp:
        mp.setenv("DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS", f"{cluster.nodes[1].host}:{OFFSET_NS}")
        printed = run_on_cluster(cluster, tmp / "store", [sys.executable, str(tmp / "job.py"), str(SENT)], ppn=2,
                                 options=("--pyspy",))
        yield cluster, TraceStore.open(tmp / "store"), printed


def test_ranks_run_on_both_nodes_under_their_host_names(cluster_run):
    cluster, store, _ = cluster_run
    hosts = [n.host for n in cluster.nodes]
    assert store.ranks == [0, 1, 2, 3]
    assert [store.rank_info(r)["host"] for r in store.ranks] == [hosts[0], hosts[0], hosts[1], hosts[1]]
    assert store.run["hosts"] == hosts and store.run["nodes"] == hosts
    agents = store.run["node_agents"]  # what each agent cost (benchmarks/node_agent_cost.py reports it)
    assert set(agents) == set(hosts)
    assert all(0 < a["cpu_s_sampling"] <= a["cpu_s_total"] and a["wall_s_sampling"] > 0 for a in agents.values())
    # each node's PID namespace numbers its processes from 1: the same pids on both nodes, told apart by host
    assert {store.rank_info(r)["ended"] for r in store.ranks} == {"normal"}


def test_each_node_has_its_own_machine_counters_and_its_ranks_counters(cluster_run):
    cluster, store, _ = cluster_run
    counters = store.counters()
    names = set(counters["name"])
    for node in cluster.nodes:
        assert {f"cpu_percent@{node.host}", f"mem_used_bytes@{node.host}", f"net_eth0_sent_bytes@{node.host}",
                f"job_processes@{node.host}"} <= names
    # the ranks' own counters come from their node's agent (matched by host and pid)
    assert set(counters.loc[counters["name"] == "rss_bytes", "rank"]) == {0, 1, 2, 3}
    # a node agent sees only its node's processes: the 2 ranks (and their children), not the other node's
    for node in cluster.nodes:
        procs = counters.loc[counters["name"] == f"job_processes@{node.host}", "value"]
        assert procs.max() >= 2 and procs.max() < 4


def test_bytes_sent_across_appear_on_the_sending_nodes_interface(cluster_run):
    cluster, store, _ = cluster_run
    counters = store.counters([-1])
    a, b = (n.host for n in cluster.nodes)

    def last(name: str) -> float:
        rows = counters[counters["name"] == name]
        return float(rows.sort_values("t_ns")["value"].iloc[-1])

    # on the wire: the payload plus TCP/IP headers and the job's other traffic (hydra, MPI set-up, clock sync)
    assert SENT <= last(f"net_eth0_sent_bytes@{a}") <= 1.10 * SENT
    assert SENT <= last(f"net_eth0_recv_bytes@{b}") <= 1.10 * SENT
    assert last(f"net_eth0_sent_bytes@{b}") < 0.10 * SENT  # node 1 sent only acknowledgements and control


def test_an_injected_node_clock_offset_is_removed_within_the_uncertainty(cluster_run):
    _, store, _ = cluster_run
    clock = store.manifest["clock"]
    for rank, injected in ((1, 0), (2, OFFSET_NS), (3, OFFSET_NS)):
        offset, uncertainty = clock["offsets_ns"][str(rank)], clock["uncertainty_ns"][str(rank)]
        # rank 0's clock minus the rank's: the nodes share one kernel clock, so only the injected part is real
        assert abs(offset + injected) <= uncertainty, (rank, offset, uncertainty)
        fin, fin_unc = clock["finalize_offsets_ns"][str(rank)], clock["finalize_uncertainty_ns"][str(rank)]
        assert abs(fin + injected) <= fin_unc, (rank, fin, fin_unc)



def test_info_shows_the_ranks_and_the_nodes_clock_offsets(cluster_run, capsys):
    """``info`` prints each rank's offset as the PMPI ping-pong measured it (node 1's ranks about -5 ms, the injected
    offset) and each node's as its agent's ping-pong with the launching process measured it, as the manifest has
    them (tests/clock_truth.py)."""
    _, store, _ = cluster_run
    check_rank_clocks(capsys, store.path)
    clock = store.manifest["clock"]
    doc = json.loads(cli_output(capsys, "info", store.path, "--json"))["clock"]
    nodes = next(g for g in doc["groups"] if g["kind"] == "node")
    assert nodes["method"] == clock["node_method"] and nodes["reference"] == "the launching process's clock"
    assert {o["who"]: (o["offset_ns"], o["uncertainty_ns"], o["end_offset_ns"], o["end_uncertainty_ns"])
            for o in nodes["offsets"]} == {
        host: (clock["node_offsets_ns"][host], clock["node_uncertainty_ns"][host], clock["node_end_offsets_ns"][host],
               clock["node_end_uncertainty_ns"][host]) for host in clock["node_offsets_ns"]}
    rank2 = next(o for o in doc["groups"][0]["offsets"] if o["who"] == "2")
    assert abs(rank2["offset_ns"] + OFFSET_NS) <= rank2["uncertainty_ns"]


def test_python_stacks_are_taken_inside_each_node(cluster_run):
    """py-spy cannot read a process of another PID namespace from outside: each node's agent runs it."""
    _, store, out = cluster_run
    if "ptrace not permitted" in out:
        pytest.skip("py-spy: ptrace not permitted here")
    for rank in store.ranks:
        tl = store.timeline([rank])
        stacks = tl[tl["source"] == "py-spy"]
        # the job's own stacks: a sample taken while the interpreter starts or exits (MPI_Finalize at exit) is
        # outside job.py (1 of 7 samples in one run), so most, not all, are in it
        in_job = stacks["name"].str.contains("job.py")
        assert len(stacks) and in_job.mean() >= 0.5, (rank, stacks["name"].tolist(), out)
        # on the same clock as the rank's MPI calls: the stacks lie within the rank's span (+- 1 s)
        mpi = tl[tl["source"] == "pmpi"]
        assert stacks["start_ns"].min() > mpi["start_ns"].min() - 1e9
        assert stacks["start_ns"].max() < (mpi["start_ns"] + mpi["dur_ns"]).max() + 1e9


def test_info_shows_a_row_per_node(cluster_run, capsys):
    cluster, store, _ = cluster_run
    assert main(["info", str(store.path)]) == 0
    text = capsys.readouterr().out
    table = text.split("\nper node (machine counters")[-1]  # (the clocks table above has a row per node too)
    for node in cluster.nodes:
        assert any(line.split()[:1] == [node.host] for line in table.splitlines()[1:]), text



def test_a_node_whose_agent_dies_is_named_and_the_rest_kept(tmp_path):
    """SIGKILL one node's agent during the job once it has saved its first samples: the store is written with the
    other node's counters and the samples the dead agent had saved (QA: a killed agent lost all its samples, 3 s
    of them), and the notes name the node and say so."""
    (tmp_path / "job.py").write_text("import time\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\ntime.sleep(4)\n"
                                     "MPI.COMM_WORLD.Barrier()\n")
    with cl.Cluster(2) as cluster:
        run = subprocess.Popen([sys.executable, "-m", "ddltrace", "run", "--no-progress", "--launcher",
                                cluster.mpiexec(MPIEXEC, ppn=2), "--out", str(tmp_path / "store"), "--",
                                sys.executable, str(tmp_path / "job.py")], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        victim = cluster.nodes[1]
        deadline = time.monotonic() + 60
        agent = None
        while agent is None and time.monotonic() < deadline and run.poll() is None:
            for pid in victim.pids():  # the agent keeps the shim's command line; the ranks have exec'd theirs
                with contextlib.suppress(OSError, psutil.Error):
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    # the agent, not a shim about to exec: forked twice, its parent is the node's init
                    if any(a.endswith(b"node_agent.py") for a in cmdline) and psutil.Process(pid).ppid() == \
                            victim.init_pid:
                        agent = pid
            time.sleep(0.1)
        assert agent is not None, "no agent found on node 1"
        folder = Path(os.readlink(f"/proc/{agent}/fd/1")).parent  # (its output goes to its node folder's log)
        wait_until = time.monotonic() + 30
        while not (folder / "samples-00000.parquet").exists() and time.monotonic() < wait_until:
            time.sleep(0.05)
        saved = pd.read_parquet(folder / "samples-00000.parquet")
        os.kill(agent, signal.SIGKILL)
        out, _ = run.communicate(timeout=120)
    assert run.returncode == 0, out
    store = TraceStore.open(tmp_path / "store")
    assert store.ranks == [0, 1, 2, 3]
    machine = store.counters([-1])
    assert f"cpu_percent@{cluster.nodes[0].host}" in set(machine["name"])
    kept = machine[machine["name"].str.endswith(f"@{victim.host}")]
    assert len(kept) >= len(saved[saved["pid"] == -1]) > 0  # at least its first save's machine samples
    note = next(n for n in store.manifest["notes"] if n.startswith(f"node {victim.host}: its agent ended"))
    assert note.startswith(f"node {victim.host}: its agent ended before writing its samples (killed, or its node "
                           f"lost): the ") and "are kept (it saves every 2 s; the last are lost)" in note, note


def test_what_an_agent_saved_before_it_was_stopped_is_read_as_its_part(tmp_path):
    """An agent that saved two chunks of samples and its start's description, then died: its part is those samples,
    its end the last sample's time, its ranks the pids registered; a note says what was kept."""
    from ddltrace.collectors.node_agent import STARTED, read_nodes

    node = tmp_path / "n1"
    (node / "ranks").mkdir(parents=True)
    (node / "agent.lock").touch()
    (node / "ranks" / "4242").write_text("123")
    (node / STARTED).write_text(json.dumps({"host": "n1", "agent_pid": 7, "start_ns": 1_000_000_000,
                                            "sample_hz": 10.0, "test_clock_offset_ns": 0}))
    for i, times in enumerate(([1_100_000_000, 1_200_000_000], [3_600_000_000])):
        pd.DataFrame({"pid": [-1] * len(times), "name": ["cpu_percent"] * len(times), "t_ns": times,
                      "value": [50.0] * len(times)}).to_parquet(node / f"samples-{i:05d}.parquet", index=False)
    parts, notes = read_nodes(tmp_path, wait_s=0)
    (part,) = parts
    assert part.host == "n1" and list(part.samples["t_ns"]) == [1_100_000_000, 1_200_000_000, 3_600_000_000]
    assert (part.info["start_ns"], part.info["end_ns"], part.info["pids"]) == (1_000_000_000, 3_600_000_000, [4242])
    assert notes == ["node n1: its agent ended before writing its samples (killed, or its node lost): the 3 it had "
                     "saved, to 2.6 s after its start, are kept (it saves every 2 s; the last are lost)"]


def test_a_node_agents_log_is_kept_in_the_note_on_its_node(tmp_path):
    """A node whose agent died with a traceback and wrote no samples: the note carries the log's end, since the
    record folder it is in is deleted once the store is written."""
    from ddltrace.collectors.node_agent import read_nodes

    for host in ("n0", "n1"):
        (tmp_path / host).mkdir()
        (tmp_path / host / "agent.lock").touch()
    (tmp_path / "n0" / "agent.log").write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                                               "OSError: [Errno 28] No space left on device\n")
    parts, notes = read_nodes(tmp_path, wait_s=0)
    assert parts == []
    assert notes == ["node n0: its agent left no samples (no agent.json); its log ended: Traceback (most recent call "
                     "last): | File \"x.py\", line 1 | OSError: [Errno 28] No space left on device",
                     "node n1: its agent left no samples (no agent.json); it left no log"]



def test_the_reference_ps_sgd_job_runs_across_nodes(tmp_path):
    """The reference ps-sgd job (server on node 0, worker on node 1) hung in its first pull across nodes with
    MPICH's UCX network module (docs/COLLECTORS.md); with the ofi one the cluster's launcher now uses it runs
    to its end under `ddltrace run --launcher`, every pull and push a call to the other node."""
    truth = tmp_path / "truth"
    with cl.Cluster(2) as cluster:
        run = subprocess.run([sys.executable, "-m", "ddltrace", "run", "--no-progress", "--launcher",
                              cluster.mpiexec(MPIEXEC, ppn=1), "--out", str(tmp_path / "store"), "--",
                              sys.executable, "-m", "ddltrace.collectors.workloads.ps_sgd", "--out", str(truth),
                              "--compute", "emulated", "--epochs", "1", "--samples", "2048"],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    batches = json.loads((truth / "ground_truth.json").read_text())["workers"]["1"]["batches"]
    store = TraceStore.open(tmp_path / "store")
    assert [store.rank_info(r)["host"] for r in store.ranks] == [n.host for n in cluster.nodes]
    worker = store.timeline([1])
    sends = worker[worker["name"].str.startswith("MPI_Send") & (worker["peer"] == 0)]
    # a pull (tag 11) and a push (tag 13) per batch, each crossing from node 1 to node 0
    assert (sends["tag"] == 11).sum() == batches and (sends["tag"] == 13).sum() == batches
