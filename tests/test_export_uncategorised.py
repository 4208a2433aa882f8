"""The export round trip keeps ``info``'s ``uncategorised:`` line: the export carries the store's ``uncategorised``
rows in ``otherData`` and ``ddltrace import`` puts them back (the export's ``cat`` is the category the events were
filed under, so the import of it cannot find them again: the line became a note only)."""

from __future__ import annotations

import json
from collections import Counter

from ddltrace.cli import main
from ddltrace.store import TraceStore

#: Raw categories no rule of categories.toml knows (a generic Chrome trace's), each with its events' names.
EVENTS = [("weird_cat", "foo"), ("weird_cat", "bar"), ("weird_cat", "foo"), ("other_weird", "baz")]


def _trace(path, events=EVENTS):
    """A Chrome trace at ``path`` of ``events`` (raw category, name), 10 us each, 20 us apart."""
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": 1, "ts": 1000 + 20 * i, "dur": 10}
        for i, (cat, name) in enumerate(events)]}))
    return path


def _uncategorised_lines(capsys, store) -> list[str]:
    capsys.readouterr()
    assert main(["info", str(store)]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("uncategorised:")]


def test_the_uncategorised_line_survives_export_and_import(tmp_path, capsys):
    trace = _trace(tmp_path / "unknown_cats.json")
    doc = json.loads(trace.read_text())
    counts = Counter(e["cat"] for e in doc["traceEvents"])
    names = {cat: len({e["name"] for e in doc["traceEvents"] if e["cat"] == cat}) for cat in counts}
    first, exported, back = tmp_path / "first", tmp_path / "first.json", tmp_path / "back"
    assert main(["import", str(trace), "--out", str(first), "--progress", "never"]) == 0
    before = _uncategorised_lines(capsys, first)
    assert len(before) == 1
    for cat, n in counts.items():  # the line as the input file holds them
        assert f"chrome cat '{cat}': {n} events ({names[cat]} names)" in before[0]
    assert before[0].startswith(f"uncategorised: {len(doc['traceEvents'])} events of {len(counts)} raw categories")

    assert main(["export", str(first), "--chrome", str(exported)]) == 0
    other = json.loads(exported.read_text())["otherData"]
    assert {(r["cat"], r["events"], r["names"]) for r in other["uncategorised"]} == \
        {(cat, n, names[cat]) for cat, n in counts.items()}
    assert main(["import", str(exported), "--out", str(back), "--progress", "never"]) == 0
    said = capsys.readouterr().out
    assert "uncategorised:" not in said  # not this import's: its events came filed under a category
    assert _uncategorised_lines(capsys, back) == before
    assert TraceStore.open(back).manifest["uncategorised"] == TraceStore.open(first).manifest["uncategorised"]


def test_uncategorised_rows_of_the_wrong_kind_are_named_not_restored(tmp_path, capsys):
    trace = _trace(tmp_path / "unknown_cats.json")
    first, exported, bad, back = (tmp_path / n for n in ("first", "first.json", "bad.json", "back"))
    assert main(["import", str(trace), "--out", str(first), "--progress", "never"]) == 0
    assert main(["export", str(first), "--chrome", str(exported)]) == 0
    doc = json.loads(exported.read_text())
    doc["otherData"]["uncategorised"] = [{"format": "chrome", "cat": "weird_cat", "events": "many", "names": 2}]
    bad.write_text(json.dumps(doc))
    assert main(["import", str(bad), "--out", str(back), "--progress", "never"]) == 0
    store = TraceStore.open(back)
    assert "uncategorised" not in store.manifest
    assert (f"import problem: {bad}: otherData.uncategorised is not a list of rows of a format, a raw category and its "
            "events and names: the events no rule knew are not restored") in store.manifest["notes"]
    assert _uncategorised_lines(capsys, back) == []  # info reads without a traceback
