"""Traffic within and between nodes (analyses/node_traffic.py) and the slow-link detector against a calibrated
bandwidth, on a small written store: 4 ranks on 2 hosts, one message within host A, one from A to B completed by
an Irecv + Wait, one collective across both hosts and one within B. The real cluster test is test_slow_link.py."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter

import pytest
from shared_data import corpus, needs

from ddltrace.analyses.findings import detect
from ddltrace.analyses.node_traffic import (
    collective_traffic,
    node_table,
    p2p_traffic,
    pair_bandwidth,
    rank_hosts,
    transfers,
)
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.thresholds import Thresholds
from ddltrace.cli import main
from ddltrace.store import write_store
from ddltrace.timeline import make_timeline

MS = 1_000_000
INTRA, INTER = 1 << 20, 4 << 20  # bytes of the message within A, and from A to B
HOSTS = {0: "A", 1: "A", 2: "B", 3: "B"}


def _row(rank, name, start, end, peer=None, nbytes=None, comm=0, request=None, category="comm"):
    return {"rank": rank, "name": name, "category": category, "start_ns": start, "dur_ns": end - start,
            "peer": peer, "tag": 0 if peer is not None and name not in ("MPI_Allreduce",) else None, "bytes": nbytes,
            "comm": comm, "request": request, "source": "pmpi"}


@pytest.fixture
def store(tmp_path):
    rows = [_row(r, "compute", 0, 10 * MS, category="compute") for r in HOSTS]
    rows += [_row(0, "MPI_Send", 10 * MS, 11 * MS, peer=1, nbytes=INTRA),
             _row(1, "MPI_Recv", 10 * MS, 11 * MS, peer=0, nbytes=INTRA),
             # A -> B: the send enters at 12 ms, the Irecv was posted at 11 ms, its Wait ends at 52 ms
             _row(0, "MPI_Send", 12 * MS, 52 * MS, peer=2, nbytes=INTER),
             _row(2, "MPI_Irecv", 11 * MS, 11 * MS + 1000, peer=0, nbytes=INTER, request=9),
             _row(2, "MPI_Wait", 20 * MS, 52 * MS, request=9)]
    rows += [_row(r, "MPI_Allreduce", 60 * MS, 62 * MS, nbytes=1000) for r in HOSTS]
    rows += [_row(r, "MPI_Allreduce", 63 * MS, 64 * MS, nbytes=500, comm=5) for r in (2, 3)]
    rows += [_row(r, "compute", 64 * MS, 70 * MS, category="compute") for r in HOSTS]
    info = {r: {"host": h} for r, h in HOSTS.items()}
    return write_store(tmp_path / "store", make_timeline(rows), run={"world_size": 4}, rank_info=info)


def test_traffic_within_and_between_hosts(store):
    run = analyze_store(store.path)
    assert "hosts" in run.capabilities and rank_hosts(run.store) == HOSTS
    p2p = p2p_traffic(run.calls, HOSTS).set_index(["host_a", "host_b"])
    assert p2p.loc[("A", "A"), "bytes"] == INTRA and p2p.loc[("A", "A"), "time_ns"] == 2 * MS
    # the send's bytes once; the time of the send and of the Irecv's post (the Wait is not a point-to-point call)
    assert p2p.loc[("A", "B"), "bytes"] == INTER and p2p.loc[("A", "B"), "time_ns"] == 40 * MS + 1000
    coll = collective_traffic(run.calls, HOSTS).set_index(["host", "scope"])
    assert coll.loc[("A", "inter-node"), "bytes"] == 2000 and coll.loc[("B", "inter-node"), "calls"] == 2
    assert coll.loc[("B", "intra-node"), "bytes"] == 1000 and ("A", "intra-node") not in coll.index
    moves = transfers(run.calls, HOSTS).set_index(["src", "dst"])
    # from the later entry (the send, 12 ms) to the end of the Wait completing the Irecv (52 ms)
    assert moves.loc[(0, 2), "time_ns"] == 40 * MS and moves.loc[(0, 1), "time_ns"] == 1 * MS
    nodes = node_table(run, 65536).set_index("host")
    assert nodes.loc["A", "p2p_intra_bytes"] == INTRA and nodes.loc["B", "p2p_intra_bytes"] == 0
    assert nodes.loc["A", "p2p_inter_sent_bytes"] == nodes.loc["B", "p2p_inter_received_bytes"] == INTER
    assert nodes.loc["A", "p2p_inter_received_bytes"] == nodes.loc["B", "p2p_inter_sent_bytes"] == 0
    assert nodes.loc["A", "p2p_inter_ns"] == 40 * MS and nodes.loc["B", "p2p_inter_ns"] == 1000  # the Irecv's post
    assert nodes.loc["B", "inter_bytes_per_s"] == pytest.approx(INTER / 40e-3)


def test_a_link_below_the_calibrated_bandwidth(store, tmp_path, capsys):
    run = analyze_store(store.path)
    found, skipped = detect([run], Thresholds())
    assert not [f for f in found if f.id == "slow_link"]  # one pair: nothing to compare it with, and it says so
    (short,) = [s for s in skipped if s.analysis == "slow_link"]  # (it was passed over in silence)
    assert short.holds == "one pair of nodes (A - B)" and "--profile" in short.needs
    run.link_bytes_per_s = 1e9  # 1 GB/s calibrated; the pair moved 4 MiB in 40 ms (105 MB/s)
    found = [f for f in detect([run], Thresholds())[0] if f.id == "slow_link"]
    assert len(found) == 1 and "A - B" in found[0].title and "'s link" not in found[0].title
    assert found[0].cost_ns == pytest.approx(40 * MS - INTER / 1e9 * 1e9)
    profile = tmp_path / "hw.json"
    profile.write_text(json.dumps({"constants": {"r_net": {"value": 1e-9, "unit": "s/B"}}}))
    assert main(["analyze", "--json", "--profile", str(profile), str(store.path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [f["id"] for f in out["findings"] if f["id"] == "slow_link"] == ["slow_link"]
    assert [n["host"] for n in out["stores"][0]["nodes"]] == ["A", "B"]
    profile.write_text(json.dumps({"constants": {"r_m": {"value": 1e-10, "unit": "s/B"}}}))
    assert main(["analyze", "--profile", str(profile), str(store.path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "r_net" in err[0] and str(profile) in err[0]


def test_one_host_gets_no_node_view(tmp_path, capsys):
    from ddltrace.analyses.synthetic import write_ps_store

    path = write_ps_store(tmp_path / "ps", workers=3, steps=6, seed=1).path
    assert main(["analyze", "--json", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stores"][0]["nodes"] == []
    assert any(s["analysis"] == "node_traffic" for s in out["not_made"])


def test_a_late_receiver_does_not_make_a_slow_link_look_fast(tmp_path):
    """The payload of a message is on its way from the send's entry: a receiver entering after it had arrived (here
    C -> A at 10 MB/s, the receive entered 401 ms after the send and done 1 ms later) must not time the link at the
    receive's 1 ms (4 GB/s, faster than the 1 GB/s pair A - B, which hid the slow link of make demo-cluster)."""
    hosts = {0: "A", 1: "B", 2: "C"}
    rows = [_row(0, "MPI_Send", 0, 4 * MS, peer=1, nbytes=INTER), _row(1, "MPI_Recv", 0, 4 * MS, peer=0, nbytes=INTER),
            _row(2, "MPI_Send", 10 * MS, 410 * MS, peer=0, nbytes=INTER),
            _row(0, "MPI_Recv", 411 * MS, 412 * MS, peer=2, nbytes=INTER)]
    info = {r: {"host": h} for r, h in hosts.items()}
    run = analyze_store(write_store(tmp_path / "late", make_timeline(rows), run={"world_size": 3},
                                    rank_info=info).path)
    moves = transfers(run.calls, hosts).set_index(["src", "dst"])
    assert moves.loc[(2, 0), "time_ns"] == 1 * MS and moves.loc[(2, 0), "flight_ns"] == 402 * MS
    bw = pair_bandwidth(transfers(run.calls, hosts), 65536).set_index(["host_a", "host_b"])
    assert bw.loc[("A", "C"), "peak_bytes_per_s"] == pytest.approx(INTER / 402e-3)
    assert bw.loc[("A", "B"), "peak_bytes_per_s"] == pytest.approx(INTER / 4e-3)
    found = [f for f in detect([run], Thresholds())[0] if f.id == "slow_link"]
    assert len(found) == 1 and "Slow link: node C's link (1 pair through it, A - C)" in found[0].title, found


IPM = corpus("ipm_hunold_1494937738", "hunold.1494937738.200810.ipm.xml")
#: The file's point-to-point calls: MPI_Sendrecv too (IPM keys it by its destination and counts it as a send).
IPM_P2P = {"MPI_Send", "MPI_Isend", "MPI_Recv", "MPI_Irecv", "MPI_Sendrecv"}


@needs(IPM)
def test_ipm_point_to_point_traffic_per_node_is_the_files_hash_entries(capsys):
    """IPM's per-call totals name each call's partner in their hash entries (<hent call= bytes= orank= count=>time
    ...): per node, the point-to-point bytes and time within and across nodes are the file's, read here with
    ElementTree (bytes sent within the node and to other nodes, received from other nodes; the calls' time). They
    were printed as unknown ('-', the bytes under "partner unknown") while "not made" listed the per-node traffic:
    the importer read the <func> totals only. The collectives within and spanning nodes and the bandwidth need
    instances and transfers in time, which totals do not have: '-' (null) in the table, and listed as not made.
    MPI_Sendrecv (384 hash entries naming their partner) was counted nowhere: jupiter1's time across nodes read
    209 ms where the file gives 0.75 s (Send 0.168 + Irecv 0.041 + Sendrecv 0.538 s)."""
    host_of, tasks = {}, []
    for task in ET.parse(IPM).getroot().iter("task"):
        host_of[int(task.get("mpi_rank"))] = task.findtext("host").strip()
        tasks.append(task)
    within, sent_across, received_across = Counter(), Counter(), Counter()
    time_within, time_across, time_func = Counter(), Counter(), Counter()
    for task in tasks:
        host = host_of[int(task.get("mpi_rank"))]
        for func in task.iter("func"):
            if func.get("name") in IPM_P2P:
                time_func[host] += float(func.text)
        for hent in task.iter("hent"):
            if hent.get("call") not in IPM_P2P:
                continue
            size = int(hent.get("bytes")) * int(hent.get("count"))
            same = host_of[int(hent.get("orank"))] == host
            send = "send" in hent.get("call").lower()
            (time_within if same else time_across)[host] += float(hent.text.split()[0])
            if send:
                (within if same else sent_across)[host] += size
            elif not same:
                received_across[host] += size
    assert len(within) == 4 and all(v > 4e8 for v in within.values()) and all(v > 1e7 for v in sent_across.values())
    assert time_across["jupiter1"] == pytest.approx(0.747, abs=0.001)
    assert main(["analyze", str(IPM), "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    nodes = {n["host"]: n for n in doc["stores"][0]["nodes"]}
    assert set(nodes) == set(within)
    for host, node in nodes.items():
        # each partner's row holds its hash entries' share of the <func> total (five significant digits each)
        assert node["p2p_intra_bytes"] == pytest.approx(within[host], rel=1e-4)
        assert node["p2p_inter_sent_bytes"] == pytest.approx(sent_across[host], rel=1e-4)
        assert node["p2p_inter_received_bytes"] == pytest.approx(received_across[host], rel=1e-4)
        assert node["p2p_intra_ns"] == pytest.approx(time_within[host] * 1e9, rel=1e-3)
        assert node["p2p_inter_ns"] == pytest.approx(time_across[host] * 1e9, rel=1e-3)
        assert node["p2p_intra_ns"] + node["p2p_inter_ns"] == pytest.approx(time_func[host] * 1e9, abs=64)
        assert node["p2p_no_partner_sent_bytes"] == 0
        assert node["coll_intra_bytes"] is None and node["coll_inter_bytes"] is None
        assert node["inter_bytes_per_s"] is None
    not_made = {s["analysis"] for s in doc["not_made"]}
    assert "node_collectives" in not_made and not {"node_traffic", "node_p2p"} & not_made
    assert main(["analyze", str(IPM), "--quiet"]) == 0
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines() if line.startswith("  jupiter")]
    assert len(rows) == 4 and all(row[-3:] == ["-", "-", "-"] for row in rows)  # coll within, across, bandwidth


def test_sendrecv_counts_once_for_its_destination(tmp_path):
    """An MPI_Sendrecv row (peer: its destination; bytes: one count, as IPM and the PMPI collector before its receive
    halves wrote it) counts for the pair of hosts of its rank and destination: its time, its bytes as sent. mpi_calls
    left it out, so it was counted neither within, across nor with partner unknown. (The receive halves:
    tests/test_pmpi_sendrecv.py.)"""
    rows = [_row(0, "MPI_Sendrecv", 0, 3 * MS, peer=2, nbytes=2 * INTRA),
            _row(2, "MPI_Sendrecv", 1 * MS, 3 * MS, peer=0, nbytes=2 * INTRA),
            _row(1, "MPI_Sendrecv_replace", 0, 1 * MS, peer=0, nbytes=INTRA),
            _row(3, "MPI_Sendrecv", 0, 5 * MS, nbytes=INTRA)]  # no partner
    info = {r: {"host": h} for r, h in HOSTS.items()}
    run = analyze_store(write_store(tmp_path / "s", make_timeline(rows), run={"world_size": 4}, rank_info=info).path)
    p2p = p2p_traffic(run.calls, HOSTS).set_index(["host_a", "host_b"])
    assert p2p.loc[("A", "B"), "calls"] == 2 and p2p.loc[("A", "B"), "bytes"] == 4 * INTRA
    assert p2p.loc[("A", "B"), "time_ns"] == 5 * MS
    assert p2p.loc[("A", "A"), "bytes"] == INTRA and p2p.loc[("A", "A"), "time_ns"] == MS
    nodes = node_table(run, 65536).set_index("host")
    assert nodes.loc["A", "p2p_inter_sent_bytes"] == 2 * INTRA and nodes.loc["A", "p2p_inter_received_bytes"] == 0
    assert nodes.loc["A", "p2p_inter_ns"] == 3 * MS and nodes.loc["A", "p2p_intra_ns"] == MS
    assert nodes.loc["B", "p2p_no_partner_sent_bytes"] == INTRA and nodes.loc["B", "p2p_no_partner_ns"] == 5 * MS
