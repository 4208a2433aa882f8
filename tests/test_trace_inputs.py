"""`ddltrace analyze TRACE` and `ddltrace report TRACE`: a trace file or folder where a store is expected is imported
into a temporary store first (ddltrace/trace_inputs.py): the same figures as import + analyze, the run named by the
trace, nothing left behind, and a store that lost its manifest still gets the store's error."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from shared_data import SHARED

from ddltrace.cli import main

TORCH = Path(__file__).parent / "data" / "torch_gloo"


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """The temporary folder the command's stores go to, to see that they are removed."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _json(capsys, *argv: str, named: tuple[str, str] = ("", "")) -> dict:
    """The command's JSON, with ``named[0]`` written ``named[1]`` wherever it names it."""
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out.replace(*named))


def test_analyze_of_a_trace_folder_is_import_then_analyze(tmp_path, own_tmp, capsys, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    store = tmp_path / "store"
    assert main(["import", str(TORCH), "--out", str(store), "--progress", "never"]) == 0
    assert synced  # a store that is kept is flushed to the disk
    from_store = _json(capsys, "analyze", str(store), "--json", named=(str(store), str(TORCH)))
    del synced[:]
    from_trace = _json(capsys, "analyze", str(TORCH), "--json")
    assert [r["store"] for r in from_trace["stores"]] == [str(TORCH)]
    assert from_trace == from_store  # every figure, and the run named by the trace wherever the store's path was
    assert not list(own_tmp.iterdir())  # the temporary store is gone
    assert not synced  # the temporary store is not: it is removed at the end
    main(["analyze", str(TORCH)])
    out, err = capsys.readouterr()
    assert f"{TORCH} is a trace, not a store: importing it into a temporary store" in err
    assert "imported 2 file(s) into " in err and "ranks 0, 1" in err  # import's summary on stderr
    assert "imported" not in out  # stdout is analyze's own
    assert f"Breakdown of {TORCH} " in out


def test_report_of_a_trace_file_names_the_file(tmp_path, own_tmp, capsys):
    trace = TORCH / "rank0.pt.trace.json.gz"
    assert main(["report", str(trace), "--out", str(tmp_path / "report"), "--quiet"]) == 0
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert str(trace) in markdown and str(own_tmp) not in markdown
    assert not list(own_tmp.iterdir())


def test_a_store_without_its_manifest_is_not_imported(tmp_path, own_tmp, capsys):
    store = tmp_path / "store"
    assert main(["import", str(TORCH), "--out", str(store), "--progress", "never"]) == 0
    (store / "manifest.json").unlink()
    capsys.readouterr()
    assert main(["analyze", str(store)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"ddltrace: error: {store}: not a trace store (no manifest.json)"
    assert not list(own_tmp.iterdir())


def test_a_folder_with_no_trace_is_one_line_and_leaves_nothing(tmp_path, own_tmp, capsys):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "readme.txt").write_text("not a trace")
    capsys.readouterr()
    assert main(["analyze", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ddltrace: error: ") and "readme.txt" in err[-1]
    assert not list(own_tmp.iterdir())


IPM = SHARED / "mpi_traces" / "ipm-xml"


@pytest.mark.skipif(not IPM.is_dir(), reason=f"{IPM} absent (the workplace's shared traces)")
def test_a_store_read_while_the_output_is_written_is_still_there(tmp_path, own_tmp, capsys):
    # IPM's 27 hosts: the per-node section reads the ranks' MPI calls from the store while the text is written,
    # after the analyses: the temporary store must outlive the output (it was removed before and analyze failed)
    capsys.readouterr()
    assert main(["analyze", str(IPM), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"Breakdown of {IPM} " in out and "per node" in out.lower()
    assert not list(own_tmp.iterdir())


TRACE_FILTER = SHARED / "hta_traces" / "trace_filter"


@pytest.mark.skipif(not TRACE_FILTER.is_dir(), reason=f"{TRACE_FILTER} absent (the workplace's shared traces)")
def test_the_ranks_a_trace_lacks_are_named_by_the_trace(own_tmp, capsys):
    # HTA's trace_filter: ranks 0 and 1 of a world of 128 (distributedInfo), the other 126 not in the files
    out = _json(capsys, "analyze", str(TRACE_FILTER), "--json")["stores"][0]
    assert out["missing_count"] == 126
    assert out["missing_ranks"][0] == {"rank": 2, "reason": f"{TRACE_FILTER}: rank 2 of the world of 128 is not in "
                                                            "the trace"}
    assert str(own_tmp) not in json.dumps(out)


BIG_TRACE = SHARED / "hta_traces" / "df_index_resolver"


@pytest.mark.skipif(not BIG_TRACE.is_dir(), reason=f"{BIG_TRACE} absent (the workplace's shared traces)")
def test_a_sigterm_while_the_trace_is_read_removes_the_temporary_store(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    ddltrace = Path(sys.executable).parent / "ddltrace"
    job = subprocess.Popen([str(ddltrace), "analyze", str(BIG_TRACE)], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("ddltrace-analyze-*")) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    job.send_signal(signal.SIGTERM)  # while the trace is imported or analysed (a second or so of work)
    _, err = job.communicate(timeout=60)
    assert job.returncode == 143, err
    assert err.strip().splitlines()[-1] == "ddltrace: terminated (SIGTERM)"
    assert not list(tmp_path.iterdir())


def test_an_import_hint_names_the_command_that_has_the_option(tmp_path, own_tmp, capsys):
    # import's error tells the user to name the format with --format, an option analyze does not have
    (tmp_path / "e.json").write_text("")
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "e.json"), "--quiet"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "it is empty); name it with --format (" in line
    assert line.endswith(f"(ddltrace analyze imports a trace with import's defaults: give 'ddltrace import "
                         f"{tmp_path / 'e.json'} --out STORE' the options, then analyze STORE)")
    assert not list(own_tmp.iterdir())


def test_a_sigterm_right_after_the_scratch_folder_is_made_removes_it(own_tmp, monkeypatch):
    """The window the real SIGTERM above hit once in CI (5b5b2a4, 2 workers and a loaded machine): the signal handled
    right after the folder's ``mkdir``, before ``tempfile.mkdtemp`` had given its path back. Here ``mkdir`` makes
    the folder, then the interrupt comes, as ``Terminated`` would (a KeyboardInterrupt)."""
    from ddltrace.interrupts import Terminated
    from ddltrace.trace_inputs import as_stores

    real_mkdir = os.mkdir

    def mkdir_then_sigterm(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        if Path(path).name.startswith("ddltrace-analyze-"):
            raise Terminated()

    monkeypatch.setattr(os, "mkdir", mkdir_then_sigterm)
    trace = Path(__file__).parent / "data" / "torch_gloo_collectives"
    with pytest.raises(Terminated), as_stores([str(trace)], "analyze", quiet=True):
        pass
    assert not list(own_tmp.iterdir())
