"""A real MXNet 1.9.1 dist_sync job (scheduler, 1 server, 2 workers on 127.0.0.1), its Gluon training script
unmodified, started by a DMLC-style local launcher under `ddltrace run --framework mxnet`."""

from __future__ import annotations

from conftest import JOBS, ddltrace_run, report_verdict

from ddltrace.store import TraceStore


def test_dist_sync_job_profiled_in_every_role(framework_python, tmp_path):
    python = framework_python("mxnet")
    store = tmp_path / "store"
    result = ddltrace_run("--framework", "mxnet", "--steps", "5-9", "--out", store, "--",
                          python, JOBS / "mxnet_launch.py", "-n", "2", "-s", "1", "--timeout", "120",
                          python, JOBS / "mxnet_dist_sync.py", "--steps", "20")
    assert result.returncode == 0, result.stderr[-3000:]
    s = TraceStore.open(store)
    assert s.run["framework"] == "mxnet" and s.run["profiled_steps"] == [5, 9]
    # workers keep their kvstore rank; the server and the scheduler are numbered after them, by role
    roles = {r: s.rank_info(r)["role"] for r in s.ranks}
    assert roles == {0: "worker", 1: "worker", 2: "scheduler", 3: "server"}, roles
    timeline, counters = s.timeline(), s.counters()
    for rank in s.ranks:
        info = s.rank_info(rank)
        assert info["format"] == "mxnet" and info["clock_method"] == "framework mark"
        assert abs(info["clock_offset_ns"]) < 5_000_000  # MXNet's clock is the wall clock already
        mine = timeline[timeline["rank"] == rank]
        assert len(mine) and mine["start_ns"].min() > s.run["start_ns"]
        assert (mine["start_ns"] + mine["dur_ns"]).max() < s.run["end_ns"]
        assert (counters[counters["rank"] == rank]["name"] == "cpu_percent").any()
    for rank in (0, 1):
        info, mine = s.rank_info(rank), timeline[timeline["rank"] == rank]
        assert info["identity_from"] == "kvstore rank" and info["profiled_steps"] == [5, 9]
        pushpull = mine[mine["name"] == "KVStoreDistDefaultStoragePushPull"]
        assert len(pushpull) == 5 * 6 and set(pushpull["category"]) == {"comm"}  # 5 steps x 6 parameters
        assert set(mine.loc[mine["name"] == "FullyConnected", "category"]) == {"compute"}
        assert (mine["name"] == "FullyConnected").sum() == 5 * 3  # the window's forward passes, all recorded
        assert not (mine["name"] == "MXNDArrayWaitAll").any()  # the bootstrap's own wait is not the job's
    server = timeline[timeline["rank"] == 3]
    assert s.rank_info(3)["profiled_steps"] == [5, 9]
    assert (server["name"].str.contains("sgd_mom_update") & (server["category"] == "compute")).sum() == 5 * 6
    scheduler = timeline[timeline["rank"] == 2]
    assert set(scheduler.loc[scheduler["name"] == "MXKVStoreRunServer", "category"]) == {"idle"}
    # a small model on loopback: the pushes and pulls take most of each worker's step
    assert report_verdict(store, tmp_path / "report") == "comm"
