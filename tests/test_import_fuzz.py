"""Fuzzing the readers with mutated real files: they salvage or refuse with DdltraceError, never crash."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from shared_data import SHARED

from ddltrace.collectors.importers import Categorizer, ImportContext, get_importer
from ddltrace.collectors.importers.base import FileReport
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.errors import DdltraceError

CNTK = SHARED / "cntk_traces"
CPU_ONLY = SHARED / "hta_traces/cpu_only"


def _real_json() -> bytes:
    if CNTK.exists():
        return next(CNTK.glob("*_detail_0.json")).read_bytes()
    pytest.skip("shared CNTK traces absent")


def _kineto_json() -> bytes:
    if CPU_ONLY.exists():
        return gzip.decompress(next(CPU_ONLY.glob("*.json.gz")).read_bytes())
    pytest.skip("shared HTA traces absent")


mutation = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1), st.just(b"")),
    st.tuples(st.just("replace"), st.floats(0, 1), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.sampled_from([b"}", b"{", b",", b"]", b'"', b"NaN", b"-1e999",
                                                                   b'"ph": 3', b'"dur": -5', b"\x00\xff"])),
    st.tuples(st.just("delete"), st.floats(0, 1), st.binary(min_size=1, max_size=1)),
)


def _mutate(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for kind, where, payload in mutations:
        pos = int(where * len(out))
        if kind == "truncate":
            del out[pos:]
        elif kind == "replace":
            out[pos:pos + len(payload)] = payload
        elif kind == "insert":
            out[pos:pos] = payload
        else:
            del out[pos:pos + 1 + payload[0] % 64]
    return bytes(out)


def _read_all_ways(data: bytes, name: str, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            trace = read_chrome(path)
            assert trace.read >= 0 and len(trace.ts_us) == len(trace.dur_us) == len(trace.key)
            assert (trace.dur_us >= 0).all()
        except DdltraceError as exc:
            assert str(exc) and "\n" not in str(exc)
        ctx = ImportContext(Categorizer(), report=FileReport(str(path)))
        try:
            for part in get_importer(fmt).read(path, ctx):
                assert (part.timeline["dur_ns"] >= 0).all()
        except DdltraceError:
            pass


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=3))
# a byte that is not UTF-8 inside an event's string, in a file whose JSON is cut: the lenient decode of that event
# raised UnicodeDecodeError through the import (CI, 2026-11-25); it is an invalid event, skipped and counted
@example([("delete", 0.10448000069546273, b"3"), ("replace", 0.5, b"\x80")])
def test_mutated_cntk_detail(mutations):
    _read_all_ways(_mutate(_real_json(), mutations), "x_detail_0.json", "cntk")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=3), st.booleans())
def test_mutated_kineto_plain_and_gzip(mutations, mutate_compressed):
    plain = _kineto_json()
    if mutate_compressed:
        data = _mutate(gzip.compress(plain), mutations)
    else:
        data = gzip.compress(_mutate(plain, mutations))
    _read_all_ways(data, "rank-1.pt.trace.json.gz", "kineto")


DATA = Path(__file__).parent / "data"


def _read_or_refuse(data: bytes, name: str, fmt: str) -> None:
    """The importer salvages (valid timelines) or refuses with one line; nothing else escapes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "worker0" / name
        path.parent.mkdir()
        path.write_bytes(data)
        ctx = ImportContext(Categorizer(), report=FileReport(str(path)))
        try:
            for part in get_importer(fmt).read(path, ctx):
                assert (part.timeline["dur_ns"] >= 0).all()
        except DdltraceError as exc:
            assert str(exc) and "\n" not in str(exc)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=3))
@example([("replace", 0.5, b"\x00")])  # a text field holding a number (was an AttributeError)
@example([("delete", 0.25, b"4")])  # a message field holding a number (was a TypeError)
def test_mutated_tf2_xplane(mutations):
    """The protobuf wire reader on a mutated real TF 2.21 XPlane (lengths and tags broken at random)."""
    real = (DATA / "tf2_profile" / "worker0" / "vm.xplane.pb").read_bytes()
    _read_or_refuse(_mutate(real, mutations), "vm.xplane.pb", "tf2-xplane")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=3))
@example([("truncate", 0.5127811711211793, b""), ("delete", 0.25, b"\x1b"),
          ("replace", 0.7458524490742978, b"\x00")])  # a value where a message belongs (was an AttributeError)
def test_mutated_tf1_step_stats(mutations):
    """The step_stats text reader on a mutated real TF1 worker's step_stats."""
    real = gzip.decompress((DATA / "tf1_ps" / "step_stats_worker0.pbtxt.gz").read_bytes())
    _read_or_refuse(_mutate(real, mutations), "step_stats_worker0.pbtxt", "tf1-stepstats")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutated_mxnet_begin_end_pairs(mutations):
    """Begin/end pairing on a mutated real MXNet dist_sync profile (B/E events)."""
    real = gzip.decompress((DATA / "mxnet_dist_sync" / "profile_dist_sync_rank0.json.gz").read_bytes())
    _read_all_ways(_mutate(real, mutations), "profile_dist_sync_rank0.json", "mxnet")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutated_tf1_binary_run_metadata(mutations):
    """The binary RunMetadata reader on a mutated real worker's RunMetadata."""
    real = gzip.decompress((DATA / "tf1_ps_pb" / "run_metadata_worker0.pb.gz").read_bytes())
    _read_or_refuse(_mutate(real, mutations), "run_metadata_worker0.pb", "tf1-stepstats-pb")
