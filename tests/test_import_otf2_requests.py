"""Non-blocking point-to-point in an OTF2 archive: requests, their completions and the wait states they give.

Score-P records an MPI_Isend as an MpiIsend event (receiver, tag, bytes, request id) inside the call's region and
its completion as MpiIsendComplete (request id) inside the MPI_Wait* or MPI_Test* that completed it; an MPI_Irecv
as MpiIrecvRequest (request id) inside the call and MpiIrecv (sender, tag, bytes, request id) inside the completing
Wait. No archive of Score-P with non-blocking calls is at hand (Score-P is not installable here; the shared OTF2
archives hold blocking calls only), so the archive is written here with the otf2 package in that layout, as
tests/test_import_align.py writes its own. Before the importer read the requests, rank 0's two Irecv rows had no
sender, the Waitall row carried the second message's, and no late sender was found."""

from __future__ import annotations

import contextlib

import pandas as pd
import pytest

from ddltrace.analyses.wait_states import mpi_calls, wait_states
from ddltrace.cli import main
from ddltrace.store import TraceStore


@contextlib.contextmanager
def _two_ranks(path, regions):
    """An OTF2 archive being written at ``path``, two ranks on one node: (MPI_COMM_WORLD, ``regions`` by name, rank 0's
    and rank 1's event writers)."""
    otf2 = pytest.importorskip("otf2")
    with otf2.writer.open(str(path), timer_resolution=10**9) as w:
        d = w.definitions
        root = d.system_tree_node("cluster")
        groups = [d.location_group(f"MPI Rank {r}", system_tree_parent=d.system_tree_node("node0", parent=root))
                  for r in range(2)]
        locs = [d.location("Master thread", group=g) for g in groups]
        d.group("locations", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=locs)
        comm = d.comm("MPI_COMM_WORLD", group=d.group("world", group_type=otf2.GroupType.COMM_GROUP,
                                                      paradigm=otf2.Paradigm.MPI, members=[0, 1]))
        yield comm, {name: d.region(name) for name in regions}, *(w.event_writer_from_location(loc) for loc in locs)


def _calls(writer, region, calls) -> None:
    """Write each (region name, enter time, leave time, events) of ``calls``: the region entered, each (event
    writer method, *arguments) of ``events`` written, the region left."""
    for name, enter, leave, events in calls:
        writer.enter(enter, region[name])
        for event, *args in events:
            getattr(writer, event)(*args)
        writer.leave(leave, region[name])


def _write_archive(path) -> None:
    """Rank 0 posts two MPI_Irecv (from rank 1, tags 5 and 6) and completes both in one MPI_Waitall entered at 200 ns;
    rank 1 sends tag 5 with MPI_Send at 250 ns and tag 6 with MPI_Isend at 550 ns, completed by MPI_Wait. Then rank 1
    posts an MPI_Irecv (tag 7) that rank 0's MPI_Send at 900 ns matches, completed by an MPI_Wait entered at 700 ns."""
    with _two_ranks(path, ("MPI_Irecv", "MPI_Isend", "MPI_Send", "MPI_Wait", "MPI_Waitall")) as (comm, region, r0, r1):
        _calls(r0, region, [("MPI_Irecv", 100, 110, [("mpi_irecv_request", 105, 1)]),
                            ("MPI_Irecv", 120, 130, [("mpi_irecv_request", 125, 2)]),
                            ("MPI_Waitall", 200, 610, [("mpi_irecv", 300, 1, comm, 5, 800, 1),
                                                       ("mpi_irecv", 600, 1, comm, 6, 1600, 2)]),
                            ("MPI_Send", 900, 910, [("mpi_send", 905, 1, comm, 7, 24)])])
        _calls(r1, region, [("MPI_Send", 250, 260, [("mpi_send", 255, 0, comm, 5, 800)]),
                            ("MPI_Isend", 550, 560, [("mpi_isend", 555, 0, comm, 6, 1600, 41)]),
                            ("MPI_Wait", 570, 580, [("mpi_isend_complete", 575, 41)]),
                            ("MPI_Irecv", 650, 660, [("mpi_irecv_request", 655, 42)]),
                            ("MPI_Wait", 700, 960, [("mpi_irecv", 950, 0, comm, 7, 24, 42)])])


def test_requests_of_an_otf2_archive_give_each_receive_its_message_and_the_late_senders(tmp_path):
    _write_archive(tmp_path / "trace")
    out = tmp_path / "store"
    assert main(["import", str(tmp_path / "trace"), "--out", str(out), "--progress", "never"]) == 0
    store = TraceStore.open(out)
    t0, t1 = store.timeline([0]), store.timeline([1])
    irecv = t0[t0["name"] == "MPI_Irecv"].sort_values("start_ns")
    waitall = t0[t0["name"] == "MPI_Waitall"].iloc[0]
    # each Irecv has its message's sender, tag and bytes (known at its completion, in the Waitall); the Waitall and
    # both Irecvs share one request, so that the Waitall completes both
    assert irecv[["peer", "tag", "bytes"]].astype(int).values.tolist() == [[1, 5, 800], [1, 6, 1600]]
    assert set(irecv["request"]) == {waitall["request"]} and pd.isna(waitall["bytes"])
    isend = t1[t1["name"] == "MPI_Isend"].iloc[0]
    waits = t1[t1["name"] == "MPI_Wait"].sort_values("start_ns")
    assert [int(isend["request"])] == [int(waits["request"].iloc[0])]
    states = wait_states(mpi_calls(store.timeline()))
    got = states[states["pattern"] == "late_sender"][["rank", "peer", "name", "enter_ns", "time_ns"]]
    base = int(store.timeline()["start_ns"].min()) - 100  # the archive's times, less where the import starts them
    # the Waitall waits for the later of its two senders (rank 1's Isend at 550: 350 ns from its enter at 200);
    # rank 1's Wait for its Irecv waits from 700 for rank 0's Send at 900
    assert [[r, p, n, e - base, t] for r, p, n, e, t in got.values.tolist()] == [
        [0, 1, "MPI_Waitall", 200, 350], [1, 0, "MPI_Wait", 700, 200]]


def test_matched_probes_give_their_receives_the_message_s_envelope(tmp_path):
    """Rank 1 takes rank 0's message (tag 9, 21 B) with MPI_Mprobe + MPI_Mrecv and the next (tag 10, 33 B) with
    MPI_Improbe + MPI_Imrecv completed by MPI_Wait, in Score-P's layout (MpiProbe with the message id, MpiMrecv,
    MpiImrecvRequest, MpiImrecv); the Imrecv's request id (0) is the first message's id too. Each receive has its
    message's source, tag and bytes, the Imrecv shares its request with the Wait, and the Mprobe, entered 150 ns
    before rank 0 sent, is a late sender of 150 ns."""
    regions = ("MPI_Send", "MPI_Mprobe", "MPI_Mrecv", "MPI_Improbe", "MPI_Imrecv", "MPI_Wait")
    with _two_ranks(tmp_path / "trace", regions) as (comm, region, r0, r1):
        _calls(r0, region, [("MPI_Send", t, t + 5, [("mpi_send", t + 2, 1, comm, tag, size)])
                            for t, tag, size in ((250, 9, 21), (350, 10, 33))])
        _calls(r1, region, [("MPI_Mprobe", 100, 305, [("mpi_probe", 300, 0, comm, 9, 0)]),
                            ("MPI_Mrecv", 310, 315, [("mpi_mrecv", 312, 0, 21)]),
                            ("MPI_Improbe", 400, 405, [("mpi_probe", 402, 0, comm, 10, 1)]),
                            ("MPI_Imrecv", 410, 415, [("mpi_imrecv_request", 412, 1, 0)]),
                            ("MPI_Wait", 420, 430, [("mpi_imrecv", 425, 0, 33)])])
    out = tmp_path / "store"
    assert main(["import", str(tmp_path / "trace"), "--out", str(out), "--progress", "never"]) == 0
    t1 = TraceStore.open(out).timeline([1]).set_index("name")
    got = {name: [None if pd.isna(v) else int(v) for v in t1.loc[name, ["peer", "tag", "bytes"]]]
           for name in ("MPI_Mprobe", "MPI_Mrecv", "MPI_Improbe", "MPI_Imrecv")}
    assert got == {"MPI_Mprobe": [0, 9, None], "MPI_Mrecv": [0, 9, 21], "MPI_Improbe": [0, 10, None],
                   "MPI_Imrecv": [0, 10, 33]}
    assert t1.loc["MPI_Imrecv", "request"] == t1.loc["MPI_Wait", "request"]
    assert t1.loc["MPI_Mprobe", "request"] == t1.loc["MPI_Mrecv", "request"]
    states = wait_states(mpi_calls(TraceStore.open(out).timeline()))
    late = states[states["pattern"] == "late_sender"]
    assert late[["rank", "peer", "name", "time_ns"]].values.tolist() == [[1, 0, "MPI_Mprobe", 150]]
