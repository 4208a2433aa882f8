"""Damaged stores (issue 18 item 4): a damaged rank is named as missing in what analyze and report write, the
rest of the run is analysed; a mutated manifest is one line and exit 2 or a result, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from shared_data import SHARED

from ddltrace.cli import main

DEMO = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"
SMALL = DEMO / "seq-w1" / "store"  # 2 ranks: a server and a worker
SERIES = DEMO / "seq-w4" / "store"  # 5 ranks
RANKS = int(os.environ.get("DDLTRACE_DAMAGED_RANKS", "64"))


def _copy(source: Path, where: Path) -> Path:
    target = where / source.parent.name
    shutil.copytree(source, target)
    return target


def _damage_rank_file(store: Path, rank: int) -> None:
    (store / "timeline" / f"rank-{rank:05d}.parquet").write_bytes(b"not a parquet file\n")


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_analyze_names_the_damaged_rank_in_its_text_and_json(tmp_path, capsys):
    store = _copy(SERIES, tmp_path)
    _damage_rank_file(store, 2)
    code, out, err = _run(capsys, "analyze", store)
    assert code == 0 and "rank-00002.parquet" in err
    lines = [line for line in out.splitlines() if "missing" in line.lower()]
    assert lines and "rank 2" in lines[0] and "4 of 5 ranks" in lines[0], out
    breakdown_ranks = {line.split()[0] for line in out.splitlines() if line.startswith("  ") and line.split()
                       and line.split()[0].isdigit()}
    assert "2" not in breakdown_ranks and {"0", "1", "3", "4"} <= breakdown_ranks
    code, out, _ = _run(capsys, "analyze", "--json", store)
    doc = json.loads(out)
    missing = doc["stores"][0]["missing_ranks"]
    assert [m["rank"] for m in missing] == [2] and "corrupt Parquet" in missing[0]["reason"]
    assert {r["rank"] for r in doc["stores"][0]["breakdown_ns"]} == {0, 1, 3, 4}


@pytest.mark.parametrize("dropped", [("lane", "source"), ("lane", "source", "correlation"), "counters"])
def test_a_rank_file_short_of_columns_is_named_and_left_out(tmp_path, capsys, dropped):
    """A timeline file without some of its columns, one written before a later column (correlation) existed among
    them, or a rank's counters file copied in its place: that rank is named with the columns it lacks and left out
    (before: an IndexError traceback from inserting the later column past the table's end)."""
    import pyarrow.parquet as pq

    store = _copy(SERIES, tmp_path)
    path = store / "timeline" / "rank-00002.parquet"
    if dropped == "counters":
        shutil.copyfile(store / "counters" / "rank-00002.parquet", path)
    else:
        table = pq.read_table(path)
        pq.write_table(table.drop([c for c in dropped if c in table.column_names]), path)
    for verb in ("info", "analyze"):
        code, out, err = _run(capsys, verb, store)
        assert code == 0 and "rank-00002.parquet: missing column(s)" in err and "Traceback" not in err, err
        if dropped != "counters":
            assert "lane, source" in err
    code, out, _ = _run(capsys, "analyze", "--json", store)
    assert {r["rank"] for r in json.loads(out)["stores"][0]["breakdown_ns"]} == {0, 1, 3, 4}


def test_report_names_the_damaged_rank_in_findings_json_and_the_page(tmp_path, capsys):
    store = _copy(SERIES, tmp_path)
    _damage_rank_file(store, 3)
    code, _, _ = _run(capsys, "report", store, "--out", tmp_path / "report")
    assert code == 0
    doc = json.loads((tmp_path / "report" / "findings.json").read_text())
    assert [m["rank"] for m in doc["missing_ranks"][str(store)]] == [3]
    for name in ("report.html", "report.md"):
        text = (tmp_path / "report" / name).read_text().replace("\\", "")  # Markdown escapes - and _
        assert "Missing ranks" in text and "rank-00003.parquet" in text, name
        assert "1 of 5 ranks has no usable timeline; everything in this report is of the other 4." in text, name


def test_a_rank_the_manifest_does_not_list_is_named_as_missing(tmp_path, capsys):
    """A rank key that is not an integer: its entry is left out, and the rank of the world it was is missing."""
    store = _copy(SERIES, tmp_path)
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["ranks"]["three"] = manifest["ranks"].pop("3")
    (store / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = _run(capsys, "info", store)
    assert code == 0 and "'three'" in err
    assert "not listed  rank 3 of the world of 5" in out
    code, out, err = _run(capsys, "analyze", "--json", store)
    missing = json.loads(out)["stores"][0]["missing_ranks"]
    assert [m["rank"] for m in missing] == [3] and "no usable entry" in missing[0]["reason"]


def _many_ranks(path: Path, ranks: int) -> None:
    """A store of ``ranks`` ranks, each a few compute and MPI rows on one clock (written by the store's writer)."""
    import numpy as np
    import pandas as pd

    from ddltrace.store import write_store

    rows = []
    for rank in range(ranks):
        t = 1_000_000 * rank % 7_000_000
        for step in range(3):
            base = t + step * 10_000_000
            rows.append((rank, "main", "compute", "forward_backward", base, 8_000_000))
            rows.append((rank, "main", "comm", "MPI_Allreduce", base + 8_000_000, 1_500_000))
    frame = pd.DataFrame(rows, columns=["rank", "lane", "category", "name", "start_ns", "dur_ns"])
    frame["start_ns"] = frame["start_ns"].astype(np.int64) + 1_700_000_000_000_000_000
    write_store(path, frame, run={"world_size": ranks, "framework": "mpi"})


def test_a_big_run_with_one_damaged_rank_is_analysed_with_that_rank_named(tmp_path, capsys):
    """``DDLTRACE_DAMAGED_RANKS`` ranks (64 here; ``make test-damaged-heavy``: 1024, 21 s on an idle machine, about
    3 minutes on 2 busy cores), one of them damaged in the middle."""
    ranks = RANKS
    store = tmp_path / "big"
    _many_ranks(store, ranks)
    damaged = ranks // 2 + 5
    _damage_rank_file(store, damaged)
    code, out, err = _run(capsys, "analyze", "--json", store)
    assert code == 0, err
    doc = json.loads(out)["stores"][0]
    assert [m["rank"] for m in doc["missing_ranks"]] == [damaged] and doc["missing_count"] == 1
    assert len(doc["breakdown_ns"]) == ranks - 1 and damaged not in {r["rank"] for r in doc["breakdown_ns"]}


# -- fuzzing the manifest ---------------------------------------------------------------------------------------

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
                     # containers built anew at each draw: st.just's one object, set at two places of a manifest
                     # (or kept from an earlier example), made it contain itself, and json.dumps refused it
                     st.builds(list), st.builds(dict), st.builds(lambda: [1, "x"]), st.builds(lambda: {"a": 1}))
_PATHS = st.sampled_from([
    ("schema_version",), ("ranks",), ("run",), ("clock",), ("counter_ranks",), ("notes",), ("workload",),
    ("run", "world_size"), ("run", "framework"), ("run", "batch_size"), ("run", "hosts"), ("run", "start_ns"),
    ("ranks", "0"), ("ranks", "1"), ("ranks", "0", "events"), ("ranks", "1", "start_ns"),
    ("ranks", "1", "end_ns"), ("ranks", "0", "role"), ("ranks", "1", "aggregate"), ("ranks", "0", "host"),
    ("clock", "offsets_ns"), ("clock", "offsets_ns", "1"), ("clock", "uncertainty_ns"), ("workload", "config"),
    ("clock", "uncertainty_ns", "1"), ("clock", "method"), ("clock", "reference_rank"), ("clock", "drift_ppm"),
    ("workload", "config", "workers"), ("workload", "config", "batch"), ("workload", "ground_truth"),
])
_MUTATION = st.one_of(
    st.tuples(st.just("set"), _PATHS, _SCALARS),
    st.tuples(st.just("delete"), _PATHS, st.none()),
    st.tuples(st.just("rename_rank"), st.sampled_from(["0", "1"]),
              st.sampled_from(["x", "-1", "01", "1.0", " 1", "99999999999999999999", "", "٣"])),
    st.tuples(st.just("unknown_field"), st.sampled_from([(), ("run",), ("ranks", "0"), ("clock",)]), _SCALARS),
)


def _mutate(manifest: dict, mutations) -> dict:
    for kind, where, value in mutations:
        if kind == "rename_rank":
            if isinstance(manifest.get("ranks"), dict) and where in manifest["ranks"]:
                manifest["ranks"][value] = manifest["ranks"].pop(where)
            continue
        if kind == "unknown_field":
            where = (*where, "future_field")
        parent = manifest
        for key in where[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        if kind == "delete":
            parent.pop(where[-1], None)
        else:
            parent[where[-1]] = value
    return manifest


def _check_verbs(capsys, mutations) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = _copy(SMALL, Path(tmp))
        manifest = _mutate(json.loads((store / "manifest.json").read_text()), mutations)
        (store / "manifest.json").write_text(json.dumps(manifest))
        for verb in (["info"], ["analyze"], ["analyze", "--json"]):
            code, out, err = _run(capsys, *verb, store)
            errors = [line for line in err.splitlines() if not line.startswith("ddltrace: warning: ")]
            assert "Traceback" not in err
            if code == 2:
                assert len(errors) == 1 and errors[0].startswith("ddltrace: error: "), err
            else:
                assert code == 0 and not errors, err
                if verb[-1] == "--json":
                    json.loads(out)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(_MUTATION, min_size=1, max_size=3))
@example([("rename_rank", "1", "x")])
@example([("set", ("run", "world_size"), 2**70)])
@example([("set", ("ranks", "1", "end_ns"), 2**70)])
@example([("delete", ("ranks",), None)])
@example([("set", ("run", "batch_size"), "64")])
@example([("set", ("workload", "config", "workers"), -3)])
@example([("set", ("workload", "ground_truth"), 1)])
@example([("set", ("workload",), [1, "x"])])
@example([("set", ("notes",), True)])  # (import_problems iterated it: a TypeError, make test 2026-11-26)
@example([("set", ("run", "exit_code"), "9")])
@example([("set", ("ranks", "0"), None)])  # (the test of empty ranks read such an entry: a traceback, CI 2026-11-25)
def test_mutated_manifest_is_a_result_or_one_line(capsys, mutations):
    _check_verbs(capsys, mutations)


CNTK = SHARED / "cntk_traces"


def test_a_rank_whose_file_gave_no_event_is_named_missing_with_the_imports_problem(tmp_path, capsys):
    """Two CNTK ranks, rank 1's file cut to 100 bytes: the import keeps rank 0 and records rank 1 with no events;
    analyze names rank 1 as missing with the import's problem (it was silent: 'a timeline of 2 ranks' and a
    breakdown of rank 0 alone), in the text and the JSON, and analyses rank 0."""
    if not CNTK.is_dir():
        pytest.skip(f"{CNTK} is not here (the shared real traces)")
    files = sorted(CNTK.glob("*_detail_*.json"))
    assert [f.name[-len("detail_0.json"):] for f in files] == ["detail_0.json", "detail_1.json"]
    traces = tmp_path / "cntk"
    traces.mkdir()
    shutil.copy(files[0], traces / files[0].name)
    (traces / files[1].name).write_bytes(files[1].read_bytes()[:100])
    store = tmp_path / "store"
    assert main(["import", str(traces), "--out", str(store), "--progress", "never"]) == 0
    capsys.readouterr()
    code, out, _ = _run(capsys, "analyze", store, "--json", "--quiet")
    assert code == 0
    (run,) = json.loads(out)["stores"]
    (missing,) = run["missing_ranks"]
    assert missing["rank"] == 1 and run["missing_count"] == 1
    assert str(traces / files[1].name) in missing["reason"] and "truncated" in missing["reason"]
    assert missing["reason"].endswith("rank 1 holds no events")
    assert [r["rank"] for r in run["breakdown_ns"]] == [0]
    code, out, _ = _run(capsys, "analyze", store, "--quiet")
    assert code == 0 and "Missing ranks in" in out and "rank 1 holds no events" in out


def test_a_trace_cut_short_is_named_damaged_by_info_analyze_and_report(tmp_path, capsys):
    """A gzipped Kineto trace cut short imports what was decoded, and every command that reads the store says so,
    naming the file (before: only the import's own output did; analyze and report read as if the file were
    whole): info, analyze (text and --json), and the report (report.md, report.html, findings.json)."""
    whole = Path(__file__).resolve().parent / "data" / "torch_gloo" / "rank0.pt.trace.json.gz"
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    store = tmp_path / "store"
    code, out, err = _run(capsys, "import", cut, "--out", store)
    assert code == 0 and f"{cut}: gzip stream truncated" in out + err
    assert _run(capsys, "import", whole, "--out", tmp_path / "whole")[0] == 0

    def events(info: str) -> int:
        return int(next(line.split()[1] for line in info.splitlines() if line.startswith("events")))

    code, out, _ = _run(capsys, "info", store)
    assert code == 0 and f"problem     {cut}: gzip stream truncated at compressed byte" in out
    assert 0 < events(out) < events(_run(capsys, "info", tmp_path / "whole")[1])
    assert "problem" not in _run(capsys, "info", tmp_path / "whole")[1]
    code, out, _ = _run(capsys, "analyze", store)
    line = next(line for line in out.splitlines() if line.startswith("Import problems"))
    assert code == 0 and f"{cut}: gzip stream truncated" in line and "what the import could read" in line
    doc = json.loads(_run(capsys, "analyze", "--json", store)[1])
    assert any(p.startswith(f"{cut}: gzip stream truncated") for p in doc["stores"][0]["import_problems"])
    assert _run(capsys, "report", store, "--out", tmp_path / "report")[0] == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Import problems" in md and "gzip stream truncated" in md
    assert "Import problems" in (tmp_path / "report" / "report.html").read_text()
    problems = json.loads((tmp_path / "report" / "findings.json").read_text())["import_problems"]
    assert any("gzip stream truncated" in p for p in problems[str(store)])


def test_consecutive_ranks_missing_for_one_reason_are_one_entry_of_the_missing_line(tmp_path, capsys):
    """One rank of a world of 128 traced: analyze's line names ranks 1-127 once, as the report does (before: eight
    entries that said the same, then 'and 119 more')."""
    import gzip

    doc = json.loads(gzip.decompress((Path(__file__).resolve().parent / "data" / "torch_gloo" /
                                      "rank0.pt.trace.json.gz").read_bytes()))
    doc["distributedInfo"]["world_size"] = 128
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(doc))
    code, out, _ = _run(capsys, "analyze", trace)
    line = next(line for line in out.splitlines() if line.startswith("Missing ranks"))
    assert code == 0 and line == (f"Missing ranks in {trace}: ranks 1-127 ({trace}: rank N of the world of 128 is "
                                  "not in the trace). Everything below is of the other 1 of 128 ranks.")
    # and the first line says so beside the findings' counts (it said "0 error(s), 0 warning(s)" alone)
    assert out.splitlines()[0].startswith("ddltrace analyze: 1 store; findings: ")
    assert out.splitlines()[0].endswith("; 127 of 128 ranks not analysed (below)")
