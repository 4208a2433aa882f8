"""A real torch 2.13 gloo DDP job on 2 processes (torchrun), unmodified, under `ddltrace run --framework pytorch`."""

from __future__ import annotations

import pytest
from conftest import JOBS, ddltrace_run, free_port, report_verdict

from ddltrace.store import TraceStore


@pytest.mark.parametrize("shape, largest", [(["--width", "512", "--batch", "512"], "compute"),
                                            (["--width", "2048", "--batch", "1", "--layers", "1"], "comm")])
def test_torchrun_job_profiled_from_outside(framework_python, tmp_path, shape, largest):
    python = framework_python("pytorch")
    store = tmp_path / "store"
    result = ddltrace_run("--framework", "torch", "--steps", "4-8", "--out", store, "--", python,
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
        assert mine["name"].str.startswith("ProfilerStep#").sum() == 5  # the window, not the whole run
        assert set(mine.loc[mine["name"].str.contains("all_reduce|allreduce"), "category"]) == {"comm"}
        # every event lies inside the run, on the samplers' clock
        ends = mine["start_ns"] + mine["dur_ns"]
        assert mine["start_ns"].min() > s.run["start_ns"] and ends.max() < s.run["end_ns"]
    counters = s.counters()
    assert {0, 1} <= set(counters["rank"]) and (counters[counters["rank"] >= 0]["name"] == "cpu_percent").any()
    assert report_verdict(store, tmp_path / "report") == largest
