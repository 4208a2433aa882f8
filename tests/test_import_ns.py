"""Times read exactly: epoch microseconds with nanosecond digits become the file's integer nanoseconds (issue 20.8).

Every expected value is computed here from the file's decimal text with :class:`decimal.Decimal`."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from shared_data import SHARED

from ddltrace.cli import main
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.store import TraceStore

HTA_NS = SHARED / "wild_traces/hta_ns_resolution_rank0"
MAX_NS = (1 << 53) * 1000  # 2**53 µs: the documented range of a time


def _ns(text: Decimal) -> int:
    return int((text * 1000).to_integral_value(ROUND_HALF_UP))


def _file_intervals(path: Path) -> Counter:
    """(start ns, duration ns) of every complete (X) event, from the decimal text."""
    with gzip.open(path) as fh:
        events = json.load(fh, parse_float=Decimal, parse_int=Decimal)["traceEvents"]
    return Counter((_ns(e["ts"]), _ns(e["dur"])) for e in events if e.get("ph") == "X")


@pytest.mark.skipif(not HTA_NS.is_dir(), reason=f"{HTA_NS} not present")
def test_hta_ns_resolution_start_times_exact_to_the_ns(tmp_path):
    path = next(HTA_NS.glob("*.json.gz"))
    expected = _file_intervals(path)
    assert any(ts % 1000 for ts, _ in expected)  # the file does carry sub-µs digits

    out = tmp_path / "store"
    assert main(["import", str(path), "--out", str(out)]) == 0
    timeline = TraceStore.open(out).timeline()
    stored = Counter(zip(timeline["start_ns"].tolist(), timeline["dur_ns"].tolist(), strict=True))
    assert len(timeline) > 40_000
    assert not stored - expected  # every stored interval is exactly one of the file's, to the ns

    trace = read_chrome(path)
    assert Counter(zip(trace.ts_ns.tolist(), trace.dur_ns.tolist(), strict=True)) == expected


def test_us_to_ns_matches_decimal_on_every_form():
    from ddltrace.collectors.importers.exact_time import OK, OUT_OF_RANGE, us_to_ns

    rng = random.Random(20)
    texts = []
    for _ in range(3000):
        whole = rng.randrange(10 ** rng.randrange(1, 17))
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 7)))
        texts.append(f"{'-' if rng.random() < 0.2 else ''}{whole}.{digits}".encode())
    texts += [b"1e3", b"1.5E-3", b"-2.5e2", b"0.0005", b"-0.0005", b"9007199254740991.9994",
              b"9007199254740991.9995", b"9007199254740992.0", b"1" + b"0" * 30 + b".5"]
    ns, status = us_to_ns(texts)
    for text, got, st in zip(texts, ns.tolist(), status.tolist(), strict=True):
        want = _ns(Decimal(text.decode()))
        assert (got, st) == ((want, OK) if abs(want) < MAX_NS else (0, OUT_OF_RANGE)), text


@pytest.mark.parametrize("decimals", [1, 3, 4, 6])
def test_us_to_ns_columns_of_one_layout(decimals):
    """A column of texts of one length with the point in one place (Kineto's ``%.3f`` epoch times) takes the
    matrix path; the same answers as Decimal, rounding and the 2**53 µs bound included."""
    from ddltrace.collectors.importers.exact_time import OK, OUT_OF_RANGE, us_to_ns

    rng = random.Random(decimals)
    texts = [f"{rng.randrange(10 ** 15, 10 ** 16)}.{rng.randrange(10 ** decimals):0{decimals}d}".encode()
             for _ in range(2000)] + [b"9999999999999999." + b"9" * decimals]
    ns, status = us_to_ns(texts)
    for text, got, st in zip(texts, ns.tolist(), status.tolist(), strict=True):
        want = _ns(Decimal(text.decode()))
        assert (got, st) == ((want, OK) if abs(want) < MAX_NS else (0, OUT_OF_RANGE)), text


def test_us_to_ns_integers_and_non_numbers():
    from ddltrace.collectors.importers.exact_time import MISSING, NOT_A_NUMBER, OK, OUT_OF_RANGE, us_to_ns

    ns, status = us_to_ns([5, -7, 1 << 53, 1 << 80, None, "12", True, [1], b"2.5", 0.25, float("nan")])
    assert ns.tolist() == [5000, -7000, 0, 0, 0, 0, 0, 0, 2500, 250, 0]
    assert status.tolist() == [OK, OK, OUT_OF_RANGE, OUT_OF_RANGE, MISSING, NOT_A_NUMBER, NOT_A_NUMBER,
                               NOT_A_NUMBER, OK, OK, OUT_OF_RANGE]


def test_begin_end_and_counters_exact(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("""{"traceEvents": [
        {"ph": "B", "name": "step", "pid": 1, "tid": 2, "ts": 1712195495519689.047},
        {"ph": "E", "name": "step", "pid": 1, "tid": 2, "ts": 1712195495519689.913},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 1712195495519689.001, "args": {"used": 3}},
        {"ph": "X", "name": "k", "pid": 1, "tid": 3, "ts": 1712195495519689.999, "dur": 0.0015}]}""")
    trace = read_chrome(path)
    base = 1712195495519689 * 1000
    assert sorted(zip(trace.ts_ns.tolist(), trace.dur_ns.tolist(), strict=True)) == [
        (base + 47, 866), (base + 999, 2)]
    assert trace.counters == [(1, "mem.used", base + 1, 3.0)]


def test_us_to_ns_exponents_beyond_the_decimal_context_are_out_of_range():
    """A text whose exponent is beyond decimal's context (the fuzzer's ``-1e999`` glued to digits) is out of range,
    not a decimal.Overflow."""
    from ddltrace.collectors.importers.exact_time import OK, OUT_OF_RANGE, us_to_ns

    ns, status = us_to_ns([b"-1e99999999", b"1E9999999", b"2.5e1"])
    assert ns.tolist() == [0, 0, 25000]
    assert status.tolist() == [OUT_OF_RANGE, OUT_OF_RANGE, OK]
