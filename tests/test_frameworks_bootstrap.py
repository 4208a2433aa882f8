"""`ddltrace run --framework` without a framework installed: the bootstrap in real Python processes (identity
from the launch, the import hook, the sitecustomize chain, bad settings, how the process ended) and the host side
on real traces; with .venvs/torch (`make test-frameworks`), real torchrun jobs that end badly."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ddltrace.cli import main
from ddltrace.collectors import frameworks
from ddltrace.collectors.importers import Categorizer
from ddltrace.errors import DdltraceError
from ddltrace.store import TraceStore

DATA = Path(__file__).parent / "data"
TORCH_PYTHON = Path(__file__).resolve().parents[1] / ".venvs" / "torch" / "bin" / "python"
needs_torch = pytest.mark.skipif(not TORCH_PYTHON.exists(), reason=f"no {TORCH_PYTHON} (make test-frameworks)")

#: a 2-rank gloo DDP job, as a user writes it: ``STEPS FAIL_AT MODE``; rank 1 ends in step FAIL_AT after its
#: forward pass, by MODE: raise (a RuntimeError), abort (os.abort) or exit (os._exit(3)); 0: no failure
TORCH_JOB = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    steps, fail_at, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                                        torch.nn.Linear(256, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
    for step in range(1, steps + 1):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if step == fail_at and dist.get_rank() == 1:
            if mode == "abort":
                os.abort()
            if mode == "exit":
                os._exit(3)
            raise RuntimeError(f"rank 1 fails at step {step}")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.barrier()
    dist.destroy_process_group()
""")


def _torchrun(tmp_path: Path, window: str, steps: int, fail_at: int = 0, mode: str = "raise") -> tuple[int, Path]:
    """``ddltrace run --framework pytorch --steps WINDOW`` of TORCH_JOB under torchrun: (exit code, store)."""
    job, store = tmp_path / "job.py", tmp_path / "store"
    job.write_text(TORCH_JOB)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = main(["run", "--no-progress", "--framework", "pytorch", "--steps", window, "--out", str(store), "--",
                 str(TORCH_PYTHON), "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                 str(port), str(job), str(steps), str(fail_at), mode])
    return code, store


def _python(code: str, fw_dir: Path, extra_path: str = "", **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DDLTRACE_", "TF_CONFIG", "DMLC_"))
            and k not in ("RANK", "WORLD_SIZE", "PYTHONPATH")}
    job_env = frameworks.job_env("pytorch", fw_dir, (2, 3))
    job_env["PYTHONPATH"] += os.pathsep + extra_path if extra_path else ""
    return subprocess.run([sys.executable, "-c", code], env={**base, **job_env, **env}, capture_output=True,
                          text=True, timeout=60)


IDENTITY = "import _ddltrace_boot, json; print(json.dumps(_ddltrace_boot.identity()))"


@pytest.mark.parametrize("env, expected", [
    ({"RANK": "3", "WORLD_SIZE": "4"}, {"role": "worker", "rank": 3, "world_size": 4, "from": "RANK"}),
    ({"DMLC_ROLE": "server", "DMLC_NUM_WORKER": "2"}, {"role": "server", "rank": None, "world_size": 2}),
    ({"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]},
                               "task": {"type": "worker", "index": 1}})},
     {"role": "worker", "index": 1, "rank": 2, "world_size": 3, "from": "TF_CONFIG"}),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["b:1"], "ps": ["d:1"]}, "task": {"type": "ps", "index": 0}})},
     {"role": "ps", "index": 0, "rank": None}),
    ({"PMI_RANK": "1", "PMI_SIZE": "2"}, {"role": "worker", "rank": 1, "world_size": 2, "from": "PMI_RANK"}),
])
def test_identity_comes_from_the_launch(tmp_path, env, expected):
    done = _python(IDENTITY, tmp_path, **env)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert {k: found[k] for k in expected} == expected


def test_the_shadowed_sitecustomize_still_runs_and_the_hook_fires_after_import(tmp_path):
    other = tmp_path / "venv_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.OTHER_SITE = True\n")
    (other / "fakefw.py").write_text("VALUE = 41\n")
    code = ("import builtins, _ddltrace_boot\n"
            "seen = []\n"
            "_ddltrace_boot.after_import('fakefw', lambda m: seen.append(m.VALUE + 1))\n"
            "assert not seen\n"
            "import fakefw\n"
            "print(builtins.OTHER_SITE, seen)\n")
    done = _python(code, tmp_path / "fw", extra_path=str(other))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True [42]"
    assert not (tmp_path / "fw").exists()  # no framework imported, no step: the process wrote nothing


def test_a_broken_setting_is_said_and_the_job_runs_on(tmp_path):
    done = _python("print('job ran')", tmp_path, DDLTRACE_FW_STEPS="9-2")
    assert done.returncode == 0 and done.stdout.strip() == "job ran"
    assert "ddltrace: framework bootstrap failed" in done.stderr and "9-2" in done.stderr


def _process_folder(fw_dir: Path, rank_file: str, meta: dict) -> Path:
    folder = fw_dir / f"vm-{meta['pid']}"
    folder.mkdir(parents=True)
    with gzip.open(DATA / "torch_gloo" / rank_file) as fh:
        (folder / "trace.json").write_bytes(fh.read())
    (folder / "meta.json").write_text(json.dumps({"files": [{"path": "trace.json", "format": "kineto"}], **meta}))
    return folder


def test_host_side_ranks_roles_and_the_clock_mark(tmp_path):
    """Real Kineto traces, as two worker processes and a server process left them; the 'ProfilerStep#2' event of
    each stands in for the mark, recorded at a wall time 5 ms after the trace says (a skewed clock)."""
    fw = tmp_path / "fw"
    parts = []
    for pid, rank_file, role, rank in ((11, "rank0.pt.trace.json.gz", "worker", 0),
                                       (12, "rank1.pt.trace.json.gz", "worker", 1),
                                       (13, "rank1.pt.trace.json.gz", "server", None)):
        _process_folder(fw, rank_file, {"pid": pid, "role": role, "rank": rank, "index": 0, "host": "vm",
                                        "framework": "pytorch", "from": "RANK", "steps": [2, 4], "marks": [],
                                        "exited_ns": 1})
    notes: list[str] = []
    parts = frameworks.collect(fw, Categorizer(), notes)
    assert [p.identity for p in parts] == [0, 1, ("server", 0)] and not notes
    assert parts[0].info["group_sizes"] == [2]  # distributedInfo.pg_config: the default group, 2 ranks
    assert frameworks.number(parts, set()) == {0: 0, 1: 1, 2: 2}
    assert frameworks.number(parts, {0, 1, 2, 3}) == {0: 0, 1: 1, 2: 4}  # after an MPI job's own ranks
    # no mark: Kineto's epoch times are kept as they are
    assert parts[0].info["clock_method"] == "framework wall clock (no mark)" and parts[0].info["clock_offset_ns"] == 0

    step = parts[0].timeline[parts[0].timeline["name"] == "ProfilerStep#2"].iloc[0]
    middle = int(step["start_ns"]) + int(step["dur_ns"]) // 2
    shutil.rmtree(fw)
    folder = _process_folder(fw, "rank0.pt.trace.json.gz", {"pid": 21, "role": "worker", "rank": 0, "marks": [
        {"wall_ns": middle + 5_000_000, "half_width_ns": 1_000}]})
    trace = json.loads((folder / "trace.json").read_text())
    for event in trace["traceEvents"]:
        if event.get("name") == "ProfilerStep#2":
            event["name"] = frameworks.MARK_NAME
    (folder / "trace.json").write_text(json.dumps(trace))
    (part,) = frameworks.collect(fw, Categorizer(), notes)
    assert part.info["clock_method"] == "framework mark" and part.info["clock_offset_ns"] == 5_000_000
    assert part.info["clock_uncertainty_ns"] == 1_000 + int(step["dur_ns"]) // 2
    moved = part.timeline[part.timeline["name"] == frameworks.MARK_NAME].iloc[0]
    assert int(moved["start_ns"]) == int(step["start_ns"]) + 5_000_000


def test_bad_files_become_notes_not_crashes(tmp_path):
    """A process killed while writing (a truncated trace) and one whose file vanished: both said, nothing raised."""
    for pid, text in ((5, '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph'),
                      (6, None)):
        folder = tmp_path / "fw" / f"vm-{pid}"
        folder.mkdir(parents=True)
        if text is not None:
            (folder / "trace.json").write_text(text)
        (folder / "meta.json").write_text(json.dumps({"pid": pid, "role": "worker", "rank": pid - 5, "notes": [
            "ended early"], "files": [{"path": "trace.json"}]}))
    notes: list[str] = []
    parts = frameworks.collect(tmp_path / "fw", Categorizer(), notes)
    assert [(p.identity, len(p.timeline)) for p in parts] == [(0, 1)]  # the event before the cut is kept
    assert any("pid 5: trace.json:" in n for n in notes), notes
    assert any("pid 6: trace.json not imported" in n for n in notes), notes
    assert sum("ended early" in n for n in notes) == 2


def test_bad_framework_options_are_one_line_errors(tmp_path, capsys):
    assert main(["run", "--framework", "caffe", "--out", str(tmp_path / "s"), "--", "true"]) == 2
    assert "--framework caffe: unknown (known: pytorch, mxnet, tf, horovod, cntk)" in capsys.readouterr().err
    assert main(["run", "--framework", "torch", "--steps", "5-x", "--out", str(tmp_path / "s"), "--", "true"]) == 2
    assert "--steps 5-x: want FIRST-LAST" in capsys.readouterr().err
    for given, said in ((["--framework", "mxnet"], "given: --framework mxnet"), ([], "given: no --framework")):
        assert main(["run", *given, "--record-shapes", "--out", str(tmp_path / "s"), "--", "true"]) == 2
        assert capsys.readouterr().err.strip() == ("ddltrace: error: --record-shapes: torch.profiler's option, for "
                                                   f"--framework pytorch or horovod only ({said})")
        assert not (tmp_path / "s").exists()
    with pytest.raises(DdltraceError, match="1 <= FIRST <= LAST"):
        frameworks.parse_steps("0-3")


def test_a_job_that_writes_no_profile_still_gives_a_store(tmp_path):
    out = tmp_path / "s"
    assert main(["run", "--no-progress", "--framework", "pytorch", "--out", str(out), "--", sys.executable, "-c",
                 "print('no torch here')"]) == 0
    from ddltrace.store import TraceStore

    store = TraceStore.open(out)
    assert store.ranks == [0] and store.rank_info(0)["role"] == "process" and store.run["framework"] == "pytorch"
    assert any("no process wrote a pytorch profile" in n for n in store.manifest["notes"])


@pytest.mark.parametrize("end, exited, ended_by", [
    ("pass", True, None),
    ("raise ValueError('bad batch')", True, "an uncaught ValueError: bad batch"),
    ("os._exit(3)", False, None),
    ("os.abort()", False, None),
    ("os.kill(os.getpid(), signal.SIGKILL)", False, None)])
def test_the_bootstrap_records_pythons_exit_and_nothing_where_none_ran(tmp_path, end, exited, ended_by):
    """A process that wrote its meta records at exit that Python's exit ran (and the exception it died of); one ended
    by os._exit, os.abort or a signal runs no exit hook and records nothing, and the host side says so."""
    code = ("import os, signal, _ddltrace_boot\n"
            "proc = _ddltrace_boot.Process('pytorch')\n"
            "proc.update(rank=0)\n"
            f"{end}\n")
    done = _python(code, tmp_path / "fw", RANK="0", WORLD_SIZE="1")
    assert (done.returncode == 0) is (end == "pass"), done.stderr
    (folder,) = (tmp_path / "fw").iterdir()
    meta = json.loads((folder / "meta.json").read_text())
    assert ("exited_ns" in meta) is exited and meta.get("ended_by") == ended_by
    notes: list[str] = []
    (part,) = frameworks.collect(tmp_path / "fw", Categorizer(), notes)
    said = f"rank 0's process (pid {meta['pid']}) ended without Python's exit (a signal, os.abort, os._exit): abrupt"
    assert (said in notes) is not exited and ("exited_ns" in part.info) is exited


@needs_torch
@pytest.mark.parametrize("fail_at, mode", [(7, "abort"), (11, "exit"), (0, "raise")])
def test_a_rank_killed_without_an_exception_is_abrupt(tmp_path, fail_at, mode):
    """Rank 1 ends by os.abort inside the window 5-9, or by os._exit after it: no exception, so nothing said how it
    ended, and torchrun's exit code 1 (>= 0) made it 'ended normally'. Now it is abrupt, and a note says why; a
    job that ends well has both ranks normal."""
    code, store = _torchrun(tmp_path, "5-9", 12, fail_at, mode)
    assert code == (1 if fail_at else 0)
    s = TraceStore.open(store)
    notes = s.manifest["notes"]
    said = (f"rank 1's process (pid {s.rank_info(1)['pid']}) ended without Python's exit (a signal, os.abort, "
            "os._exit): abrupt")
    assert s.rank_info(1)["ended"] == ("abrupt" if fail_at else "normal") and (said in notes) is bool(fail_at)
    if not fail_at:
        assert s.rank_info(0)["ended"] == "normal" and not any("without Python's exit" in n for n in notes)


@needs_torch
@pytest.mark.parametrize("window, fail_at, marked", [("10-20", 0, {10, 11, 12}), ("5-9", 7, {5, 6})])
def test_only_the_steps_the_job_finished_are_marked(tmp_path, window, fail_at, marked):
    """torch opens step N + 1 when step N ends: a 12-step job profiled over 10-20 read a 13th step (the final barrier
    and teardown), and a rank that raised in step 7 an unfinished step 7. Their spans are dropped, their rows kept
    without a step, and the rank's ``unfinished_step`` names it."""
    code, store = _torchrun(tmp_path, window, 12, fail_at)
    assert code == (1 if fail_at else 0)
    s = TraceStore.open(store)
    timeline = s.timeline()
    for rank in (0, 1):
        mine = timeline[timeline["rank"] == rank]
        spans = set(mine.loc[mine["name"].str.startswith("ProfilerStep#"), "name"])
        assert spans == {f"ProfilerStep#{n}" for n in marked} and set(mine["step"].dropna()) == marked
        assert s.rank_info(rank)["profiled_steps"] == [min(marked), max(marked)]
    assert s.rank_info(1)["unfinished_step"] == max(marked) + 1
    # the run says what was profiled, and the window asked for apart (it said the window: 10-20 of a 12-step job)
    assert s.run["profiled_steps"] == [min(marked), max(marked)]
    assert s.run["steps_window"] == [int(x) for x in window.split("-")]


@needs_torch
def test_no_straggler_is_named_from_a_step_the_ranks_did_not_finish(tmp_path, capsys):
    """Rank 1 raises in step 5, the first of the window 5-9, after its forward pass; rank 0 waits in its backward for
    the dead peer until gloo gives up. That unfinished step named the healthy rank 0 the straggler (its compute held
    the wait); now the stragglers analysis is not made, and says why."""
    code, store = _torchrun(tmp_path, "5-9", 12, 5)
    assert code == 1
    capsys.readouterr()
    main(["analyze", str(store), "--json"])
    analysed = json.loads(capsys.readouterr().out)
    assert not [f for f in analysed["findings"] if f["id"] == "straggler"]
    (skipped,) = [n for n in analysed["not_made"] if n["analysis"] == "stragglers"]
    assert skipped["holds"] == "ranks 0, 1 ended abruptly with no finished step"
