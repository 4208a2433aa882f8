"""Chrome trace export, loaded back with json and checked for structure."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ddltrace.chrome import MACHINE_PID, export_chrome
from ddltrace.cli import main
from ddltrace.store import TraceStore


def test_export_structure(tiny_store, tmp_path):
    out = tmp_path / "trace.json"
    count = export_chrome(tiny_store, out)
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    assert len(events) == count
    assert doc["otherData"]["run"]["command"] == "python job.py"
    phases = Counter(e["ph"] for e in events)
    timeline = tiny_store.timeline()
    counters = tiny_store.counters()
    assert phases["X"] == len(timeline)
    assert phases["C"] == len(counters)
    names = {(e["pid"], e["name"]): e["args"] for e in events if e["ph"] == "M"}
    for rank in range(4):
        assert names[(rank, "process_name")]["name"] == f"rank {rank} (node0)"
        assert names[(rank, "process_sort_index")]["sort_index"] == rank
    assert names[(MACHINE_PID, "process_name")]["name"] == "machine"
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert {e["args"]["name"] for e in threads} == {"main"}
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in complete} == set(timeline["category"].astype(str))
    # every X event is the timeline row it came from, in microseconds
    by_key = {(int(r.rank), int(r.start_ns), r.name): r for r in timeline.itertuples()}
    for e in complete:
        row = by_key[(e["pid"], round(e["ts"] * 1000), e["name"])]
        assert round(e["dur"] * 1000) == row.dur_ns
        if not pd.isna(row.bytes):
            assert e["args"]["bytes"] == row.bytes
    sends = [e for e in complete if e["name"] == "MPI_Send"]
    assert sends and all(e["args"]["peer"] == 0 and e["args"]["tag"] == 1 for e in sends)


def test_export_selected_ranks(tiny_store, tmp_path):
    out = tmp_path / "r1.json"
    export_chrome(tiny_store, out, ranks=[1])
    events = json.loads(out.read_text())["traceEvents"]
    from ddltrace.chrome import MACHINE_PID  # (the machine's counters go with any ranks: merge keeps each sample once)

    assert {e["pid"] for e in events} == {1} | ({MACHINE_PID} if -1 in tiny_store.counter_ranks else set())


PAR_W4 = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd" / "par-w4" / "store"
#: The columns of a rank's timeline the export carries (source: the rank's, one per rank in this store).
ROUND_TRIP = ["lane", "name", "category", "start_ns", "dur_ns", "bytes", "peer", "step", "tag", "comm", "request",
              "correlation", "source"]


def _rows(table: pa.Table) -> list[tuple]:
    """A rank's intervals as sorted tuples of :data:`ROUND_TRIP` (category as its text, missing as None; a column
    the file was written without, ``correlation`` in stores older than it, is missing)."""
    columns = [[None if v is None else str(v) if name == "category" else v
                for v in (table.column(name).to_pylist() if name in table.column_names else [None] * len(table))]
               for name in ROUND_TRIP]
    return sorted(zip(*columns, strict=True), key=lambda row: tuple((v is None, v) for v in row))


def test_an_exported_mpi_store_imports_back_to_the_same_intervals_and_counters(tmp_path, capsys):
    """par-w4 (a real PMPI run on the epoch clock, 5 ranks) exported, then imported: every rank, every interval
    with its exact start and duration (ns), lane, name, category, bytes, peer, tag, comm, source, the rank's
    counters, as the store's Parquet files hold them, and its manifest entry (host, role, ended, pid, ...) as the
    manifest lists it (was: one rank 0, every interval 'other', starts moved by up to 174 ns: float µs at epoch
    times), and the run's workload, clock and notes entries, so ``analyze`` finds the same."""
    out = tmp_path / "par.json"
    assert main(["export", str(PAR_W4), "--chrome", str(out)]) == 0
    back = tmp_path / "back"
    assert main(["import", str(out), "--out", str(back), "--progress", "never"]) == 0
    capsys.readouterr()
    store = TraceStore.open(back)
    files = sorted((PAR_W4 / "timeline").glob("rank-*.parquet"))
    assert store.ranks == [int(f.stem.split("-")[1]) for f in files]
    for file in files:
        rank = int(file.stem.split("-")[1])
        assert _rows(store.written_table(rank)) == _rows(pq.read_table(file)), rank
        expected = pq.read_table(PAR_W4 / "counters" / file.name).to_pandas()
        got = store.counters([rank])
        assert got[["name", "t_ns", "value"]].reset_index(drop=True).equals(
            expected[["name", "t_ns", "value"]].astype(got[["name", "t_ns", "value"]].dtypes).reset_index(drop=True))
        listed = json.loads((PAR_W4 / "manifest.json").read_text())["ranks"][str(rank)]
        kept = {k: v for k, v in store.rank_info(rank).items() if k not in ("file", "format")}
        assert kept == listed and listed["host"] == "vm" and listed["role"] == "rank"  # the entry, host and all
    # the run's workload (w, server rank, batch size), clock alignment (offsets, uncertainties) and notes, as the
    # original manifest has them (was: none, the import's own clock; analyze inferred w and roles, no staleness)
    original = json.loads((PAR_W4 / "manifest.json").read_text())
    truth = (PAR_W4 / original["workload"]["ground_truth"]).resolve()
    assert store.manifest["workload"] == {**original["workload"], "ground_truth": str(truth)}
    assert store.manifest["clock"] == original["clock"] and original["clock"]["uncertainty_ns"]["1"] > 0
    notes = store.manifest["notes"]
    assert notes[:len(original["notes"])] == original["notes"] and len(notes) > len(original["notes"])
    analyses = []
    for path in (PAR_W4, back):
        assert main(["analyze", str(path), "--json"]) == 0
        analyses.append(json.loads(capsys.readouterr().out.replace(str(path), "STORE")))
    before, after = analyses
    assert after["findings"] == before["findings"] and after["scaling"] == before["scaling"]
    # the same stores, but for the import's own note after the run's (analyze --json gives the store's notes)
    assert after["stores"][0]["notes"][:len(before["stores"][0]["notes"])] == before["stores"][0]["notes"]
    assert [{k: v for k, v in s.items() if k != "notes"} for s in after["stores"]] == \
        [{k: v for k, v in s.items() if k != "notes"} for s in before["stores"]]
    assert after["not_made"] == before["not_made"]
    assert [f["id"] for f in after["findings"]] == ["staleness"]
    assert (after["stores"][0]["workers"], after["stores"][0]["workers_inferred"]) == (4, None)
    assert after["stores"][0]["batch_size"] == original["workload"]["config"]["batch"]


def test_exported_times_are_the_stores_nanoseconds_exactly(tiny_store, tmp_path):
    """Every ``ts`` + ``otherData.origin_ns`` and every ``dur`` is the store's ns exactly, read as decimal text and
    read as Perfetto does (a float64 of µs, times 1000, rounded): at epoch times a float64 of µs is 0.25 µs apart,
    so ``ts`` counts from a whole second at or before the first interval."""
    from ddltrace.chrome import us_text
    from ddltrace.timeline import make_timeline

    frame = make_timeline(pd.DataFrame({"rank": 9, "lane": "main", "name": ["a", "b", "c"], "category": "compute",
                                        "start_ns": [1795385469514945938, 1795385469514946001, 1795385470000000123],
                                        "dur_ns": [62, 1, 123456789012]}))
    tiny_store.add_rank(9, frame)
    out = tmp_path / "t.json"
    export_chrome(tiny_store, out, ranks=[9])
    doc = json.loads(out.read_text(), parse_float=Decimal)
    origin = doc["otherData"]["origin_ns"]
    assert origin % 10**9 == 0 and origin <= frame["start_ns"].min()
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    expected = sorted(zip(frame["start_ns"], frame["dur_ns"], strict=True))
    assert sorted((int(e["ts"] * 1000) + origin, int(e["dur"] * 1000)) for e in events) == expected
    assert sorted((round(float(e["ts"]) * 1000) + origin, round(float(e["dur"]) * 1000)) for e in events) == expected
    assert [bytes(us_text(n)) for n in (-1, 0, 1500, -2500)] == [b"-0.001", b"0", b"1.5", b"-2.5"]


def test_an_existing_output_is_refused_unless_forced(tiny_store, tmp_path, capsys):
    out = tmp_path / "mine.json"
    out.write_text("keep me")
    assert main(["export", str(tiny_store.path), "--chrome", str(out)]) == 2
    assert f"{out}: already exists (choose another --chrome, or add --force)" in capsys.readouterr().err
    assert out.read_text() == "keep me"
    assert main(["export", str(tiny_store.path), "--chrome", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["traceEvents"]


def test_a_big_store_says_its_progress(tiny_store, tmp_path, capsys, monkeypatch):
    """Above export.PROGRESS_EVENTS intervals (lowered here to the tiny store's), a line on stderr before the first
    rank with the ranks and intervals the manifest lists, then ranks written of all and the events written."""
    from ddltrace.commands import export

    monkeypatch.setattr(export, "PROGRESS_EVENTS", 1)
    out = tmp_path / "t.json"
    assert main(["export", str(tiny_store.path), "--chrome", str(out)]) == 0
    lines = capsys.readouterr().err.splitlines()
    intervals = len(tiny_store.timeline())
    assert lines[0] == f"ddltrace export: {tiny_store.path}: writing 4 ranks ({intervals:,} intervals) rank by rank"
    events = sum(e["pid"] != MACHINE_PID for e in json.loads(out.read_text())["traceEvents"])
    assert f"4 of 4 ranks written, {events:,} events" in lines[-1]  # the ranks' (the machine's counters come last)
    assert main(["export", str(tiny_store.path), "--chrome", str(out), "--force", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_an_export_pretty_printed_is_still_read_as_ddltraces(tiny_store, tmp_path):
    """``json.dumps(indent=2)`` of an export (keys in their order) is sniffed as the ``ddltrace`` format too."""
    from ddltrace.collectors.importers import detect

    out = tmp_path / "t.json"
    export_chrome(tiny_store, out)
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads(out.read_text()), indent=2))
    assert detect(out).name == detect(pretty).name == "ddltrace"


def test_run_entries_of_the_wrong_kind_or_differing_between_exports_are_named_not_restored(tiny_store, tmp_path,
                                                                                           capsys):
    """An export whose ``otherData.workload`` is not an object, and whose run's world size is not one, still imports,
    its workload left out and the world size its ranks', each named among the file's problems; two exports whose clock
    entries differ leave the import's own clock, and a note says so."""
    out = tmp_path / "t.json"
    export_chrome(tiny_store, out)
    doc = json.loads(out.read_text())
    doc["otherData"]["workload"] = "w=4"
    doc["otherData"]["run"]["world_size"] = "4"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    doc["otherData"].update(workload={"job": "other"}, clock={**doc["otherData"]["clock"], "method": "another clock"})
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    back = tmp_path / "back"
    assert main(["import", str(bad), "--out", str(back), "--progress", "never"]) == 0
    store = TraceStore.open(back)
    assert "workload" not in store.manifest and store.ranks == tiny_store.ranks
    assert f"import problem: {bad}: otherData.workload is not an object: the run's workload entry is not restored" \
        in store.manifest["notes"]
    assert f"import problem: {bad}: otherData.run.world_size '4' is not a world size (an integer from 1 to " \
        f"{2**31 - 1}); the store counts its ranks" in store.manifest["notes"]
    assert store.world_size == len(tiny_store.ranks)
    both = tmp_path / "both"
    assert main(["import", str(out), str(other), "--out", str(both), "--progress", "never"]) == 0
    capsys.readouterr()
    notes = TraceStore.open(both).manifest["notes"]
    assert "the clock entry of the exported run(s) is not restored: not every file imported carries the same one" \
        in notes and TraceStore.open(both).manifest["clock"]["method"] != "another clock"


def test_a_rank_two_files_give_is_their_union(tmp_path, capsys):
    """The same export given twice, and an export beside a copy cut to its first counter samples: each rank's rows
    and counters once (QA: every interval doubled, steps 514 -> 1028; the last file's counters replaced the
    earlier's, 89 samples or 29 by the order given), and the import counts the rows it found twice."""
    out = tmp_path / "par.json"
    export_chrome(TraceStore.open(PAR_W4), out)
    doc = json.loads(out.read_text())
    first_ts = min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "C")
    cut = tmp_path / "cut" / "par.json"
    cut.parent.mkdir()
    cut.write_text(json.dumps({**doc, "traceEvents": [e for e in doc["traceEvents"] if e.get("ph") != "C"
                                                      or e["ts"] <= first_ts]}))
    original = TraceStore.open(PAR_W4)
    for files in ([out, out], [cut, out], [out, cut]):
        store = tmp_path / f"s{len(list(tmp_path.glob('s*')))}"
        assert main(["import", *map(str, files), "--out", str(store), "--progress", "never"]) == 0
        said = capsys.readouterr().out
        got = TraceStore.open(store)
        for rank in original.ranks:
            assert _rows(got.written_table(rank)) == _rows(original.written_table(rank)), (files, rank)
            assert len(got.counters([rank])) == len(original.counters([rank])), (files, rank)
        assert "rows of a rank another file gave already (the same interval twice)" in said


def test_an_export_cut_at_a_line_is_a_problem_naming_the_file_the_events_before_the_cut_kept(tiny_store, tmp_path,
                                                                                             capsys):
    """An export cut between two lines (one event a line: `head -n N`) ends with its events array open; the export
    always closes it (a temporary file, renamed), so the import names the file and the cut as a problem and keeps
    the events before it, not the Horovod reader's 'never closed (tolerated)' (QA8 #1)."""
    out = tmp_path / "t.json"
    export_chrome(tiny_store, out)
    lines = out.read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut.json"
    cut.write_bytes(b"".join(lines[:len(lines) // 2]))
    kept = sum(b'"ph":"X"' in line for line in lines[:len(lines) // 2])
    back = tmp_path / "back"
    assert main(["import", str(cut), "--out", str(back), "--progress", "never"]) == 0
    said = capsys.readouterr().out
    assert "tolerated" not in said
    notes = TraceStore.open(back).manifest["notes"]
    assert [n for n in notes if n.startswith(f"import problem: {cut}: cut at byte {len(cut.read_bytes().rstrip())}: "
                                             "the file ends after a whole event with its events array still open")]
    assert not [n for n in notes if "tolerated" in n]
    assert sum(len(frame) for _, frame in TraceStore.open(back).iter_timeline()) == kept


def test_damaged_origin_and_rank_entries_are_named_and_left_out_not_guessed(tiny_store, tmp_path):
    """``otherData.origin_ns`` missing (with times that are not on the wall clock) or not an integer: an import problem
    says the times are relative, and they are (not placed in 1970 from a made-up origin); a ``ddltrace_rank`` value of
    the wrong kind (pid "x", open_calls 7) is named and left out of the rank's manifest entry, the rest restored
    (QA8 #10)."""
    out = tmp_path / "t.json"
    export_chrome(tiny_store, out)
    doc = json.loads(out.read_text())
    assert doc["otherData"]["origin_ns"] == 0  # (the tiny store's times are relative)
    first = min(e["ts"] for e in doc["traceEvents"] if e["ph"] == "X")
    for origin in ("zz", None, 2**63, True):
        if origin is None:
            doc["otherData"].pop("origin_ns")
        else:
            doc["otherData"]["origin_ns"] = origin
        bad = tmp_path / f"origin-{origin}.json"
        bad.write_text(json.dumps(doc))
        back = tmp_path / f"back-{origin}"
        assert main(["import", str(bad), "--out", str(back), "--progress", "never", "--quiet"]) == 0
        store = TraceStore.open(back)
        said = "missing" if origin is None else f"{str(origin)!r} is not a time (integer ns since the epoch)"
        assert f"import problem: {bad}: otherData.origin_ns {said}: the times are relative (from an unknown origin), " \
            "not on the wall clock" in store.manifest["notes"]
        assert min(store.rank_info(r)["start_ns"] for r in store.ranks) == round(first * 1000)
    doc["otherData"]["origin_ns"] = 0
    names = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == 1]
    names[0]["args"]["ddltrace_rank"].update(pid="x", open_calls=7, role="rank")
    bad = tmp_path / "entry.json"
    bad.write_text(json.dumps(doc))
    back = tmp_path / "back-entry"
    assert main(["import", str(bad), "--out", str(back), "--progress", "never", "--quiet"]) == 0
    store = TraceStore.open(back)
    notes = store.manifest["notes"]
    assert f"import problem: {bad}: rank 1's ddltrace_rank.pid 'x' is not a process id (an integer from 0): left out " \
        "of its manifest entry" in notes
    assert f"import problem: {bad}: rank 1's ddltrace_rank.open_calls '7' is not a list of call names: left out of " \
        "its manifest entry" in notes
    info = store.rank_info(1)
    assert "pid" not in info and "open_calls" not in info and info["role"] == "rank" and info["ended"] == "normal"
    assert not [n for n in notes if "origin_ns" in n or "rank 0's" in n]


def test_the_runs_own_entries_come_back_from_an_export(tmp_path, capsys):
    """The run's command, framework, profiled steps and collectors come back on import (QA: lost, so a framework
    store's window and py-spy's rows were no longer said as such after a round trip); one of the wrong kind is
    named and left out."""
    from ddltrace.store import write_store

    run = {"command": "torchrun job.py", "framework": "pytorch", "world_size": 1, "profiled_steps": [5, 9],
           "steps_window": [5, 20], "collectors": ["system", "py-spy", "pytorch profiler"], "sample_hz": 10.0,
           "exit_code": 0, "interrupted": False}
    rows = [{"rank": 0, "lane": "cpu/thread 1", "name": f"ProfilerStep#{s}", "category": "compute",
             "start_ns": 1_700_000_000_000_000_000 + s * 10**6, "dur_ns": 900_000, "step": s} for s in range(5, 10)]
    store = write_store(tmp_path / "s", rows, run=run)
    out = tmp_path / "s.json"
    export_chrome(store, out)
    assert main(["import", str(out), "--out", str(tmp_path / "back"), "--progress", "never"]) == 0
    back = TraceStore.open(tmp_path / "back").run
    assert {k: back.get(k) for k in run if k != "world_size"} == {k: v for k, v in run.items() if k != "world_size"}
    doc = json.loads(out.read_text())
    doc["otherData"]["run"]["profiled_steps"] = "5-9"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["import", str(tmp_path / "bad.json"), "--out", str(tmp_path / "bad"), "--progress", "never"]) == 0
    assert "otherData.run.profiled_steps '5-9' is not a [first, last] pair of steps: left out of the store's run" \
        in capsys.readouterr().out
    assert "profiled_steps" not in TraceStore.open(tmp_path / "bad").run
