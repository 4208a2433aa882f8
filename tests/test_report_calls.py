"""The report's table of event names counts calls only where each row is a call: a profile of per-call totals (a
CNTK summary, an IPM profile) keeps no call counts, and an OTF2 archive's rows are a region's exclusive pieces. The
QA read `__Get Minibatch | 2 | 83.4 ms | 41.7 ms` for a CNTK summary whose files say 8 calls a rank, 6.947 ms each,
and `int main | 42 | 5.37 ms | 128 us` for an archive with 2 calls of main (shared third-party files; skipped when
absent)."""

from __future__ import annotations

import re

import pytest
from shared_data import SHARED

from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.report import scan
from ddltrace.store import TraceStore, write_store
from ddltrace.timeline import make_timeline
from ddltrace.units import format_ns

CNTK = SHARED / "cntk_traces"
OTF2 = SHARED / "mpi_traces" / "pipit-ping-pong-otf2"


def _imported(paths, out) -> str:
    assert main(["import", *map(str, paths), "--out", str(out), "--progress", "never"]) == 0
    return str(out)


@pytest.mark.skipif(not CNTK.exists(), reason="shared CNTK traces absent")
def test_a_summarys_names_have_their_total_and_no_calls(tmp_path):
    summaries = sorted(CNTK.glob("*_summary_*.txt"))
    store = _imported(summaries, tmp_path / "summary")
    _, table = scan(analyze_store(store))
    # the files' own Total of __Get Minibatch, summed over the two ranks' summaries (ms)
    totals = [float(re.search(r"^__Get Minibatch\s*:.*?([\d.]+) ms\s*$", path.read_text(), re.M).group(1))
              for path in summaries]
    row = table.loc["__Get Minibatch"]
    assert (row["calls"], row["mean per call"]) == ("-", "-")  # before: 2 (rows) and 41.7 ms
    assert row["total"] == format_ns(round(sum(totals) * 1e6))
    assert "per-call totals" in next(iter(table.attrs["rows_are"]))


@pytest.mark.skipif(not OTF2.exists(), reason="shared MPI traces absent")
def test_an_archives_names_are_counted_as_pieces_with_no_mean(tmp_path):
    store = _imported([OTF2 / "traces.otf2"], tmp_path / "otf2")
    _, table = scan(analyze_store(store))
    frame = TraceStore.open(store).timeline()
    main_rows = frame[frame["name"].str.startswith("int main")]
    name = main_rows["name"].iloc[0]
    row = table.loc[name]
    assert row["calls"] == f"{len(main_rows):,} pieces" and row["mean per call"] == "-"  # before: 42, 128 us
    assert row["total"] == format_ns(int(main_rows["dur_ns"].sum()))  # the exclusive time: main's less its calls


def test_a_timelines_names_keep_their_calls_and_means(tmp_path):
    """A store of calls: each row is a call, as before."""
    rows = [{"rank": 0, "name": "step", "category": "compute", "lane": "main", "start_ns": i * 1000, "dur_ns": 300}
            for i in range(4)]
    _, table = scan(analyze_store(write_store(tmp_path / "store", make_timeline(rows))))
    assert (table.loc["step", "calls"], table.loc["step", "mean per call"]) == ("4", "300 ns")
    assert table.attrs["rows_are"] == {"calls"}


@pytest.mark.skipif(not CNTK.exists(), reason="shared CNTK traces absent")
def test_diff_names_a_cntk_summary_as_such(tmp_path, capsys):
    """`diff` of the CNTK summary against its detailed trace said the summary was "an IPM profile"."""
    summary = _imported(sorted(CNTK.glob("*_summary_*.txt")), tmp_path / "summary")
    detail = _imported(sorted(CNTK.glob("*_detail_*.json")), tmp_path / "detail")
    capsys.readouterr()
    assert main(["diff", summary, detail]) == 0
    out = capsys.readouterr().out
    assert "holds per-call totals (a CNTK summary: a row per profiled name" in out and "IPM" not in out
