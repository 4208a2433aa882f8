"""The ddltrace command: info, export, --version, and exit codes / messages on bad input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddltrace import __version__
from ddltrace.cli import main

DDLTRACE = [sys.executable, "-m", "ddltrace"]


def run_cli(*args):
    return subprocess.run(DDLTRACE + list(args), capture_output=True, text=True, timeout=120)


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"ddltrace {__version__}"


def test_info_table(tiny_store, capsys):
    assert main(["info", str(tiny_store.path)]) == 0
    out = capsys.readouterr().out
    assert "world size  4 ranks (4 recorded)" in out
    summary_rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in summary_rows] == ["0", "1", "2", "3"]
    timeline = tiny_store.timeline()
    assert [int(row[1]) for row in summary_rows] == timeline.groupby("rank").size().tolist()
    assert "barrier" in out and " ms" in out and "%" in out


def test_info_json_matches_the_store(tiny_store, capsys):
    assert main(["info", str(tiny_store.path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    timeline = tiny_store.timeline()
    assert doc["world_size"] == 4
    assert doc["events"] == len(timeline)
    barrier_rank2 = int(timeline[(timeline["rank"] == 2) & (timeline["category"] == "barrier")]["dur_ns"].sum())
    assert doc["ranks"][2]["time_ns"]["barrier"] == barrier_rank2
    assert doc["span_ns"] == int((timeline["start_ns"] + timeline["dur_ns"]).max() - timeline["start_ns"].min())


def test_info_gives_the_stores_notes_and_not_its_import_problems_twice(tiny_store, tmp_path, capsys):
    """The notes a run left in the store (a sampler that could not run, emulated compute) are `info`'s, one line
    each, and in its JSON; an import problem stays on its own "problem" line."""
    import shutil

    from ddltrace.store import IMPORT_PROBLEM

    copy = tmp_path / "noted"
    shutil.copytree(tiny_store.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["notes"] = ["GPU sampler off: NVML not usable here", f"{IMPORT_PROBLEM}r1.json: JSON truncated at byte 9"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert main(["info", str(copy)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("note ")] == ["note        GPU sampler off: NVML not usable here"]
    assert "problem     r1.json: JSON truncated at byte 9" in lines
    assert main(["info", str(copy), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["notes"] == ["GPU sampler off: NVML not usable here"]
    assert doc["import_problems"] == ["r1.json: JSON truncated at byte 9"]
    manifest["notes"] = [f"import r{i}.json (chrome): 9 events read" for i in range(25)]  # a note per file imported
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert main(["info", str(copy)]) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note ")]
    assert len(shown) == 11 and shown[-1] == "note        ... and 15 more notes (info --json lists them all)"


def test_export_command(tiny_store, tmp_path):
    out = tmp_path / "t.json"
    result = run_cli("export", str(tiny_store.path), "--chrome", str(out))
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["traceEvents"]
    assert str(out) in result.stdout


@pytest.mark.parametrize("args, message", [
    (["info", "/no/such/store"], "/no/such/store: no such trace store"),
    (["info", "{file}"], "not a trace store"),
    (["export", "{store}", "--chrome", "/no/such/dir/t.json"], "/no/such/dir: no such directory"),
    (["export", "{store}", "--chrome", "{tmp}/t.json", "--ranks", "x"], "--ranks: 'x' is not a rank"),
    (["export", "{store}", "--chrome", "{tmp}/t.json", "--ranks", "7"], "no rank 7"),
    (["export", "{store}", "--chrome", "{tmp}/t.json", "--ranks", "3-1"], "--ranks: '3-1' is an empty range"),
    (["info"], "the following arguments are required"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_gives_one_line_and_exit_2(args, message, tiny_store, tmp_path):
    a_file = tmp_path / "plain.txt"
    a_file.write_text("hello")
    args = [a.format(file=a_file, store=tiny_store.path, tmp=tmp_path) for a in args]
    result = run_cli(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert message in lines[-1]
    assert len([line for line in lines if "error" in line]) == 1


def test_debug_shows_the_traceback():
    result = run_cli("--debug", "info", "/no/such/store")
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "no such trace store" in result.stderr


def test_truncated_store_file_is_reported_by_name(tiny_store):
    path = tiny_store.path / "timeline" / "rank-00003.parquet"
    path.write_bytes(path.read_bytes()[:100])
    result = run_cli("info", str(tiny_store.path))
    assert result.returncode == 0  # the other ranks are shown; the damaged one is named and left out
    assert "warning:" in result.stderr and "rank-00003.parquet: corrupt Parquet file" in result.stderr
    assert "rank 3 left out" in result.stderr and "(3 recorded)" in result.stdout


def test_merging_a_store_with_itself_is_one_line_a_user_can_act_on(tmp_path, capsys):
    """The CLI has no renumbering: its error names the overlap and says why, not a Python keyword argument."""
    store = Path(__file__).resolve().parents[1] / "sample_traces" / "ps-sgd" / "par-w2" / "store"
    capsys.readouterr()
    assert main(["merge", str(store), str(store), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"ddltrace: error: {store}: ranks 0-2 are also in {store}: two parts of one job hold different "
                   "ranks")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("args, hint", [
    (["analyse", "{store}"], "did you mean 'analyze'?"),
    (["info", "{store}", "--jsno"], "did you mean '--json'?"),
    (["analyze", "{store}", "--thresold=ps.busy_min=0.9", "--jsn"],
     "did you mean '--threshold' for '--thresold', '--json' for '--jsn'?"),
    (["model", "fti"], "did you mean 'fit'?"),
    (["analyze", "{store}", "--phase", "stedy"], "did you mean 'steady'?"),
    (["info", "{store}", "--debug"], "--debug goes before the command ('ddltrace --debug VERB ...')"),
])
def test_a_near_miss_of_a_verb_or_option_names_the_one_meant(args, hint, tiny_store):
    result = run_cli(*[a.format(store=tiny_store.path) for a in args])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and hint in result.stderr


def test_a_word_like_no_verb_gets_no_suggestion():
    result = run_cli("frobnicate")
    assert result.returncode == 2 and "invalid choice" in result.stderr and "did you mean" not in result.stderr


def test_a_trace_where_a_store_is_expected_says_how_to_make_one(tmp_path):
    """info/export on trace files (a folder of them, or one): the one line says how to make a store of them."""
    trace = tmp_path / "traces"
    trace.mkdir()
    (trace / "rank0.pt.trace.json").write_text('{"traceEvents": []}')
    for path in (trace, trace / "rank0.pt.trace.json"):
        result = run_cli("info", str(path))
        assert result.returncode == 2 and result.stderr.count("\n") == 1
        assert f"{path}: not a trace store" in result.stderr
        assert f"'ddltrace import {path} --out STORE', or give them to analyze or report" in result.stderr


def test_run_leaves_stdout_to_the_job(tmp_path):
    """`ddltrace run`'s own lines, its notes included (the GPU sampler off where NVML is missing), go to stderr:
    a job's stdout redirected to a file holds the job's output only."""
    result = run_cli("run", "--out", str(tmp_path / "store"), "--no-progress", "--",
                     sys.executable, "-c", "print('the job says 42')")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "the job says 42\n"
    assert "ddltrace: wrote " in result.stderr


def test_info_says_a_rank_missing_from_an_imported_trace_is_not_in_the_files(tmp_path, capsys):
    """df_index_resolver is rank 1 of a world of 2 (distributedInfo): rank 0 is not in the file, which info called
    'no usable entry in the manifest', as if the store were damaged."""
    from shared_data import SHARED

    trace = SHARED / "hta_traces" / "df_index_resolver" / "df_index_resolver.json.gz"
    if not trace.is_file():
        pytest.skip(f"{trace} absent (the workplace's shared traces)")
    world = json.loads(gzip.decompress(trace.read_bytes()))["distributedInfo"]
    assert (world["rank"], world["world_size"]) == (1, 2)
    store = tmp_path / "store"
    assert main(["import", str(trace), "--out", str(store), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["info", str(store)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("not listed"))
    assert line == ("not listed  rank 0 of the world of 2: not in the files imported, whose run names that world, so "
                    "no timeline here")


def test_a_rank_of_a_node_whose_part_was_not_gathered_is_said_so_not_a_damaged_manifest(tiny_store, tmp_path,
                                                                                        capsys):
    """A run whose node's part was not gathered notes the ranks none of whose files it gathered; info and analyze
    gave 'no usable entry in the manifest' for them, as if the store were damaged (QA, a simulated node killed)."""
    import shutil

    from ddltrace.merged_manifest import no_record_note

    copy = tmp_path / "part"
    shutil.copytree(tiny_store.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["run"]["world_size"] = 5  # the tiny store's ranks 0-3, and rank 4 on the node not gathered
    note = no_record_note([4], 5, True, {"n2": "/tmp/part-of-n2"})
    manifest["notes"] = [note]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert main(["info", str(copy)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("not listed"))
    assert line == f"not listed  rank 4 of the world of 5: the run's note: {note}, so no timeline here"
    assert "missing node(s) n2, which `ddltrace merge` joins" in line
    assert main(["analyze", str(copy), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stores"][0]["missing_ranks"] == [{"rank": 4, "reason": note}]


def test_a_framework_profilers_window_is_said_where_the_stores_time_is_shown(tmp_path, capsys):
    """A store of `run --framework` holds the profiler's window of steps, not the job: info's time span, analyze's
    breakdown and the report's verdict say so (QA: 'time span 373 ms' of an 8.5 s job, 'shares of the whole run')."""
    from ddltrace.store import write_store

    rows = [{"rank": 0, "lane": "cpu/thread 1", "name": f"ProfilerStep#{s}", "category": "compute",
             "start_ns": s * 1_000_000, "dur_ns": 900_000, "step": s} for s in range(5, 10)]
    write_store(tmp_path / "s", rows, run={"command": "torchrun job.py", "world_size": 1, "framework": "pytorch",
                                           "profiled_steps": [5, 9]})
    window = "the profiled steps 5-9 (the framework profiler's window: the time and shares are of it, not of the " \
             "whole job)"
    assert main(["info", str(tmp_path / "s")]) == 0
    assert f"time span   4.9 ms, {window}" in capsys.readouterr().out
    assert main(["analyze", str(tmp_path / "s"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "; shares of the profiled steps 5-9)" in out and f"  the store holds {window}" in out


def test_info_gives_the_jobs_own_cpu_and_memory_beside_the_machines(tmp_path, capsys):
    """The sampler's job_cpu_percent and job_rss_bytes (the job's processes) are info's, beside the machine's
    figures, which hold every other user of the node too (QA: info gave 96 % and 1.9 GiB, the machine's, for a job
    that used 31 % of a core and 526 MiB, figures only the store's files held)."""
    from ddltrace.store import write_store

    rows = [{"rank": 0, "lane": "main", "name": "job", "category": "compute", "start_ns": 0, "dur_ns": 10**9}]
    samples = [(name, t * 10**8, value) for t in range(10) for name, value in
               (("cpu_percent", 90.0), ("mem_used_bytes", 2e9), ("job_cpu_percent", 30.0 + t),
                ("job_rss_bytes", 1e8 * (t + 1)))]
    counters = [{"rank": -1, "name": n, "t_ns": t, "value": v} for n, t, v in samples]
    write_store(tmp_path / "s", rows, counters, run={"command": "job", "world_size": 1, "hosts": ["vm"]})
    assert main(["info", str(tmp_path / "s")]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("node "))
    assert lines[header].split()[-6:] == ["job", "CPU", "mean", "job", "memory", "peak"]
    assert lines[header + 1].split()[-4:] == ["34.5", "%", "954", "MiB"]  # mean of 30..39 %, 1e9 B
    assert main(["info", str(tmp_path / "s"), "--json"]) == 0
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    assert (node["job_cpu_percent"], node["job_rss_peak_bytes"]) == (34.5, 1e9)


def test_info_counts_a_nodes_samples_where_it_sampled_no_cpu(tmp_path, capsys):
    """The bundled sample store's node sampled memory 30 times and CPU never: its ``samples`` read 0 beside a
    memory peak of those 30 samples (QA s20: only ``cpu_percent`` samples were counted). Checked against the file."""
    import make_sample_store
    import pyarrow.parquet as pq

    make_sample_store.main([str(tmp_path / "tiny")])
    machine = pq.read_table(tmp_path / "tiny" / "counters" / "machine.parquet").to_pandas()
    per_series = machine.groupby("name").size()
    assert "cpu_percent" not in per_series.index and per_series.max() == 30
    capsys.readouterr()
    assert main(["info", str(tmp_path / "tiny"), "--json"]) == 0
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    assert node["samples"] == per_series.max() and node["mem_peak_bytes"] == machine["value"].max()
