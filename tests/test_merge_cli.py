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
    """Ranks 0-3 of a run said to be of 8 ranks and ranks 4-7 of one said to be of 12: not one run, refused on one
    line (tests/test_merge_refuses_two_runs.py); merged with --as-one-run, the merged store is of 12 ranks, 8-11 named
    missing, and lines on stderr and notes say which store said what (before: 8, the ranks held, unsaid) and that
    the user merged them as one run."""
    a, b = _store(tmp_path / "a", 0), _store(tmp_path / "b", 4, world_size=12)
    capsys.readouterr()
    assert main(["merge", str(a.path), str(b.path), "--out", str(tmp_path / "ab")]) == 2
    assert "world size 12 vs 8" in capsys.readouterr().err and not (tmp_path / "ab").exists()
    assert main(["merge", str(a.path), str(b.path), "--out", str(tmp_path / "ab"), "--as-one-run"]) == 0
    note = (f"world size 12: the merged stores do not declare the same one ({a.path}'s run says 8; {b.path}'s run "
            "says 12); the merged store takes the largest")
    user = (f"merged as one run on the user's word (--as-one-run), though {b.path} looked like another run than "
            f"{a.path} (its vs {a.path}'s: world size 12 vs 8)")
    assert capsys.readouterr().err.strip().splitlines() == [f"ddltrace: note: {note}", f"ddltrace: note: {user}"]
    merged = TraceStore.open(tmp_path / "ab")
    assert merged.world_size == 12 and merged.manifest["notes"] == [note, user]
    assert sorted(merged.missing()) == [8, 9, 10, 11]


def test_a_split_export_merges_back_with_the_machines_counters_once(tmp_path, capsys):
    """A real store exported as two parts (--ranks 0-2 and 3,4) and imported apart merges back to the store: the
    machine's counters, which an export with --ranks dropped (QA: 445 samples of 874, the per-node table gone), come
    back once, not twice (merge doubled a machine's samples both stores held: 1303); --ranks naming a rank twice
    exports it once (it wrote rank 1 twice, doubling its rows on import)."""
    import json

    par = Path(__file__).resolve().parents[1] / "sample_traces" / "ps-sgd" / "par-w4" / "store"
    original = TraceStore.open(par)
    for name, ranks in (("a", "0-2"), ("b", "3,4,3")):
        assert main(["export", str(par), "--ranks", ranks, "--chrome", str(tmp_path / f"{name}.json")]) == 0
        assert main(["import", str(tmp_path / f"{name}.json"), "--out", str(tmp_path / name), "--quiet"]) == 0
    doc = json.loads((tmp_path / "b.json").read_text())
    names = [e for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"]
    assert sorted(e["args"]["name"] for e in names) == ["machine", "rank 3 (vm)", "rank 4 (vm)"]
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "ab")]) == 0
    merged = TraceStore.open(tmp_path / "ab")
    for store in (merged, TraceStore.open(tmp_path / "b")):
        assert store.counters([-1]).reset_index(drop=True)[["name", "t_ns", "value"]].equals(
            original.counters([-1]).reset_index(drop=True)[["name", "t_ns", "value"]])
    assert len(merged.timeline()) == len(original.timeline())
