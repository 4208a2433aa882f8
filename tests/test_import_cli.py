"""`ddltrace import`: several files of one job into one store, the summary, --explain, --rules, bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mixed_imports import assert_same_stores, mixed_folder
from shared_data import SHARED

from ddltrace.cli import main
from ddltrace.store import TraceStore

CNTK = SHARED / "cntk_traces"
VENV_DDLTRACE = Path(sys.executable).parent / "ddltrace"


def _mxnet_file(path: Path, rank: int) -> Path:
    t0 = 1700000000000000 + rank * 3
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "cpu/0"}}]
    for i, (name, dur) in enumerate([("FullyConnected", 80), ("KVStoreDistDefaultStoragePushPull", 500),
                                     ("sgd_update", 20)]):
        events += [{"name": name, "cat": "operator", "ph": "B", "ts": t0 + 1000 * i, "pid": 0, "tid": 5},
                   {"name": name, "cat": "operator", "ph": "E", "ts": t0 + 1000 * i + dur, "pid": 0, "tid": 5}]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_two_files_one_store_summary_and_manifest(tmp_path, capsys):
    for rank in (0, 1):
        _mxnet_file(tmp_path / f"profile_dist_sync_rank{rank}.json", rank)
    (tmp_path / "notes.txt").write_text("not a trace")
    out = tmp_path / "store"
    assert main(["import", str(tmp_path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # the files imported are the two traces, not the note beside them (the summary said 'imported 3 file(s)')
    assert printed.startswith("imported 2 file(s) into ") and "3 file(s)" not in printed
    assert "1 file(s) in the folders are not traces" in printed
    store = TraceStore.open(out)
    assert store.ranks == [0, 1]
    tl = store.timeline()
    assert len(tl) == 6 and set(tl["source"]) == {"mxnet"}
    assert store.manifest["clock"]["method"].startswith("wall clock")
    assert any("profile_dist_sync_rank1.json (mxnet): 7 events read, 3 intervals kept" in n
               for n in store.manifest["notes"])
    assert store.run["framework"] == "mxnet"


def test_explain_and_user_rules_override(tmp_path, capsys):
    _mxnet_file(tmp_path / "profile_rank0.json", 0)
    rules = tmp_path / "mine.toml"
    rules.write_text('[[rule]]\nid = "sgd-is-comm-here"\nformats = ["mxnet"]\nname = "^sgd_update$"\n'
                     'category = "comm"\n')
    assert main(["import", str(tmp_path / "profile_rank0.json"), "--out", str(tmp_path / "s"), "--explain",
                 "--rules", str(rules)]) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.strip().endswith("operator | sgd_update"))
    assert "comm" in line and "sgd-is-comm-here" in line
    line = next(x for x in printed.splitlines() if "KVStoreDistDefaultStoragePushPull" in x)
    assert "comm" in line and "mxnet-kvstore" in line
    tl = TraceStore.open(tmp_path / "s").timeline()
    assert tl.set_index("name").loc["sgd_update", "category"] == "comm"


def test_bad_rules_file_is_one_line(tmp_path, capsys):
    _mxnet_file(tmp_path / "profile_rank0.json", 0)
    rules = tmp_path / "bad.toml"
    rules.write_text('[[rule]]\nname = "("\ncategory = "comm"\n')
    assert main(["import", str(tmp_path / "profile_rank0.json"), "--out", str(tmp_path / "s"),
                 "--rules", str(rules)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.toml: rule 1" in err and "bad regular expression" in err and "\n" not in err


def test_unreadable_input_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, oops')
    result = subprocess.run([str(VENV_DDLTRACE), "import", str(bad), "--out", str(tmp_path / "s")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "trace.json" in result.stderr and "byte" in result.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.skipif(not CNTK.exists(), reason="shared CNTK traces absent")
def test_cntk_job_detail_preferred_over_summary(tmp_path, capsys):
    """Each rank's summary is dropped beside its detailed trace, and the summary says so in intervals: the
    intervals it says were kept are the store's (before: 162 kept, the summaries' 14 among them, of 148 stored)."""
    out = tmp_path / "cntk"
    assert main(["import", str(CNTK), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("dropped 7 interval(s): aggregate profile of a rank whose detailed trace was imported") == 2
    store = TraceStore.open(out)
    kept = int(re.search(r"(\d+) intervals kept", printed)[1])
    assert kept == sum(store.rank_info(r)["events"] for r in store.ranks) == len(store.timeline()) == 148
    assert store.ranks == [0, 1]
    assert store.rank_info(0)["format"] == "cntk"
    assert "relative to its own start" in store.manifest["clock"]["method"]


def test_files_read_in_several_processes_give_the_store_one_process_gives(tmp_path, capsys):
    """--jobs 3 (files read in forked workers, handed back in order) against --jobs 1 (in this process, part by
    part): the same ranks, rows, manifest notes, summary and --explain, with files of two formats that give the
    same ranks (merged in command-line order), an aggregate after its detailed trace, and an unreadable file."""
    import shutil

    folder = mixed_folder(tmp_path / "in")
    if CNTK.exists():
        for path in sorted(CNTK.glob("*_1.*")):  # rank 1's detail trace and its summary (an aggregate)
            shutil.copy(path, folder / path.name)
    printed, stores = {}, {}
    for jobs in (1, 3):
        out = tmp_path / f"store{jobs}"
        assert main(["import", str(folder), "--out", str(out), "--jobs", str(jobs), "--explain"]) == 0
        printed[jobs] = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("imported")]
        stores[jobs] = TraceStore.open(out)
    assert_same_stores(stores[1], stores[3])
    assert printed[1] == printed[3]
    assert any("broken.pt.trace.json" in line and "problem" in line for line in printed[3])
    assert any(line.startswith("  kineto ") for line in printed[3])  # --explain rows from the workers' files


def _dies_on_rank1(index):
    """A reader that dies on rank 1's file (module level: the pool pickles its function by name)."""
    import os

    from ddltrace.collectors.importers import pool

    if pool._WORK[0][index].path.name.startswith("rank1"):
        os._exit(9)
    return _REAL_READ_WHOLE(index)


_REAL_READ_WHOLE = None


def test_a_reader_process_that_dies_is_one_line(tmp_path, capsys, monkeypatch):
    """A worker killed while reading (as a crashing C library or the OOM killer would) ends the import with one
    line naming the file, exit 2, and no half-written store."""
    from ddltrace.collectors.importers import pool

    monkeypatch.setitem(globals(), "_REAL_READ_WHOLE", pool._read_whole)
    monkeypatch.setattr(pool, "_read_whole", _dies_on_rank1)
    out = tmp_path / "store"
    assert main(["import", str(Path(__file__).parent / "data" / "torch_gloo"), "--out", str(out), "--jobs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a process reading one of" in err[0] and "rank1.pt.trace.json.gz" in err[0]
    assert "died without a word; --jobs 1" in err[0]
    assert not out.exists() and not list(tmp_path.glob(".store.*"))


def test_a_folder_of_unknown_files_names_them_and_why(tmp_path, capsys):
    """A folder with no trace in it: the error names each file found and why it was not read ('no events' did
    not say which file, nor that its format is unknown)."""
    (tmp_path / "results.json").write_text('{"some-other-tool": []}')
    (tmp_path / "notes.txt").write_text("not a trace")
    assert main(["import", str(tmp_path), "--out", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "results.json: not a trace format ddltrace knows" in err and "notes.txt" in err
    assert not (tmp_path / "store").exists()


def test_a_binary_file_of_no_known_format_shows_its_first_bytes_in_hex(tmp_path, capsys):
    """Bytes that are not text are shown as hex in the one-line error, not as the terminal's garbage of
    replacement characters; text stays text."""
    (tmp_path / "blob.json").write_bytes(bytes([0xAD, 0xAB, 0x06, 0xBD, 0x87, 0x3F]) + bytes(range(200, 256)))
    assert main(["import", str(tmp_path / "blob.json"), "--out", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert "blob.json: not a trace format ddltrace knows (starts with the bytes ad ab 06 bd 87 3f c8 c9" in err
    assert "\ufffd" not in err and len(err.strip().splitlines()) == 1
    (tmp_path / "words.json").write_text("hello, not a trace")
    assert main(["import", str(tmp_path / "words.json"), "--out", str(tmp_path / "store")]) == 2
    assert "(starts with 'hello, not a trace')" in capsys.readouterr().err


BIG_TRACE = SHARED / "hta_traces" / "df_index_resolver"


@pytest.mark.skipif(not BIG_TRACE.is_dir(), reason=f"{BIG_TRACE} absent (the workplace's shared traces)")
def test_a_sigterm_during_the_import_leaves_no_unfinished_store(tmp_path):
    import os
    import shutil
    import signal
    import time

    out = tmp_path / "x.store"
    for _ in range(3):  # on a busy machine the import may end before the signal reaches it: then again
        job = subprocess.Popen([str(VENV_DDLTRACE), "import", str(BIG_TRACE), "--out", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".x.store.*.tmp")) and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        job.send_signal(signal.SIGTERM)  # while the store is being written (its staging folder exists)
        _, err = job.communicate(timeout=60)
        if job.returncode != 0:
            break
        shutil.rmtree(out)
    assert job.returncode == 143, err
    assert err.strip().splitlines()[-1] == "ddltrace: terminated (SIGTERM)"
    assert os.listdir(tmp_path) == []  # neither the staging folder nor the lock file left


def test_a_trace_store_given_to_import_is_one_line_saying_to_use_it_as_it_is(tmp_path, capsys):
    """A store named where traces are expected: one line saying what it is and which verbs take it, not an error
    listing each of its Parquet files as 'not a trace format'."""
    store = Path(__file__).resolve().parents[1] / "sample_traces" / "ps-sgd" / "par-w2" / "store"
    assert main(["import", str(store), "--out", str(tmp_path / "again")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"ddltrace: error: {store}: a ddltrace trace store already, not a trace to import: give it to "
                   "'ddltrace info', 'analyze' or 'report' as it is ('ddltrace merge' joins two stores)")
    assert not (tmp_path / "again").exists()


@pytest.mark.skipif(not BIG_TRACE.is_dir(), reason=f"{BIG_TRACE} absent (the workplace's shared traces)")
def test_quiet_silences_the_progress_line_as_in_analyze_and_report(tmp_path):
    """`--progress always` draws the line on stderr; `--quiet` after it (the last one given wins) leaves stderr empty;
    the summary stays on stdout."""
    base = [str(VENV_DDLTRACE), "import", str(BIG_TRACE), "--progress", "always"]
    shown = subprocess.run(base + ["--out", str(tmp_path / "a")], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "importing df_index_resolver.json.gz" in shown.stderr
    quiet = subprocess.run(base + ["--quiet", "--out", str(tmp_path / "b")], capture_output=True, text=True,
                           timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert quiet.stdout.startswith("imported 1 file(s) into ")


def test_force_replaces_a_store_but_never_a_file_or_a_folder_of_other_things(tmp_path, capsys):
    """--force swapped out whatever --out named: a typo'd --out deleted a file or a whole folder of the user's."""
    trace = _mxnet_file(tmp_path / "profile_rank0.json", 0)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    a_folder = tmp_path / "thesis"
    a_folder.mkdir()
    (a_folder / "chapter1.tex").write_text("keep me too")
    for out, what in ((a_file, "a file"), (a_folder, "a folder that is not a trace store")):
        assert main(["import", str(trace), "--out", str(out), "--force"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"ddltrace: error: {out}: {what}, which --force does not replace (only a trace store): "
                       "choose another --out, or remove it yourself")
    assert a_file.read_text() == "keep me" and (a_folder / "chapter1.tex").read_text() == "keep me too"
    store = tmp_path / "store"
    assert main(["import", str(trace), "--out", str(store)]) == 0
    assert main(["import", str(trace), str(_mxnet_file(tmp_path / "profile_rank1.json", 1)), "--out", str(store),
                 "--force"]) == 0
    assert TraceStore.open(store).ranks == [0, 1]  # a store is replaced, as before


def _kineto_copy(path: Path, **changes) -> Path:
    """tests/data/torch_gloo's rank 0 trace with ``changes`` made to its header (``world_size``, ``rank``:
    distributedInfo's;
    ``shift_ns``: added to baseTimeNanoseconds)."""
    import gzip

    doc = json.loads(gzip.decompress((Path(__file__).resolve().parent / "data" / "torch_gloo" /
                                      "rank0.pt.trace.json.gz").read_bytes()))
    for key in ("world_size", "rank"):
        if key in changes:
            doc["distributedInfo"][key] = changes[key]
    doc["baseTimeNanoseconds"] += changes.get("shift_ns", 0)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("changes, why", [
    ({"world_size": 16}, "of a world of 2 and of 16 ranks"),
    ({"shift_ns": 2 * 86400 * 10**9}, "47 h 59 min apart on the wall clock"),  # 2 days less the trace's 12 s
])
def test_two_runs_giving_one_rank_are_refused_in_one_line(tmp_path, capsys, changes, why):
    """Two files that both give rank 0 but are of two runs (worlds of different sizes, or two days apart on the wall
    clock) are refused, one line naming both, and no store: merged, their rank read as one run spanning both (QA:
    two wild traces 2.8 years apart gave rank 0 a span of 24,736 h, 100 % idle). Two files of one run that give
    one rank (here a second a second later) are still merged."""
    first = _kineto_copy(tmp_path / "a.json")
    second = _kineto_copy(tmp_path / "b.json", **changes)
    assert main(["import", str(first), str(second), "--out", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ddltrace: error: {first} and {second} both give rank 0, {why}: they are of two runs (import "
                   "each into a store of its own)"]
    assert not (tmp_path / "store").exists()
    later = _kineto_copy(tmp_path / "c.json", shift_ns=10**9)
    assert main(["import", str(first), str(later), "--out", str(tmp_path / "merged")]) == 0
    store = TraceStore.open(tmp_path / "merged")
    assert store.ranks == [0] and store.rank_info(0)["files"] == [str(first), str(later)]


def test_a_rank_beyond_its_world_size_is_a_problem_and_the_world_holds_it(tmp_path, capsys):
    """distributedInfo rank 5 of a world_size 2: the import says so, and the store's world holds rank 5 (before:
    nothing said, and a world of 2 ranks with rank 5 recorded in it)."""
    trace = _kineto_copy(tmp_path / "r5.json", rank=5)
    assert main(["import", str(trace), "--out", str(tmp_path / "store")]) == 0
    assert (f"problem: {trace}: distributedInfo.rank 5 is not a rank of its world_size 2 (0 to world_size - 1)"
            in capsys.readouterr().out)
    store = TraceStore.open(tmp_path / "store")
    assert store.ranks == [5] and store.world_size == 6


def test_ranks_on_the_wall_clock_beside_ranks_on_their_own_are_an_import_problem(tmp_path, capsys):
    """One file on the wall clock, one whose times are relative to its own start: imported, each its rank, and
    the mix named as a problem of the relative one, which analyze shows (before: nothing said, and info's span of
    the two read as a run of hundreds of thousands of hours)."""
    events = [{"ph": "X", "name": "work", "cat": "cpu", "pid": 1, "tid": 1, "dur": 50}]
    wall, relative = tmp_path / "wall.json", tmp_path / "rel.json"
    wall.write_text(json.dumps({"traceEvents": [{**events[0], "ts": 1_790_000_000_000_000}]}))
    relative.write_text(json.dumps({"traceEvents": [{**events[0], "ts": 10}]}))
    assert main(["import", str(wall), str(relative), "--out", str(tmp_path / "store")]) == 0
    said = f"{relative}: its times are relative to its own start (ranks 1), while ranks 0 are on the wall clock"
    assert said in capsys.readouterr().out
    assert main(["analyze", str(tmp_path / "store")]) == 0
    assert any(line.startswith("Import problems") and said in line for line in capsys.readouterr().out.splitlines())


def test_files_of_two_runs_whose_ranks_do_not_overlap_are_said_to_be(tmp_path, capsys):
    """sample_traces/h200-graphs holds two single-GPU runs 41.5 s apart (eager, then graphed), which one import
    reads as ranks 0 and 1: an import problem says their times do not overlap, as one job's ranks' do (the H100
    straggler run's two ranks, whose profiled windows overlap, get no such line)."""
    samples = Path(__file__).resolve().parent.parent / "sample_traces"
    assert main(["import", str(samples / "h200-graphs"), "--out", str(tmp_path / "g"), "--progress", "never"]) == 0
    problems = TraceStore.open(tmp_path / "g").import_problems
    assert len(problems) == 1 and "2 groups that do not overlap" in problems[0]
    import gzip

    from ddltrace.units import format_ns

    starts = []  # each file's first event (the profiler's own 'Trace' span left out, as the import drops it)
    for path in sorted((samples / "h200-graphs").glob("*.pt.trace.json.gz")):
        events = json.load(gzip.open(path))["traceEvents"]
        starts.append(min(e["ts"] for e in events if e.get("ph") == "X" and e.get("cat") != "Trace"))
    assert f"ranks 0 first; ranks 1 {format_ns((starts[1] - starts[0]) * 1e3)} after" in problems[0]
    assert main(["import", str(samples / "h100-ddp" / "straggler1"), "--out", str(tmp_path / "s"),
                 "--progress", "never"]) == 0
    assert not TraceStore.open(tmp_path / "s").import_problems
