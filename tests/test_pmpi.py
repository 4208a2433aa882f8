"""The PMPI wrapper with MPICH: generation from the table, build and cache, and a real mpi4py job's calls."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mpi_tools import HAVE_MPI, needs_mpi

from ddltrace.collectors.mpi_env import find_tool, mpiexec_command
from ddltrace.collectors.pmpi import build_wrapper, read_records, to_timeline
from ddltrace.collectors.pmpi.build import exported_pmpi, mpi_library
from ddltrace.collectors.pmpi.generate import generate
from ddltrace.collectors.pmpi.records import RECORD_DTYPE, RankRecords, ticks_to_ns
from ddltrace.collectors.pmpi.table import WRAPPERS, names
from ddltrace.errors import DdltraceError

JOB = textwrap.dedent("""
    import time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    a = np.arange(1000, dtype="f8")
    b = np.empty_like(a)
    comm.Barrier()
    comm.Allreduce(a, b)
    if rank == 0:
        comm.Send(a[:10], dest=1, tag=11)
        comm.send({"hello": 1}, dest=1, tag=12)
        req = comm.Isend(a[:5], dest=1, tag=13)
        req.Wait()
        comm.Send(a[:10], dest=1, tag=14)
        comm.send({"x": 2}, dest=1, tag=15)
        comm.Send(a[:3], dest=1, tag=16)
        for tag in (19, 20, 21, 22):  # completed by Waitany, Waitsome (two), Testall: 16, 24, 32, 40 bytes
            comm.Send(a[:tag - 17], dest=1, tag=tag)
        for tag in range(100, 200):  # one Waitall of 100 Irecv given MPI_STATUSES_IGNORE: 8 to 56 bytes each
            comm.Send(a[:tag % 7 + 1], dest=1, tag=tag)
        for tag in (17, 18):  # rank 1 polls for these 50 ms each: idle, then working between its polls
            time.sleep(0.05)
            comm.Send(a[:1], dest=1, tag=tag)
    else:
        comm.Recv(b[:10], source=0, tag=11)
        assert comm.recv(source=0, tag=12) == {"hello": 1}
        req = comm.Irecv(b, source=0, tag=13)
        MPI.Request.Waitall([req])
        comm.Irecv(b, source=0, tag=14).Wait()  # a buffer of 8000 bytes, a message of 80
        assert comm.irecv(source=0, tag=15).wait() == {"x": 2}
        req = comm.Irecv(b, source=0, tag=16)
        while not req.Test():
            pass
        MPI.Request.Waitany([comm.Irecv(b, source=0, tag=19)])
        pending = [comm.Irecv(b[:500], source=0, tag=20), comm.Irecv(b[500:], source=0, tag=21)]
        while MPI.Request.Waitsome(pending) is not None:
            pass
        req = comm.Irecv(b, source=0, tag=22)
        while not MPI.Request.Testall([req]):
            pass
        many = np.empty((100, 8))
        MPI.Request.Waitall([comm.Irecv(many[i], source=0, tag=100 + i) for i in range(100)])
        req = comm.Irecv(b, source=0, tag=17)
        while not req.Test():
            pass
        while not comm.Iprobe(source=0, tag=18):
            t = time.perf_counter()
            while time.perf_counter() - t < 0.002:
                pass
        comm.Recv(b[:1], source=0, tag=18)
    r = comm.Iallreduce(a, b)
    r.Wait()
    comm.Bcast(a, root=1)
    comm.Barrier()
""")


def test_generator_covers_the_table_and_only_what_the_library_has():
    full = generate(None)
    for w in WRAPPERS:
        assert f"int {w.name}(" in full
        assert (f"int {w.name}_c(" in full) == w.large
    some = generate({"PMPI_Send", "PMPI_Barrier", "PMPI_Init", "PMPI_Finalize"})
    assert "int MPI_Send(" in some and "int MPI_Barrier(" in some
    assert "MPI_Send_c(" not in some and "int MPI_Recv(" not in some
    assert len(set(filter(None, names()))) == len(list(filter(None, names())))


@needs_mpi
def test_mpich_exports_the_large_count_twins():
    exported = exported_pmpi(mpi_library(find_tool("mpicc")))
    assert {"PMPI_Send_c", "PMPI_Allreduce_c", "PMPI_Mprobe", "PMPI_Barrier"} <= exported


def test_no_mpicc_is_said_clearly(tmp_path, monkeypatch):
    from ddltrace.collectors.pmpi import build

    monkeypatch.setattr(build, "find_tool", lambda name: None)  # as on a machine without any MPI
    with pytest.raises(DdltraceError, match="mpicc: no MPI compiler wrapper found"):
        build_wrapper()
    with pytest.raises(DdltraceError, match="no-such-mpicc: does not say how it links MPI"):
        build_wrapper(str(tmp_path / "no-such-mpicc"))


def _record(tmp: Path, job: str, ranks: int) -> dict[int, RankRecords]:
    """Run the mpi4py ``job`` on ``ranks`` ranks under the wrapper; each rank's records."""
    lib = build_wrapper()
    (tmp / "job.py").write_text(job)
    (tmp / "rec").mkdir()
    cmd, env = mpiexec_command(ranks, [sys.executable, str(tmp / "job.py")])
    env.update(LD_PRELOAD=str(lib), DDLTRACE_PMPI_DIR=str(tmp / "rec"))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {r: read_records(tmp / "rec" / f"rank-{r:05d}.pmpi") for r in range(ranks)}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    if not HAVE_MPI:
        pytest.skip("no mpicc/mpiexec")
    assert build_wrapper() == build_wrapper()  # cached
    return _record(tmp_path_factory.mktemp("pmpi"), JOB, 2)


def test_mpi4py_calls_are_recorded_with_their_columns(recorded):
    r0, r1 = recorded[0], recorded[1]
    assert (r0.rank, r1.rank, r0.world_size, r0.ended, r1.ended) == (0, 1, 2, "normal", "normal")
    assert r0.pid != r1.pid and r0.host and "MPICH" in r0.library
    t0, t1 = to_timeline(r0), to_timeline(r1)
    n0 = list(t0.loc[t0["name"] != "outside MPI", "name"])
    # mpi4py 4 on MPICH takes the large-count entry points; the pickle API goes through Mprobe/Mrecv
    assert n0[:2] == ["MPI_Init_thread", "ddltrace_clock_sync"]
    assert {"MPI_Barrier", "MPI_Allreduce_c", "MPI_Send_c", "MPI_Isend_c", "MPI_Wait", "MPI_Iallreduce_c",
            "MPI_Bcast_c", "MPI_Finalize"} <= set(n0)
    assert {"MPI_Recv_c", "MPI_Mprobe", "MPI_Mrecv_c", "MPI_Irecv_c", "MPI_Waitall"} <= set(t1["name"])
    cat = dict(zip(t1["name"], t1["category"].astype(str), strict=True))
    assert (cat["MPI_Barrier"], cat["MPI_Waitall"], cat["MPI_Recv_c"], cat["MPI_Mprobe"], cat["MPI_Allreduce_c"],
            cat["outside MPI"]) == ("barrier", "wait", "wait", "wait", "comm", "compute")
    # the collector's two clock synchronisations: the one in MPI_Init is start-up ("other"), the one in
    # MPI_Finalize, where every rank waits for the last to arrive, a barrier; finalisation begins there
    syncs = t0[t0["name"] == "ddltrace_clock_sync"].sort_values("start_ns")
    assert syncs["category"].astype(str).tolist() == ["other", "barrier"]
    from ddltrace.analyses.phases import segment_rank

    assert segment_rank(t0).steady_end_ns <= syncs["start_ns"].iloc[1]  # the closing one is in finalisation
    send = t0[(t0["name"] == "MPI_Send_c")].iloc[0]
    assert (send["bytes"], send["peer"], send["tag"]) == (80, 1, 11)
    recv = t1[(t1["name"] == "MPI_Recv_c")].iloc[0]
    assert (recv["bytes"], recv["peer"], recv["tag"]) == (80, 0, 11)
    probe = t1[t1["name"] == "MPI_Mprobe"].iloc[0]
    mrecv = t1[t1["name"] == "MPI_Mrecv_c"].iloc[0]
    assert probe["peer"] == 0 and probe["tag"] == 12 and probe["bytes"] > 0
    assert mrecv["request"] == probe["request"] and mrecv["bytes"] == probe["bytes"]
    assert t0.loc[t0["name"] == "MPI_Allreduce_c", "bytes"].iloc[0] == 8000
    assert t0.loc[t0["name"] == "MPI_Bcast_c", "peer"].iloc[0] == 1
    # a Wait names the request its Isend made
    isend = t0[t0["name"] == "MPI_Isend_c"].iloc[0]
    waits = t0[t0["name"] == "MPI_Wait"]
    assert isend["request"] in set(waits["request"])
    irecv = t1[t1["name"] == "MPI_Irecv_c"].iloc[0]
    assert t1.loc[t1["name"] == "MPI_Waitall", "request"].iloc[0] == irecv["request"]
    # an Irecv's bytes are its message's, from the status of the Wait, Test, Waitall, Waitany, Waitsome or Testall
    # that completed it (before: its buffer's, 8000 bytes for tag 13, 4000 for 20 and 21, 8000 for the rest), as
    # rank 0's sends recorded them
    sizes = {int(r["tag"]): int(r["bytes"]) for _, r in t1[t1["name"].str.startswith("MPI_Irecv")].iterrows()}
    sent = {int(r["tag"]): int(r["bytes"]) for _, r in t0[t0["name"].str.match(r"MPI_I?[Ss]end")].iterrows()}
    assert [sizes[tag] for tag in (13, 14, 16, 19, 20, 21, 22)] == [sent[tag] for tag in (13, 14, 16, 19, 20, 21, 22)]
    assert [sent[tag] for tag in (13, 14, 16, 19, 20, 21, 22)] == [40, 80, 24, 16, 24, 32, 40]
    # all 100 Irecv of one Waitall given MPI_STATUSES_IGNORE (before: the first 64 with a call of up to 64, none with
    # more; each kept its buffer's 64 bytes)
    many = range(100, 200)
    assert [sizes[tag] for tag in many] == [sent[tag] for tag in many] == [8 * (tag % 7 + 1) for tag in many]
    # the requests completed by Waitany, Waitsome and Testall are recorded apart, not as calls of the timeline
    done = r1.completions
    assert set(done["tag"]) >= {13, 19, 20, 21, 22} and "ddltrace_request_done" not in set(t1["name"])
    assert {"MPI_Waitany", "MPI_Waitsome", "MPI_Testall"} <= set(t1["name"])
    pickled = t0.loc[(t0["name"].str.startswith("MPI_Send")) & (t0["tag"] == 15), "bytes"].iloc[0]
    assert sizes[15] == pickled < 100  # mpi4py's irecv(): the pickle's size, not the buffer it posted


def test_a_rank_that_polls_waits_and_one_that_works_between_polls_computes(recorded):
    """Rank 1 waits 50 ms for a message in a loop of MPI_Test calls that find nothing and nothing else (mpi4py's
    ``while not req.Test(): pass``): the gaps between those calls are polling, category wait, not the rank's own work
    (before: "outside MPI", compute, so a polling rank read as compute-bound). Then 50 ms of MPI_Iprobe calls with
    2 ms of work between them: those gaps stay its work."""
    from ddltrace.collectors.pmpi.records import OUTSIDE_MPI, POLLING

    t1 = to_timeline(recorded[1])
    tagged = t1[t1["tag"].isin([17, 18])]
    start17 = tagged.loc[tagged["tag"] == 17, "start_ns"].min()
    start18 = tagged.loc[tagged["name"].str.startswith("MPI_Iprobe") & (tagged["tag"] == 18), "start_ns"].min()
    end18 = tagged.loc[tagged["name"].str.startswith("MPI_Recv") & (tagged["tag"] == 18), "start_ns"].max()

    def spent(name, lo, hi):
        rows = t1[(t1["name"] == name) & (t1["start_ns"] >= lo) & (t1["start_ns"] < hi)]
        return int(rows["dur_ns"].sum()) / 1e6, set(rows["category"].astype(str))

    # each window is up to 50 ms (rank 1 may reach it late on a busy machine: 15 ms is the least asked)
    polled, cats = spent(POLLING, start17, start18)
    assert polled > 15 and cats == {"wait"}, polled
    # most of it: a gap where the polling loop lost its core for more than 20 us reads as outside MPI (6.6 of 31 ms
    # in one run on a busy machine)
    assert spent(OUTSIDE_MPI, start17, start18)[0] < 0.5 * polled
    worked, _ = spent(OUTSIDE_MPI, start18, end18)
    assert worked > 15 and spent(POLLING, start18, end18)[0] < 1


def test_timeline_rows_do_not_overlap_on_the_main_lane(recorded):
    t = to_timeline(recorded[0])
    main = t[t["lane"] == "main"].sort_values("start_ns")
    ends = (main["start_ns"] + main["dur_ns"]).to_numpy()
    assert (main["start_ns"].to_numpy()[1:] >= ends[:-1]).all()
    assert (t["dur_ns"] >= 0).all()


def test_bad_record_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "rank-00000.pmpi"
    bad.write_bytes(b"not a record file" * 10)
    with pytest.raises(DdltraceError, match="rank-00000.pmpi: not a ddltrace PMPI record file"):
        read_records(bad)


def test_wrapper_is_inert_without_a_record_folder(tmp_path):
    if find_tool("mpicc") is None:
        pytest.skip("no mpicc")
    lib = build_wrapper()
    env = dict(os.environ, LD_PRELOAD=str(lib))
    env.pop("DDLTRACE_PMPI_DIR", None)
    code = "from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); print(MPI.COMM_WORLD.Get_size())"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr
    assert not list(Path(tmp_path).glob("*.pmpi"))


def test_ticks_convert_through_calibration_pairs_and_beyond():
    pairs = np.array([[1000, 5_000], [3000, 6_000], [5000, 8_000]])  # 0.5 then 1 ns per tick
    got = ticks_to_ns(np.array([1000, 2000, 3000, 4000, 5000, 7000, 0]), pairs)
    rate = 3000 / 4000  # first to last pair
    assert list(got) == [5_000, 5_500, 6_000, 7_000, 8_000, 8_000 + round(2000 * rate), 5_000 - round(1000 * rate)]


def test_an_imrecv_takes_the_envelope_of_the_latest_probe_of_its_message_handle():
    """Hand-built records of one rank (MPICH reuses handles, so two probes share one): each MPI_Imrecv row gets the
    source, tag and communicator of the latest MPI_Mprobe / MPI_Improbe that returned the handle in its ``aux``; an
    Improbe that found nothing (no handle) is passed over; an Imrecv with no handle (a file written before the
    wrapper recorded it) keeps none, and its buffer's size. The Imrecv's own request stays; its bytes are the
    message's, from the probe's status (before: its buffer's size, count x datatype)."""
    ids = {name: i + 1 for i, name in enumerate(names()) if name}
    na32, na64, handle = -(2**31), -(2**63), -1409286144

    def rec(name, t0, peer=na32, tag=na32, comm=na64, request=na64, aux=na64, size=4096):
        return (ids[name], 0, 7, peer, tag, t0, t0 + 5, size, comm, request, aux)

    records = np.array([
        rec("MPI_Mprobe", 10, peer=0, tag=6, comm=11, request=handle, size=8),
        rec("MPI_Mprobe", 20, peer=2, tag=7, comm=12, request=handle, size=24),
        rec("MPI_Improbe", 30, tag=9, comm=13, size=-1),
        rec("MPI_Imrecv_c", 40, request=99, aux=handle),
        rec("MPI_Improbe", 50, peer=3, tag=8, comm=14, request=handle, size=40),
        rec("MPI_Imrecv", 60, request=98, aux=handle),
        rec("MPI_Imrecv_c", 70, request=97),
    ], dtype=RECORD_DTYPE)
    rr = RankRecords(path=Path("rank-00001.pmpi"), rank=1, world_size=4, pid=1, state=3, main_tid=7, host="h",
                     library="MPICH", test_offset_ns=0, syncs=[], records=records)
    t = to_timeline(rr, align=False)
    imrecv = t[t["name"].str.startswith("MPI_Imrecv")]
    got = imrecv[["peer", "tag", "comm", "request", "bytes"]].astype("Int64").fillna(-1).values.tolist()
    assert got == [[2, 7, 12, 99, 24], [3, 8, 14, 98, 40], [-1, -1, -1, 97, 4096]]


def test_an_irecv_takes_its_size_from_the_completion_of_its_own_request():
    """Hand-built records of one rank, one request handle reused throughout (as MPICH does): an Irecv whose request a
    Test that found nothing and then a Wait complete takes the Wait's status size; one completed by a Waitall that
    recorded no status (a file written before the wrapper recorded completions) keeps its buffer's size even though a
    later Wait on the same handle, after the handle's next post (an Isend), has a size; an Irecv with no completion
    after it keeps its buffer's; with the Waitall's completion record, its Irecv takes that record's size."""
    ids = {name: i + 1 for i, name in enumerate(names()) if name}
    na32, na64, handle = -(2**31), -(2**63), -1409286143

    def rec(name, t0, size=-1, aux=na64, request=handle, tag=na32):
        return (ids[name], 0, 7, na32, tag, t0, t0 + 5, size, na64, request, aux)

    records = np.array([
        rec("MPI_Irecv_c", 10, 8000, tag=1), rec("MPI_Test", 20), rec("MPI_Wait", 30, aux=80),
        rec("MPI_Irecv", 40, 4096, tag=2), rec("MPI_Waitall", 50, aux=1),
        rec("MPI_Isend_c", 60, 512), rec("MPI_Wait", 70, aux=0),
        rec("MPI_Irecv_c", 80, 32768, tag=3),
    ], dtype=RECORD_DTYPE)
    rr = RankRecords(path=Path("rank-00001.pmpi"), rank=1, world_size=4, pid=1, state=3, main_tid=7, host="h",
                     library="MPICH", test_offset_ns=0, syncs=[], records=records)
    t = to_timeline(rr, align=False)
    got = t[t["name"].str.startswith("MPI_Irecv")][["tag", "bytes"]].astype(int).values.tolist()
    assert got == [[1, 80], [2, 4096], [3, 32768]]
    assert t.loc[t["name"] == "MPI_Isend_c", "bytes"].tolist() == [512]
    rr.completions = np.array([rec("ddltrace_request_done", 55, aux=48)], dtype=RECORD_DTYPE)
    t = to_timeline(rr, align=False)
    got = t[t["name"].str.startswith("MPI_Irecv")][["tag", "bytes"]].astype(int).values.tolist()
    assert got == [[1, 80], [2, 48], [3, 32768]] and "ddltrace_request_done" not in set(t["name"])
    # a damaged file: two Waitalls of one thread ending at the same tick; the completion goes to the later one
    rr.records = np.concatenate([records, np.array([rec("MPI_Waitall", 50, aux=1)], dtype=RECORD_DTYPE)])
    t = to_timeline(rr, align=False)
    assert t[t["name"].str.startswith("MPI_Irecv")]["bytes"].astype(int).tolist() == [80, 48, 32768]


def test_a_file_of_the_table_before_completion_records_is_read_and_another_table_is_not(recorded, tmp_path):
    """The header's table hash: a file written before the table had its last pseudo record (``ddltrace_request_done``)
    has the same ids for every call and is read; a file of any other table is refused, naming it."""
    import struct
    import zlib

    at = struct.calcsize("<8sIIIiiiQI")  # the hash follows magic, version, sizes, rank, world, pid, slots, state
    whole = recorded[0].path.read_bytes()
    older = tmp_path / "rank-00000.pmpi"
    older.write_bytes(whole[:at] + struct.pack("<I", zlib.crc32("\n".join(names()[:-1]).encode())) + whole[at + 4:])
    assert len(read_records(older).records) == len(recorded[0].records)
    older.write_bytes(whole[:at] + struct.pack("<I", 12345) + whole[at + 4:])
    with pytest.raises(DdltraceError, match="written by a wrapper built from another call table"):
        read_records(older)


@needs_mpi
def test_a_second_mpi_world_does_not_overwrite_a_rank_file(tmp_path):
    lib = build_wrapper()
    env = dict(os.environ, LD_PRELOAD=str(lib), DDLTRACE_PMPI_DIR=str(tmp_path))
    code = "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"
    for _ in range(2):  # two singletons: both are rank 0 of their own world
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    first = read_records(tmp_path / "rank-00000.pmpi")
    extra = list(tmp_path.glob("extra-00000-*.pmpi"))
    assert len(extra) == 1 and read_records(extra[0]).pid != first.pid


LATE_IN_A_WAITALL = textwrap.dedent("""
    import time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    buf = np.zeros((2, 1000))
    comm.Barrier()
    if rank == 0:  # one Waitall for both: rank 1 sends at once, rank 2 200 ms later
        MPI.Request.Waitall([comm.Irecv(buf[0], source=1, tag=1), comm.Irecv(buf[1], source=2, tag=2)])
    else:
        if rank == 2:
            time.sleep(0.2)
        comm.Send(np.ones(rank * 100), dest=0, tag=rank)
    comm.Barrier()
""")


@needs_mpi
def test_a_late_sender_to_the_second_request_of_a_waitall_is_found(tmp_path):
    """Rank 0 completes two MPI_Irecv with one MPI_Waitall; rank 2 sends 200 ms late. The Waitall's record names its
    first request only; its completion records give both Irecvs its ``request`` in the timeline, so wait-state analysis
    matches the second too and finds rank 2 late by the time rank 0 waited for it (before: no late sender at all, the
    late message being the second request's). Each Irecv's bytes are its message's (800 and 1,600 B, 8,000 posted)."""
    from ddltrace.analyses.wait_states import mpi_calls, wait_states

    timelines = [to_timeline(rr) for rr in _record(tmp_path, LATE_IN_A_WAITALL, 3).values()]
    t0 = timelines[0]
    irecvs = t0[t0["name"].str.startswith("MPI_Irecv")].sort_values("tag")
    waitall = t0[t0["name"] == "MPI_Waitall"].iloc[0]
    assert irecvs["bytes"].tolist() == [800, 1600]
    assert set(irecvs["request"]) == {waitall["request"]}
    states = wait_states(pd.concat([mpi_calls(t) for t in timelines], ignore_index=True))
    late = states[states["pattern"] == "late_sender"]
    assert late[["rank", "peer", "name"]].values.tolist() == [[0, 2, "MPI_Waitall"]]
    send = timelines[2][timelines[2]["name"].str.startswith("MPI_Send")].iloc[0]
    # the time rank 0 waited in its Waitall for rank 2's send: from entering the Waitall to the send's start
    enter, leave = waitall["start_ns"], waitall["start_ns"] + waitall["dur_ns"]
    assert late["time_ns"].iloc[0] == min(send["start_ns"], leave) - enter
    assert late["time_ns"].iloc[0] > 150_000_000


@needs_mpi
def test_a_full_record_file_system_drops_records_and_the_job_runs_on(tmp_path):
    """The record folder on a full file system (a 64 KiB tmpfs: the header's 4 KiB fit, a 4 MiB segment does not):
    the ranks' records past the header are dropped and counted lost, and the job runs to its end. The segment's
    pages are reserved before they are mapped: with the file only grown (ftruncate, what a full /dev/shm allows),
    the first record stored into it killed the rank with SIGBUS (QA: a 20 MB /dev/shm, the job dead at iteration
    2816 of 40000)."""
    from small_tmpfs import small_tmpfs

    lib = build_wrapper()
    with small_tmpfs(tmp_path / "rec", "64k") as rec:
        (tmp_path / "job.py").write_text("from mpi4py import MPI\n"
                                         "for _ in range(3000):\n    MPI.COMM_WORLD.allreduce(1)\n")
        cmd, env = mpiexec_command(2, [sys.executable, str(tmp_path / "job.py")])
        env.update(LD_PRELOAD=str(lib), DDLTRACE_PMPI_DIR=str(rec))
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        for rank in (0, 1):
            records = read_records(rec / f"rank-{rank:05d}.pmpi")
            assert len(records.records) == 0 and records.lost >= 3000
