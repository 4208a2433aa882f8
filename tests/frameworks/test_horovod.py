"""A real Horovod 0.28.1 (PyTorch 2.13 CPU, Gloo) job on 2 processes started by horovodrun, unmodified, under
`ddltrace run --framework horovod`."""

from __future__ import annotations

import pytest
from conftest import JOBS, ddltrace_run, report_verdict

from ddltrace.store import TraceStore

WAIT = "horovod::allreduce_wait (DistributedOptimizer.synchronize)"


@pytest.mark.parametrize("shape, gradients, largest", [
    (["--width", "512", "--batch", "256", "--layers", "2"], 6, "compute"),
    (["--width", "2048", "--batch", "1", "--layers", "1"], 4, "comm")])
def test_horovodrun_job_profiled_from_outside(framework_python, tmp_path, shape, gradients, largest):
    python = framework_python("horovod")
    store = tmp_path / "store"
    result = ddltrace_run("--framework", "horovod", "--steps", "4-8", "--out", store, "--",
                          python.parent / "horovodrun", "--gloo", "-np", "2", "-H", "localhost:2",
                          python, JOBS / "hvd_torch.py", "--steps", "12", *shape)
    assert result.returncode == 0, result.stderr[-3000:]
    s = TraceStore.open(store)
    assert s.ranks == [0, 1] and s.run["framework"] == "horovod" and s.run["profiled_steps"] == [4, 8]
    timeline = s.timeline()
    for rank in (0, 1):
        info = s.rank_info(rank)
        assert info["role"] == "worker" and info["identity_from"] == "HOROVOD_RANK"
        assert info["profiled_steps"] == [4, 8] and info["clock_method"] == "framework mark"
        mine = timeline[timeline["rank"] == rank]
        # torch.profiler on every rank, for the window only: one ProfilerStep per DistributedOptimizer step
        # (not two: its step() calls the wrapped SGD's; not shifted by broadcast_optimizer_state's set-up step)
        assert mine["name"].str.startswith("ProfilerStep#").sum() == 5
        assert (mine["name"] == "aten::addmm").any()
        # the step's wait for its gradients' allreduces (Horovod's background thread) is comm
        waits = mine[mine["name"] == WAIT]
        assert len(waits) == 5 and set(waits["category"]) == {"comm"}
        ends = mine["start_ns"] + mine["dur_ns"]
        assert mine["start_ns"].min() > s.run["start_ns"] and ends.max() < s.run["end_ns"]
    assert s.rank_info(0)["format"] == "horovod+kineto" and s.rank_info(1)["format"] == "kineto"
    # rank 0's Horovod timeline (every rank's tensors), recorded for the window only: 5 steps x its gradients
    horovod = timeline[(timeline["rank"] == 0) & (timeline["source"] == "horovod")]
    allreduce = horovod[horovod["name"] == "ALLREDUCE"]
    assert len(allreduce) == 5 * gradients and set(allreduce["category"]) == {"comm"}
    assert set(horovod.loc[horovod["name"] == "GLOO_ALLREDUCE", "category"]) == {"comm"}
    assert (horovod["name"] == "NEGOTIATE_ALLREDUCE").sum() == 5 * gradients
    steps = timeline[(timeline["rank"] == 0) & timeline["name"].str.startswith("ProfilerStep#")]
    window = steps["start_ns"].min() - 50_000_000, (steps["start_ns"] + steps["dur_ns"]).max() + 50_000_000
    assert window[0] <= allreduce["start_ns"].min() and (allreduce["start_ns"] + allreduce["dur_ns"]).max() <= window[1]
    counters = s.counters()
    assert {0, 1} <= set(counters["rank"]) and (counters[counters["rank"] >= 0]["name"] == "cpu_percent").any()
    assert report_verdict(store, tmp_path / "report") == largest
