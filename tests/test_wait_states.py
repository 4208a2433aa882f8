"""Scalasca's wait states on hand-built MPI traces whose answers are known to the nanosecond, and on a real job."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddltrace.analyses.wait_exchange import WaitStateExchange, summarise_states
from ddltrace.analyses.wait_states import PATTERNS, completions, mpi_calls, summarize, wait_states
from ddltrace.cli import main
from ddltrace.collectors.launcher import RunConfig, run_job
from ddltrace.collectors.mpi_env import find_tool
from ddltrace.store import TraceStore
from ddltrace.timeline import make_timeline

CATEGORY = {"MPI_Barrier": "barrier", "MPI_Wait": "wait", "MPI_Waitall": "wait", "MPI_Probe": "wait",
            "MPI_Iprobe": "wait"}


def call(rank, name, enter, leave, peer=None, tag=0, comm=1, request=None):
    return {"rank": rank, "name": name, "category": CATEGORY.get(name.removesuffix("_c"), "comm"),
            "start_ns": enter, "dur_ns": leave - enter, "peer": peer, "tag": tag, "comm": comm,
            "request": request}


def states(rows):
    return wait_states(mpi_calls(make_timeline(rows)))


def only(frame, pattern):
    return frame[frame["pattern"] == pattern]


def test_late_sender_blocking_receive():
    out = states([call(1, "MPI_Recv", 100, 500, peer=0), call(0, "MPI_Send", 300, 310, peer=1)])
    assert out[["pattern", "rank", "peer", "time_ns"]].values.tolist() == [["late_sender", 1, 0, 200]]


def test_late_sender_capped_at_leave():
    # clock skew: the send looks like it began after the receive returned; the wait is the whole call
    out = states([call(1, "MPI_Recv", 100, 150, peer=0), call(0, "MPI_Send", 300, 310, peer=1)])
    assert only(out, "late_sender")["time_ns"].tolist() == [50]


def test_late_receiver_blocking_send():
    out = states([call(0, "MPI_Send", 100, 400, peer=1), call(1, "MPI_Recv", 250, 410, peer=0)])
    assert out[["pattern", "rank", "peer", "time_ns"]].values.tolist() == [["late_receiver", 0, 1, 150]]


def test_fifo_order_and_tags():
    out = states([
        call(0, "MPI_Send", 100, 101, peer=1, tag=5), call(0, "MPI_Send", 200, 201, peer=1, tag=5),
        call(1, "MPI_Recv", 50, 120, peer=0, tag=5), call(1, "MPI_Recv", 150, 260, peer=0, tag=5),
    ])
    assert only(out, "late_sender")["time_ns"].tolist() == [50, 50]
    # tags keep messages apart: the tag-5 receive posted first matches the tag-5 send, sent second
    out = states([
        call(0, "MPI_Send", 100, 101, peer=1, tag=7), call(0, "MPI_Send", 200, 201, peer=1, tag=5),
        call(1, "MPI_Recv", 50, 300, peer=0, tag=5), call(1, "MPI_Recv", 300, 310, peer=0, tag=7),
    ])
    assert only(out, "late_sender")[["enter_ns", "time_ns"]].values.tolist() == [[50, 150]]


def test_communicators_keep_messages_apart():
    out = states([
        call(0, "MPI_Send", 100, 101, peer=1, comm=2), call(0, "MPI_Send", 400, 401, peer=1, comm=3),
        call(1, "MPI_Recv", 50, 500, peer=0, comm=3),
    ])
    assert only(out, "late_sender")["time_ns"].tolist() == [350]


def test_wait_on_irecv_and_large_count_names():
    out = states([
        call(1, "MPI_Irecv_c", 0, 5, peer=0, request=11), call(1, "MPI_Wait", 100, 400, request=11),
        call(0, "MPI_Isend_c", 250, 260, peer=1, request=21), call(0, "MPI_Wait", 260, 270, request=21),
    ])
    assert out[["pattern", "rank", "name", "time_ns"]].values.tolist() == [["late_sender", 1, "MPI_Wait", 150]]


def test_waitall_counts_only_the_latest_sender():
    out = states([
        call(2, "MPI_Irecv", 0, 1, peer=0, request=1), call(2, "MPI_Irecv", 1, 2, peer=1, request=2),
        call(2, "MPI_Waitall", 100, 600, request=1), call(2, "MPI_Waitall", 100, 600, request=2),
        call(0, "MPI_Send", 200, 210, peer=2), call(1, "MPI_Send", 450, 460, peer=2),
    ])
    late = only(out, "late_sender")
    assert late[["rank", "peer", "time_ns"]].values.tolist() == [[2, 1, 350]]


def test_request_handles_are_reused_after_completion():
    out = states([
        call(1, "MPI_Irecv", 0, 1, peer=0, request=7), call(1, "MPI_Wait", 10, 50, request=7),
        call(1, "MPI_Irecv", 60, 61, peer=0, request=7), call(1, "MPI_Wait", 70, 200, request=7),
        call(0, "MPI_Send", 30, 31, peer=1), call(0, "MPI_Send", 150, 151, peer=1),
    ])
    assert only(out, "late_sender")["time_ns"].tolist() == [20, 80]


def test_times_since_the_epoch_keep_their_nanoseconds_through_a_wait():
    """The PMPI collector's times are ns since the epoch (1.8e18 ns), where a float's steps are 256 ns. A post no
    Wait* completed made the completions' times floats (merge_asof's missing values): the late sender to an Irecv
    read 150 +- 256 ns. Now exact: 150 ns, and the enter time the Wait's own."""
    t = 1_768_554_939_865_398_728  # (not a multiple of 256)
    out = states([
        call(1, "MPI_Irecv_c", t, t + 5, peer=0, request=11), call(1, "MPI_Wait", t + 101, t + 401, request=11),
        call(1, "MPI_Irecv_c", t + 500, t + 505, peer=0, request=12),  # never completed
        call(0, "MPI_Isend_c", t + 251, t + 260, peer=1, request=21), call(0, "MPI_Wait", t + 260, t + 270, request=21),
    ])
    late = only(out, "late_sender")
    assert late[["rank", "name", "enter_ns", "time_ns"]].values.tolist() == [[1, "MPI_Wait", t + 101, 150]]


def test_late_receiver_on_wait_for_isend():
    out = states([
        call(0, "MPI_Isend", 0, 2, peer=1, request=3), call(0, "MPI_Wait", 10, 300, request=3),
        call(1, "MPI_Recv", 120, 310, peer=0),
    ])
    assert only(out, "late_receiver")[["rank", "name", "time_ns"]].values.tolist() == [[0, "MPI_Wait", 110]]



def exchanged(rows) -> pd.DataFrame:
    """The wait-state sums of ``rows`` matched rank by rank through the scratch folder (analyze's path), against
    those of every call matched at once: they must be the same."""
    calls = mpi_calls(make_timeline(rows))
    with WaitStateExchange() as exchange:
        for rank, part in calls.groupby("rank"):
            exchange.add(int(rank), part.reset_index(drop=True))
        summary = exchange.summary({})
    at_once = summarise_states(wait_states(calls).assign(phase=None)).drop(columns="phase")
    summary = summary.drop(columns="phase").reset_index(drop=True)
    pd.testing.assert_frame_equal(summary, at_once.reset_index(drop=True))
    return summary


def test_a_blocking_probe_waits_for_the_send_of_the_message_its_receive_takes():
    # the server's --server-receive probe: MPI_Probe(any source) returns rank 2's tag-5 message, sent at 300; the
    # MPI_Recv after it, from that rank and tag, enters after the send: the probe is the wait, 200 ns of it. The
    # send still waits for the receive to be posted (a probe receives nothing): Late Receiver, 30 ns
    rows = [call(0, "MPI_Probe", 100, 320, peer=2, tag=5), call(0, "MPI_Recv", 330, 340, peer=2, tag=5),
            call(2, "MPI_Send", 300, 335, peer=0, tag=5)]
    out = states(rows)
    assert out[["pattern", "rank", "peer", "name", "enter_ns", "time_ns"]].values.tolist() == [
        ["late_sender", 0, 2, "MPI_Probe", 100, 200], ["late_receiver", 2, 0, "MPI_Send", 300, 30]]
    assert exchanged(rows)[["pattern", "rank", "instances", "time_ns"]].values.tolist() == [
        ["late_receiver", 2, 1, 30], ["late_sender", 0, 1, 200]]


def test_a_probe_takes_the_next_receive_of_its_source_and_tag_and_iprobe_polls_are_not_counted():
    rows = [
        # rank 0 sends tag 7 at 150 and tag 5 at 400; rank 1 probes for tag 5, first takes the tag-7 message
        call(0, "MPI_Send", 150, 151, peer=1, tag=7), call(0, "MPI_Send", 400, 401, peer=1, tag=5),
        call(1, "MPI_Probe", 100, 410, peer=0, tag=5), call(1, "MPI_Recv", 420, 430, peer=0, tag=7),
        call(1, "MPI_Recv", 440, 450, peer=0, tag=5),
        # a probe whose message nothing receives, and an Iprobe loop (the last poll returned the message): nothing
        call(1, "MPI_Probe", 500, 600, peer=0, tag=9),
        call(1, "MPI_Iprobe", 700, 701, tag=3), call(1, "MPI_Iprobe", 800, 801, peer=0, tag=3),
        call(1, "MPI_Recv", 810, 820, peer=0, tag=3), call(0, "MPI_Send", 790, 791, peer=1, tag=3),
    ]
    out = only(states(rows), "late_sender")
    assert out[["name", "enter_ns", "time_ns"]].values.tolist() == [["MPI_Probe", 100, 300]]
    assert exchanged(rows).query("pattern == 'late_sender'")["time_ns"].tolist() == [300]


def test_a_receive_that_waits_after_its_probe_counts_too_and_a_late_probe_nothing():
    rows = [
        # two probes of one message (the second after the send: no wait), then its receive
        call(1, "MPI_Probe", 0, 60, peer=0, tag=1), call(1, "MPI_Probe", 70, 80, peer=0, tag=1),
        call(1, "MPI_Recv", 90, 95, peer=0, tag=1), call(0, "MPI_Send", 50, 51, peer=1, tag=1),
        # a probe that returns before the send is recorded (clock skew) waits its whole call, as a receive would
        call(1, "MPI_Probe", 200, 230, peer=0, tag=2), call(1, "MPI_Recv", 240, 300, peer=0, tag=2),
        call(0, "MPI_Send", 260, 261, peer=1, tag=2),
    ]
    out = only(states(rows), "late_sender")
    assert out[["name", "enter_ns", "time_ns"]].values.tolist() == [
        ["MPI_Probe", 0, 50], ["MPI_Probe", 200, 30], ["MPI_Recv", 240, 20]]
    assert exchanged(rows).query("pattern == 'late_sender'")["time_ns"].tolist() == [100]


def test_an_mprobe_waits_for_the_message_its_mrecv_takes_on_the_probes_communicator():
    # mpi4py's comm.recv(): MPI_Mprobe, then MPI_Mrecv of the message handle (no communicator recorded); MPICH
    # reuses the handle, so each Mrecv takes the communicator of the latest Mprobe of its handle before it
    rows = [call(0, "MPI_Send", 300, 301, peer=1, tag=4, comm=2), call(0, "MPI_Send", 700, 701, peer=1, tag=4, comm=3),
            call(1, "MPI_Mprobe", 100, 310, peer=0, tag=4, comm=2, request=-9),
            call(1, "MPI_Mrecv_c", 320, 330, peer=0, tag=4, comm=None, request=-9),
            call(1, "MPI_Mprobe", 400, 710, peer=0, tag=4, comm=3, request=-9),
            call(1, "MPI_Mrecv_c", 720, 730, peer=0, tag=4, comm=None, request=-9)]
    calls = mpi_calls(make_timeline(rows))
    assert calls.query("name == 'MPI_Mrecv'")["comm"].tolist() == [2, 3]
    out = only(wait_states(calls), "late_sender")
    assert out[["name", "enter_ns", "time_ns", "comm"]].values.tolist() == [["MPI_Mprobe", 100, 200, 2],
                                                                           ["MPI_Mprobe", 400, 300, 3]]
    assert exchanged(rows).query("pattern == 'late_sender'")["time_ns"].tolist() == [500]

def test_wildcard_receive_is_left_unmatched():
    out = states([call(1, "MPI_Recv", 100, 500, peer=-2), call(0, "MPI_Send", 300, 310, peer=1)])
    assert out.empty


def test_barrier_wait_and_completion():
    out = states([call(0, "MPI_Barrier", 100, 410), call(1, "MPI_Barrier", 200, 420),
                  call(2, "MPI_Barrier", 400, 430)])
    assert only(out, "wait_at_barrier")[["rank", "time_ns"]].values.tolist() == [[0, 300], [1, 200]]
    assert only(out, "barrier_completion").sort_values("rank")[["rank", "time_ns"]].values.tolist() == \
        [[1, 10], [2, 20]]


def test_barriers_matched_by_order_per_communicator():
    rows = []
    for e0, e1 in [(0, 50), (100, 130), (200, 280)]:
        rows += [call(0, "MPI_Barrier", e0, max(e0, e1) + 5), call(1, "MPI_Barrier", e1, max(e0, e1) + 5)]
    rows += [call(0, "MPI_Barrier", 150, 160, comm=9), call(1, "MPI_Barrier", 140, 160, comm=9)]
    out = only(states(rows), "wait_at_barrier")
    assert out.groupby("rank")["time_ns"].sum().to_dict() == {0: 50 + 30 + 80, 1: 10}


def test_wait_at_nxn_for_allreduce():
    out = states([call(0, "MPI_Allreduce", 0, 100), call(1, "MPI_Allreduce", 50, 100),
                  call(2, "MPI_Allreduce", 80, 100)])
    assert only(out, "wait_at_nxn")[["rank", "time_ns"]].values.tolist() == [[0, 80], [1, 30]]


def test_early_reduce_on_the_root():
    out = states([call(0, "MPI_Reduce", 10, 100, peer=0), call(1, "MPI_Reduce", 60, 70, peer=0),
                  call(2, "MPI_Reduce", 90, 95, peer=0)])
    assert out[["pattern", "rank", "time_ns"]].values.tolist() == [["early_reduce", 0, 50]]


def test_late_broadcast_on_non_roots():
    out = states([call(1, "MPI_Bcast", 300, 310, peer=1), call(0, "MPI_Bcast", 100, 320, peer=1),
                  call(2, "MPI_Bcast", 200, 330, peer=1)])
    late = only(out, "late_broadcast")
    assert late[["rank", "peer", "time_ns"]].values.tolist() == [[0, 1, 200], [2, 1, 100]]
    assert set(out["pattern"]) == {"late_broadcast"}


def test_summary_has_every_pattern_and_rank():
    out = states([call(1, "MPI_Recv", 100, 500, peer=0), call(0, "MPI_Send", 300, 310, peer=1),
                  call(0, "MPI_Barrier", 600, 700), call(1, "MPI_Barrier", 650, 700)])
    table = summarize(out, ranks=[0, 1, 2])
    assert list(table.columns) == list(PATTERNS)
    assert table.loc[1, "late_sender"] == 200 and table.loc[0, "wait_at_barrier"] == 50
    assert table.loc[2].sum() == 0


@pytest.mark.parametrize("rows", [[], [call(0, "MPI_Send", 0, 1, peer=1)]])
def test_nothing_to_match_gives_an_empty_table(rows):
    out = states(rows) if rows else wait_states(mpi_calls(make_timeline(None)))
    assert out.empty and list(out.columns) == ["pattern", "rank", "peer", "name", "enter_ns", "time_ns", "comm"]
    assert isinstance(out, pd.DataFrame)


# A late sender to a non-blocking receive, in a real job: rank 0 sends 0.1 s late three times, rank 1 waits in the
# MPI_Wait of its MPI_Irecv and logs how long. MPICH's request handles are C ints with the top bit set (recorded as
# negative numbers), and posts and Wait*s with a negative request were taken as having none: the Wait*s were never
# matched to their receives, and analyze printed no late sender at all (0 of rank 1's 0.5 s).
# Then three objects 0.05 s late through mpi4py's pickle API: comm.recv() is MPI_Mprobe, where it waits, and
# MPI_Mrecv of the probed message, which records no communicator. Neither counted (the probe was not kept, the
# receive matched no send): 0 of rank 1's 0.15 s.
# Then the nonblocking receive of a probed message, MPI_Imrecv, whose MPI_Wait completes it: a buffer sent 0.1 s late
# to an MPI_Mprobe (where rank 1 waits: logged apart), and a synchronous send that rank 1 takes 0.05 s late with
# MPI_Improbe. The wrapper recorded neither the message handle nor the source of an Imrecv: both stayed unmatched,
# the Mprobe's 0.1 s and the Ssend's Late Receiver uncounted.
LATE_SENDER_JOB = """
import json, sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
buf = np.zeros(1 << 16, dtype=np.uint8)
waited = {"MPI_Wait": [], "MPI_Mprobe": []}
for _ in range(3):
    if comm.Get_rank() == 0:
        time.sleep(0.1)
        comm.Ssend(buf, dest=1, tag=5)
        time.sleep(0.05)
        comm.send({"step": _}, dest=1, tag=6)
    else:
        req = comm.Irecv(buf, source=0, tag=5)
        t = time.perf_counter()
        req.Wait()
        waited["MPI_Wait"].append(time.perf_counter() - t)
        t = time.perf_counter()
        comm.recv(source=0, tag=6)
        waited["MPI_Mprobe"].append(time.perf_counter() - t)
if comm.Get_rank() == 0:
    time.sleep(0.1)
    comm.Send(buf, dest=1, tag=7)
    comm.Ssend(buf, dest=1, tag=8)
else:
    t = time.perf_counter()
    message = comm.Mprobe(source=0, tag=7)
    imrecv_mprobe = time.perf_counter() - t
    message.Irecv(buf).Wait()
    time.sleep(0.05)
    while (message := comm.Improbe(source=0, tag=8)) is None:
        time.sleep(0.001)
    message.Irecv(buf).Wait()
    json.dump({**waited, "imrecv_mprobe": [imrecv_mprobe]}, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def late_sender_run(tmp_path_factory):
    """The store of :data:`LATE_SENDER_JOB` run with the PMPI collector, and rank 1's waits it logged (ns)."""
    tmp_path = tmp_path_factory.mktemp("late_sender")
    (tmp_path / "job.py").write_text(LATE_SENDER_JOB)
    result = run_job(RunConfig(argv=[sys.executable, str(tmp_path / "job.py"), str(tmp_path / "waited.json")], np=2,
                               out=tmp_path / "store", stream=io.StringIO()))
    assert result.exit_code == 0
    waited_ns = {name: sum(times) * 1e9 for name, times in json.loads((tmp_path / "waited.json").read_text()).items()}
    return tmp_path / "store", waited_ns


@pytest.mark.skipif(find_tool("mpiexec") is None, reason="no mpiexec beside this Python")
def test_a_late_sender_to_an_irecv_is_found_in_a_real_mpich_job(late_sender_run, capsys):
    store, waited_ns = late_sender_run
    assert main(["analyze", str(store), "--json"]) == 0
    by_rank = {row["rank"]: row for row in json.loads(capsys.readouterr().out)["stores"][0]["wait_states_ns"]}
    assert by_rank[0]["late_sender"] == 0
    calls = mpi_calls(TraceStore.open(store).timeline())
    late = only(wait_states(calls), "late_sender")
    assert late["name"].value_counts().to_dict() == {"MPI_Wait": 3, "MPI_Mprobe": 4}  # the 4th: the Imrecv's
    assert by_rank[1]["late_sender"] == late["time_ns"].sum()
    # rank 1 waited about 0.1 s (0.05 s) per message for rank 0 to send: most of its measured wait is Late Sender
    waited_ns = {**waited_ns, "MPI_Mprobe": waited_ns["MPI_Mprobe"] + waited_ns["imrecv_mprobe"]}
    for name in ("MPI_Wait", "MPI_Mprobe"):
        waited = waited_ns[name]
        assert waited / 2 < late.query("name == @name")["time_ns"].sum() <= waited, (name, late, waited)


@pytest.mark.skipif(find_tool("mpiexec") is None, reason="no mpiexec beside this Python")
def test_an_imrecv_takes_its_probes_envelope_and_its_wait_in_a_real_mpich_job(late_sender_run):
    """MPI_Imrecv of a message probed by MPI_Mprobe (sent 0.1 s late: rank 1 waits in the probe) and by MPI_Improbe
    (an Ssend that rank 1 takes 0.05 s late: rank 0 waits in it). Each Imrecv row carries its probe's source, tag and
    communicator and is completed by the MPI_Wait after it; the probe's Late Sender and the Ssend's Late Receiver are
    those of the store's own rows: ``min(enter(send), leave(probe)) - enter(probe)``,
    ``min(enter(Imrecv), leave(Ssend)) - enter(Ssend)`` (ns)."""
    store, waited_ns = late_sender_run
    timeline = TraceStore.open(store).timeline()
    rows = timeline.assign(name=timeline["name"].astype(str).str.removesuffix("_c"),
                           end_ns=timeline["start_ns"] + timeline["dur_ns"])

    def one(rank, name, tag):
        found = rows[(rows["rank"] == rank) & (rows["name"] == name) & (rows["tag"] == tag)]
        assert len(found) == 1, (rank, name, tag, found)
        return found.iloc[0]

    probe, send = one(1, "MPI_Mprobe", 7), one(0, "MPI_Send", 7)
    improbe = rows[(rows["rank"] == 1) & (rows["name"] == "MPI_Improbe") & rows["request"].notna()].iloc[0]
    imrecv = rows[rows["name"] == "MPI_Imrecv"].sort_values("start_ns")
    envelope = imrecv[["peer", "tag", "comm"]].astype("Int64").fillna(-1).values.tolist()
    assert envelope == [[0, 7, probe["comm"]], [0, 8, improbe["comm"]]] and improbe["tag"] == 8
    late_sender = min(send["start_ns"], probe["end_ns"]) - probe["start_ns"]
    ssend, taken = one(0, "MPI_Ssend", 8), imrecv.iloc[1]
    late_receiver = min(taken["start_ns"], ssend["end_ns"]) - ssend["start_ns"]
    assert waited_ns["imrecv_mprobe"] / 2 < late_sender <= waited_ns["imrecv_mprobe"] and late_receiver > 0

    calls = mpi_calls(timeline)
    states = wait_states(calls)
    at_probe = only(states, "late_sender").query("enter_ns == @probe.start_ns")
    assert at_probe[["rank", "peer", "name", "time_ns"]].values.tolist() == [[1, 0, "MPI_Mprobe", late_sender]]
    at_ssend = only(states, "late_receiver").query("enter_ns == @ssend.start_ns")
    assert at_ssend[["rank", "peer", "name", "time_ns"]].values.tolist() == [[0, 1, "MPI_Ssend", late_receiver]]
    # each Imrecv's request is completed by the MPI_Wait right after it; the message had arrived (its probe had
    # returned it), so that Wait is no Late Sender
    posts = calls.index[calls["name"] == "MPI_Imrecv"]
    done = completions(calls).reindex(posts)
    waits = rows[(rows["rank"] == 1) & (rows["name"] == "MPI_Wait")]
    after = [waits[waits["start_ns"] >= start]["start_ns"].min() for start in imrecv["start_ns"]]
    assert sorted(done["w_enter"].tolist()) == after and set(done["w_name"]) == {"MPI_Wait"}
    assert not only(states, "late_sender")["enter_ns"].isin(after).any()


SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def _late_sender_from_rows(store: Path, rank: int) -> tuple[int, int, int]:
    """The Late Sender of ``rank`` (the ps-sgd job's server) computed from the store's own rows: each of its
    receives (MPI_Recv, the job's only receive) is the k-th from its source with its tag, whose send is that
    source's k-th MPI_Send to it with that tag; each MPI_Probe waits for the message of the receive the job makes
    right after it. Returns (the receives' time, the probes' time, the probes), each wait
    ``max(0, min(send's entry, leave) - entry)`` in ns."""
    timeline = TraceStore.open(store).timeline()
    base = timeline["name"].astype(str).str.removesuffix("_c")
    timeline = timeline.assign(base=base, end_ns=timeline["start_ns"] + timeline["dur_ns"])
    sends = timeline[(base == "MPI_Send") & (timeline["peer"] == rank)].sort_values("start_ns")
    sends = sends.assign(k=sends.groupby(["rank", "tag"]).cumcount())
    recvs = timeline[(base == "MPI_Recv") & (timeline["rank"] == rank)].sort_values("start_ns")
    recvs = recvs.assign(k=recvs.groupby(["peer", "tag"]).cumcount()).reset_index(drop=True)
    sent = recvs.merge(sends[["rank", "tag", "k", "start_ns"]].rename(columns={"rank": "peer", "start_ns": "send"}),
                       on=["peer", "tag", "k"], how="left")
    assert sent["send"].notna().all()  # every message the server received was sent

    def wait(enter, leave, send):
        return int(np.maximum(0, np.minimum(send, leave) - enter).sum())

    probes = timeline[(base == "MPI_Probe") & (timeline["rank"] == rank)].sort_values("start_ns")
    after = np.searchsorted(sent["start_ns"].to_numpy(), probes["start_ns"].to_numpy())  # the receive after each
    taken = sent.iloc[after]
    assert (taken["peer"].to_numpy() == probes["peer"].to_numpy()).all()  # from the source and tag it probed
    assert (taken["tag"].to_numpy() == probes["tag"].to_numpy()).all()
    return (wait(sent["start_ns"], sent["end_ns"], sent["send"]),
            wait(probes["start_ns"].to_numpy(), probes["end_ns"].to_numpy(), taken["send"].to_numpy()), len(probes))


@pytest.mark.parametrize("folder, probing", [("ps-sgd-quota/A-compute-w4", True), ("ps-sgd-disk/A-cold-init-w1", True),
                                             ("ps-sgd/par-w4", False)])
def test_the_servers_late_sender_counts_its_probes_waits_in_a_real_run(folder, probing, capsys):
    """Real runs of the ps-sgd job: with --server-receive probe the server waits for each message in MPI_Probe
    and takes it with an MPI_Recv that no longer waits, and analyze printed 0 ns of Late Sender for it (A-compute-w4:
    against 1.02 s in its probes); with blocking receives (par-w4) the wait is the receives', unchanged. Both equal
    the store's own rows' figure."""
    store = SAMPLES / folder / "store"
    config = json.loads((store / "manifest.json").read_text())["workload"]["config"]
    assert config.get("server_receive", "any") == ("probe" if probing else "any") and config["server_rank"] == 0
    received, probed, probes = _late_sender_from_rows(store, 0)
    assert (probes > 100 and probed > 10 * received) if probing else (probes == 0 and received > 0)
    assert main(["analyze", str(store), "--json"]) == 0
    by_rank = {row["rank"]: row for row in json.loads(capsys.readouterr().out)["stores"][0]["wait_states_ns"]}
    assert by_rank[0]["late_sender"] == received + probed
    # every call matched at once (wait_states) gives the same
    states = wait_states(mpi_calls(TraceStore.open(store).timeline([0, *range(1, config["workers"] + 1)])))
    assert only(states, "late_sender").query("rank == 0")["time_ns"].sum() == received + probed
