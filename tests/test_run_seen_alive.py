"""A rank that ended abruptly outside any MPI call (killed, os._exit, its node lost): its time after its last call is
in its span, to the last sample that saw its process alive. Before, its span ended at its last call: ranks that slept
2 s after their last call, then died without MPI_Finalize, read spans of a few ms."""

from __future__ import annotations

import io
import sys

from mpi_tools import needs_mpi

from ddltrace.collectors.launcher import RunConfig, run_job
from ddltrace.store import TraceStore
from ddltrace.summary import summarize

pytestmark = needs_mpi

JOB = ("import os, time\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\ntime.sleep(2)\n"
       "os._exit(0)  # no MPI_Finalize: abrupt, in no call\n")


def test_an_abrupt_ranks_time_after_its_last_call_is_in_its_span(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    result = run_job(RunConfig(argv=[sys.executable, str(tmp_path / "job.py")], out=tmp_path / "store", np=2,
                               sample_hz=20, stream=io.StringIO()))
    store = TraceStore.open(tmp_path / "store")
    assert result.ranks == {0: "abrupt", 1: "abrupt"}
    summary = summarize(store)
    for rank in (0, 1):
        info = store.rank_info(rank)
        assert info["open_calls"] == []
        tl = store.timeline([rank])
        calls = tl[tl["source"] == "pmpi"]
        last_call = int((calls["start_ns"] + calls["dur_ns"]).max())
        tail = tl[tl["source"] == "launcher"]
        assert list(tail["name"]) == ["outside MPI"] and list(tail["category"]) == ["compute"]
        assert int(tail["start_ns"].iloc[0]) == last_call
        # it slept 2 s after its barrier: seen alive for most of it (a sample every 50 ms), never past the job's end
        assert 1.5e9 <= info["seen_alive_until_ns"] - last_call <= 2.5e9, info
        assert info["seen_alive_until_ns"] <= store.run["end_ns"]
        assert summary.ranks[rank].span_ns >= 1.5e9
    assert summary.span_ns >= 1.5e9
    (note,) = [n for n in store.manifest["notes"] if "ended abruptly outside any MPI call" in n]
    assert note.startswith("rank 0, 1 ended abruptly outside any MPI call: the time from its last call to the last "
                           "sample that saw its process alive"), note
    assert result.calls == store.manifest["run"]["mpi_calls"]  # (the kept time is no MPI call)


def test_a_rank_killed_inside_a_call_keeps_it_open_to_the_end_and_gets_no_second_row(tmp_path):
    """A rank that died inside a call already lasts to the job's end (its open call): nothing is added."""
    (tmp_path / "job.py").write_text("import os, signal, time\nfrom mpi4py import MPI\ncomm = MPI.COMM_WORLD\n"
                                     "comm.Barrier()\nif comm.rank == 1:\n    time.sleep(1)\n"
                                     "    os.kill(os.getpid(), signal.SIGKILL)\ncomm.Barrier()\n")
    run_job(RunConfig(argv=[sys.executable, str(tmp_path / "job.py")], out=tmp_path / "store", np=2,
                      stream=io.StringIO()))
    store = TraceStore.open(tmp_path / "store")
    assert store.rank_info(0)["open_calls"] == ["MPI_Barrier"]
    assert "seen_alive_until_ns" not in store.rank_info(0)
    assert not (store.timeline([0])["source"] == "launcher").any()
    # rank 1 died in its sleep, outside MPI: its second of sleep is in its span
    assert store.rank_info(1)["open_calls"] == [] and store.rank_info(1)["seen_alive_until_ns"] > 0
