"""A gzipped Chrome trace with one corrupted byte: only the events before the damage are kept (qa-s22a, finding 3).

A damaged byte inside deflate data makes the inflater give text that goes wrong from some byte on; it notices only
later (an invalid code, or the CRC at the member's end). Back-references into the wrong text decode to events that
look right but are not the file's: the reader kept them (a Kineto trace: 105 made-up intervals, ``aten::add_`` at a
time no event of the file has). Now, once the stream is known to be corrupt, everything decoded after its first
malformed JSON is dropped and counted in the import's line. A stream that only ends early is not corrupt: its whole
decoded prefix is kept, as before.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from ddltrace.cli import main
from ddltrace.collectors.importers import chrome, chrome_split
from ddltrace.collectors.importers import source as source_module
from ddltrace.collectors.importers.chrome import DROPPED_AFTER_DAMAGE, read_chrome

#: A real Kineto trace of the repository: 208 KB of gzip (many deflate blocks), 3 MB of JSON, 7062 X events.
TRACE = Path(__file__).resolve().parents[1] / "sample_traces" / "h100-ddp" / "memory" / \
    "rank0.1795672347277199583.pt.trace.json.gz"
_SEPARATORS = re.compile(r"[\s,]*")
_DROPPED = re.compile(r"dropped the (\d+) events decoded after it \((\d+) intervals")


def _x_events(text: str) -> list[tuple[int, tuple[str, int, int]]]:
    """Each X event of a Chrome trace's text with a duration: (the offset one past its closing brace, (name, ts ns,
    dur ns)), read with the json module (times exactly, as Decimal)."""
    decoder = json.JSONDecoder(parse_float=Decimal)
    pos = text.index("[", text.index('"traceEvents"')) + 1
    events = []
    while True:
        pos = _SEPARATORS.match(text, pos).end()
        if text[pos] == "]":
            return events
        event, pos = decoder.raw_decode(text, pos)
        if event.get("ph") == "X" and "dur" in event and event["dur"] >= 0:
            events.append((pos, (event["name"], int(Decimal(event["ts"]) * 1000), int(Decimal(event["dur"]) * 1000))))


def _inflate_as_far_as_it_goes(data: bytes) -> bytes:
    """What zlib inflates of a gzip stream before it fails or the data ends (one compressed byte at a time)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    for i in range(len(data)):
        try:
            out += inflater.decompress(data[i:i + 1])
        except zlib.error:
            break
    return bytes(out)


def _kept(trace) -> list[tuple[str, int, int]]:
    return [(trace.keys[k][1], ts, dur)
            for k, ts, dur in zip(trace.key.tolist(), trace.ts_ns.tolist(), trace.dur_ns.tolist(), strict=True)]


@pytest.fixture(scope="module")
def original() -> tuple[bytes, bytes, list]:
    compressed = TRACE.read_bytes()
    text = gzip.decompress(compressed)
    assert text.isascii()  # (character offsets are byte offsets)
    return compressed, text, _x_events(text.decode())


@pytest.fixture
def corrupt(tmp_path, original) -> tuple[Path, int]:
    """The trace with one byte of its deflate data changed, three fifths in (the old reader kept 9 made-up
    intervals from it); and how many X events of the original lie wholly before the first byte where the damaged
    stream's text differs from the original's."""
    compressed, text, events = original
    damaged = bytearray(compressed)
    at = len(compressed) * 3 // 5
    damaged[at] = ord("Z") if damaged[at] != ord("Z") else ord("Y")
    path = tmp_path / "corrupt.pt.trace.json.gz"
    path.write_bytes(bytes(damaged))
    inflated = _inflate_as_far_as_it_goes(bytes(damaged))
    differs = next(i for i, (a, b) in enumerate(zip(inflated, text, strict=False)) if a != b)
    assert 0 < differs < len(text) * 9 // 10  # (the damage shows in the middle of the text, not at its end)
    return path, sum(1 for end, _ in events if end <= differs)


def test_one_corrupted_byte_keeps_only_the_events_before_the_damage(corrupt, original):
    path, before = corrupt
    trace = read_chrome(path)
    in_original = Counter(key for _, key in original[2])
    kept = Counter(_kept(trace))
    assert not kept - in_original, f"kept but not in the file: {list((kept - in_original).items())[:5]}"
    assert len(_kept(trace)) == before  # (the old reader kept 4440 of 4431)
    (line,) = [p for p in trace.problems if "corrupt gzip data at compressed byte" in p]
    dropped = _DROPPED.search(line)
    assert dropped and int(dropped.group(1)) == trace.skipped[DROPPED_AFTER_DAMAGE] > 0, line
    assert int(dropped.group(2)) > 0 and "kept what was decoded" not in line
    assert f"kept the {trace.read} events before that" in line
    assert not [p for p in trace.problems if "malformed JSON at byte" in p]  # (the garbage's lines went with it)


def test_the_import_line_says_how_many_events_were_dropped_after_the_damage(corrupt, tmp_path, capsys):
    path, _ = corrupt
    code = main(["import", str(path), "--out", str(tmp_path / "store")])
    out = "".join(capsys.readouterr())
    assert code == 0
    (line,) = [x for x in out.splitlines() if "corrupt gzip data" in x]
    assert _DROPPED.search(line) and "malformed JSON from decoded byte" in line, out
    assert re.search(rf"skipped (\d+) event\(s\): {re.escape(DROPPED_AFTER_DAMAGE)}", out), out


def test_several_processes_read_the_corrupt_file_as_one_does(corrupt, monkeypatch):
    """The split reader meets the damage and hands the file to one reader: the same events and lines."""
    path, _ = corrupt
    one = read_chrome(path)
    monkeypatch.setattr(chrome_split, "MIN_GZIP", 0)
    monkeypatch.setattr(chrome, "SHARED_PIECE_SIZE", 64 << 10)
    monkeypatch.setattr(source_module, "GZIP_READ_SIZE", 4 << 10)
    several = read_chrome(path, processes=3)
    assert _kept(several) == _kept(one) and several.problems == one.problems and several.skipped == one.skipped


def test_a_gzip_stream_cut_short_keeps_its_whole_decoded_prefix(tmp_path, original):
    """Not corrupt, only short: every X event wholly in the inflated prefix is kept, nothing is dropped."""
    compressed, _, events = original
    path = tmp_path / "cut.pt.trace.json.gz"
    path.write_bytes(compressed[:len(compressed) // 2])
    decoded = len(_inflate_as_far_as_it_goes(path.read_bytes()))
    trace = read_chrome(path)
    assert _kept(trace) == [key for end, key in events if end <= decoded]
    assert any("gzip stream truncated at compressed byte" in p for p in trace.problems)
    assert DROPPED_AFTER_DAMAGE not in trace.skipped and not [p for p in trace.problems if "dropped" in p]


def test_a_wrong_crc_alone_keeps_every_event_and_says_the_last_may_be_wrong(tmp_path, original):
    """Damage that shows as no malformed JSON (here: only the CRC is wrong): every event is kept, and the line says
    that those from the stream's last part may be wrong (a damaged byte can inflate to well-formed text)."""
    compressed, _, events = original
    damaged = bytearray(compressed)
    damaged[-8] ^= 0xFF  # the CRC-32 of the gzip trailer
    path = tmp_path / "crc.pt.trace.json.gz"
    path.write_bytes(bytes(damaged))
    trace = read_chrome(path)
    assert _kept(trace) == [key for _, key in events]
    (line,) = [p for p in trace.problems if "corrupt gzip data at compressed byte" in p]
    assert "no malformed JSON among them" in line and "may be wrong" in line and "dropped" not in line
