"""Measurements are not lost to the disk: ``calibrate`` refuses a folder it cannot write before measuring, and a
write that fails after the measurements (a disk that filled meanwhile, a file system remounted read-only) keeps
them in the temporary folder and names that file (ddltrace/outputs.py ``save_measured``).

Before: on a read-only file system the profile's save raised a traceback (removing its temporary file failed again,
EROFS, which ``missing_ok`` does not cover) after all the measurements, and on a full disk the one line was right
but the measured profile was gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from read_only_folder import read_only_folder
from small_tmpfs import small_tmpfs

from ddltrace.errors import DdltraceError
from ddltrace.outputs import save_measured

DDLTRACE = [sys.executable, "-m", "ddltrace"]
#: A profile of more bytes than the 16 KiB tmpfs holds.
BIG = json.dumps({"constants": {f"c{i}": {"value": i, "uncertainty": 0.1, "unit": "s"} for i in range(600)}})


def kept_file(message: str) -> Path:
    assert "what was measured is kept in " in message, message
    return Path(message.rsplit("what was measured is kept in ", 1)[1])


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_a_refused_write_keeps_the_measurements_in_the_temporary_folder(tmp_path, how):
    with small_tmpfs(tmp_path / "small", "16k") as small:
        if how == "read-only":
            text = '{"constants": {}}'
            if subprocess.run(["mount", "-o", "remount,ro", str(small)], capture_output=True).returncode:
                pytest.skip("cannot remount the tmpfs read-only")
        else:
            text = BIG
        with pytest.raises(DdltraceError) as err:
            save_measured(small / "p.json", text, "the profile")
        message = str(err.value)
        reason = "Read-only file system" if how == "read-only" else "No space left on device"
        assert message.startswith(f"{small / 'p.json'}: cannot write the profile ({reason})"), message
        assert os.listdir(small) == []  # no temporary file left beside it
    kept = kept_file(message)
    try:
        assert kept.read_text() == text  # the whole of it, byte for byte
    finally:
        kept.unlink()


def test_a_write_that_succeeds_leaves_only_the_file(tmp_path):
    assert save_measured(tmp_path / "p.json", BIG, "the profile") == tmp_path / "p.json"
    assert os.listdir(tmp_path) == ["p.json"] and (tmp_path / "p.json").read_text() == BIG


@pytest.mark.parametrize("extra", [["--quick", "--only", "mem"],
                                   ["--conv-algorithms", "--dnn", "alexnet", "--batches", "1", "--repeats", "1"]])
def test_calibrate_refuses_a_folder_it_cannot_write_before_measuring(tmp_path, extra):
    """One line, exit 2, at once: before, both ran every measurement (seconds here, minutes in full), then failed."""
    with read_only_folder(tmp_path) as (locked, prefix):
        result = subprocess.run([*prefix, *DDLTRACE, "calibrate", *extra, "--out", str(locked / "p.json")],
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [f"ddltrace: error: {locked}: cannot write "
                     f"{'a hardware profile' if '--quick' in extra else 'a DNN description with algorithm tables'}"
                     " there (Permission denied)"], result.stderr
    assert os.listdir(locked) == []


@pytest.mark.parametrize("which", ["profile", "conv_algorithms"])
def test_both_calibrations_save_through_it(tmp_path, which):
    """``calibrate``'s profile and ``--conv-algorithms``' tables: a full disk keeps what was measured (before: the
    profile lost either way, the tables a traceback on a read-only disk)."""
    from ddltrace.collectors.microbench import conv_algorithms, profile

    save = profile.save if which == "profile" else conv_algorithms.save
    doc = json.loads(BIG)
    with small_tmpfs(tmp_path / "small", "16k") as small:
        with pytest.raises(DdltraceError) as err:
            save(doc, small / "out.json")
        assert os.listdir(small) == []
    kept = kept_file(str(err.value))
    try:
        assert json.loads(kept.read_text()) == doc
    finally:
        kept.unlink()
