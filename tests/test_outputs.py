"""`report` and `export` write all of their output or none of it: a full disk (a small tmpfs, as root) or a failed
analysis is one line, exit 2, and leaves neither partial files nor an empty --out (ddltrace/outputs.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from read_only_folder import read_only_folder
from small_tmpfs import small_tmpfs

DDLTRACE = [sys.executable, "-m", "ddltrace"]


def cli(*args):
    return subprocess.run([*DDLTRACE, *map(str, args)], capture_output=True, text=True, timeout=300)


def assert_one_error_line(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in lines if not line.startswith("ddltrace report: ")]  # progress lines
    assert len(errors) == 1 and errors[0].startswith("ddltrace: error: "), result.stderr
    for word in words:
        assert word in errors[0], errors[0]


@pytest.fixture
def full_disk(tmp_path):
    """A 16 KiB tmpfs, unmounted at the end whatever happens."""
    with small_tmpfs(tmp_path / "small", "16k") as small:
        yield small


@pytest.mark.parametrize("existing", [False, True])
def test_report_on_a_full_disk_is_one_line_and_leaves_nothing(tiny_store, full_disk, existing):
    out = full_disk / "report"
    if existing:  # a folder of the user's: what is in it stays as it was
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    result = cli("report", tiny_store.path, "--out", out, *(["--force"] if existing else []))
    assert_one_error_line(result, f"{out}: cannot write the report (No space left on device); nothing was written")
    assert list(full_disk.iterdir()) == ([out] if existing else [])  # no temporary folder left either
    if existing:
        assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


def test_export_on_a_full_disk_is_one_line_and_leaves_nothing(tiny_store, full_disk):
    out = full_disk / "trace.json"
    result = cli("export", tiny_store.path, "--chrome", out)
    assert_one_error_line(result, f"{out}: cannot write the Chrome trace (No space left on device)")
    assert list(full_disk.iterdir()) == []


def test_import_on_a_full_disk_is_one_line_and_leaves_nothing(full_disk):
    from pathlib import Path

    torch = Path(__file__).parent / "data" / "torch_gloo"  # 22 kB gzipped, more than 16 KiB as a store
    out = full_disk / "store"
    result = cli("import", torch, "--out", out)
    assert_one_error_line(result, f"{out}: cannot write the store (", "No space left on device",
                          "nothing was written")
    assert list(full_disk.iterdir()) == []  # neither the staging folder nor the lock
    # analyze on a trace imports it into a temporary store in TMPDIR: the same line, nothing left there
    result = subprocess.run([*DDLTRACE, "analyze", str(torch), "--quiet"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TMPDIR": str(full_disk)})
    assert_one_error_line(result, f"{full_disk}/ddltrace-analyze-", "cannot write the store (",
                          "No space left on device")
    assert list(full_disk.iterdir()) == []


def test_merge_on_a_full_disk_is_one_line_and_leaves_nothing(full_disk, tmp_path):
    from pathlib import Path

    torch = Path(__file__).parent / "data" / "torch_gloo"
    for rank in (0, 1):  # two stores of one job, a rank each
        assert cli("import", torch / f"rank{rank}.pt.trace.json.gz", "--out", tmp_path / f"r{rank}").returncode == 0
    out = full_disk / "merged"
    result = cli("merge", tmp_path / "r0", tmp_path / "r1", "--out", out)
    assert_one_error_line(result, f"{out}: cannot write the store (No space left on device); nothing was written")
    assert list(full_disk.iterdir()) == []


def test_a_failed_report_leaves_no_empty_out(tiny_store, tmp_path):
    for rank in tiny_store.ranks:  # every rank's file damaged: the analysis fails after the stores are opened
        (tiny_store.path / "timeline" / f"rank-{rank:05d}.parquet").write_bytes(b"PAR1 not really")
    out = tmp_path / "report"
    result = cli("report", tiny_store.path, "--out", out)
    assert_one_error_line(result, "no rank can be read", "corrupt Parquet file")
    assert not out.exists() and not list(tmp_path.glob(".report.*"))


def test_report_into_a_read_only_folder_is_one_line_before_the_analysis(tiny_store, tmp_path):
    with read_only_folder(tmp_path) as (locked, prefix):
        result = subprocess.run([*prefix, *DDLTRACE, "report", str(tiny_store.path), "--out", str(locked / "r")],
                                capture_output=True, text=True, timeout=300)
    assert_one_error_line(result, f"{locked}: cannot write the report there (Permission denied)")
    assert "analysing" not in result.stderr and not (locked / "r").exists()


def test_a_sigterm_during_the_export_leaves_no_partial_file(tmp_path):
    """SIGTERM is met as Ctrl-C is (ddltrace/cli.py): the export's temporary file is removed and the command exits
    143; Python's default ended it at once and left the file (.trace.json.XXXX.tmp) beside --out."""
    import signal
    import time

    from shared_data import SHARED

    trace = SHARED / "hta_traces" / "df_index_resolver"
    if not trace.is_dir():
        pytest.skip(f"{trace} absent (the workplace's shared traces)")
    store, out = tmp_path / "store", tmp_path / "out"
    assert cli("import", trace, "--out", store).returncode == 0
    out.mkdir()
    job = subprocess.Popen([*DDLTRACE, "export", str(store), "--chrome", str(out / "trace.json")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(out.glob(".trace.json.*")) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    job.send_signal(signal.SIGTERM)  # while the file is written
    _, err = job.communicate(timeout=60)
    assert job.returncode == 143, err
    assert err.strip().splitlines()[-1] == "ddltrace: terminated (SIGTERM)"
    assert os.listdir(out) == []


def _mkdir_then_sigterm(monkeypatch):
    """``os.mkdir`` that makes a staging folder (``.NAME.XXXX.tmp``) and then meets a SIGTERM, as ``Terminated``
    would be raised were the signal handled the instant after the call (a loaded machine may stop the process
    there)."""
    from ddltrace.interrupts import Terminated

    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        name = os.path.basename(path)
        if name.startswith(".") and name.endswith(".tmp"):
            raise Terminated()

    monkeypatch.setattr(os, "mkdir", mkdir)
    return Terminated


def test_a_sigterm_right_after_a_staging_folder_is_made_leaves_nothing(tmp_path, monkeypatch):
    """An output folder (report) and a store (import, merge) are built in a staging folder beside them; its name is
    held before the folder is made, so a signal right after ``mkdir`` removes it (with ``tempfile.mkdtemp`` it
    stayed, ``.out.XXXX.tmp`` beside the user's output)."""
    from ddltrace.outputs import output_folder
    from ddltrace.store import TraceStore, building

    terminated = _mkdir_then_sigterm(monkeypatch)
    with pytest.raises(terminated), output_folder(tmp_path / "report", "the report"):
        pass
    with pytest.raises(terminated), building(tmp_path / "store") as staging:
        TraceStore.create(staging)
    assert not list(tmp_path.iterdir())
