"""The streaming Chrome trace reader: containers, pairing, damage salvage (real bytes on disk)."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from ddltrace.collectors.importers import chrome
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.errors import DdltraceError


def _write(path, events, container="object", **top):
    if container == "object":
        path.write_text(json.dumps({**top, "traceEvents": events}))
    else:
        path.write_text(json.dumps(events))
    return path


def _by_name(trace):
    out = {}
    for key, ts, dur in zip(trace.key, trace.ts_us, trace.dur_us, strict=True):
        out.setdefault(trace.keys[key][1], []).append((float(ts), float(dur)))
    return out


def test_x_events_and_header_keys_after_the_array(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 2, '
                    '"ts": 10, "dur": 5}, {"ph": "X", "name": "b", "pid": "Spans", "tid": 3, "ts": 12.5, '
                    '"dur": 1.25}], "baseTimeNanoseconds": 1700000000000000000, "displayTimeUnit": "ms"}')
    trace = read_chrome(path)
    assert trace.header == {"schemaVersion": 1, "baseTimeNanoseconds": 1700000000000000000, "displayTimeUnit": "ms"}
    assert _by_name(trace) == {"a": [(10.0, 5.0)], "b": [(12.5, 1.25)]}
    assert trace.lanes == [(1, 2), ("Spans", 3)]
    assert trace.problems == []


def test_begin_end_pairs_written_in_completion_order_and_unmatched_ends(tmp_path):
    events = [  # CNTK style: child pair before its parent's pair; then an E with no B and a B never closed
        {"ph": "B", "name": "child", "pid": 1, "tid": 1, "ts": 20},
        {"ph": "E", "name": "child", "pid": 1, "tid": 1, "ts": 30},
        {"ph": "B", "name": "parent", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "E", "name": "parent", "pid": 1, "tid": 1, "ts": 50},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 60},
        {"ph": "B", "name": "open", "pid": 1, "tid": 2, "ts": 70},
    ]
    trace = read_chrome(_write(tmp_path / "t.json", events, container="array"))
    assert _by_name(trace) == {"child": [(20.0, 10.0)], "parent": [(10.0, 40.0)]}
    assert trace.skipped["E without a matching B"] == 1
    assert trace.skipped["B never closed by an E"] == 1


def test_nameless_end_closes_the_innermost_begin(tmp_path):
    events = [{"ph": "B", "name": "ALLREDUCE", "pid": 3, "ts": 100}, {"ph": "B", "name": "QUEUE", "pid": 3, "ts": 101},
              {"ph": "E", "pid": 3, "ts": 105}, {"ph": "E", "pid": 3, "ts": 110, "args": {"dtype": "float32"}}]
    trace = read_chrome(_write(tmp_path / "t.json", events, container="array"))
    assert _by_name(trace) == {"QUEUE": [(101.0, 4.0)], "ALLREDUCE": [(100.0, 10.0)]}
    assert list(trace.end_args.values()) == [{"dtype": "float32"}]


def test_never_closed_array_as_old_horovod_writes(tmp_path):
    path = tmp_path / "timeline.json"
    path.write_text('[\n{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 1, "pid": 1},\n'
                    '{"ph": "E", "ts": 4, "pid": 1},\n{"ph": "X", "name": "0", "ts": 2, "pid": 1, "dur": 0},\n')
    trace = read_chrome(path)
    assert _by_name(trace) == {"0": [(2.0, 0.0)], "NEGOTIATE_ALLREDUCE": [(1.0, 3.0)]}
    assert trace.skipped["events array never closed (tolerated)"] == 1


def test_gzip_and_many_pieces_give_the_same_result_as_one_piece(tmp_path, monkeypatch):
    events = [{"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "pid": 9785678402843609691, "tid": i % 3,
               "ts": 1669783687464181 + i, "dur": i % 5, "args": {"s": "}, {", "n": [{"a": 1}, {"b": 2}]}}
              for i in range(3000)]
    plain = _write(tmp_path / "t.json", events, distributedInfo={"rank": 3})
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    whole = read_chrome(plain)
    monkeypatch.setattr(chrome, "PIECE_SIZE", 4096)
    pieces = read_chrome(packed)
    assert pieces.read == whole.read == 3000
    assert pieces.lanes == whole.lanes and pieces.keys == whole.keys
    assert (pieces.ts_us == whole.ts_us).all() and (pieces.dur_us == whole.dur_us).all()
    assert pieces.lanes[0][0] == 9785678402843609691  # 64-bit ids stay exact
    assert pieces.header["distributedInfo"] == {"rank": 3}


def test_truncated_json_keeps_the_complete_events_and_says_where(tmp_path):
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(10)]
    text = json.dumps({"traceEvents": events})
    path = tmp_path / "t.json"
    path.write_text(text[:-30])
    trace = read_chrome(path)
    assert trace.read == 9
    assert trace.skipped["truncated event at the end of the file"] == 1
    assert any(f"byte {len(text[:-30].rstrip())}" in p for p in trace.problems)


def test_nothing_valid_names_the_byte_offset(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[{"ph": "X", "name": "a", "ts": 1, "dur": 2 oops')
    with pytest.raises(DdltraceError, match=r"t.json: (malformed|truncated) JSON at byte \d+"):
        read_chrome(path)


def test_not_json_at_all(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("hello")
    with pytest.raises(DdltraceError, match=r"t.json: not JSON \(byte 0"):
        read_chrome(path)


def test_corrupt_gzip_keeps_what_was_decoded(tmp_path):
    events = [{"ph": "X", "name": f"e{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(20000)]
    data = bytearray(gzip.compress(json.dumps({"traceEvents": events}).encode(), compresslevel=1))
    cut = len(data) * 2 // 3
    data[cut:cut + 64] = bytes(64)  # zero a stretch of the deflate stream
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(data))
    trace = read_chrome(path)
    assert 0 < trace.read < 20000
    assert any("gzip" in p for p in trace.problems)


def test_corrupt_gzip_crc_keeps_every_event_inflated_before_it(tmp_path):
    """Only the member's CRC is wrong: every byte inflates, so every event is kept (the reader lost the last
    16 KiB step's inflated events, hundreds of them, with the exception the checksum raised)."""
    events = [{"ph": "X", "name": f"e{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(20000)]
    data = bytearray(gzip.compress(json.dumps({"traceEvents": events}).encode(), compresslevel=1))
    data[-8] ^= 0xFF  # the CRC-32 of the gzip trailer
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(data))
    trace = read_chrome(path)
    assert trace.read == 20000 and sorted(_by_name(trace)) == sorted(f"e{i}" for i in range(20000))
    found = (re.search(r"corrupt gzip data at compressed byte (\d+)", p) for p in trace.problems)
    where = [int(m.group(1)) for m in found if m]
    assert len(where) == 1 and len(data) - 8 <= where[0] < len(data) - 4, trace.problems  # in the CRC's 4 bytes


def test_wrong_types_negative_durations_and_unknown_phases_are_counted(tmp_path):
    events = [{"ph": "X", "name": "good", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
              {"ph": "X", "name": "bad-ts", "pid": 1, "tid": 1, "ts": "soon", "dur": 2},
              {"ph": "X", "name": "neg", "pid": 1, "tid": 1, "ts": 1, "dur": -3},
              {"ph": "X", "name": "nodur", "pid": 1, "tid": 1, "ts": 1},
              {"ph": "Z", "name": "what", "pid": 1, "tid": 1, "ts": 1},
              {"ph": 7}, [1, 2], {}]
    trace = read_chrome(_write(tmp_path / "t.json", events))
    assert list(_by_name(trace)) == ["good"]
    assert trace.skipped["invalid event: ts is not a number"] == 1
    assert trace.skipped["negative duration"] == 1
    assert trace.skipped["X event without ts or dur"] == 1
    assert trace.skipped["unknown phase 'Z'"] == 1
    assert trace.skipped["invalid event: missing or non-string ph"] == 1
    assert trace.skipped["invalid event: not a JSON object"] == 1
    assert trace.skipped["events without a phase (ph), such as TF2's trailing {}"] == 1


def test_metadata_and_counters(tmp_path):
    events = [{"ph": "M", "name": "process_name", "pid": 5, "args": {"name": "cpu/0"}},
              {"ph": "M", "name": "thread_name", "pid": 5, "tid": 6, "args": {"name": "worker"}},
              {"ph": "C", "name": "Memory", "pid": 5, "ts": 3, "args": {"used": 10, "free": 2.5}}]
    trace = read_chrome(_write(tmp_path / "t.json", events))
    assert trace.process_names == {5: "cpu/0"} and trace.thread_names == {(5, 6): "worker"}
    assert sorted(trace.counters) == [(5, "Memory.free", 3000, 2.5), (5, "Memory.used", 3000, 10.0)]  # t in ns


def test_invalid_utf8_is_bad_input_not_a_crash(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"tr\x80ce": 1}')
    with pytest.raises(DdltraceError, match="t.json"):
        read_chrome(path)
    path.write_bytes(b'[{"ph": "X", "name": "ok", "ts": 1, "dur": 1},\n{"ph": "X", "name": "\xff\xfe", "ts": 2, '
                     b'"dur": 1}]')
    trace = read_chrome(path)
    assert trace.read == 1 and trace.skipped["undecodable JSON (event skipped)"] == 1


def test_times_out_of_range_are_counted_not_overflowed(tmp_path):
    """Times no clock gives (beyond 2**53 µs, or beyond float) are damage: counted and left out, everywhere a
    time is read (X, B/E pairs, counters; a flow arrow's is not read, the arrow only counted), and the rest still
    imports into a valid timeline."""
    from ddltrace.collectors.importers import Categorizer, ImportContext, get_importer
    from ddltrace.collectors.importers.base import FileReport

    huge = 10**400  # beyond float64 as well
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + ",".join([
        '{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 10, "dur": 5}',
        '{"ph": "X", "name": "far", "pid": 1, "tid": 1, "ts": 1e300, "dur": 5}',
        f'{{"ph": "X", "name": "long", "pid": 1, "tid": 1, "ts": 10, "dur": {huge}}}',
        '{"ph": "X", "name": "late", "pid": 1, "tid": 1, "ts": 9007199254740993, "dur": 1}',
        '{"ph": "B", "name": "b", "pid": 1, "tid": 2, "ts": -1e20}',
        '{"ph": "E", "name": "b", "pid": 1, "tid": 2, "ts": 20}',
        '{"ph": "C", "name": "mem", "pid": 1, "ts": 1e99, "args": {"bytes": 3}}',
        '{"ph": "s", "cat": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 1e99}']) + "]}")
    trace = read_chrome(path)
    assert _by_name(trace) == {"ok": [(10.0, 5.0)]}
    assert trace.skipped["times out of range (not finite, or beyond 2**53 µs)"] == 5
    assert trace.skipped["E without a matching B"] == 1 and trace.counters == []
    assert trace.skipped["flow arrows (s/t/f)"] == 1
    ctx = ImportContext(Categorizer(), report=FileReport(str(path)))
    (part,) = get_importer("chrome").read(path, ctx)
    assert part.timeline["name"].tolist() == ["ok"] and part.timeline["start_ns"].tolist() == [10_000]
