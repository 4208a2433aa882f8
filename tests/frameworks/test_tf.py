"""Real TensorFlow 2.21 jobs, unmodified, under `ddltrace run --framework tf`: a MultiWorkerMirroredStrategy job
(2 workers, TF_CONFIG, TF2 profiler) and a tf.compat.v1 parameter-server job (1 ps + 2 workers, task flags, TF1
FULL_TRACE timelines on the workers, the TF2 profiler around the ps's Server.join)."""

from __future__ import annotations

import pytest
from conftest import JOBS, ddltrace_run, report_verdict

from ddltrace.store import TraceStore


def _run(framework_python, tmp_path, kind, shape):
    python = framework_python("tf")
    store = tmp_path / "store"
    result = ddltrace_run("--framework", "tf", "--steps", "5-9", "--out", store, "--", python,
                          JOBS / "tf_launch.py", kind, "--steps", "15", *shape)
    assert result.returncode == 0, result.stderr[-3000:]
    s = TraceStore.open(store)
    assert s.run["framework"] == "tf" and s.run["profiled_steps"] == [5, 9]
    return store, s


def _inside_run(s, mine) -> bool:
    return mine["start_ns"].min() > s.run["start_ns"] and (mine["start_ns"] + mine["dur_ns"]).max() < s.run["end_ns"]


def _counters_beside(s, ranks) -> None:
    counters = s.counters()
    assert set(ranks) <= set(counters["rank"])
    for rank in ranks:
        assert (counters[counters["rank"] == rank]["name"] == "cpu_percent").any()


@pytest.mark.parametrize("shape, largest", [(["--width", "64", "--batch", "8192"], "compute"),
                                            (["--width", "1024", "--batch", "16"], "comm")])
def test_multiworker_mirrored_job_profiled_from_outside(framework_python, tmp_path, shape, largest):
    store, s = _run(framework_python, tmp_path, "mwms", shape)
    assert s.ranks == [0, 1]
    timeline = s.timeline()
    for rank in (0, 1):
        info = s.rank_info(rank)
        assert info["role"] == "worker" and info["identity_from"] == "TF_CONFIG" and info["format"] == "tf2-xplane"
        assert info["profiled_steps"] == [5, 9] and info["clock_method"] == "framework mark"
        # TF 2.21's XPlane carries the wall clock already: the mark moves it by less than a millisecond
        assert abs(info["clock_offset_ns"]) < 1_000_000
        mine = timeline[timeline["rank"] == rank]
        steps = mine[mine["name"] == "train"]
        assert sorted(steps["step"].tolist()) == [5, 6, 7, 8, 9]  # the window, not the whole run
        assert set(mine.loc[mine["name"].str.contains("CollectiveReduceV2"), "category"]) == {"comm"}
        assert set(mine.loc[mine["name"].str.contains(":MatMul$"), "category"]) == {"compute"}
        # the spans around the whole tf.function call are not computation
        assert set(mine.loc[mine["name"].isin(["train_step", "KernelAndDeviceFunc::Run"]), "category"]) == {"other"}
        assert _inside_run(s, mine)
    _counters_beside(s, [0, 1])
    assert report_verdict(store, tmp_path / "report") == largest


@pytest.mark.parametrize("shape, largest", [(["--width", "64", "--batch", "4096"], "compute"),
                                            (["--width", "4096", "--batch", "8"], "comm")])
def test_parameter_server_job_profiled_from_outside(framework_python, tmp_path, shape, largest):
    store, s = _run(framework_python, tmp_path, "ps", shape)
    assert s.ranks == [0, 1, 2]  # the two workers, then the ps
    timeline = s.timeline()
    for rank in (0, 1):
        info = s.rank_info(rank)
        assert info["role"] == "worker" and info["identity_from"].startswith("argv") and info["format"] == "tf1"
        assert info["profiled_steps"] == [5, 9] and info["clock_method"] == "framework mark"
        mine = timeline[timeline["rank"] == rank]
        assert mine["name"].eq("MatMul").sum() == 5 * 5  # 5 traced Session.run steps, 5 MatMuls each
        assert set(mine.loc[mine["name"] == "RecvTensor", "category"]) == {"comm"}
        assert not mine["lane"].str.contains("ps").any()  # the ps's own work is on the ps's rank
        assert _inside_run(s, mine)
    ps = s.rank_info(2)
    assert ps["role"] == "ps" and ps["identity_from"].startswith("argv") and ps["format"] == "tf2-xplane"
    assert ps["clock_method"] == "framework mark"
    mine = timeline[timeline["rank"] == 2]
    assert set(mine.loc[mine["name"].str.endswith(":_Send"), "category"]) == {"comm"}  # variables to the workers
    applied = mine[mine["name"].str.endswith(":ResourceApplyGradientDescent")]
    assert set(applied["category"]) == {"compute"} and len(applied) >= 2 * 5 * 4  # 2 workers x 5 steps x 4 vars
    assert _inside_run(s, mine)
    _counters_beside(s, [0, 1, 2])
    assert report_verdict(store, tmp_path / "report") == largest
