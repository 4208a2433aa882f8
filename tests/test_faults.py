"""The fault suite: real `ddltrace` processes, real MPI jobs, real signals, a real full disk, real concurrent
writers. Each case checks the calls in the final store against what the job itself logged before the fault:
nothing lost.

The job makes ``DDLTRACE_FAULT_CALLS`` MPI_Allreduce calls per rank (default 5,000; set it to millions for the
heavy variant, `make test-faults-heavy`), logs that count, then ends, sleeps until stopped, or waits for a
file. ``DDLTRACE_TEST_WRITE_DELAY_S`` (ddltrace/store.py) makes the store's write wait before each rank so a
signal lands inside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from mpi_tools import needs_mpi

from ddltrace.collectors import record_sets
from ddltrace.collectors.mpi_env import find_tool
from ddltrace.collectors.pmpi.records import HEADER_SIZE, RECORD_DTYPE, read_records
from ddltrace.collectors.pmpi.table import names
from ddltrace.errors import DdltraceError
from ddltrace.store import TraceStore

REPO = Path(__file__).resolve().parent.parent
DDLTRACE = Path(sys.executable).parent / "ddltrace"
CALLS = int(os.environ.get("DDLTRACE_FAULT_CALLS", "5000"))
LONG_S = 120 + CALLS / 5000  # the longest wait for a job or a write (s): longer with more calls

# argv: LOG_DIR CALLS AFTER, AFTER one of "end", "sleep" (until a signal stops the job), or a file to wait for
JOB = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    log, n, after = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    a = np.ones(4)
    for _ in range(n):
        comm.Allreduce(MPI.IN_PLACE, a)
    with open(f"{log}/rank{rank}.tmp", "w") as fh:
        json.dump({"allreduce": n}, fh)
    os.replace(f"{log}/rank{rank}.tmp", f"{log}/rank{rank}.json")
    if after == "sleep":
        time.sleep(300)
    elif after != "end":
        while not os.path.exists(after):
            time.sleep(0.05)
    comm.Barrier()
""")


class Run:
    """One `ddltrace run --np 2` of the job, its stderr in a file."""

    def __init__(self, tmp_path: Path, out: Path, after: str, env: dict | None = None, name: str = "run",
                 options: tuple[str, ...] = ()):
        self.log = tmp_path / f"{name}-log"
        self.log.mkdir()
        self.before = set(record_sets.SHM.glob(record_sets.SHM_PREFIX + "*"))
        self.err = tmp_path / f"{name}.err"
        (tmp_path / "job.py").write_text(JOB)
        self.proc = subprocess.Popen(
            [str(DDLTRACE), "run", "--np", "2", "--no-progress", *options, "--out", str(out), "--", sys.executable,
             str(tmp_path / "job.py"), str(self.log), str(CALLS), after],
            stdout=subprocess.DEVNULL, stderr=open(self.err, "w"), env={**os.environ, **(env or {})})

    def stderr(self) -> str:
        return self.err.read_text()

    def records(self) -> Path:
        """The job's record folder: named by `run`, else the one that appeared in /dev/shm since it started."""
        def named() -> Path | None:
            found = re.search(r"raw records in (\S+);", self.stderr())
            new = set(record_sets.SHM.glob(record_sets.SHM_PREFIX + "*")) - self.before
            return Path(found.group(1)) if found else new.pop() if len(new) == 1 and self.logged() else None
        return wait_for(named, "the job's record folder")

    def logged(self) -> dict[int, int]:
        """Calls each rank logged, once both have."""
        wait_for(lambda: len(list(self.log.glob("rank*.json"))) == 2, "the job's call log")
        return {int(p.stem[4:]): json.loads(p.read_text())["allreduce"] for p in self.log.glob("rank*.json")}


def wait_for(predicate, what: str, timeout: float = LONG_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def stored_calls(store: Path) -> dict[int, int]:
    """MPI_Allreduce calls per rank in the store (mpi4py calls the large-count twin on MPICH)."""
    opened = TraceStore.open(store)
    return {rank: int(tl["name"].astype(str).str.match(r"MPI_Allreduce(_c)?$").sum())
            for rank, tl in opened.iter_timeline()}


def ddltrace(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(DDLTRACE), *args], capture_output=True, text=True, timeout=LONG_S)


@pytest.fixture
def cleanup(tmp_path):
    """What a case leaves behind is removed whatever the outcome: its processes (ddltrace, mpiexec and the
    ranks: every process whose command line names the case's folder; a job outlives a killed ddltrace),
    record folders, mounts, and MPICH's shared-memory files of ranks that were stopped."""
    left = {"records": [], "runs": [], "mounts": []}
    shm_before = set(record_sets.SHM.glob("mpich_shm_*"))
    yield left
    mine = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid != os.getpid() and any(str(tmp_path) in arg for arg in proc.info["cmdline"] or []):
            mine.append(proc)
            with contextlib.suppress(psutil.Error):
                proc.kill()
    psutil.wait_procs(mine, timeout=10)
    for run in left["runs"]:
        run.proc.wait(timeout=10)
    for path in left["records"]:
        try:
            job = record_sets.load(path).job
        except (DdltraceError, OSError):  # gone (recovered), or never written
            job = {}
        record_sets.discard(path, job)
    for rs in record_sets.find():  # a set the case did not get to list (it failed first): its store was to be here
        if str(rs.job.get("out", "")).startswith(str(tmp_path)):
            record_sets.discard(rs.path, rs.job)
    for mount in left["mounts"]:
        subprocess.run(["umount", "-l", str(mount)], check=False)
    maps = ""
    for path in Path("/proc").glob("[0-9]*/maps"):
        try:
            maps += path.read_text()
        except OSError:
            continue
    for path in set(record_sets.SHM.glob("mpich_shm_*")) - shm_before:
        if str(path) not in maps:  # not another job's, still in use
            path.unlink(missing_ok=True)


def past_rank0(tmp_path: Path, out: str, pid: int) -> bool:
    """The write is past its first rank and waiting before the next (the test hook's sleep): the staging
    folder beside ``out`` holds rank 0's timeline and counters (the samplers saw rank 0's process, so it has
    counters; they are its last file), and ddltrace's main thread sleeps (a thread that just wrote them may
    not have run again yet, under load, and would still call the write rank 0's)."""
    written = all(any(tmp_path.glob(f".{out}.*.tmp/{kind}/rank-00000.parquet")) for kind in ("timeline", "counters"))
    return written and psutil.Process(pid).status() == psutil.STATUS_SLEEPING


@needs_mpi
def test_ctrl_c_twice_during_the_write_keeps_the_records_and_recover_makes_the_store(tmp_path, cleanup):
    out = tmp_path / "S"
    run = Run(tmp_path, out, "sleep", env={"DDLTRACE_TEST_WRITE_DELAY_S": "4"})
    cleanup["runs"].append(run)
    records = run.records()
    cleanup["records"].append(records)
    logged = run.logged()
    run.proc.send_signal(signal.SIGINT)  # 1: stops the job
    wait_for(lambda: past_rank0(tmp_path, "S", run.proc.pid), "the write to be past rank 0")
    run.proc.send_signal(signal.SIGINT)  # 2: says what is written and how long it will take
    wait_for(lambda: "Interrupt again" in run.stderr(), "the write's progress line")
    run.proc.send_signal(signal.SIGINT)  # 3: abandons the write
    assert run.proc.wait(timeout=LONG_S) == 130
    err = run.stderr()
    said = next(line for line in err.splitlines() if "Interrupt again" in line)
    assert f"writing the store {out}" in said and re.search(r"of [\d,]+ MPI calls written, about \d+ s left", said)
    assert f"records are kept in {records}" in err and f"ddltrace recover {records} --out {out}" in err
    assert not out.exists(), "no store missing ranks is left where the store goes"
    assert not list(tmp_path.glob(".S.*.tmp")), "the partial store is removed"
    assert len(list(records.glob("rank-*.pmpi"))) == 2
    listing = ddltrace("recover")
    assert listing.returncode == 0 and any(line.startswith(f"{records}  ") and "job.py" in line and "2 ranks" in line
                                           for line in listing.stdout.splitlines()), listing.stdout
    done = ddltrace("recover", str(records), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert stored_calls(out) == logged == {0: CALLS, 1: CALLS}
    store = TraceStore.open(out)
    assert store.run["interrupted"] is True and store.run["exit_code"] is not None
    # the samples run held were kept with the records (they were lost): the machine's and each rank's process's
    assert len(store.counters([-1])) and all(len(store.counters([r])) for r in (0, 1))
    assert "system" in store.run["collectors"] and not any("system and GPU samples" in n and "not recorded" in n
                                                          for n in store.manifest["notes"])
    assert not records.exists() and not list(tmp_path.glob(".S.*")), "records and work folder deleted after"


@needs_mpi
def test_one_signal_during_the_write_says_so_and_the_store_is_complete(tmp_path, cleanup):
    out = tmp_path / "S"
    run = Run(tmp_path, out, "end", env={"DDLTRACE_TEST_WRITE_DELAY_S": "1"})
    cleanup["runs"].append(run)
    cleanup["records"].append(records := run.records())
    logged = run.logged()
    wait_for(lambda: "the job ended" in run.stderr(), "the store's write")
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=LONG_S) == 0, run.stderr()
    assert "Interrupt again to abandon" in run.stderr()
    assert stored_calls(out) == logged == {0: CALLS, 1: CALLS}
    assert not records.exists()


@needs_mpi
def test_sigkill_of_run_then_recover(tmp_path, cleanup):
    out, go = tmp_path / "S", tmp_path / "go"
    run = Run(tmp_path, out, str(go))
    cleanup["runs"].append(run)
    records = run.records()
    cleanup["records"].append(records)
    assert f"ddltrace recover {records} --out {out}" in run.stderr()
    logged = run.logged()
    run.proc.send_signal(signal.SIGKILL)  # the OOM killer; the job runs on
    run.proc.wait()
    early = ddltrace("recover", str(records), "--out", str(out))
    assert early.returncode == 2 and "still running" in early.stderr and not out.exists()
    go.touch()
    wait_for(lambda: not record_sets.load(records).job_alive, "the job to end")
    assert any(str(records) in line and "left" in line for line in ddltrace("recover").stdout.splitlines())
    done = ddltrace("recover", str(records), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert stored_calls(out) == logged == {0: CALLS, 1: CALLS}
    store = TraceStore.open(out)
    assert store.run["exit_code"] is None and store.run["recovered_from"] == str(records)
    assert {store.rank_info(r)["ended"] for r in store.ranks} == {"normal"}
    assert not records.exists() and not list(tmp_path.glob(".S.*")), "records and work folder deleted after"
    info = ddltrace("info", str(out)).stdout  # the store says it was recovered, wherever it is read
    assert f"note        recovered by `ddltrace recover` from {records}" in info, info
    said = ddltrace("analyze", str(out)).stdout
    assert f"{out} was made by `ddltrace recover` from the raw records {records}" in said, said
    assert "exit code and end are not known" in said
    stored = json.loads(ddltrace("analyze", str(out), "--json").stdout)["stores"][0]
    assert stored["recovered_from"] == str(records) and stored["exit_code"] is None
    assert any(note.startswith("recovered by `ddltrace recover`") for note in stored["notes"])


@needs_mpi
def test_a_killed_runs_pyspy_stacks_are_recovered(tmp_path, cleanup):
    """py-spy outlives a killed `ddltrace run`: it writes each rank's stacks to the run's work folder when the rank
    ends, and `recover` reads them back with the records (QA: it said "not recorded: py-spy stacks" and deleted
    the complete files)."""
    if find_tool("py-spy") is None:
        pytest.skip("no py-spy beside this Python")
    out, go = tmp_path / "S", tmp_path / "go"
    run = Run(tmp_path, out, str(go), options=("--pyspy",))
    cleanup["runs"].append(run)
    cleanup["records"].append(records := run.records())
    run.logged()
    job = [sys.executable, str(tmp_path / "job.py"), str(run.log)]  # the ranks' command (not mpiexec's, hydra's)
    ranks = [proc.pid for proc in psutil.process_iter(["cmdline"]) if (proc.info["cmdline"] or [])[:3] == job]
    assert len(ranks) == 2, ranks
    wait_for(lambda: all(any(tmp_path.glob(f".S.*/pyspy/pyspy-{pid}.start")) for pid in ranks), "py-spy on both ranks")
    time.sleep(2)  # py-spy attached (it takes a moment) and sampling the ranks' wait for the go file
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    go.touch()
    wait_for(lambda: not record_sets.load(records).job_alive, "the job to end")
    done = ddltrace("recover", str(records), "--out", str(out))
    assert done.returncode == 0, done.stderr
    store = TraceStore.open(out)
    notes = " ".join(store.manifest["notes"])
    assert "py-spy stacks were kept" in notes and "not recorded: py-spy" not in notes
    stacks = {rank: int((tl["source"] == "py-spy").sum()) for rank, tl in store.iter_timeline()}
    assert set(stacks) == {0, 1} and all(n > 0 for n in stacks.values()), stacks


@needs_mpi
def test_a_killed_run_of_the_ps_sgd_job_recovers_with_its_workload_entry(tmp_path, cleanup):
    """The reference job's run killed (SIGKILL) once its ranks are past MPI_Init, the job running on to its end:
    the recovered store records what the job was told (from the command and world size its record set keeps),
    the entry a normal run records, the same configuration as the job's ground truth (w = 1, server rank 0)."""
    from ddltrace.collectors.workloads import ps_sgd_config

    out, truth = tmp_path / "S", tmp_path / "truth"
    before = set(record_sets.SHM.glob(record_sets.SHM_PREFIX + "*"))
    proc = subprocess.Popen([str(DDLTRACE), "run", "--np", "2", "--no-progress", "--out", str(out), "--",
                             sys.executable, "-m", ps_sgd_config.JOB_MODULE, "--out", str(truth), "--samples", "512",
                             "--epochs", "1", "--batch", "64", "--hidden", "10", "--compute", "emulated",
                             "--sample-time", "0.002"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = wait_for(lambda: next(iter(set(record_sets.SHM.glob(record_sets.SHM_PREFIX + "*")) - before), None),
                       "the job's record folder")
    cleanup["records"].append(records)
    wait_for(lambda: len(list(records.glob("rank-*.pmpi"))) == 2, "both ranks past MPI_Init")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_for(lambda: not record_sets.load(records).job_alive, "the job to end")
    done = ddltrace("recover", str(records), "--out", str(out))
    assert done.returncode == 0, done.stderr
    store = TraceStore.open(out)
    assert store.run["recovered_from"] == str(records) and store.run["exit_code"] is None
    config = json.loads((truth / "ground_truth.json").read_text())["config"]
    assert (config["workers"], config["server_rank"]) == (1, 0)
    assert store.manifest["workload"] == {"job": "ps-sgd", "compute": "emulated", "sync": config["sync"],
                                          "init": config["init"], "config": config,
                                          "ground_truth": "../truth/ground_truth.json"}


@needs_mpi
def test_sigkill_during_the_write_then_recover(tmp_path, cleanup):
    out = tmp_path / "S"
    run = Run(tmp_path, out, "end", env={"DDLTRACE_TEST_WRITE_DELAY_S": "2"})
    cleanup["runs"].append(run)
    cleanup["records"].append(records := run.records())
    logged = run.logged()
    wait_for(lambda: any(tmp_path.glob(".S.*.tmp")), "the store's write")
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    assert not out.exists(), "no partial store where the store goes"
    done = ddltrace("recover", str(records), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert stored_calls(out) == logged == {0: CALLS, 1: CALLS}
    assert TraceStore.open(out).run["exit_code"] == 0, "the job had ended: its exit code was kept with the records"
    assert not records.exists() and not list(tmp_path.glob(".S.*")), "records, work and partial store deleted"


@needs_mpi
def test_full_disk_keeps_the_records_and_recover_makes_the_store_elsewhere(tmp_path, cleanup):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full disk needs a small tmpfs: mounting one needs root")
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(small)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    cleanup["mounts"].append(small)
    out = small / "S"
    run = Run(tmp_path, out, "end")
    cleanup["runs"].append(run)
    cleanup["records"].append(records := run.records())
    logged = run.logged()
    assert run.proc.wait(timeout=LONG_S) == 2
    err = run.stderr()
    assert "Traceback" not in err
    assert f"ddltrace: error: {out}: cannot write the store (No space left on device)" in err
    assert f"ddltrace recover {records} --out {out}" in err
    assert not out.exists() and not list(small.iterdir())  # no staging, no empty work folder (records in /dev/shm)
    again = ddltrace("recover", str(records), "--out", str(out))  # still full: fails the same way, keeps them
    assert again.returncode == 2 and "No space left on device" in again.stderr and records.is_dir()
    done = ddltrace("recover", str(records), "--out", str(tmp_path / "S"))
    assert done.returncode == 0, done.stderr
    assert stored_calls(tmp_path / "S") == logged == {0: CALLS, 1: CALLS}
    assert len(TraceStore.open(tmp_path / "S").counters([-1])), "the system samples kept with the records"
    assert not records.exists()


def _chrome(path: Path, name: str, n: int) -> Path:
    path.write_text(json.dumps({"traceEvents": [{"name": name, "cat": "kernel", "ph": "X", "ts": 10 * i, "dur": 5,
                                                 "pid": 0, "tid": 1} for i in range(n)]}))
    return path


def _names(store: Path) -> dict[str, int]:
    return TraceStore.open(store).timeline()["name"].astype(str).value_counts().to_dict()


def test_two_imports_into_one_out(tmp_path):
    first, second = _chrome(tmp_path / "a.json", "op_a", 1200), _chrome(tmp_path / "b.json", "op_b", 700)
    out = tmp_path / "S"
    slow = subprocess.Popen([str(DDLTRACE), "import", str(first), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DDLTRACE_TEST_WRITE_DELAY_S": "2"})
    try:
        wait_for(lambda: any(tmp_path.glob(".S.*.tmp")), "the first import's write")
        slow.send_signal(signal.SIGSTOP)  # the first import stays inside its write while the second runs
        racing = ddltrace("import", str(second), "--out", str(out))
        slow.send_signal(signal.SIGCONT)
        assert racing.returncode == 2 and "being written by ddltrace pid" in racing.stderr, racing
        assert slow.wait(timeout=LONG_S) == 0, slow.stderr.read()
    finally:
        if slow.poll() is None:
            slow.send_signal(signal.SIGCONT)
            slow.kill()
    assert _names(out) == {"op_a": 1200}, "the first import's store, whole"
    refused = ddltrace("import", str(second), "--out", str(out))
    assert refused.returncode == 2 and "already exists" in refused.stderr and _names(out) == {"op_a": 1200}
    assert ddltrace("import", str(second), "--out", str(out), "--force").returncode == 0
    assert _names(out) == {"op_b": 700}
    assert not list(tmp_path.glob(".S.*")), "no staging folder or lock file left"


@needs_mpi
def test_two_runs_into_one_out(tmp_path, cleanup):
    out, go = tmp_path / "S", tmp_path / "go"
    first = Run(tmp_path, out, str(go), name="first")
    cleanup["runs"].append(first)
    cleanup["records"].append(records := first.records())
    logged = first.logged()
    marker = tmp_path / "second-job-ran"
    second = ddltrace("run", "--np", "2", "--out", str(out), "--", sys.executable, "-c",
                      f"open({str(marker)!r}, 'w')")
    assert second.returncode == 2 and "being written by ddltrace pid" in second.stderr, second.stderr
    assert not marker.exists(), "the second run stopped before its job"
    go.touch()
    assert first.proc.wait(timeout=LONG_S) == 0, first.stderr()
    assert stored_calls(out) == logged == {0: CALLS, 1: CALLS}
    assert not records.exists()


@needs_mpi
def test_recover_names_a_cut_rank_file_and_an_unreadable_one_and_keeps_the_rest(tmp_path, cleanup):
    """A rank's record file cut short keeps the calls it holds and says how many it lost; an unreadable one is
    named as such (not 'wrote no record file'); `recover` prints both (it printed no note: the rank was silently
    missing, or silently short)."""
    out, go = tmp_path / "S", tmp_path / "go"
    run = Run(tmp_path, out, str(go))
    cleanup["runs"].append(run)
    cleanup["records"].append(records := run.records())
    logged = run.logged()
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    go.touch()
    wait_for(lambda: not record_sets.load(records).job_alive, "the job to end")
    garbled = tmp_path / "garbled"
    shutil.copytree(records, garbled)
    cleanup["records"].append(garbled)
    (garbled / "rank-00001.pmpi").write_bytes(b"\0" * 4096)
    rank1 = records / "rank-00001.pmpi"
    whole = read_records(rank1)
    keep = len(whole.records) // 2
    with open(rank1, "r+b") as fh:
        fh.truncate(HEADER_SIZE + keep * RECORD_DTYPE.itemsize)
    done = ddltrace("recover", str(records), "--out", str(out))
    assert done.returncode == 0, done.stderr
    lost = len(whole.records) - keep
    assert not len(whole.completions)  # (its job completes no request by a Waitall: every record is a call)
    assert (f"{rank1}: the file ends before {lost:,} of the {len(whole.records):,} records (MPI calls and requests "
            f"completed) rank 1 wrote" in done.stdout), done.stdout
    allreduce = int(np.isin(whole.records["fn"][:keep] - 1, [i for i, n in enumerate(names())
                                                              if re.match(r"MPI_Allreduce(_c)?$", n)]).sum())
    assert stored_calls(out) == {0: logged[0], 1: allreduce} and 0 < allreduce < logged[1]
    done = ddltrace("recover", str(garbled), "--out", str(tmp_path / "G"))
    assert done.returncode == 0, done.stderr
    assert (f"unreadable record file: {garbled / 'rank-00001.pmpi'}: not a ddltrace PMPI record file (bad magic or "
            "too short); rank 1 left out") in done.stdout and "wrote no record file" not in done.stdout, done.stdout
    assert stored_calls(tmp_path / "G") == {0: logged[0]}


@needs_mpi
@pytest.mark.parametrize("stop", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_sighup_or_sigterm_stops_the_job_and_writes_the_store(tmp_path, cleanup, stop):
    """The terminal closed or the ssh session lost (SIGHUP to ``ddltrace run``), or a scheduler's SIGTERM: handled as
    Ctrl-C, the job stopped and the store written with every call (before: on SIGHUP ddltrace died at once, no
    store, the job left running); the exit status is 128 + the signal, as the shell reports one (it was 130 for
    every signal, where the other commands give 143 for SIGTERM)."""
    out = tmp_path / "S"
    run = Run(tmp_path, out, "sleep")
    cleanup["runs"].append(run)
    cleanup["records"].append(records := run.records())
    logged = run.logged()
    run.proc.send_signal(stop)
    assert run.proc.wait(timeout=LONG_S) == 128 + stop, run.stderr()
    assert stored_calls(out) == logged == {0: CALLS, 1: CALLS}
    assert TraceStore.open(out).run["interrupted"] is True
    assert not records.exists()


@needs_mpi
def test_the_shared_memory_a_killed_rank_leaves_is_removed(tmp_path, cleanup):
    """A rank killed (SIGKILL) leaves MPICH's shared-memory segment in /dev/shm (2-3 MB, until a reboot: about 180
    of earlier sessions' were left here): `run` removes the one its job made that no process maps, and says so."""
    job = tmp_path / "killed.py"
    job.write_text("import os, signal, time\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()\n"
                   "if MPI.COMM_WORLD.Get_rank() == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(1)\n")
    before = set(record_sets.SHM.glob("mpich_shm_*"))
    done = subprocess.run([str(DDLTRACE), "run", "--np", "2", "--no-progress", "--out", str(tmp_path / "S"), "--",
                           sys.executable, str(job)], capture_output=True, text=True, timeout=LONG_S)
    assert done.returncode != 0 and "exit code 9" in done.stderr, done.stderr
    assert "note: removed 1 MPICH shared-memory file(s)" in done.stderr
    assert set(record_sets.SHM.glob("mpich_shm_*")) <= before


@needs_mpi
def test_a_burst_of_signals_during_the_write_leaves_no_partial_store(tmp_path, cleanup):
    """Ctrl-C pressed many times, fast, during the write (QA: 2 times in 3 the partial .S.*.tmp stayed: every
    signal after the one that abandons the write abandoned it again, inside its cleanup): the write is abandoned
    once, the partial store removed, the records kept."""
    out = tmp_path / "S"
    run = Run(tmp_path, out, "sleep", env={"DDLTRACE_TEST_WRITE_DELAY_S": "4"})
    cleanup["runs"].append(run)
    cleanup["records"].append(records := run.records())
    run.logged()
    run.proc.send_signal(signal.SIGINT)  # stops the job
    wait_for(lambda: past_rank0(tmp_path, "S", run.proc.pid), "the write to be past rank 0")
    for pause in [0.0] * 10 + [0.002] * 20:  # (back to back, then one at a time through the cleanup)
        run.proc.send_signal(signal.SIGINT)
        time.sleep(pause)
    assert run.proc.wait(timeout=LONG_S) == 130
    assert run.stderr().count("write abandoned") == 1
    assert not out.exists() and not list(tmp_path.glob(".S.*.tmp")), "the partial store is removed"
    assert len(list(records.glob("rank-*.pmpi"))) == 2


@needs_mpi
def test_a_reader_that_leaves_does_not_stop_the_run(tmp_path, cleanup):
    """`ddltrace run ... 2>&1 | head -n1`: the reader of ddltrace's output leaves after one line. The job runs to its
    end and the store is written with every call (before: a broken pipe made `run` exit 0 at once, the job never run;
    part-way, no store and no word)."""
    (tmp_path / "job.py").write_text(JOB)
    (log := tmp_path / "log").mkdir()
    out = tmp_path / "S"
    command = (f"{DDLTRACE} run --np 2 --out {out} -- {sys.executable} {tmp_path / 'job.py'} {log} {CALLS} end 2>&1 "
               "| head -n1")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=LONG_S)
    assert done.returncode == 0 and done.stdout.count("\n") == 1, done.stdout
    logged = {int(p.stem[4:]): json.loads(p.read_text())["allreduce"] for p in log.glob("rank*.json")}
    assert stored_calls(out) == logged == {0: CALLS, 1: CALLS}


HUNG_JOB = textwrap.dedent("""
    import sys, time
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    for _ in range(200):
        comm.allreduce(1)
    open(f"{sys.argv[1]}/rank{comm.Get_rank()}.ready", "w").close()
    if comm.Get_rank() == 2:
        time.sleep(300)  # stuck in its own code: the others wait at the barrier
    comm.Barrier()
""")


def stopped_by_ctrl_c(tmp_path: Path, job: str) -> tuple[Path, dict]:
    """``job`` (its argv[1]: a folder where each of its 3 ranks writes ``rankN.ready`` at its blocking call) run
    under `ddltrace run --np 3`, stopped by Ctrl-C 2 s after every rank is ready: its store, and the hang finding
    of `analyze --json` on it."""
    (tmp_path / "job.py").write_text(job)
    (ready := tmp_path / "ready").mkdir()
    out = tmp_path / "S"
    with open(tmp_path / "run.err", "w") as err:
        proc = subprocess.Popen([str(DDLTRACE), "run", "--np", "3", "--no-progress", "--out", str(out), "--",
                                 sys.executable, str(tmp_path / "job.py"), str(ready)],
                                stdout=subprocess.DEVNULL, stderr=err)
    wait_for(lambda: len(list(ready.glob("*.ready"))) == 3, "the ranks at their blocking calls")
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=LONG_S) == 130, (tmp_path / "run.err").read_text()
    done = ddltrace("analyze", str(out), "--json")
    assert done.returncode == 0, done.stderr
    (hang,) = [f for f in json.loads(done.stdout)["findings"] if f["id"] == "hang"]
    return out, hang


UNMATCHED_JOB = textwrap.dedent("""
    import sys
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    open(f"{sys.argv[1]}/rank{comm.Get_rank()}.ready", "w").close()
    if comm.Get_rank() == 0:
        comm.Recv(np.zeros(1), source=2)  # a receive no rank sends to
    comm.Barrier()
""")


@needs_mpi
def test_a_receive_no_rank_sends_to_is_named_in_the_deadlock(tmp_path, cleanup):
    """Rank 0 waits for a message rank 2 never sends, the others wait at the barrier: every rank is blocked, and
    the finding says which call waits for whom (QA: only 'every rank was blocked', as for any deadlock)."""
    _, hang = stopped_by_ctrl_c(tmp_path, UNMATCHED_JOB)
    assert "a deadlock" in hang["title"] and re.search(r"rank 0's MPI_Recv(_c)? waits for rank 2, in MPI_Barrier",
                                                        hang["title"]), hang["title"]
    assert hang["ranks"] == [2]


@needs_mpi
def test_a_hung_job_stopped_by_ctrl_c_names_the_rank_the_others_wait_for(hung_job):
    """Rank 2 sleeps before a barrier the others entered; Ctrl-C stops the job 2 s later. The store keeps the two
    ranks' open MPI_Barrier calls, and `analyze` says the job hung waiting for rank 2 (QA: "No findings", the
    wait in the finalisation phase)."""
    out, hang = hung_job  # (conftest: run once, also for test_interrupted_shares)
    store = TraceStore.open(out)
    assert {r: store.rank_info(r)["open_calls"] for r in (0, 1)} == {0: ["MPI_Barrier"], 1: ["MPI_Barrier"]}
    assert hang["ranks"] == [2] and "ranks 0-1 stopped blocked in MPI_Barrier" in hang["title"]
    # from the barrier to the Ctrl-C (about 2 s), not to the ranks' end (the stop's up to 5 s more)
    stopped = store.run["interrupted_ns"]
    assert 2e9 <= hang["evidence"]["longest_wait"]["value"] < 4e9 and stopped < store.run["end_ns"]
    # and the stop's wait is finalisation, not steady state
    from ddltrace.analyses.run_analysis import analyze_store

    phases = analyze_store(out).phases
    assert all(phases[r].steady_end_ns <= stopped < phases[r].end_ns for r in (0, 1, 2))
