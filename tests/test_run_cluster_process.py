"""``ddltrace run --launcher`` on a job with neither MPI nor a framework, across 2 simulated nodes: one Python
process per node (started by hydra as a plain process starter), each with a child; node 1's child sends a known
number of bytes over TCP to node 0. Each node agent's clock ping-pong with the launching process (at its start
and end) measures the clock offset injected on node 1 (test hook) within its stated uncertainty, and node 1's
counters are put back on the launching machine's clock with it.

Needs root, iproute2, util-linux and MPICH (hydra); skips with the reason where any is missing."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from cluster_jobs import NEEDS_CLUSTER, run_on_cluster

from ddltrace.collectors import cluster as cl
from ddltrace.store import TraceStore

pytestmark = NEEDS_CLUSTER

SENT = 16_000_000  # bytes node 1's child sends to node 0
OFFSET_NS = 2_000_000_000  # node 1's collectors' clock is 2 s ahead (test hook): far more than a sample period

JOB = textwrap.dedent("""
    import json, os, socket, subprocess, sys, time
    rank, server, size, out = int(os.environ["PMI_RANK"]), sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if len(sys.argv) > 4:  # the child on node 1: send, and say when (this node's true wall clock)
        time.sleep(1.0)
        for _ in range(100):
            try:
                sock = socket.create_connection((server, 45123))
                break
            except OSError:
                time.sleep(0.05)
        t0 = time.time_ns()
        sock.sendall(b"x" * size)
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)
        with open(out, "w") as fh:
            json.dump({"t0_ns": t0, "t1_ns": time.time_ns()}, fh)
        sys.exit(0)
    if rank == 1:
        sys.exit(subprocess.run([sys.executable, *sys.argv, "child"]).returncode)
    listener = socket.create_server(("0.0.0.0", 45123))
    conn, _ = listener.accept()
    got = 0
    while chunk := conn.recv(1 << 20):
        got += len(chunk)
    conn.sendall(b"k")
    assert got == size, got
    time.sleep(0.5)
""")


@pytest.fixture(scope="module")
def process_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster_process")
    (tmp / "job.py").write_text(JOB)
    with cl.Cluster(2) as cluster, pytest.MonkeyPatch.context() as mp:
        mp.setenv("DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS", f"{cluster.nodes[1].host}:{OFFSET_NS}")
        run_on_cluster(cluster, tmp / "store", [sys.executable, str(tmp / "job.py"), cluster.nodes[0].host,
                                                str(SENT), str(tmp / "sent.json")],
                       ppn=1, options=("--launcher-addr", cluster.host_addr))
        yield cluster, TraceStore.open(tmp / "store"), json.loads((tmp / "sent.json").read_text())


def test_each_started_process_is_a_rank_on_its_node(process_run):
    cluster, store, _ = process_run
    hosts = [n.host for n in cluster.nodes]
    assert store.ranks == [0, 1] and store.world_size == 2
    assert [store.rank_info(r)["host"] for r in store.ranks] == hosts
    assert {store.rank_info(r)["role"] for r in store.ranks} == {"process"}
    counters = store.counters()
    assert set(counters.loc[counters["name"] == "rss_bytes", "rank"]) == {0, 1}
    # node 1's agent sees its process and that process's child
    procs = counters.loc[counters["name"] == f"job_processes@{hosts[1]}", "value"]
    assert procs.max() == 2
    assert {n: link["state"] for n, link in store.run["node_links"].items()} == dict.fromkeys(hosts, "complete")


def test_the_node_agents_ping_pong_removes_an_injected_clock_offset(process_run):
    cluster, store, _ = process_run
    clock = store.manifest["clock"]
    for node, injected in ((cluster.nodes[0], 0), (cluster.nodes[1], OFFSET_NS)):
        # this machine's clock minus the node's: the nodes share one kernel clock, only the injected part is real
        for at in ("node_offsets_ns", "node_end_offsets_ns"):
            uncertainty = clock[at.replace("offsets", "uncertainty")][node.host]
            assert abs(clock[at][node.host] + injected) <= uncertainty, (node.host, at, clock)
        assert node.host in clock["node_drift_ppm"]


def test_node_counters_are_put_on_the_launching_machines_clock(process_run):
    """Node 1's eth0 counter rises while its child sends (times the child took on the true clock): 2 s late
    without the correction."""
    cluster, store, sent = process_run
    counters = store.counters([-1])
    rows = counters[counters["name"] == f"net_eth0_sent_bytes@{cluster.nodes[1].host}"].sort_values("t_ns")
    assert SENT <= rows["value"].iloc[-1] <= 1.10 * SENT
    period = 1e9 / store.run["sample_hz"]
    rising = rows[rows["value"].diff() > 0.1 * SENT]  # a sample that saw a good part of the transfer
    assert len(rising)
    assert (rising["t_ns"] > sent["t0_ns"]).all() and (rising["t_ns"] < sent["t1_ns"] + 2 * period).all(), \
        (rising["t_ns"].tolist(), sent)
