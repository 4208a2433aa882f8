"""``ddltrace merge`` with two stores of one job (ddltrace/store.py's merge_stores from the command line): ranks
added, overlapping ranks refused on one line naming the store, a folder that is neither a store nor a node's
part named. The node-part form is tested on a simulated cluster (tests/test_run_cluster_local.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from ddltrace.cli import main
from ddltrace.store import TraceStore, write_store
from ddltrace.timeline import make_counters, make_timeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_traces"))
import make_sample_store  # noqa: E402


def _store(path: Path, first_rank: int, world_size: int = 8) -> TraceStore:
    rows, counters = make_sample_store.build()
    rows = [{**row, "rank": row["rank"] + first_rank} for row in rows]
    counters = [{**c, "rank": c["rank"] + first_rank if c["rank"] >= 0 else c["rank"]} for c in counters]
    ranks = sorted({row["rank"] for row in rows})
    return write_store(path, make_timeline(rows), make_counters(counters),
                       run={"command": "python job.py", "world_size": world_size},
                       rank_info={r: {"host": f"node{r // 4}", "ended": "normal"} for r in ranks})


def test_merge_two_stores_and_refusals(tmp_path, capsys):
    a, b = _store(tmp_path / "a", 0), _store(tmp_path / "b", 4)
    assert main(["merge", str(a.path), str(b.path), "--out", str(tmp_path / "ab")]) == 0
    merged = TraceStore.open(tmp_path / "ab")
    assert merged.ranks == [*a.ranks, *b.ranks]
    assert len(merged.timeline()) == len(a.timeline()) + len(b.timeline())
    assert main(["merge", str(a.path), str(a.path), "--out", str(tmp_path / "aa")]) == 2
    err = capsys.readouterr().err
    assert str(a.path) in err and "also in" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "aa").exists()
    (tmp_path / "junk").mkdir()
    assert main(["merge", str(a.path), str(tmp_path / "junk"), "--out", str(tmp_path / "aj")]) == 2
    assert "junk: not the part of a node missing from" in capsys.readouterr().err


def test_stores_that_declare_different_world_sizes_take_the_largest_and_say_so(tmp_path, capsys):
    """Ranks 0-3 of a run said to be of 8 ranks and ranks 4-7 of one said to be of 12: the merged store is of 12
    ranks, 8-11 named missing, and one line on stderr and a note say which store said what (before: 8, the ranks
    held, unsaid)."""
    a, b = _store(tmp_path / "a", 0), _store(tmp_path / "b", 4, world_size=12)
    capsys.readouterr()
    assert main(["merge", str(a.path), str(b.path), "--out", str(tmp_path / "ab")]) == 0
    note = (f"world size 12: the merged stores do not declare the same one ({a.path}'s run says 8; {b.path}'s run "
            "says 12); the merged store takes the largest")
    assert capsys.readouterr().err.strip().splitlines() == [f"ddltrace: note: {note}"]
    merged = TraceStore.open(tmp_path / "ab")
    assert merged.world_size == 12 and merged.manifest["notes"] == [note]
    assert sorted(merged.missing()) == [8, 9, 10, 11]
