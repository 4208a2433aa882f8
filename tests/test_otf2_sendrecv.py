"""An MPI_Sendrecv in an OTF2 archive is its send half, as the PMPI collector and the IPM importer give it (and as
analyses/wait_states.py and node_traffic.py read it): ``peer`` the destination (the MpiSend event's receiver inside
the call), ``tag`` the send tag, ``bytes`` the bytes sent. Score-P writes the call's MpiSend before its MpiRecv, and
the row took the last event's: the source of the message received, its tag and its bytes; so a receive waiting for
the Sendrecv's message found no send and the node view counted its bytes as sent to its source. What it received is
its receive half, a row of its own at its Leave, as the PMPI collector writes it.

No shared OTF2 archive holds a Sendrecv (../shared/wild_traces/pipit_otf2_papi and ../shared/mpi_traces/
pipit-ping-pong-otf2: MPI_Send / MPI_Recv only), so the archive is written here with the otf2 package, as
tests/test_import_otf2_requests.py writes its own."""

from __future__ import annotations

import pandas as pd
import pytest

from ddltrace.analyses.node_traffic import p2p_traffic, rank_hosts
from ddltrace.analyses.wait_states import RECEIVE_HALF, mpi_calls, wait_states
from ddltrace.cli import main
from ddltrace.collectors.pmpi.table import SENDRECV_RECEIVED
from ddltrace.store import TraceStore


def _write_archive(path, name: str = "MPI_Sendrecv", recv_first: bool = False) -> None:
    """Three ranks, each on its node (node0-2): rank 0's ``name`` (500-520 ns) sends 64 B with tag 3 to rank 1 and
    receives 32 B with tag 4 from rank 2; rank 1 waits for it in an MPI_Recv entered at 100 ns; rank 2 sends its 32 B
    with MPI_Send at 200 ns."""
    otf2 = pytest.importorskip("otf2")
    with otf2.writer.open(str(path), timer_resolution=10**9) as w:
        d = w.definitions
        groups = [d.location_group(f"MPI Rank {r}", system_tree_parent=d.system_tree_node(f"node{r}"))
                  for r in range(3)]
        locs = [d.location("Master thread", group=g) for g in groups]
        d.group("locations", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=locs)
        comm = d.comm("MPI_COMM_WORLD", group=d.group("world", group_type=otf2.GroupType.COMM_GROUP,
                                                      paradigm=otf2.Paradigm.MPI, members=[0, 1, 2]))
        region = {n: d.region(n) for n in (name, "MPI_Recv", "MPI_Send")}
        r0, r1, r2 = (w.event_writer_from_location(loc) for loc in locs)
        r0.enter(500, region[name])
        events = [("mpi_send", 1, comm, 3, 64), ("mpi_recv", 2, comm, 4, 32)]
        for t, (event, *args) in zip((505, 515), reversed(events) if recv_first else events, strict=True):
            getattr(r0, event)(t, *args)
        r0.leave(520, region[name])
        r1.enter(100, region["MPI_Recv"])
        r1.mpi_recv(508, 0, comm, 3, 64)
        r1.leave(510, region["MPI_Recv"])
        r2.enter(200, region["MPI_Send"])
        r2.mpi_send(205, 0, comm, 4, 32)
        r2.leave(210, region["MPI_Send"])


@pytest.mark.parametrize("name,recv_first", [("MPI_Sendrecv", False), ("MPI_Sendrecv_replace", False),
                                             ("MPI_Sendrecv", True)])
def test_a_sendrecv_row_is_its_send_half(tmp_path, name, recv_first):
    _write_archive(tmp_path / "trace", name, recv_first)
    out = tmp_path / "store"
    assert main(["import", str(tmp_path / "trace"), "--out", str(out), "--progress", "never"]) == 0
    store = TraceStore.open(out)
    row = store.timeline([0]).set_index("name").loc[name]
    assert [int(row[c]) for c in ("peer", "tag", "bytes")] == [1, 3, 64]  # (was: [2, 4, 32], the receive's)
    # what it received is its receive half, as the PMPI collector writes it: at the call's Leave, no duration
    half = store.timeline([0]).set_index("name").loc[SENDRECV_RECEIVED]
    assert [int(half[c]) for c in ("peer", "tag", "bytes", "dur_ns")] == [2, 4, 32, 0]
    assert int(half["start_ns"]) == int(row["start_ns"] + row["dur_ns"]) and half["category"] == "comm"
    calls = mpi_calls(store.timeline([0]))
    assert calls.loc[calls["name"] == RECEIVE_HALF, ["start_ns", "end_ns"]].values.tolist() == \
        [[int(row["start_ns"]), int(row["start_ns"] + row["dur_ns"])]]  # a receive over the call
    states = wait_states(mpi_calls(store.timeline()))
    late = states[states["pattern"] == "late_sender"]
    # rank 1's receive waits from 100 ns for the Sendrecv entered at 500 (was: no send to match it)
    assert late[["rank", "peer", "name", "time_ns"]].values.tolist() == [[1, 0, "MPI_Recv", 400]]
    traffic = p2p_traffic(mpi_calls(store.timeline()), rank_hosts(store))
    sent = {(a, b): n for a, b, n in traffic[["host_a", "host_b", "bytes"]].values.tolist()}
    # the Sendrecv's 64 B go to node1 (was: 32 B to node2, its source); rank 2's MPI_Send its 32 B to node0
    assert sent == {("node0", "node1"): 64, ("node0", "node2"): 32}


def test_a_sendrecv_with_no_send_event_has_no_partner(tmp_path):
    """A Sendrecv whose archive holds its receive only (a send to MPI_PROC_NULL, which Score-P does not record):
    its send half's partner, tag and bytes are not known, not the receive's."""
    otf2 = pytest.importorskip("otf2")
    with otf2.writer.open(str(tmp_path / "trace"), timer_resolution=10**9) as w:
        d = w.definitions
        group = d.location_group("MPI Rank 0", system_tree_parent=d.system_tree_node("node0"))
        loc = d.location("Master thread", group=group)
        d.group("locations", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=[loc])
        comm = d.comm("MPI_COMM_WORLD", group=d.group("world", group_type=otf2.GroupType.COMM_GROUP,
                                                      paradigm=otf2.Paradigm.MPI, members=[0]))
        region = d.region("MPI_Sendrecv")
        writer = w.event_writer_from_location(loc)
        writer.enter(100, region)
        writer.mpi_recv(110, 0, comm, 4, 32)
        writer.leave(120, region)
    out = tmp_path / "store"
    assert main(["import", str(tmp_path / "trace"), "--out", str(out), "--progress", "never"]) == 0
    timeline = TraceStore.open(out).timeline([0]).set_index("name")
    row = timeline.loc["MPI_Sendrecv"]
    assert all(pd.isna(row[c]) for c in ("peer", "tag", "bytes"))
    assert [int(timeline.loc[SENDRECV_RECEIVED, c]) for c in ("peer", "tag", "bytes")] == [0, 4, 32]
