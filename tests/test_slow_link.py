"""The slow-link detector on a simulated cluster (collectors/cluster.py): a real mpi4py job on 3 nodes x 1 rank,
every pair of ranks exchanging messages of a known size with explicit sources, run by `ddltrace run --launcher`.
With node 2's link shaped to 100 Mbit/s (tbf) the detector names node 2's link and its two pairs; on the same
cluster unshaped it finds nothing. The per-node traffic figures are the job's own bytes.

Needs root, iproute2, util-linux and MPICH (the `mpich` wheel); skips with the reason where any is missing."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from cluster_jobs import NEEDS_CLUSTER, run_on_cluster

from ddltrace.analyses.findings import detect
from ddltrace.analyses.node_traffic import node_table, p2p_traffic, pair_bandwidth, rank_hosts, transfers
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.thresholds import Thresholds
from ddltrace.cli import main
from ddltrace.collectors import cluster as cl
from ddltrace.units import format_bytes

pytestmark = NEEDS_CLUSTER

SIZE = 2 << 20  # bytes per message
REPS = 4  # messages per ordered pair of ranks
RATE_BIT = 100e6  # node 2's shaped link

# every ordered pair in turn, a barrier between: one transfer at a time, explicit sources
JOB = textwrap.dedent("""
    import sys
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    size, reps = int(sys.argv[1]), int(sys.argv[2])
    out, buf = np.ones(size, dtype=np.uint8), np.empty(size, dtype=np.uint8)
    for src in range(comm.size):
        for dst in range(comm.size):
            if src == dst:
                continue
            for _ in range(reps):
                comm.Barrier()
                if comm.rank == src:
                    comm.Send(out, dest=dst, tag=7)
                elif comm.rank == dst:
                    comm.Recv(buf, source=src, tag=7)
                    assert buf.sum() == size
    comm.Barrier()
""")


def _run_job(cluster, path) -> analyze_store:
    run_on_cluster(cluster, path, [sys.executable, str(path.parent / "job.py"), str(SIZE), str(REPS)], ppn=1)
    return analyze_store(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(cluster hosts, the unshaped run, the run with node 2's link at 100 Mbit/s), on one 3-node cluster."""
    tmp = tmp_path_factory.mktemp("slow_link")
    (tmp / "job.py").write_text(JOB)
    with cl.Cluster(3) as cluster:
        plain = _run_job(cluster, tmp / "plain")
        cluster.shape(2, RATE_BIT)
        shaped = _run_job(cluster, tmp / "shaped")
        yield [n.host for n in cluster.nodes], plain, shaped


def test_the_pairs_traffic_is_the_jobs(runs):
    hosts, plain, _ = runs
    assert rank_hosts(plain.store) == dict(enumerate(hosts))
    assert "hosts" in plain.capabilities
    p2p = p2p_traffic(plain.calls, rank_hosts(plain.store))
    # 3 pairs of nodes, each 2 x REPS messages of SIZE bytes (both directions), nothing within a node
    assert len(p2p) == 3 and (p2p["host_a"] != p2p["host_b"]).all()
    assert (p2p["bytes"] == 2 * REPS * SIZE).all() and (p2p["calls"] == 4 * REPS).all()
    moves = transfers(plain.calls, rank_hosts(plain.store))
    assert len(moves) == 6 * REPS and (moves["bytes"] == SIZE).all() and (moves["time_ns"] > 0).all()


def test_a_shaped_link_is_named_with_its_node(runs):
    hosts, _, shaped = runs
    th = Thresholds()
    bw = pair_bandwidth(transfers(shaped.calls, rank_hosts(shaped.store)), th["slow_link.min_bytes"])
    through = bw[(bw["host_a"] == hosts[2]) | (bw["host_b"] == hosts[2])]
    # tbf at 100 Mbit/s (12.5 MB/s) lets a burst of 10 ms of the rate pass at once: a 2 MiB message (168 ms at
    # the rate), timed from its send's entry, can show 1.06 x the rate at most; none through node 2 reaches 1.25 x
    assert len(through) == 2 and (through["peak_bytes_per_s"] <= 1.25 * RATE_BIT / 8).all(), bw
    assert (through["peak_bytes_per_s"] >= 0.5 * RATE_BIT / 8).all(), bw  # the link's rate, not something slower
    findings = [f for f in detect([shaped], th)[0] if f.id == "slow_link"]
    assert len(findings) == 1, findings
    finding = findings[0]
    assert f"node {hosts[2]}'s link" in finding.title, finding.title
    assert f"{hosts[0]} - {hosts[2]}" in finding.title and f"{hosts[1]} - {hosts[2]}" in finding.title
    assert f"{hosts[0]} - {hosts[1]}" not in finding.title
    assert finding.ranks == [2]
    # the cost: the slow pairs' time beyond what their bytes take at the fast pair's bandwidth, from the table
    fast = float(bw.loc[(bw["host_a"] == hosts[0]) & (bw["host_b"] == hosts[1]), "peak_bytes_per_s"].iloc[0])
    expected = float((through["time_ns"] - through["bytes"] / fast * 1e9).sum())
    assert finding.cost_ns == pytest.approx(expected)
    assert finding.cost_ns > 0.5 * 4 * REPS * SIZE * 8 / RATE_BIT * 1e9


def test_no_finding_on_the_unshaped_cluster(runs):
    _, plain, _ = runs
    findings, skipped = detect([plain], Thresholds())
    assert not [f for f in findings if f.id == "slow_link"], findings
    assert not [s for s in skipped if s.analysis == "slow_link"]
    # no message of slow_link.min_bytes: not made, and said with the job's count of messages between nodes (it was
    # passed over in silence); every one of the 3 x 2 ordered pairs of nodes sent REPS messages
    _, skipped = detect([plain], Thresholds({"slow_link.min_bytes": SIZE + 1}))
    (short,) = [s for s in skipped if s.analysis == "slow_link"]
    assert short.holds == f"{3 * 2 * REPS} matched messages between nodes, none that large"
    assert short.needs.startswith(f"matched point-to-point messages of {format_bytes(SIZE + 1)} or more")


def test_the_per_node_view(runs, capsys):
    hosts, _, shaped = runs
    table = node_table(shaped, Thresholds()["slow_link.min_bytes"]).set_index("host")
    assert list(table.index) == hosts
    for host in hosts:
        # each node sends REPS messages to each of the 2 others, and receives as many
        assert table.loc[host, "p2p_inter_sent_bytes"] == table.loc[host, "p2p_inter_received_bytes"] \
            == 2 * REPS * SIZE
        assert table.loc[host, "p2p_intra_bytes"] == 0
        assert table.loc[host, "coll_inter_bytes"] == 0  # barriers carry no payload
    assert table.loc[hosts[2], "inter_bytes_per_s"] < table.loc[hosts[0], "inter_bytes_per_s"]
    assert main(["analyze", "--json", str(shaped.store.path)]) == 0
    nodes = json.loads(capsys.readouterr().out)["stores"][0]["nodes"]
    assert [n["host"] for n in nodes] == hosts
    assert main(["analyze", str(shaped.store.path)]) == 0
    text = capsys.readouterr().out
    assert "Per node" in text and all(h in text for h in hosts)


def test_the_report_has_the_finding_and_a_per_node_table(runs, tmp_path):
    from ddltrace.report import build_report

    hosts, _, shaped = runs
    files = build_report([shaped.store.path], tmp_path / "report")
    findings = json.loads(files.findings.read_text())["findings"]
    assert any(f"node {hosts[2]}'s link" in f["title"] for f in findings if f["id"] == "slow_link"), findings
    md = files.markdown.read_text()
    table = md.split("### Per node", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ddlc")]
    assert [row.split("|")[1].strip() for row in rows] == [h.replace("-", "\\-") for h in hosts]  # Markdown
    # one heading per column, as analyze's (QA: 'p2p_intra | p2p_intra', the bytes and the time both cut to it)
    (heading,) = [line for line in table.splitlines() if line.startswith("| host |")]
    cells = [c.strip().replace("\\", "") for c in heading.split("|")[1:-1]]
    assert cells[:7] == ["host", "ranks", "compute", "comm", "wait", "p2p within", "p2p across (sent / received)"]
    assert len(set(cells)) == len(cells) and "p2p partner unknown" not in cells  # (every call names its partner)
    sent = 2 * REPS * SIZE
    assert all(f"| {format_bytes(sent)} / {format_bytes(sent)} in " in row.replace("\\", "") for row in rows)
