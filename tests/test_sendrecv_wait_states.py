"""MPI_Sendrecv in the wait states. A store whose only calls with a partner are Sendrecvs held no ``messages``
(MPI_Sendrecv was not a point-to-point call there), so its wait states were not made; now its send half is matched as
a send and its receive half, where the PMPI collector wrote one, as a blocking receive over the call.

The ring is a real MPICH job's (3 ranks, ``comm.Sendrecv(dest=r + 1, source=r - 1)`` three times, rank 0 sleeping
0.1 s before each), its calls' times as the PMPI collector recorded them; each receive half is the row of no
duration the collector writes at the call's exit, naming the source (collectors/pmpi/table.py SENDRECV_RECEIVED)."""

from __future__ import annotations

import pandas as pd
import pytest

from ddltrace.analyses.run_analysis import analyze_store, not_made
from ddltrace.analyses.wait_states import RECEIVE_HALF, SENDRECV_RECEIVED, mpi_calls, wait_states
from ddltrace.store import write_store
from ddltrace.timeline import make_timeline

WORLD = 1140850688  # MPICH's MPI_COMM_WORLD
#: Per rank: MPI_Init_thread, its three MPI_Sendrecv_c and MPI_Finalize as (start_ns, dur_ns).
RING = {
    0: [(1795696047011276657, 40657686), (1795696047164775622, 166400), (1795696047265056862, 86691),
        (1795696047365251413, 944938), (1795696047390815807, 4837785)],
    1: [(1795696046963345955, 90857192), (1795696047062932604, 101891218), (1795696047164877943, 100213342),
        (1795696047265113128, 100158090), (1795696047390688547, 5462337)],
    2: [(1795696046991902263, 60038015), (1795696047063956505, 8974), (1795696047063973821, 100914578),
        (1795696047164918735, 100200417), (1795696047390822503, 2758208)],
}


def row(rank, name, start, dur, category="comm", peer=None, tag=None, comm=None, nbytes=None):
    return {"rank": rank, "lane": "main", "name": name, "category": category, "start_ns": start, "dur_ns": dur,
            "peer": peer, "tag": tag, "comm": comm, "bytes": nbytes, "source": "pmpi"}


def ring_rows(halves: bool = True) -> list[dict]:
    rows = []
    for rank, ((init, init_dur), *calls, (fin, fin_dur)) in RING.items():
        rows += [row(rank, "MPI_Init_thread", init, init_dur, "other"),
                 row(rank, "MPI_Finalize", fin, fin_dur, "other")]
        for start, dur in calls:
            rows.append(row(rank, "MPI_Sendrecv_c", start, dur, peer=(rank + 1) % 3, tag=3, comm=WORLD, nbytes=4096))
            if halves:
                rows.append(row(rank, SENDRECV_RECEIVED, start + dur, 0, peer=(rank - 1) % 3, tag=3, comm=WORLD,
                                nbytes=4096))
    return rows


def late_senders_from_the_rows() -> dict[int, int]:
    """Each rank's Late Sender (ns) from the calls' times: at its k-th Sendrecv, ``min(enter of its source's k-th
    Sendrecv, its own leave) - its own enter`` where positive (Scalasca's definition, the message sent at the
    sender's entry)."""
    out = {}
    for rank, (_, *calls, _) in RING.items():
        sent = RING[(rank - 1) % 3][1:-1]
        out[rank] = sum(max(0, min(s_start, start + dur) - start) for (start, dur), (s_start, _) in
                        zip(calls, sent, strict=True))
    return out


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    return analyze_store(write_store(tmp_path_factory.mktemp("ring") / "store", make_timeline(ring_rows())))


def test_a_ring_of_sendrecvs_has_its_wait_states(ring):
    """Before: not made ("needs MPI point-to-point or collective calls on two or more ranks"). Now rank 1 waits at
    each of its 3 Sendrecvs for rank 0, which slept 0.1 s (302.2 ms in all), and rank 2 at its last two for rank
    1, which was waiting (201.1 ms): the calls' own figures, on both the exchange's and the all-ranks paths."""
    truth = late_senders_from_the_rows()
    assert truth[0] == 0 and 300e6 < truth[1] < 303e6 and 200e6 < truth[2] < 202e6
    assert ring.can("wait_states") and "messages" in ring.capabilities
    assert not [s for s in not_made([ring]) if s.analysis == "wait_states"]
    table = ring.wait_state_table()
    assert table["late_sender"].to_dict() == truth
    assert (table.drop(columns="late_sender") == 0).all().all()  # no Late Receiver at a Sendrecv's send half
    states = wait_states(ring.calls)
    assert states.groupby("rank")["time_ns"].sum().to_dict() == {r: t for r, t in truth.items() if t}
    assert set(states["name"]) == {RECEIVE_HALF} and set(states["peer"]) == {0, 1}


def test_without_receive_halves_the_ring_is_matched_but_waits_nowhere(tmp_path):
    """PMPI records made before the collector wrote receive halves: a Sendrecv's source is not recorded, so no
    receive is matched; the analysis is made and says no wait (not a wait of the wrong partner)."""
    run = analyze_store(write_store(tmp_path / "store", make_timeline(ring_rows(halves=False))))
    assert run.can("wait_states")
    assert (run.wait_state_table() == 0).all().all()


def test_a_sendrecvs_send_half_is_the_send_a_receive_waits_for():
    """A blocking receive entered 200 ns before the Sendrecv that sends to it: Late Sender 200 ns at the receive;
    the Sendrecv itself counts no Late Receiver (its time holds its own receive's wait)."""
    rows = [row(0, "MPI_Sendrecv", 300, 500, peer=1, tag=4, comm=1), row(1, "MPI_Recv", 100, 400, "wait", peer=0,
                                                                          tag=4, comm=1)]
    out = wait_states(mpi_calls(make_timeline(rows)))
    assert out[["pattern", "rank", "peer", "name", "time_ns"]].values.tolist() == [
        ["late_sender", 1, 0, "MPI_Recv", 200]]


def test_a_blocking_send_to_a_sendrecv_waits_for_the_calls_entry():
    """A blocking send entered 150 ns before the Sendrecv whose receive half takes it: Late Receiver 150 ns at the
    send, the receive half posted at its call's entry (the half's row is at the call's exit)."""
    rows = [row(0, "MPI_Send", 100, 400, peer=1, tag=4, comm=1), row(1, "MPI_Sendrecv", 250, 260, peer=2, tag=4,
                                                                      comm=1),
            row(1, SENDRECV_RECEIVED, 510, 0, peer=0, tag=4, comm=1)]
    calls = mpi_calls(make_timeline(rows))
    half = calls[calls["name"] == RECEIVE_HALF]
    assert half[["start_ns", "end_ns", "peer"]].values.tolist() == [[250, 510, 0]]
    out = wait_states(calls)
    assert out[["pattern", "rank", "peer", "name", "time_ns"]].values.tolist() == [
        ["late_receiver", 0, 1, "MPI_Send", 150]]


def test_per_call_totals_of_sendrecvs_name_their_partners(tmp_path):
    """IPM's hash entries of MPI_Sendrecv name the destination: a store of them alone gave no ``p2p_partners``."""
    rows = [row(r, "MPI_Sendrecv", 0, 1000, peer=1 - r, tag=0, comm=1) for r in (0, 1)]
    run = analyze_store(write_store(tmp_path / "store", make_timeline(pd.DataFrame(rows)),
                                    rank_info={r: {"aggregate": True} for r in (0, 1)}))
    assert "p2p_partners" in run.capabilities


def test_the_reports_event_names_leave_the_receive_halves_out(ring):
    """The report's table of event names counts calls: a Sendrecv's receive half (a record of the call's, no
    duration) was listed as 9 'calls' of ddltrace_sendrecv_received taking 0 ns beside the 9 MPI_Sendrecv_c."""
    from ddltrace.report import scan

    rows = ring_rows()
    _, table = scan(ring)
    assert SENDRECV_RECEIVED not in table.index
    assert table.loc["MPI_Sendrecv_c", "calls"] == str(sum(r["name"] == "MPI_Sendrecv_c" for r in rows)) == "9"
    assert sum(r["name"] == SENDRECV_RECEIVED for r in rows) > 0


def test_two_ranks_sendrecvs_ending_in_the_same_ns_keep_both_receive_halves():
    """The halves were found by (lane, end) over all ranks at once, and both ranks' lanes are "main": two ranks'
    Sendrecvs ending in the same ns dropped both halves as ambiguous (CI, Open MPI, 4 ranks: 52 of 54 messages
    matched). A swap between ranks 0 and 1 that ends at 900 ns on both: each half is its own rank's."""
    rows = []
    for rank, start in ((0, 100), (1, 400)):
        rows += [row(rank, "MPI_Sendrecv", start, 900 - start, peer=1 - rank, tag=5, comm=1, nbytes=8),
                 row(rank, SENDRECV_RECEIVED, 900, 0, peer=1 - rank, tag=5, comm=1, nbytes=8)]
    calls = mpi_calls(make_timeline(rows))
    half = calls[calls["name"] == RECEIVE_HALF].sort_values("rank")
    assert half[["rank", "start_ns", "end_ns", "peer"]].values.tolist() == [[0, 100, 900, 1], [1, 400, 900, 0]]
    out = wait_states(calls)
    assert out[["pattern", "rank", "peer", "time_ns"]].values.tolist() == [["late_sender", 0, 1, 300]]
