"""A trace that gives no rank of its own beside a TraceFusion file (one Chrome JSON of several ranks, each event's
``args.rank``): the rankless file was numbered by its place among the files, so it landed in one of the fused file's
ranks (rank 1 of 0-3 for a plain Kineto trace sorted after merged_nccl_only.json.gz): two processes' events merged
into one rank, its span both files' (482,980 h). Now it keeps its place only where no other file gives that rank,
else it takes the first rank no file gives, and the import says so in one line naming the file and the rank.

Real files: the 4-rank TraceFusion file of amd/HPCTrainingExamples (merged_nccl_only.json.gz, tests/data/wild/
PROVENANCE.md) and HTA's ROCm 6.2 MI250 Kineto trace, which carries no distributedInfo and no rank in its name
(../shared/hta_traces/amd_trace, its PROVENANCE.md); where the corpus is absent (CI), a 2-rank file fused as
TraceFusion does (tests/test_import_tracefusion.py) beside the repository's torch_gloo rank 1 trace with its
``distributedInfo.rank`` taken out."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from shared_data import SHARED, needs
from test_import_tracefusion import FUSED_NCCL, _fuse, _rank_trace

from ddltrace.cli import main
from ddltrace.store import TraceStore

MI250 = SHARED / "hta_traces" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
GLOO_RANK1 = Path(__file__).resolve().parent / "data" / "torch_gloo" / "rank1.pt.trace.json.gz"
SAID = ("{path}: gives no rank of its own (none in the file, its name or its folder's): imported as rank {rank}, the "
        "first rank no other file gives (by its place among the traces it would be rank {place}, given by {fused})")


def _fused_counts(events: list[dict]) -> Counter:
    """Intervals per ``args.rank`` as the fused file holds them: its complete (X) events and its B/E pairs."""
    return Counter(e["args"]["rank"] for e in events if e.get("ph") in ("X", "B"))


def _rows(store: TraceStore, rank: int) -> list[tuple]:
    """A rank's rows as comparable tuples (lane, name, category, start, duration), sorted."""
    frame = store.timeline([rank])
    return sorted(zip(frame["lane"], frame["name"], frame["category"].astype(str), frame["start_ns"].astype(int),
                      frame["dur_ns"].astype(int), strict=True))


def _check(tmp_path: Path, capsys, fused: Path, fused_events: list[dict], rankless: Path, place: int, jobs: int):
    """Import the folder of ``fused`` and ``rankless``: every fused rank holds exactly the file's intervals of its
    ``args.rank`` and comes from the fused file only; ``rankless``'s rows, as an import of it alone gives them, are
    the whole of a rank of their own, the first no other file gives, which one line names."""
    want = _fused_counts(fused_events)
    ranks = sorted(want)
    alone = tmp_path / "alone"
    assert main(["import", str(rankless), "--out", str(alone), "--progress", "never"]) == 0
    own = _rows(TraceStore.open(alone), 0)
    assert own
    capsys.readouterr()

    out = tmp_path / "store"
    assert main(["import", str(fused.parent), "--out", str(out), "--progress", "never", "--jobs", str(jobs)]) == 0
    printed = capsys.readouterr().out
    store = TraceStore.open(out)
    new = len(ranks)  # the first rank no file gives: the fused ranks are 0 to n - 1
    assert store.ranks == [*ranks, new]
    timeline = store.timeline(store.ranks)
    got = Counter(timeline["rank"].astype(int))
    for rank in ranks:
        assert got[rank] == want[rank], rank  # (was: the fused rank the rankless file's place gave, its rows and more)
        assert store.rank_info(rank).get("files", [store.rank_info(rank)["file"]]) == [str(fused)], rank
    assert _rows(store, new) == own
    assert store.rank_info(new).get("files", [store.rank_info(new)["file"]]) == [str(rankless)]
    assert got[new] == len(own) == store.rank_info(new)["events"]
    assert sum(got.values()) == sum(want.values()) + len(own)  # nothing read lost
    line = SAID.format(path=rankless, rank=new, place=place, fused=fused)
    assert printed.count(line) == 1 and line in store.notes
    return store, printed


@needs(FUSED_NCCL)
@needs(MI250)
@pytest.mark.parametrize("name, place", [(MI250.name, 1), ("a_minitoy.json.gz", 0)])
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_real_rankless_trace_beside_a_real_fused_file_gets_a_rank_of_its_own(tmp_path, capsys, name, place, jobs):
    """merged_nccl_only (ranks 0-3, 42 intervals each) and the MI250 trace (112 intervals: no distributedInfo, no
    rank in its name), sorted after the fused file (its place: rank 1) or before it (rank 0): the fused ranks keep
    their 42, the MI250 trace's 112 are rank 4 alone (was: rank 1 with 154 intervals over 482,980 h), read in this
    process or in two."""
    folder = tmp_path / "traces"
    folder.mkdir()
    fused = folder / FUSED_NCCL.name
    fused.write_bytes(FUSED_NCCL.read_bytes())
    rankless = folder / name
    rankless.write_bytes(MI250.read_bytes())
    assert "distributedInfo" not in json.loads(gzip.decompress(MI250.read_bytes()))
    with gzip.open(FUSED_NCCL, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    assert _fused_counts(events) == {0: 42, 1: 42, 2: 42, 3: 42}
    store, printed = _check(tmp_path, capsys, fused, events, rankless, place, jobs)
    assert store.rank_info(4)["events"] == 112
    assert store.world_size == 5


def test_a_rankless_kineto_trace_beside_a_fused_file_gets_a_rank_of_its_own(tmp_path, capsys):
    """A 2-rank file fused as TraceFusion does (ranks 0-1, 4 intervals each) and the torch_gloo rank 1 trace with its
    distributedInfo.rank taken out, named with no rank: it is rank 2 alone, not the fused file's rank 1."""
    folder = tmp_path / "traces"
    folder.mkdir()
    fused = folder / "merged_trace.json.gz"
    document = _fuse([_rank_trace(0, 4242, 1_000_000.0), _rank_trace(1, 4343, 1_000_300.5)])
    with gzip.open(fused, "wt") as fh:
        json.dump(document, fh)
    doc = json.loads(gzip.decompress(GLOO_RANK1.read_bytes()))
    assert doc["distributedInfo"].pop("rank") == 1
    rankless = folder / "profile.json.gz"  # (sorted after merged_trace: its place among the traces is rank 1)
    rankless.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert _fused_counts(document["traceEvents"]) == {0: 4, 1: 4}
    _check(tmp_path, capsys, fused, document["traceEvents"], rankless, 1, 1)


def test_a_rankless_file_whose_place_no_file_gives_keeps_it(tmp_path, capsys):
    """Rankless files whose places no other file gives are numbered by them, as before, with no line: two plain
    Chrome traces give ranks 0 and 1."""
    paths = []
    for i, name in enumerate(("b.json", "c.json")):
        path = tmp_path / name
        path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": f"work{i}", "cat": "cpu", "pid": 1, "tid": 1,
                                                     "ts": 1_790_000_000_000_000 + i, "dur": 50}]}))
        paths.append(path)
    assert main(["import", *map(str, paths), "--out", str(tmp_path / "store")]) == 0
    assert "gives no rank of its own" not in capsys.readouterr().out
    store = TraceStore.open(tmp_path / "store")
    assert store.ranks == [0, 1]
    assert [store.rank_info(r)["file"] for r in store.ranks] == [str(p) for p in paths]


def test_a_rankless_file_beside_a_whole_world_is_an_import_problem(tmp_path, capsys):
    """Beside both ranks of a world of 2 (torch_gloo, distributedInfo world_size 2), a trace with no rank of its own
    sorted first (its place: rank 0) takes rank 2, past that world: an import problem naming it and saying so (was:
    merged into rank 0 and, its times another day's, the import refused as two runs)."""
    data = Path(__file__).resolve().parent / "data" / "torch_gloo"
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"rank{rank}.pt.trace.json.gz").write_bytes((data / f"rank{rank}.pt.trace.json.gz").read_bytes())
    doc = json.loads(gzip.decompress((data / "rank0.pt.trace.json.gz").read_bytes()))
    del doc["distributedInfo"]
    doc["baseTimeNanoseconds"] += 86400 * 10**9
    stray = folder / "a.json"
    stray.write_text(json.dumps(doc))
    assert main(["import", str(folder), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    printed = capsys.readouterr().out
    store = TraceStore.open(tmp_path / "store")
    assert store.ranks == [0, 1, 2] and store.rank_info(2)["file"] == str(stray)
    problem = (SAID.format(path=stray, rank=2, place=0, fused=folder / "rank0.pt.trace.json.gz")
               + "; the other files give a world of 2 ranks, so it may be of another run (a rank in its name, "
                 "rank<N>, says which rank it is)")
    assert f"problem: {problem}" in printed and problem in store.import_problems
