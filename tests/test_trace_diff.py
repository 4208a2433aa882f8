"""``ddltrace diff``: two runs compared name by name, against HTA's TraceDiff on its own test traces (HTA's
trace_diff/control and trace_diff/test, two ranks of a recommendation model's training before and after a change),
and on a trace built here whose figures are known by construction."""

from __future__ import annotations

import json

import pytest
from hta_reference import NEEDS_HTA, hta_trace_diff
from shared_data import SHARED

from ddltrace.analyses import trace_diff
from ddltrace.cli import main

HTA_DIFF = SHARED / "hta_traces" / "trace_diff"
needs_traces = pytest.mark.skipif(not HTA_DIFF.is_dir(), reason=f"{HTA_DIFF} absent (../shared/hta_traces)")


def _diff(capsys, *argv) -> dict:
    assert main(["diff", *map(str, argv), "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


@needs_traces
@NEEDS_HTA
@pytest.mark.parametrize("device", ["all", "cpu", "gpu"])
def test_every_name_s_counts_and_time_are_hta_s(capsys, device):
    """HTA's default window (the first rank, its first iteration, ProfilerStep#1009 on both) and device types: every
    name HTA lists, with its counts, total durations (HTA's µs: this trace's durations are whole µs, so to the ns) and
    change, and nothing more."""
    got = _diff(capsys, HTA_DIFF / "control", HTA_DIFF / "test", "--device", device)
    hta = hta_trace_diff(HTA_DIFF / "control", HTA_DIFF / "test", device.upper())
    assert (got["control"]["rank"], got["control"]["step"], got["test"]["rank"], got["test"]["step"]) == \
        (3, 1009, 1, 1009)
    mine = {r["name"]: [r["control_count"], r["test_count"], r["control_ns"] / 1e3, r["test_ns"] / 1e3]
            for r in got["names"]}
    assert mine == hta["names"]
    for change, names in hta["changes"].items():
        assert sorted(r["name"] for r in got["names"] if r["change"] == change) == sorted(names), change
    assert got["changes"] == {change: len(names) for change, names in hta["changes"].items()}


@needs_traces
def test_the_whole_window_is_the_step_s_rows_in_the_file(capsys):
    """Without HTA: the control's step 1009 holds 12,101 rows summing 411,779 µs (HTA's figures for this trace: its
    tests' expectations), the test's 11,187 and 673,157 µs; and a whole-run comparison sums more."""
    got = _diff(capsys, HTA_DIFF / "control", HTA_DIFF / "test")
    rows = got["names"]
    assert (got["control"]["rows"], sum(r["control_count"] for r in rows), sum(r["control_ns"] for r in rows)) == \
        (12_101, 12_101, 411_779_000)
    assert (got["test"]["rows"], sum(r["test_ns"] for r in rows)) == (11_187, 673_157_000)
    whole = _diff(capsys, HTA_DIFF / "control", HTA_DIFF / "test", "--control-step", "all", "--test-step", "all")
    assert whole["control"]["rows"] > 6 * 12_000 and whole["control"]["step"] is None


def _chrome(path, events):
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _x(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_a_trace_built_here_gives_its_own_counts_sums_and_changes(tmp_path, capsys):
    """Two Kineto-style traces with two ProfilerStep spans each: in the first step the control runs aten::mm twice
    (3 + 5 µs) and aten::relu once (2 µs); the test runs aten::mm once (4 µs) and aten::add once (6 µs). The first
    step of each is compared: mm decreased (-4 µs), relu deleted, add added, each ProfilerStep unchanged in count;
    the second step's rows are not in the window."""
    control = _chrome(tmp_path / "control.json", [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"), _x("aten::mm", 10, 3), _x("aten::mm", 20, 5),
        _x("aten::relu", 30, 2), _x("ProfilerStep#2", 200, 100, cat="user_annotation"), _x("aten::mm", 210, 50)])
    test = _chrome(tmp_path / "test.json", [
        _x("ProfilerStep#1", 0, 120, cat="user_annotation"), _x("aten::mm", 10, 4), _x("aten::add", 20, 6),
        _x("ProfilerStep#2", 200, 100, cat="user_annotation"), _x("aten::relu", 210, 50)])
    got = _diff(capsys, control, test)
    by = {r["name"]: r for r in got["names"]}
    assert {n: (r["control_count"], r["test_count"], r["diff_ns"], r["change"]) for n, r in by.items()} == {
        "ProfilerStep#1": (1, 1, 20_000, "unchanged"), "aten::mm": (2, 1, -4_000, "decreased"),
        "aten::relu": (1, 0, -2_000, "deleted"), "aten::add": (0, 1, 6_000, "added")}
    assert [r["name"] for r in got["names"]] == ["ProfilerStep#1", "aten::add", "aten::mm", "aten::relu"]
    # each side's window: its step's rows, first start to last end (the ProfilerStep spans: 100 and 120 µs)
    assert (got["control"]["rows"], got["control"]["span_ns"], got["test"]["rows"], got["test"]["span_ns"]) == \
        (4, 100_000, 3, 120_000)
    assert main(["diff", str(control), str(test), "--test-step", "7", "--quiet"]) == 2
    assert "--test-step 7: rank 0 of" in capsys.readouterr().err


def test_a_side_read_from_a_damaged_file_says_so(tmp_path, capsys):
    """A trace cut short: its side is what the import could read, and diff says so as analyze does (QA: nothing was
    said, and a cut XPlane was compared whole, 5,043 names 'added')."""
    events = [_x("ProfilerStep#1", 0, 100, cat="user_annotation"), _x("aten::mm", 10, 3), _x("aten::relu", 30, 2)]
    control = _chrome(tmp_path / "control.json", events)
    text = json.dumps({"traceEvents": events})
    cut = tmp_path / "cut.json"
    cut.write_text(text[:text.index('"aten::relu"') + 30])
    got = _diff(capsys, control, cut)
    assert got["control"]["import_problems"] == []
    (problem,) = got["test"]["import_problems"]
    assert problem.startswith(f"{cut}: ") and "truncated" in problem
    assert [r["name"] for r in got["names"] if r["change"] == "deleted"] == ["aten::relu"]  # the cut event is lost
    assert main(["diff", str(control), str(cut), "--quiet"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[3] == f"Import problems in {cut}: {problem}. Its side is of what the import could read."


def test_summary_and_compare_on_empty_sides():
    import pandas as pd

    empty = trace_diff.summary(pd.DataFrame(columns=["name", "category", "dur_ns"]))
    assert list(empty.columns) == trace_diff.SUMMARY_COLUMNS and not len(trace_diff.compare(empty, empty))


IPM = SHARED / "wild_traces/ipm_hunold_1494937738/hunold.1494937738.200810.ipm.xml"


@pytest.mark.skipif(not IPM.is_file(), reason=f"{IPM.name} absent")
def test_a_diff_of_per_call_totals_says_its_counts_are_rows(tmp_path, capsys):
    """An IPM profile keeps a row per call and partner with the calls' totals (its MPI_Send: 34,569 calls in the
    file, 6 rows): the diff says so, not that the counts are unchanged calls (QA)."""
    out = tmp_path / "ipm"
    assert main(["import", str(IPM), "--out", str(out), "--progress", "never"]) == 0
    capsys.readouterr()
    assert main(["diff", str(out), str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("holds per-call totals") == 1 and "its counts are rows, not calls" in text
    assert main(["diff", str(out), str(out), "--json"]) == 0
    sides = json.loads(capsys.readouterr().out)
    assert sides["control"]["aggregate"] and sides["test"]["aggregate"]
