"""The trace store: round trip, lazy per-rank reads, atomic writes, version refusal, merge."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from ddltrace import store as store_module
from ddltrace.errors import SchemaError, StoreError
from ddltrace.store import SCHEMA_VERSION, TraceStore, merge_stores, write_store
from ddltrace.timeline import make_counters, make_timeline


def rows_for(rank, n=5, t0=0):
    return [dict(rank=rank, name=f"op{i}", category="compute" if i % 2 else "wait", start_ns=t0 + 100 * i,
                 dur_ns=50 + i, bytes=i * 8 if i % 2 else None, peer=(rank + 1) % 4, source="test")
            for i in range(n)]


def test_round_trip_keeps_values_and_dtypes(tiny_store, tmp_path):
    again = TraceStore.open(tiny_store.path)
    timeline = again.timeline()
    assert again.ranks == [0, 1, 2, 3]
    original = make_timeline(__import__("make_sample_store").build()[0])
    expected = original.sort_values(["rank", "start_ns", "lane"], kind="stable").reset_index(drop=True)
    got = timeline.sort_values(["rank", "start_ns", "lane"], kind="stable").reset_index(drop=True)
    assert dict(got.dtypes) == dict(expected.dtypes)
    pd.testing.assert_frame_equal(got, expected)
    counters = again.counters()
    assert str(counters["t_ns"].dtype) == "int64" and str(counters["rank"].dtype) == "int32"
    assert sorted(set(counters["rank"])) == [-1, 0, 1, 2, 3]
    assert again.rank_info(2)["host"] == "node0"
    assert again.manifest["schema_version"] == SCHEMA_VERSION
    assert again.manifest["ddltrace_version"]
    assert again.manifest["created"].startswith("20")


def test_reads_are_lazy_and_per_rank(tiny_store, monkeypatch):
    opened = []
    real = pq.ParquetFile  # (what the store reads a file with: pq.read_table imports pandas)
    monkeypatch.setattr(pq, "ParquetFile", lambda path, *a, **k: opened.append(str(path)) or
                        real(path, *a, **k))
    frame = tiny_store.timeline([2])
    assert set(frame["rank"]) == {2}
    assert len(opened) == 1 and opened[0].endswith("rank-00002.parquet")
    iterator = tiny_store.iter_timeline()
    rank, first = next(iterator)
    assert rank == 0 and set(first["rank"]) == {0}
    assert len(opened) == 2  # nothing read ahead
    with pytest.raises(StoreError, match="no rank 9"):
        tiny_store.timeline([9])


def test_add_rank_to_existing_store(tmp_path):
    store = TraceStore.create(tmp_path / "s", run={"command": "job"})
    store.add_rank(0, make_timeline(rows_for(0)), host="a")
    store.add_rank(1, make_timeline(rows_for(1)), make_counters(rank=[1], name=["cpu_percent"], t_ns=[5],
                                                                 value=[3.0]), host="b", ended="abrupt")
    reopened = TraceStore.open(store.path)
    assert reopened.ranks == [0, 1]
    assert reopened.rank_info(1) == {"events": 5, "start_ns": 0, "end_ns": 454, "counter_samples": 1,
                                     "host": "b", "ended": "abrupt"}
    assert reopened.counters()["value"].tolist() == [3.0]
    with pytest.raises(SchemaError, match="rows of rank"):
        store.add_rank(2, make_timeline(rows_for(3)))


def test_interrupted_rewrite_leaves_old_store_intact(tiny_store, monkeypatch):
    before = tiny_store.timeline()
    calls = {"n": 0}
    real = store_module._atomic_write_parquet

    def crash_on_third(path, frame):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("simulated crash mid-write")
        real(path, frame)

    monkeypatch.setattr(store_module, "_atomic_write_parquet", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        write_store(tiny_store.path, make_timeline(rows_for(0) + rows_for(1) + rows_for(2)), overwrite=True)
    monkeypatch.undo()
    after = TraceStore.open(tiny_store.path).timeline()
    pd.testing.assert_frame_equal(before, after)
    leftovers = [p.name for p in tiny_store.path.parent.iterdir() if p.name != tiny_store.path.name]
    assert leftovers == []


def test_interrupted_file_write_leaves_no_valid_partial_file(tmp_path, monkeypatch):
    store = TraceStore.create(tmp_path / "s")
    store.add_rank(0, make_timeline(rows_for(0)))

    def die(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(pq, "write_table", die)
    with pytest.raises(OSError):
        store.add_rank(0, make_timeline(rows_for(0, n=2)))
    files = sorted(p.name for p in (store.path / "timeline").iterdir())
    assert files == ["rank-00000.parquet"]  # the temporary file is gone, the old file remains
    monkeypatch.undo()
    assert len(TraceStore.open(store.path).timeline()) == 5


def test_newer_schema_version_is_refused_with_the_version_needed(tiny_store):
    manifest_path = tiny_store.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["schema_version"] = SCHEMA_VERSION + 1
    manifest["ddltrace_version"] = "9.0.0"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(StoreError) as err:
        TraceStore.open(tiny_store.path)
    text = str(err.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in text and "9.0.0" in text and "upgrade ddltrace" in text


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / "manifest.json").unlink(), "no manifest.json"),
    (lambda p: (p / "manifest.json").write_text("{not json"), "unreadable manifest"),
    (lambda p: (p / "manifest.json").write_text("[]"), "not a ddltrace manifest"),
    (lambda p: (p / "timeline" / "rank-00001.parquet").write_bytes(b"PAR1garbage"), "corrupt Parquet"),
    (lambda p: (p / "timeline" / "rank-00001.parquet").unlink(), "listed in the manifest but missing"),
])
def test_damaged_stores_give_one_clear_error(tiny_store, damage, message):
    damage(tiny_store.path)
    with pytest.raises(StoreError, match=message):
        TraceStore.open(tiny_store.path).timeline([0, 1, 2, 3])


def test_merge_two_stores(tmp_path):
    a = write_store(tmp_path / "a", make_timeline(rows_for(0) + rows_for(1)), run={"command": "job", "hosts": ["a"]})
    b = write_store(tmp_path / "b", make_timeline(rows_for(2) + rows_for(3)), run={"command": "job", "hosts": ["b"]},
                    counters=make_counters(rank=[-1, 2], name=["mem_used_bytes", "cpu_percent"], t_ns=[1, 2],
                                           value=[1.0, 2.0]))
    merged = merge_stores(a, b, tmp_path / "m")
    assert merged.ranks == [0, 1, 2, 3]
    assert merged.world_size == 4
    assert len(merged.timeline()) == 20
    assert sorted(merged.counters()["rank"].tolist()) == [-1, 2]
    with pytest.raises(StoreError, match="also in"):
        merge_stores(a, a, tmp_path / "m2")
    renumbered = merge_stores(a, a, tmp_path / "m3", renumber=True)
    assert renumbered.ranks == [0, 1, 2, 3]
    assert set(renumbered.timeline([3])["rank"]) == {3}


def test_create_refuses_existing_path(tmp_path):
    TraceStore.create(tmp_path / "s")
    with pytest.raises(StoreError, match="already exists"):
        TraceStore.create(tmp_path / "s")
    assert TraceStore.create(tmp_path / "s", exist_ok=True).ranks == []


def test_times_and_correlation_ids_are_delta_encoded_and_read_back_as_written(tmp_path):
    """The Kineto trace's correlation ids (one per launch and its kernel) are written delta-encoded, not as a
    dictionary as long as the column, and read back equal to the ids in the file."""
    import gzip

    import msgspec
    import pyarrow.parquet as pq
    from shared_data import SHARED

    from ddltrace.cli import main

    trace = SHARED / "hta_traces" / "trace_filter" / "sampled_rank-0.json.gz"
    assert main(["import", str(trace), "--out", str(tmp_path / "s"), "--progress", "never"]) == 0
    path = next((tmp_path / "s" / "timeline").glob("*.parquet"))
    metadata = pq.ParquetFile(path).metadata
    columns = {metadata.row_group(0).column(i).path_in_schema: metadata.row_group(0).column(i)
               for i in range(metadata.num_columns)}
    for name in ("start_ns", "dur_ns", "correlation"):
        assert "DELTA_BINARY_PACKED" in columns[name].encodings, (name, columns[name].encodings)
        assert not any("DICTIONARY" in e for e in columns[name].encodings), (name, columns[name].encodings)
    events = msgspec.json.decode(gzip.decompress(trace.read_bytes()))["traceEvents"]
    written = {e["args"]["correlation"] for e in events
               if e.get("ph") == "X" and isinstance(e.get("args"), dict) and "correlation" in e["args"]}
    read = set(pq.read_table(path, columns=["correlation"]).column(0).drop_null().to_pylist())
    assert written and read == written


def test_stores_of_two_runs_are_not_merged(tmp_path):
    """Two stores whose ranks' wall-clock times lie two days apart (more than an hour, and than ten times either
    span) are not parts of one job: refused, naming the gap, nothing written (QA: an nsys trace merged with ranks of
    a ps-sgd run gave a 29,881 h run). Stores of one run, minutes apart, still merge."""
    day = 86_400 * 10**9
    t0 = 1_790_000_000 * 10**9  # 2026, on the wall clock

    def store(name: str, rank: int, start: int) -> TraceStore:
        rows = [{"rank": rank, "name": "work", "category": "compute", "start_ns": start + i * 10**6, "dur_ns": 500_000}
                for i in range(10)]
        return write_store(tmp_path / name, make_timeline(rows), run={"world_size": 2})

    first = store("a", 0, t0)
    # (two days less the first store's span)
    with pytest.raises(StoreError, match=r"b: 47 h 59 min apart from .*a on the wall clock: not a part of its run"):
        merge_stores(first, store("b", 1, t0 + 2 * day), tmp_path / "ab")
    assert not (tmp_path / "ab").exists()
    merged = merge_stores(first, store("c", 1, t0 + 5 * 60 * 10**9), tmp_path / "ac")
    assert merged.ranks == [0, 1]
