"""What a store holds is checked when it is read: each case damages a real store on disk (its Parquet files
rewritten with pyarrow, or its manifest edited) and runs the real command line in a subprocess. A damaged rank is
named on one warning line and left out, and the figures of the other ranks are those of the undamaged store; a
store that cannot be used at all is one error line, exit 2, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

DDLTRACE = [sys.executable, "-m", "ddltrace"]
_NO_OVERRIDE = "-dac_override,-dac_read_search"


def as_a_user() -> list[str]:
    """A command prefix under which file modes apply: nothing for a user, for root setpriv dropping the
    capabilities that let root read and write past them (skips where that cannot be done)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: file modes cannot be made to apply")
    return ["setpriv", f"--inh-caps={_NO_OVERRIDE}", f"--bounding-set={_NO_OVERRIDE}"]


def cli(*args, **kwargs):
    return subprocess.run([*DDLTRACE, *map(str, args)], capture_output=True, text=True, timeout=120, **kwargs)


def info_json(path) -> dict:
    """What ``ddltrace info --json`` prints, computed in this process (the undamaged store's figures)."""
    from ddltrace.store import TraceStore
    from ddltrace.summary import summarize

    return json.loads(json.dumps(summarize(TraceStore.open(path)).to_dict(), default=str))


def rewrite(path, **columns) -> None:
    """Rewrite one Parquet file with some columns replaced (pyarrow arrays or a function of the old column)."""
    table = pq.read_table(path)
    for name, value in columns.items():
        value = value(table.column(name)) if callable(value) else value
        table = table.set_column(table.schema.get_field_index(name), name, value)
    pq.write_table(table, path)


def rank_file(store, rank: int):
    return store.path / "timeline" / f"rank-{rank:05d}.parquet"


def edit_manifest(store, change) -> None:
    path = store.path / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def assert_one_line(result, code: int, *words: str) -> str:
    """The command's stderr is one line holding every word; no traceback; exit ``code``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def assert_others_intact(before: dict, after: dict, left_out: int) -> None:
    """``after`` (the damaged store's info) has every rank of ``before`` but ``left_out``, with the same figures."""
    expected = [r for r in before["ranks"] if r["rank"] != left_out]
    assert after["ranks"] == expected
    assert after["events"] == sum(r["events"] for r in expected)
    assert str(left_out) in after["damaged"]


def _category(column):
    values = column.to_pylist()
    values[3] = "bogus"
    return pa.array(values, pa.string())


def _negative(column):
    values = column.to_numpy().copy()
    values[5] = -1_000_000
    return pa.array(values, pa.int64())


def _shifted(column):
    return pa.array(column.to_numpy() + 2**62, pa.int64())


@pytest.mark.parametrize("damage, words, export", [
    (dict(category=_category), ["category 'bogus'", "1 row (first: row 3)", "not one of compute"], True),
    (dict(dur_ns=_negative), ["negative duration (-1000000 ns)", "row 5"], False),
    (dict(start_ns=_shifted), ["outside the rank's span in the manifest"], False),
    (dict(rank=lambda c: pa.array(np.full(len(c), 5, np.int32))), ["of rank 5 in the file of rank 2"], False),
])
def test_a_damaged_rank_file_is_named_and_the_others_are_used(tiny_store, damage, words, export):
    before = info_json(tiny_store.path)
    rewrite(rank_file(tiny_store, 2), **damage)
    result = cli("info", tiny_store.path, "--json")
    line = assert_one_line(result, 0, "warning:", "rank-00002.parquet", "rank 2 left out", *words)
    assert line.startswith("ddltrace: warning: ")
    assert_others_intact(before, json.loads(result.stdout), 2)
    if not export:
        return
    table = cli("info", tiny_store.path)
    assert "damaged     rank 2 left out" in table.stdout and "world size  4 ranks (3 recorded)" in table.stdout
    # the Chrome export holds the other ranks' events, as many as their files hold
    out = tiny_store.path.parent / "trace.json"
    export = cli("export", tiny_store.path, "--chrome", out)
    assert export.returncode == 0 and "rank 2 left out" in export.stderr
    events = json.loads(out.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1, 3}
    assert len(spans) == sum(pq.read_metadata(rank_file(tiny_store, r)).num_rows for r in (0, 1, 3))


def test_a_rank_asked_for_by_number_that_is_damaged_is_an_error(tiny_store):
    rewrite(rank_file(tiny_store, 1), dur_ns=_negative)
    result = cli("export", tiny_store.path, "--chrome", tiny_store.path.parent / "t.json", "--ranks", "1")
    assert_one_line(result, 2, "error:", "rank-00001.parquet", "negative duration")
    assert not (tiny_store.path.parent / "t.json").exists()


def test_a_store_with_no_readable_rank_is_one_error_line(tmp_path):
    from ddltrace.store import write_store
    from ddltrace.timeline import make_timeline

    store = write_store(tmp_path / "one", make_timeline(rank=[0, 0], name=["a", "b"], category=["compute", "wait"],
                                                        start_ns=[0, 10], dur_ns=[10, 5]))
    rewrite(rank_file(store, 0), dur_ns=pa.array([10, -5], pa.int64()))
    result = cli("info", store.path)
    assert_one_line(result, 2, "error:", "no rank can be read", "negative duration (-5 ns)")


def test_a_rank_key_that_is_not_a_rank_is_named(tiny_store):
    before = info_json(tiny_store.path)
    edit_manifest(tiny_store, lambda m: m["ranks"].__setitem__("-7", m["ranks"].pop("2")))
    result = cli("info", tiny_store.path, "--json")
    assert_one_line(result, 0, "warning:", "rank key '-7' is not a rank")
    after = json.loads(result.stdout)
    assert after["ranks"] == [r for r in before["ranks"] if r["rank"] != 2]


def test_a_damaged_rank_entry_is_named(tiny_store):
    before = info_json(tiny_store.path)
    edit_manifest(tiny_store, lambda m: m["ranks"]["1"].__setitem__("events", -3))
    result = cli("info", tiny_store.path, "--json")
    assert_one_line(result, 0, "warning:", "rank 1's entry has events -3", "rank 1 left out")
    assert_others_intact(before, json.loads(result.stdout), 1)


def test_counter_ranks_that_are_not_ranks_are_named(tiny_store):
    edit_manifest(tiny_store, lambda m: m["counter_ranks"].extend(["x", -9]))
    result = cli("info", tiny_store.path)
    assert_one_line(result, 0, "warning:", "counter_ranks holds 'x', -9, not ranks")
    assert "samples of" in result.stdout


@pytest.mark.parametrize("version", [-1, 0, True])
def test_schema_versions_that_are_not_versions_are_refused(tiny_store, version):
    edit_manifest(tiny_store, lambda m: m.__setitem__("schema_version", version))
    assert_one_line(cli("info", tiny_store.path), 2, "error:", "manifest.json", "schema_version")


@pytest.mark.parametrize("world_size, words", [
    (-5, ["run.world_size -5 is not a world size"]),
    (10**30, ["run.world_size 1000000000000000000000000000000 is not"]),
    (True, ["run.world_size True is not a world size"]),
    (2, ["run.world_size 2 is below the 4 ranks recorded"]),
])
def test_a_world_size_that_cannot_be_is_named_and_the_ranks_recorded_used(tiny_store, world_size, words):
    edit_manifest(tiny_store, lambda m: m["run"].__setitem__("world_size", world_size))
    result = cli("info", tiny_store.path)
    assert_one_line(result, 0, "warning:", *words)
    assert "world size  4 ranks (4 recorded)" in result.stdout


def test_info_escapes_the_manifests_control_characters(tiny_store):
    edit_manifest(tiny_store, lambda m: m["run"].update(command="job \x1b[2J\x1b]0;owned\x07 --x\nfake line",
                                                         framework="py\x9btorch"))
    result = cli("info", tiny_store.path)
    assert result.returncode == 0
    assert not any(c in result.stdout for c in "\x1b\x07\x9b")
    assert "command     job \\x1b[2J\\x1b]0;owned\\x07 --x\\nfake line" in result.stdout
    assert "framework   py\\x9btorch" in result.stdout


def test_an_unreadable_parquet_file_is_permission_denied_not_corrupt(tiny_store):
    os.chmod(rank_file(tiny_store, 2), 0)
    result = subprocess.run([*as_a_user(), *DDLTRACE, "info", str(tiny_store.path)], capture_output=True,
                            text=True, timeout=120)
    assert_one_line(result, 0, "warning:", "rank-00002.parquet: permission denied", "rank 2 left out")
    assert "corrupt" not in result.stderr
