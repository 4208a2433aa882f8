"""A real torch 2.13 gloo DDP job on 2 processes (torchrun), unmodified, under `ddltrace run --framework pytorch`."""

from __future__ import annotations

import json

import pytest
from conftest import JOBS, ddltrace_run, free_port, report_verdict

from ddltrace.cli import main
from ddltrace.store import TraceStore


@pytest.mark.parametrize("shape, largest, options", [
    (["--width", "512", "--batch", "512"], "compute", []),
    (["--width", "2048", "--batch", "1", "--layers", "1"], "comm", ["--record-shapes"])])
def test_torchrun_job_profiled_from_outside(framework_python, tmp_path, capsys, shape, largest, options):
    """The comm-bound shape is profiled with --record-shapes: each gloo all-reduce then has its bytes, the DDP
    bucket of all the model's float32 parameters (2048 x 2048 + 2048 + 2048 x 10 + 10 of them, one bucket: DDP
    closes a bucket once it holds 1 MiB, and the last layer's are ready first), and analyze gives their bus
    bandwidth; without it the trace gives no size and analyze says what the bandwidth needs."""
    python = framework_python("pytorch")
    store = tmp_path / "store"
    result = ddltrace_run("--framework", "torch", "--steps", "4-8", *options, "--out", store, "--", python,
                          "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", free_port(),
                          JOBS / "torch_ddp.py", "--steps", "12", *shape)
    assert result.returncode == 0, result.stderr[-3000:]
    s = TraceStore.open(store)
    assert s.ranks == [0, 1] and s.run["framework"] == "pytorch" and s.run["profiled_steps"] == [4, 8]
    timeline = s.timeline()
    for rank in (0, 1):
        info = s.rank_info(rank)
        assert info["role"] == "worker" and info["identity_from"] == "RANK" and info["backend"] == "gloo"
        assert info["profiled_steps"] == [4, 8] and info["clock_method"] == "framework mark"
        # Kineto's clock is the wall clock already: the mark moves it by less than a millisecond
        assert abs(info["clock_offset_ns"]) < 1_000_000
        mine = timeline[timeline["rank"] == rank]
        steps = mine[mine["name"].str.startswith("ProfilerStep#")]
        # the window, not the whole run, by the job's own step numbers (torch's own count would say 1-5)
        assert sorted(steps["name"]) == [f"ProfilerStep#{n}" for n in range(4, 9)]
        assert set(mine["step"].dropna()) == set(range(4, 9))
        assert set(mine.loc[mine["name"].str.contains("all_reduce|allreduce"), "category"]) == {"comm"}
        # every event lies inside the run, on the samplers' clock
        ends = mine["start_ns"] + mine["dur_ns"]
        assert mine["start_ns"].min() > s.run["start_ns"] and ends.max() < s.run["end_ns"]
    counters = s.counters()
    assert {0, 1} <= set(counters["rank"]) and (counters[counters["rank"] >= 0]["name"] == "cpu_percent").any()
    assert s.run["record_shapes"] is bool(options)
    reduces = timeline[timeline["name"] == "gloo:all_reduce"]
    assert set(reduces["rank"]) == {0, 1} and set(reduces["step"]) == set(range(4, 9))
    capsys.readouterr()
    assert main(["analyze", str(store), "--json"]) == 0
    analysed = json.loads(capsys.readouterr().out)
    collectives = analysed["stores"][0]["host_collectives"]["collectives"]
    assert [c["collective"] for c in collectives] == ["allreduce"] * (len(reduces) // 2)
    if options:
        width = 2048
        assert (reduces["bytes"] == (width * width + width + width * 10 + 10) * 4).all()
        for c in collectives:  # the bus bandwidth of an all-reduce of 2 ranks: bytes / duration x 2(2-1)/2
            assert c["bytes"] == reduces["bytes"].iloc[0] and c["ranks"] == 2
            assert c["busbw"] == pytest.approx(c["bytes"] / (c["duration_ns"] / 1e9))
    else:
        assert reduces["bytes"].isna().all() and all(c["busbw"] is None for c in collectives)
        assert any(n["analysis"] == "host_collective_bandwidth" and "--record-shapes" in n["reason"]
                   for n in analysed["not_made"])
    assert report_verdict(store, tmp_path / "report") == largest


@pytest.mark.parametrize("own, window", [((1, 12), None), ((7, 8), [5, 6])])
def test_job_running_its_own_profiler_keeps_it(framework_python, tmp_path, own, window):
    """Torch has one profiler session per process; two at once crashed the job (SIGSEGV). The job's own
    profiler, running before the window (1-12) or started inside it (7-8), keeps running and writes its trace;
    the window is left out, or ends where the job's begins, and the notes say so."""
    python = framework_python("pytorch")
    store, own_trace = tmp_path / "store", tmp_path / "own.json"
    result = ddltrace_run("--framework", "pytorch", "--steps", "5-9", "--out", store, "--", python,
                          JOBS / "torch_own_profiler.py", *own, own_trace)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "job done" in result.stdout
    events = json.loads(own_trace.read_text())["traceEvents"]
    assert sum(e.get("name") == "Optimizer.step#SGD.step" for e in events) == own[1] - own[0] + 1
    s = TraceStore.open(store)
    assert s.rank_info(0).get("profiled_steps") == window
    notes = " ".join(s.manifest["notes"])
    if window is None:
        assert "the job's own torch profiler runs at step 4: the window 5-9 is not profiled" in notes
        assert "nothing profiled" not in notes
    else:
        assert "the job started its own torch profiler after step 6: the window 5-9 ends there" in notes
        timeline = s.timeline()
        assert {"ProfilerStep#5", "ProfilerStep#6"} <= set(timeline["name"])


def test_crash_on_one_rank_keeps_the_others_trace_and_names_it(framework_python, tmp_path):
    """Rank 1 raises at step 6, inside the window 4-8; torchrun then SIGTERMs rank 0 (busy in step 6). Rank 0's
    trace of steps 4-5 is kept (it was lost: SIGTERM killed the process before its exit hook wrote it), both
    ranks are marked as ended abruptly and the notes say by what, rank 1's exception named."""
    python = framework_python("pytorch")
    store = tmp_path / "store"
    result = ddltrace_run("--framework", "pytorch", "--steps", "4-8", "--out", store, "--", python,
                          "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", free_port(),
                          JOBS / "torch_ddp.py", "--steps", "12", "--fail-at", "6")
    assert result.returncode == 1, result.stderr[-3000:]  # torchrun's own exit code for a failed worker
    assert "RuntimeError: rank 1 fails at step 6" in result.stderr  # the job's output, as it wrote it
    s = TraceStore.open(store)
    assert s.ranks == [0, 1]
    timeline = s.timeline()
    for rank in (0, 1):
        assert s.rank_info(rank)["ended"] == "abrupt"
        mine = timeline[timeline["rank"] == rank]
        assert {"ProfilerStep#4", "ProfilerStep#5"} <= set(mine["name"])
        assert (mine["name"] == "gloo:all_reduce").sum() >= 2
    assert s.rank_info(1)["ended_by"] == "an uncaught RuntimeError: rank 1 fails at step 6"
    notes = s.manifest["notes"]
    assert f"rank 1 (pid {s.rank_info(1)['pid']}) ended by an uncaught RuntimeError: rank 1 fails at step 6" in notes
    assert any(n.startswith(f"rank 0 (pid {s.rank_info(0)['pid']}) ended by ") for n in notes)
