"""Hostile Chrome traces (issue 21 items 4, 6, 7): memory that does not grow with what the reader skips, names cut at
a documented length, early and exact one-line errors.

The gzip bombs are written here, streamed (64 MiB of text in 0.3 MB on disk; the full sizes are in
benchmarks/import_hostile_memory.py), and each import whose memory is checked runs in a fresh process whose peak
resident memory (VmHWM) is compared with a clean file's import in another fresh process."""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
from pathlib import Path

import msgspec
import pytest

from ddltrace.cli import main
from ddltrace.collectors.importers import chrome
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.collectors.importers.source import READ_SIZE, ByteSource
from ddltrace.store import TraceStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from import_hostile_memory import import_peak, write_events, write_long_name, write_spaces  # noqa: E402

MiB = 1 << 20
#: The documented bounds (docs/IMPORTERS.md, "Hostile input"; chrome.LOOKAHEAD, NAME_CUT, NAME_MARK).
LOOKAHEAD_MIB, NAME_CUT, NAME_MARK = 16, 16384, "…"
#: How much more than the clean file's import a bomb's import may take (its text is 64 MiB or more).
EXTRA = 48 * MiB


#: Events in the clean file, and in the file with bad times.
EVENTS = 50_000


@pytest.fixture(scope="module")
def clean_peak(tmp_path_factory):
    """Peak resident memory (MiB) of importing a clean trace of ``EVENTS`` events, in a fresh process."""
    folder = tmp_path_factory.mktemp("clean")
    write_events(folder / "clean.json.gz", EVENTS)
    result = import_peak(folder / "clean.json.gz", folder / "store")
    assert result["rc"] == 0, result["stderr"]
    return result["peak_mib"]


def test_spaces_bomb_is_refused_early_in_bounded_memory(tmp_path, clean_peak):
    bomb = tmp_path / "spaces.json.gz"
    size = write_spaces(bomb, 64 * MiB, level=1)
    assert bomb.stat().st_size < MiB and size > 64 * MiB
    result = import_peak(bomb, tmp_path / "store")
    assert result["rc"] == 2
    assert f"spaces.json.gz: no events in the first {LOOKAHEAD_MIB} MiB of the events array (only whitespace)" \
        in result["stderr"]
    assert "Traceback" not in result["stderr"]
    assert result["peak_mib"] < 1024 and result["peak_mib"] < clean_peak + EXTRA / MiB


def test_long_name_is_cut_and_said_in_bounded_memory(tmp_path, clean_peak):
    bomb = tmp_path / "name.json.gz"
    write_long_name(bomb, 64 * MiB, level=1)
    result = import_peak(bomb, tmp_path / "store")
    assert result["rc"] == 0, result["stderr"]
    assert f"1 name(s) longer than {NAME_CUT} characters cut to their first {NAME_CUT}" in result["stdout"]
    assert result["peak_mib"] < 1024 and result["peak_mib"] < clean_peak + EXTRA / MiB
    timeline = TraceStore.open(tmp_path / "store").timeline().sort_values("start_ns")
    assert timeline["name"].tolist() == ["a" * NAME_CUT + NAME_MARK, "after"]
    assert timeline["dur_ns"].tolist() == [5000, 7000]


def test_bad_times_are_counted_in_bounded_memory(tmp_path, clean_peak):
    count = EVENTS
    bad = tmp_path / "bad.json.gz"
    write_events(bad, count, bad_every=10)
    text = gzip.decompress(bad.read_bytes()).decode()
    expected = {"undecodable JSON (event skipped)": len(re.findall(r'"ts": NaN', text)),
                "negative duration": len(re.findall(r'"dur": -', text)),
                "times out of range (not finite, or beyond 2**53 µs)": len(re.findall(r'"ts": 1e300', text))}
    assert sum(expected.values()) == count // 10
    result = import_peak(bad, tmp_path / "bad_store")
    assert result["rc"] == 0
    for why, n in expected.items():
        assert f"skipped {n} event(s): {why}" in result["stdout"]
    assert len(TraceStore.open(tmp_path / "bad_store").timeline()) == count - count // 10
    assert result["peak_mib"] < clean_peak + EXTRA / MiB


def test_gzip_inflates_in_bounded_pieces(tmp_path):
    bomb = tmp_path / "spaces.json.gz"
    size = write_spaces(bomb, 16 * MiB)  # 16 KB at level 9: one read of 16 KiB inflates to all of it
    pieces = [len(piece) for piece in ByteSource(bomb).chunks()]
    assert sum(pieces) == size and max(pieces) <= READ_SIZE


def _deep_event(depth: int) -> str:
    return ('{"ph": "X", "name": "deep", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"a": '
            + "[" * depth + "]" * depth + "}}")


@pytest.mark.parametrize("where", ["last piece", "middle piece"])
def test_args_nested_200k_deep_skip_one_event_with_one_line(tmp_path, monkeypatch, where):
    ordinary = [json.dumps({"ph": "X", "name": f"k{i}", "pid": 1, "tid": 1, "ts": 10 + i, "dur": 1})
                for i in range(400)]
    if where == "middle piece":
        monkeypatch.setattr(chrome, "PIECE_SIZE", 4096)
    events = ordinary[:200] + [_deep_event(200_000)] + ordinary[200:]
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [' + ", ".join(events) + '], "displayTimeUnit": "ms"}')
    trace = read_chrome(path)
    assert len(trace.ts_ns) == 400 and trace.skipped["event nested too deep to decode"] == 1
    deep_at = path.read_bytes().index(b'{"ph": "X", "name": "deep"')
    assert any(f"the event at byte {deep_at}" in p and "it was skipped" in p for p in trace.problems)
    assert trace.header == {"displayTimeUnit": "ms"}


def test_deep_args_through_the_command_is_one_line_not_a_traceback(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}, '
                    + _deep_event(200_000) + "]}")
    assert main(["import", str(path), "--out", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 event(s): event nested too deep to decode" in out and "1 intervals kept" in out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_device_and_symlink_loop_are_named_for_what_they_are(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    cases = {fifo: "not a regular file (a FIFO)", Path("/dev/zero"): "not a regular file (a character device)",
             tmp_path / "loop1": "a symbolic link loop", tmp_path / "dangling": "no such file or folder (a symbolic "
             "link to nothing)"}
    for path, message in cases.items():
        assert main(["import", str(path), "--out", str(tmp_path / "store")]) == 2
        err = capsys.readouterr().err
        assert f"{path}: {message}" in err and "Traceback" not in err


def test_utf8_byte_order_mark_is_accepted(tmp_path, capsys):
    path = tmp_path / "bom.json"
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"traceEvents": events}).encode())
    for extra in ([], ["--format", "chrome"]):
        assert main(["import", str(path), "--out", str(tmp_path / f"s{len(extra)}"), *extra]) == 0
        assert "1 intervals kept" in capsys.readouterr().out


def test_whitespace_file_is_said_early(tmp_path, capsys):
    path = tmp_path / "spaces.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        for _ in range(64):
            fh.write(b" " * MiB)
    assert main(["import", str(path), "--out", str(tmp_path / "s"), "--format", "chrome"]) == 2
    assert f"no events in the first {LOOKAHEAD_MIB} MiB (only whitespace)" in capsys.readouterr().err
    assert main(["import", str(path), "--out", str(tmp_path / "s")]) == 2
    assert "its first 64 KiB are whitespace" in capsys.readouterr().err


def test_documented_bounds_are_the_readers():
    assert (chrome.LOOKAHEAD, chrome.NAME_CUT, chrome.NAME_MARK) == (LOOKAHEAD_MIB * MiB, NAME_CUT, NAME_MARK)


def test_skimmer_keeps_a_decodable_copy_cut_at_character_and_escape_boundaries():
    from ddltrace.collectors.importers.skim import Skimmer

    texts = ['{"name": "abcdefgh\\u00e9xyz", "n": [1, 2]}', '{"name": "abcdefghé€xyz"}',
             '{"name": "ab\\\\\\"cdefghixyz", "x": {"y": "\\"}"}}']
    for text in texts:
        data = text.encode()
        whole = msgspec.json.decode(data)
        fed = data + b", {"
        for keep in range(4, 20):  # keys (4 bytes at most here) are strings too
            for step in (1, 3, len(fed)):
                skimmer = Skimmer(keep, 1 << 20)
                end = next(i + e for i in range(0, len(fed), step) if (e := skimmer.feed(fed[i:i + step])) is not None)
                assert end == len(data)
                copy = msgspec.json.decode(bytes(skimmer.copy))
                assert whole["name"].encode().startswith(copy["name"].encode())
                assert len(copy["name"].encode()) <= keep


def test_skimmer_caps_its_copy_and_follows_deep_nesting():
    from ddltrace.collectors.importers.skim import Skimmer

    skimmer = Skimmer(100, 1000)
    assert skimmer.feed(b"[" * 300_000 + b"]" * 300_000 + b"]") == 600_000
    assert skimmer.too_large and not skimmer.copy
    skimmer = Skimmer(100, 1000)
    assert skimmer.feed(b'{"a": "' + b"x" * 10_000 + b'"} , {}') == 10_009 and skimmer.cut_strings == 1
