"""Fuzzing the readers with mutated real files: they salvage or refuse with DdltraceError, never crash."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddltrace.collectors.importers import Categorizer, ImportContext, get_importer
from ddltrace.collectors.importers.base import FileReport
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.errors import DdltraceError

CNTK = Path("/work/shared/cntk_traces")
CPU_ONLY = Path("/work/shared/hta_traces/cpu_only")


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
