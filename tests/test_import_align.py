"""Clock alignment from matched send/receive pairs: a 2-rank OTF2 archive written here (the otf2 package) with
rank 1's clock 5 ms ahead, on two hosts; the import recovers the offset within its uncertainty."""

from __future__ import annotations

import pandas as pd
import pytest

from ddltrace.cli import main
from ddltrace.collectors.importers.align import estimate_offsets
from ddltrace.store import TraceStore

SKEW = 5_000_000  # rank 1's clock ahead of rank 0's, ns


def _write_archive(path, skew: int, latencies: list[tuple[int, int]]) -> None:
    otf2 = pytest.importorskip("otf2")
    with otf2.writer.open(str(path), timer_resolution=10**9) as w:
        d = w.definitions
        root = d.system_tree_node("cluster")
        groups = [d.location_group(f"MPI Rank {r}", system_tree_parent=d.system_tree_node(f"node{r}", parent=root))
                  for r in range(2)]
        locs = [d.location("Master thread", group=g) for g in groups]
        d.group("locations", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=locs)
        comm = d.comm("MPI_COMM_WORLD", group=d.group("world", group_type=otf2.GroupType.COMM_GROUP,
                                                      paradigm=otf2.Paradigm.MPI, members=[0, 1]))
        send, recv = d.region("MPI_Send"), d.region("MPI_Recv")
        ew = [w.event_writer_from_location(loc) for loc in locs]
        shift = [0, skew]
        t = 10_000_000
        for there, back in latencies:  # ping (0 -> 1) then pong (1 -> 0), true times then each rank's clock
            ew[1].enter(t - 1000 + shift[1], recv)
            ew[0].enter(t, send)
            ew[0].mpi_send(t + 100, 1, comm, 7, 4096)
            ew[0].leave(t + 2000, send)
            arrive = t + there
            ew[1].mpi_recv(arrive + shift[1], 0, comm, 7, 4096)
            ew[1].leave(arrive + 500 + shift[1], recv)
            t2 = arrive + 10_000
            ew[0].enter(t2 - 5000, recv)
            ew[1].enter(t2 + shift[1], send)
            ew[1].mpi_send(t2 + 100 + shift[1], 0, comm, 7, 4096)
            ew[1].leave(t2 + 2000 + shift[1], send)
            arrive = t2 + back
            ew[0].mpi_recv(arrive, 1, comm, 7, 4096)
            ew[0].leave(arrive + 500, recv)
            t = arrive + 50_000


def test_offset_injected_on_one_host_is_recovered(tmp_path):
    _write_archive(tmp_path / "trace", SKEW, [(30_000, 22_000), (25_000, 40_000), (21_000, 26_000)])
    out = tmp_path / "store"
    assert main(["import", str(tmp_path / "trace"), "--out", str(out)]) == 0  # hosts node0, node1: auto aligns
    store = TraceStore.open(out)
    clock = store.manifest["clock"]
    assert clock["method"].startswith("matched messages") and clock["matched_messages"] == 6
    # bounds: the fastest ping (21 µs) and pong (22 µs) plus the 0.5 µs receive tails
    assert abs(clock["offsets_ns"]["1"] + SKEW) <= clock["uncertainty_ns"]["1"] <= 25_000
    tl0, tl1 = store.timeline([0]), store.timeline([1])
    send0 = tl0.query("name == 'MPI_Send'")["start_ns"].to_numpy()
    recv1_end = tl1.query("name == 'MPI_Recv'").eval("start_ns + dur_ns").to_numpy()
    assert ((recv1_end - send0) > 0).all() and ((recv1_end - send0) < 60_000).all()  # causal after the shift
    assert main(["import", str(tmp_path / "trace"), "--out", str(tmp_path / "raw"), "--align", "none"]) == 0
    raw = TraceStore.open(tmp_path / "raw").timeline([1])
    assert raw["start_ns"].min() - tl1["start_ns"].min() == -clock["offsets_ns"]["1"]


def test_estimator_chains_ranks_and_refuses_contradictions():
    # rank 2 talks only to rank 1, rank 1 to rank 0; clocks ahead by 0, 3000, -7000 ns; one-way delay 100-200
    ahead = {0: 0, 1: 3000, 2: -7000}
    rows = []
    for a, b, delay in [(0, 1, 100), (1, 0, 150), (1, 2, 120), (2, 1, 200)]:
        rows.append((a, b, 1_000_000 + ahead[a], 1_000_000 + delay + ahead[b]))
    result = estimate_offsets(pd.DataFrame(rows, columns=["src", "dst", "send_ns", "recv_ns"]), [0, 1, 2])
    assert result.consistent and result.offsets_ns[0] == 0
    for rank in (1, 2):
        assert abs(result.offsets_ns[rank] + ahead[rank]) <= result.uncertainty_ns[rank]
    assert result.uncertainty_ns[2] > result.uncertainty_ns[1]  # bounds add along the chain
    one_way = estimate_offsets(pd.DataFrame([rows[0]], columns=["src", "dst", "send_ns", "recv_ns"]), [0, 1])
    assert one_way.unaligned == [1]
    bad = pd.DataFrame([(0, 1, 0, -500), (1, 0, 0, -500)], columns=["src", "dst", "send_ns", "recv_ns"])
    assert not estimate_offsets(bad, [0, 1]).consistent
