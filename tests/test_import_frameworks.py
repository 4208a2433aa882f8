"""Real framework traces made here by scripts/make_framework_traces.py: a 2-rank torch gloo job
(tests/data/torch_gloo), a 2-worker MXNet dist_sync parameter-server job (tests/data/mxnet_dist_sync) and a
TensorFlow 1.x-style 1 ps + 2 worker job (tests/data/tf1_ps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddltrace.cli import main
from ddltrace.store import TraceStore

DATA = Path(__file__).parent / "data" / "torch_gloo"
MXNET = Path(__file__).parent / "data" / "mxnet_dist_sync"
TF1 = Path(__file__).parent / "data" / "tf1_ps"


def test_gloo_job_imports_as_two_ranks_on_one_clock(tmp_path, capsys):
    out = tmp_path / "store"
    assert main(["import", str(DATA), "--out", str(out)]) == 0
    store = TraceStore.open(out)
    assert store.ranks == [0, 1] and store.world_size == 2
    barrier_ends = []
    for rank, tl in store.iter_timeline():
        by_name = tl.groupby("name")["category"].first().astype(str)
        assert by_name["gloo:all_reduce"] == "comm" and by_name["c10d::allreduce_"] == "comm"
        assert by_name["gloo:barrier"] == "barrier" and by_name["c10d::barrier"] == "barrier"
        assert by_name["dataloader_next"] == "io" and by_name["aten::addmm"] == "compute"
        assert sorted(tl["step"].dropna().unique().tolist()) == [2, 3, 4]
        assert tl["lane"].str.contains("pt_gloo_runloop").any()  # gloo's own thread is a lane
        barrier = tl[tl["name"] == "gloo:barrier"].sort_values("start_ns")
        barrier_ends.append((barrier["start_ns"] + barrier["dur_ns"]).to_numpy())
        assert store.rank_info(rank)["backend"] == "gloo"
    # a barrier releases both ranks together: on one host's clock their ends agree to well under a millisecond
    assert len(barrier_ends[0]) == len(barrier_ends[1]) == 3
    assert abs(barrier_ends[0] - barrier_ends[1]).max() < 1_000_000
    assert 1_700_000_000 < barrier_ends[0][0] / 1e9 < 2_100_000_000  # baseTimeNanoseconds + relative ts: epoch


def test_mxnet_dist_sync_workers(tmp_path, capsys):
    out = tmp_path / "store"
    assert main(["import", str(MXNET), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "operator-domain copies of device operator events" in printed
    store = TraceStore.open(out)
    assert store.ranks == [0, 1]
    for _rank, tl in store.iter_timeline():
        cats = tl.groupby("name")["category"].first().astype(str)
        assert cats["KVStoreDistDefaultStoragePushPull"] == "comm" and cats["MXKVStorePushPull"] == "comm"
        assert cats["FullyConnected"] == "compute" and cats["MXNDArrayWaitAll"] == "wait"
        assert cats["CopyCPU2CPU"] == "memcpy"
        # each of 3 profiled steps pushes and pulls the 4 parameters (2 Dense layers: weight and bias)
        assert (tl["name"] == "KVStoreDistDefaultStoragePushPull").sum() == 12
        assert not tl["lane"].str.startswith("operator/").any()
        assert tl["start_ns"].min() > 1_700_000_000 * 10**9
    counters = store.counters()
    assert set(counters["rank"]) == {0, 1} and "Memory: cpu/0" in set(counters["name"])


def test_tf1_parameter_server_job_workers_then_ps(tmp_path):
    out = tmp_path / "store"
    assert main(["import", *map(str, sorted(TF1.glob("timeline_*"))), "--out", str(out)]) == 0
    store = TraceStore.open(out)
    assert store.ranks == [0, 1, 2]
    assert [store.rank_info(r)["role"] for r in (0, 1, 2)] == ["worker", "worker", "ps"]
    assert store.rank_info(2)["identity"] == "ps/0"
    ps = store.timeline([2])
    assert (ps["name"] == "ResourceApplyGradientDescent").sum() == 8  # 4 variables updated for each of 2 workers
    for rank in (0, 1):
        tl = store.timeline([rank])
        cats = tl.groupby("name")["category"].first().astype(str)
        assert cats["RecvTensor"] == "comm" and cats["MatMul"] == "compute"
        assert "ResourceApplyGradientDescent" not in cats  # ran on the ps, not on the worker
        assert tl["start_ns"].min() > 1_700_000_000 * 10**9


def test_tf2_xplane_read_without_tensorflow(tmp_path):
    from ddltrace.collectors.importers import Categorizer, ImportContext, detect
    from ddltrace.errors import DdltraceError

    path = Path(__file__).parent / "data" / "tf2_profile" / "worker0" / "vm.xplane.pb"
    importer = detect(path)
    assert importer.name == "tf2-xplane"
    (part,) = importer.read(path, ImportContext(Categorizer()))
    tl = part.timeline
    assert part.rank == 0 and part.clock == "epoch"  # Task Environment's profile_start_time
    steps = tl[tl["step"].notna()].sort_values("start_ns")
    assert steps["name"].tolist() == ["train"] * 3 and steps["step"].tolist() == [0, 1, 2]
    assert set(steps["category"].astype(str)) == {"other"}
    ops = tl[tl["lane"].str.contains("tf_Compute")]
    assert len(ops) and (ops["name"].str.endswith(":_FusedMatMul")).any()
    # kernels on the executor threads run inside the python thread's train steps: one time base for all lines
    first, last = steps["start_ns"].iloc[0], (steps["start_ns"] + steps["dur_ns"]).iloc[-1]
    assert (ops["start_ns"] >= first).all() and ((ops["start_ns"] + ops["dur_ns"]) <= last).all()
    broken = tmp_path / "worker3" / "vm.xplane.pb"
    broken.parent.mkdir()
    broken.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(DdltraceError, match="vm.xplane.pb: not a readable XPlane"):
        list(importer.read(broken, ImportContext(Categorizer())))


def test_tf2_trace_viewer_json_matches_the_xplane_it_was_made_from():
    """The trace-viewer JSON that xprof's own converter made from the real TF 2.21 XPlane above: the same ops
    (named ``node:OpType``, from ``args.long_name``), durations, relative times, steps and categories."""
    from ddltrace.collectors.importers import Categorizer, ImportContext, detect

    data = Path(__file__).parent / "data"
    json_path = data / "tf2_trace_viewer" / "worker0" / "vm.trace.json.gz"
    xplane_path = data / "tf2_profile" / "worker0" / "vm.xplane.pb"
    assert detect(json_path).name == "tf2"
    (json_part,) = detect(json_path).read(json_path, ImportContext(Categorizer()))
    (xplane_part,) = detect(xplane_path).read(xplane_path, ImportContext(Categorizer()))
    assert json_part.clock == "relative" and xplane_part.clock == "epoch"
    j, x = json_part.timeline, xplane_part.timeline

    def steps(tl):
        return tl[tl["step"].notna()].sort_values("start_ns")

    js, xs = steps(j), steps(x)
    assert js["step"].tolist() == xs["step"].tolist() == [0, 1, 2]
    assert js["dur_ns"].tolist() == xs["dur_ns"].tolist()

    def compute(tl, origin):
        ops = tl[tl["category"].astype(str) == "compute"]
        return sorted(zip(ops["name"], ops["start_ns"] - origin, ops["dur_ns"], strict=True))

    ops = compute(j, js["start_ns"].iloc[0])
    assert len(ops) > 50 and ops == compute(x, xs["start_ns"].iloc[0])
    assert any(name.endswith(":_FusedMatMul") for name, _, _ in ops)
    # the tf.function's own span (named after the Python function) encloses the step: not compute, in both
    assert set(j.loc[j["name"] == "step", "category"].astype(str)) == {"other"}
    assert set(x.loc[x["name"] == "step", "category"].astype(str)) == {"other"}
