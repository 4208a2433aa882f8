"""Jobs that end badly: no MPI_Finalize, SIGTERM, SIGKILL, os._exit, and Ctrl-C on ``ddltrace run``.
What the ranks recorded before the end is recovered and the ranks are marked abrupt."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mpi_tools import needs_mpi

from ddltrace.collectors.launcher import RunConfig, run_job
from ddltrace.store import TraceStore

REPO = Path(__file__).resolve().parent.parent
pytestmark = needs_mpi

DYING_JOB = textwrap.dedent("""
    import os, signal, sys
    import mpi4py
    mode = sys.argv[1]
    if mode == "no-finalize":
        mpi4py.rc.finalize = False
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    a = np.ones(256)
    comm.Barrier()
    comm.Allreduce(MPI.IN_PLACE, a)
    if rank == 1:
        if mode == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        elif mode == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "os-exit":
            os._exit(3)
    if mode != "no-finalize":
        comm.Barrier()  # rank 0 waits here for a rank that is gone
""")


@pytest.mark.parametrize("mode", ["no-finalize", "sigterm", "sigkill", "os-exit"])
def test_partial_records_are_recovered_and_marked_abrupt(tmp_path, mode):
    (tmp_path / "job.py").write_text(DYING_JOB)
    result = run_job(RunConfig(argv=[sys.executable, str(tmp_path / "job.py"), mode], out=tmp_path / "store",
                               np=2, stream=io.StringIO()))
    store = TraceStore.open(tmp_path / "store")
    assert store.ranks == [0, 1]
    info = store.rank_info(1)
    assert info["ended"] == "abrupt" and result.ranks[1] == "abrupt"
    names = list(store.timeline([1])["name"])
    # everything rank 1 did before it died is there
    assert [n for n in names if n.startswith("MPI_")] == ["MPI_Init_thread", "MPI_Barrier", "MPI_Allreduce_c"]
    if mode == "no-finalize":
        assert store.rank_info(0)["ended"] == "abrupt"
        assert result.exit_code == 0 or result.exit_code != 0  # MPICH may or may not complain
    else:
        assert result.exit_code != 0
        assert store.rank_info(0)["ended"] == "abrupt"
        assert set(store.rank_info(0)["open_calls"]) <= {"MPI_Barrier"}
        rank0 = store.timeline([0])
        assert list(rank0.loc[rank0["name"].str.startswith("MPI_"), "name"])[:3] == \
            ["MPI_Init_thread", "MPI_Barrier", "MPI_Allreduce_c"]


def test_ctrl_c_stops_the_job_and_still_writes_the_store(tmp_path):
    (tmp_path / "job.py").write_text("import time\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\n"
                                     "time.sleep(60)\n")
    exe = REPO / ".venv" / "bin" / "ddltrace"
    proc = subprocess.Popen([str(exe), "run", "--np", "2", "--out", str(tmp_path / "store"), "--", sys.executable,
                             str(tmp_path / "job.py")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob(".store.*")):
        time.sleep(0.2)
    time.sleep(3.0)  # both ranks past their Barrier, in their sleep
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    store = TraceStore.open(tmp_path / "store")
    assert store.ranks == [0, 1]
    assert store.run["interrupted"] is True
    # the job was stopped long before its 60 s sleep ended (mpi4py turns SIGINT into KeyboardInterrupt,
    # so the ranks may still call MPI_Finalize on their way out: "interrupted", else "abrupt"; not "normal", their
    # work was not done: tests/test_run_interrupted.py)
    assert store.run["end_ns"] - store.run["start_ns"] < 30e9
    assert {store.rank_info(r)["ended"] for r in (0, 1)} <= {"interrupted", "abrupt"}
    assert "MPI_Barrier" in set(store.timeline([0])["name"])
    assert "wrote" in err and "interrupted" in err  # (run's notes are on stderr: stdout is the job's)
    assert not list(tmp_path.glob(".store.*")), "the work folder is removed"
    manifest = json.loads((tmp_path / "store" / "manifest.json").read_text())
    assert any("interrupted" in n for n in manifest["notes"])
