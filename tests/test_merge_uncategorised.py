"""``ddltrace merge`` keeps ``info``'s ``uncategorised:`` line: the merged store's ``uncategorised`` entry holds the
rows of both stores' entries, a row both carry once (ddltrace/merged_manifest.py's ``merged_uncategorised``; was: no
entry, the line lost, only its note kept)."""

from __future__ import annotations

from test_export_uncategorised import _trace as export_trace
from test_export_uncategorised import _uncategorised_lines

from ddltrace.cli import main
from ddltrace.merged_manifest import merged_uncategorised
from ddltrace.store import TraceStore, merge_stores, write_store
from ddltrace.timeline import make_timeline

EVENTS = [("weird_cat", "foo"), ("weird_cat", "bar"), ("other_weird", "baz")]


def _trace(path):
    return export_trace(path, EVENTS)


def test_merging_two_imports_of_one_store_s_exported_ranks_keeps_the_line_once(tmp_path, capsys):
    traces = [_trace(tmp_path / f"t{i}.json") for i in range(2)]
    whole = tmp_path / "whole"
    assert main(["import", *map(str, traces), "--out", str(whole), "--progress", "never"]) == 0
    before = _uncategorised_lines(capsys, whole)
    assert len(before) == 1 and before[0].startswith("uncategorised: 6 events of 2 raw categories")
    parts = []
    for rank in (0, 1):  # each export carries the whole store's entry, and so each import of one
        exported, part = tmp_path / f"r{rank}.json", tmp_path / f"r{rank}"
        assert main(["export", str(whole), "--chrome", str(exported), "--ranks", str(rank)]) == 0
        assert main(["import", str(exported), "--out", str(part), "--progress", "never"]) == 0
        parts.append(part)
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, parts), "--out", str(merged)]) == 0
    assert TraceStore.open(merged).ranks == [0, 1]
    assert _uncategorised_lines(capsys, merged) == before  # (was: [])
    assert TraceStore.open(merged).manifest["uncategorised"] == TraceStore.open(whole).manifest["uncategorised"]


def _store(path, rank, rows):
    timeline = make_timeline([{"rank": rank, "lane": "main", "name": "op", "category": "other",
                               "start_ns": 10**9 + i * 1000, "dur_ns": 500, "source": "chrome"} for i in range(2)])
    store = write_store(path, timeline, run={"world_size": 2})
    if rows is not None:
        store.manifest["uncategorised"] = rows
        store.save_manifest()
    return store


def test_merge_takes_the_rows_of_either_store():
    a = [{"format": "chrome", "cat": "weird_cat", "events": 4, "names": 2}]
    b = [{"format": "kineto", "cat": "fancy_npu_op", "events": 3, "names": 1}]
    assert merged_uncategorised(a, b) == [*a, *b]
    assert merged_uncategorised(a, [*a, *b]) == [*a, *b]  # (a row both carry, once)
    assert merged_uncategorised([*a, *a], a) == [*a, *a]  # (as many times as the one that carries it most)
    assert merged_uncategorised(None, b) == b and merged_uncategorised(a, "damaged") == a
    assert merged_uncategorised(None, None) == []


def test_merge_stores_writes_the_entry_of_the_store_that_has_one(tmp_path):
    rows = [{"format": "chrome", "cat": "weird_cat", "events": 4, "names": 2}]
    merged = merge_stores(_store(tmp_path / "a", 0, None), _store(tmp_path / "b", 1, rows), tmp_path / "m")
    assert merged.manifest["uncategorised"] == rows  # (was: no entry)
    merged = merge_stores(_store(tmp_path / "c", 0, None), _store(tmp_path / "d", 1, None), tmp_path / "n")
    assert "uncategorised" not in merged.manifest
