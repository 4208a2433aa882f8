"""A real 2-rank torch gloo job's profiler traces (tests/data/torch_gloo, made by scripts/make_framework_traces.py)."""

from __future__ import annotations

from pathlib import Path

from ddltrace.cli import main
from ddltrace.store import TraceStore

DATA = Path(__file__).parent / "data" / "torch_gloo"


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
