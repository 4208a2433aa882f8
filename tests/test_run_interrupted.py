"""Ctrl-C on ``ddltrace run`` of an MPI job: how each rank ended reads as what happened.

mpi4py turns SIGINT into KeyboardInterrupt, and a rank's exit then calls MPI_Finalize, which returns: before, such a
rank read "ended normally" (the run's line) beside the note that "a rank that had not ended by then is marked abrupt".
A rank whose MPI_Finalize began after the interrupt ended because the job was stopped: ``ended: "interrupted"``; one
whose MPI_Finalize began before it (its work done, waiting there for the others) ended normally."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
from ctrl_c import default_sigint
from mpi_tools import needs_mpi

from ddltrace.collectors import record_sets
from ddltrace.collectors.launcher import ENDED_BY_INTERRUPT, _interrupted_note, _mpi_ended
from ddltrace.store import TraceStore

REPO = Path(__file__).resolve().parent.parent
pytestmark = needs_mpi

# both ranks sleep until Ctrl-C; then each one's exit calls MPI_Finalize
JOB = ("import sys, time\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\n"
       "open(f'{sys.argv[1]}/rank{MPI.COMM_WORLD.rank}.ready', 'w').close()\ntime.sleep(60)\n")


def test_ranks_finalised_on_their_way_out_after_ctrl_c_read_interrupted(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    (ready := tmp_path / "ready").mkdir()
    proc = subprocess.Popen([str(REPO / ".venv" / "bin" / "ddltrace"), "run", "--np", "2", "--no-progress", "--out",
                             str(tmp_path / "store"), "--", sys.executable, str(tmp_path / "job.py"), str(ready)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(ready.glob("*.ready"))) < 2:
            time.sleep(0.1)
        time.sleep(1.5)  # both ranks in their sleep
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    store = TraceStore.open(tmp_path / "store")
    info = {r: store.rank_info(r) for r in store.ranks}
    finalised = [r for r, i in info.items() if i["state"] == 3]  # MPI_Finalize returned
    assert finalised, (info, err)  # (mpi4py's exit finalises: a rank killed inside it first is abrupt)
    stopped = store.run["interrupted_ns"]
    for rank, tl in store.iter_timeline():
        if rank in finalised:
            assert int(tl.loc[tl["name"] == "MPI_Finalize", "start_ns"].min()) >= stopped
            assert info[rank]["ended"] == ENDED_BY_INTERRUPT, (rank, info[rank])
        else:
            assert info[rank]["ended"] == "abrupt", (rank, info[rank])
    # the run's line and the note say so; nothing reads as a rank that ended normally
    line = next(x for x in err.splitlines() if x.startswith("ddltrace: wrote"))
    assert "normally" not in line and f"{len(finalised)} on their way out of the stopped job (" in line, line
    (note,) = [n for n in store.manifest["notes"] if n.startswith("interrupted (Ctrl-C")]
    assert f"rank {', '.join(map(str, finalised))}: MPI_Finalize began after the interrupt" in note, note
    assert "after the start" in note and "marked abrupt" not in note, note


def test_a_rank_that_began_its_finalize_before_the_interrupt_ended_normally():
    """Its work was done (it waited in MPI_Finalize for the others when the interrupt came); a rank whose
    MPI_Finalize did not return is abrupt whenever it began; no interrupt time known: as recorded."""
    timeline = pd.DataFrame({"name": ["MPI_Barrier", "MPI_Finalize"], "start_ns": [100, 200], "source": "pmpi"})
    done, cut = SimpleNamespace(ended="normal"), SimpleNamespace(ended="abrupt")
    assert _mpi_ended(done, timeline, 250) == "normal"
    assert _mpi_ended(done, timeline, 150) == ENDED_BY_INTERRUPT
    assert _mpi_ended(cut, timeline, 150) == "abrupt"
    assert _mpi_ended(done, timeline, None) == "normal"
    assert _mpi_ended(done, timeline.iloc[:1], 150) == "normal"  # (no MPI_Finalize recorded: as the file says)
    note = _interrupted_note({0: "normal", 1: ENDED_BY_INTERRUPT, 2: "abrupt"}, 3_000_000_000, 1_000_000_000)
    assert note == ("interrupted (Ctrl-C / SIGTERM / SIGHUP): the job was stopped 2 s after the start (ddltrace's "
                    "launch of the job); "
                    "rank 0: MPI_Finalize began before the interrupt (work done): ended normal; "
                    "rank 1: MPI_Finalize began after the interrupt (on the way out of the stopped job): ended "
                    "interrupted; rank 2: ended abrupt (records up to the end kept)")


def test_a_recovered_interrupted_run_keeps_when_the_interrupt_came(tmp_path):
    """Ctrl-C, then `run` killed during its write (SIGKILL), then `ddltrace recover`: the store has the interrupt's
    time and the ranks read as above. Before, the record set's last description (written once the samplers stopped)
    dropped `interrupted_ns`, so a recovery lost it and a rank finalised on the way out read normal."""
    (tmp_path / "job.py").write_text(JOB)
    (ready := tmp_path / "ready").mkdir()
    ddltrace = str(REPO / ".venv" / "bin" / "ddltrace")
    proc = subprocess.Popen([ddltrace, "run", "--np", "2", "--no-progress", "--out", str(tmp_path / "store"), "--",
                             sys.executable, str(tmp_path / "job.py"), str(ready)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
                            env={**os.environ, "DDLTRACE_TEST_WRITE_DELAY_S": "5"})
    records = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(ready.glob("*.ready"))) < 2:
            time.sleep(0.1)
        time.sleep(1.5)
        os.kill(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 60  # the write has begun: its staging folder beside the store
        while time.monotonic() < deadline and not list(tmp_path.glob(".store.*.tmp")):
            time.sleep(0.05)
        proc.kill()
        _, err = proc.communicate(timeout=30)
        records = Path(err.split("raw records in ", 1)[1].split(";", 1)[0])
        done = subprocess.run([ddltrace, "recover", str(records), "--out", str(tmp_path / "again")],
                              capture_output=True, text=True, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if records is not None and records.exists():  # (a failed recovery leaves them: not in /dev/shm for good)
            record_sets.discard(records, {"work": str(next(tmp_path.glob(".store.*"), tmp_path / "none"))})
    assert done.returncode == 0, done.stderr
    store = TraceStore.open(tmp_path / "again")
    assert store.run["interrupted"] is True and store.run["interrupted_ns"] > store.run["start_ns"]
    ended = {store.rank_info(r)["ended"] for r in store.ranks}
    assert ended <= {ENDED_BY_INTERRUPT, "abrupt"} and "normal" not in ended, ended
    assert any(n.startswith("interrupted (Ctrl-C") and "after the start" in n for n in store.manifest["notes"])
