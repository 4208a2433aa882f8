"""Times written as JSON numbers of microseconds, read exactly into integer nanoseconds.

A Kineto trace writes epoch microseconds with nanosecond digits (``1712195495519689.047``): float64 holds such a
number only to 0.25 µs, so parsing it as a float moves it by up to ~125 ns. The reader hands the text of every
non-integer number to :func:`us_to_ns` (msgspec's ``float_hook``), which reads the digits themselves: vectorised
over the plain decimal texts, :class:`decimal.Decimal` for the rest (exponents, more than 16 digits before the
point). Digits beyond the nanosecond are rounded half away from zero.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

import numpy as np

#: The JSON text of a non-integer number, as the reader's decoders give it (``float_hook``).
float_text = str.encode
#: Times and durations at or beyond this (µs) are damage, not times: 2**53 µs is 285 years, and the ns it
#: makes (9.0e18) still fit int64.
MAX_US = 1 << 53
MAX_NS = MAX_US * 1000
#: Status of each value: a time, missing (None), not a number (a string, a bool, an object...), out of range.
OK, MISSING, NOT_A_NUMBER, OUT_OF_RANGE = 0, 1, 2, 3
_TEXT, _FLOAT = 4, 5
_KIND = {int: OK, bytes: _TEXT, float: _FLOAT, type(None): MISSING}


def us_to_ns(values: list) -> tuple[np.ndarray, np.ndarray]:
    """``values`` (µs: ints, :data:`float_text` bytes, None, or anything else) as int64 ns, and each one's status
    (:data:`OK`, :data:`MISSING`, :data:`NOT_A_NUMBER`, :data:`OUT_OF_RANGE`; the ns of a value not OK is 0).
    A Python float (from a decoder without ``float_hook``) is taken at its shortest repr: no better than the float."""
    n = len(values)
    ns = np.zeros(n, dtype=np.int64)
    status = np.zeros(n, dtype=np.int8)
    if not n:
        return ns, status
    types = set(map(type, values))
    if types == {bytes}:
        return _texts(values)
    if types == {int}:
        try:
            _ints(np.fromiter(values, dtype=np.int64, count=n), ns, status, slice(None))
            return ns, status
        except OverflowError:  # an integer beyond int64: sorted out below
            pass
    kind = np.fromiter([_KIND.get(type(v), NOT_A_NUMBER) for v in values], dtype=np.int8, count=n)
    status[:] = np.where(kind >= _TEXT, OK, kind)
    ints = np.flatnonzero(kind == OK)
    if len(ints):
        chosen = [values[i] for i in ints]
        big = np.fromiter([not -MAX_US < v < MAX_US for v in chosen], dtype=bool, count=len(chosen))
        status[ints[big]] = OUT_OF_RANGE
        small = ints[~big]
        _ints(np.array([values[i] for i in small], dtype=np.int64), ns, status, small)
    texts = np.flatnonzero(kind >= _TEXT)
    if len(texts):
        ns[texts], status[texts] = _texts([values[i] if kind[i] == _TEXT else repr(values[i]).encode()
                                           for i in texts])
    return ns, status


def _ints(us: np.ndarray, ns: np.ndarray, status: np.ndarray, where) -> None:
    bad = (us >= MAX_US) | (us <= -MAX_US)
    ns[where] = np.where(bad, 0, us * 1000)
    status[where] = np.where(bad, OUT_OF_RANGE, status[where])


def _texts(texts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """JSON number texts (µs, each with a point or an exponent) to ns. The plain ``-ddd.ddd`` forms with at most
    16 digits before the point in one pass over the joined text, digit column by digit column (the fourth digit
    after the point rounds); the rest by Decimal."""
    n = len(texts)
    joined = b",".join(texts)
    uniform = _uniform(joined, n)
    if uniform is not None:
        return uniform
    text = np.frombuffer(joined, dtype=np.uint8)
    ends = np.append(np.flatnonzero(text == ord(",")), len(text))
    starts = np.append(0, ends[:-1] + 1)
    negative = text[starts] == ord("-")
    points = np.flatnonzero(text == ord("."))
    owner = np.searchsorted(ends, points)
    exponents = np.searchsorted(ends, np.flatnonzero((text == ord("e")) | (text == ord("E"))))
    point = np.zeros(n, dtype=np.int64)
    point[owner] = points
    first = starts + negative
    plain = ((np.bincount(owner, minlength=n) == 1) & (np.bincount(exponents, minlength=n) == 0)
             & (point - first <= 16))
    digits = text.astype(np.uint64) - np.uint64(ord("0"))  # wraps for the non-digits, which are never used
    value = np.zeros(n, dtype=np.uint64)  # 16 digits of µs make up to 1e19 ns: beyond int64, within uint64
    for k in range(1, int((point - first)[plain].max(initial=0)) + 1):  # before the point, from the units up
        at = point - k
        value += np.where(at >= first, digits[np.maximum(at, 0)], 0) * np.uint64(10 ** (k + 2))
    last = len(text) - 1
    for k, scale in ((1, 100), (2, 10), (3, 1)):
        at = point + k
        value += np.where(at < ends, digits[np.minimum(at, last)], 0) * np.uint64(scale)
    at = point + 4
    value += ((at < ends) & (digits[np.minimum(at, last)] >= 5)).astype(np.uint64)  # the first digit below 1 ns
    ok = plain & (value < MAX_NS)
    magnitude = np.where(ok, value, 0).astype(np.int64)
    ns = np.where(negative, -magnitude, magnitude)
    status = np.where(plain & ~ok, OUT_OF_RANGE, OK).astype(np.int8)
    for i in np.flatnonzero(~plain):
        ns[i], status[i] = _decimal(texts[i])
    return ns, status


def _uniform(joined: bytes, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The common case at matrix speed: ``n`` texts all of one length with the point in one place and digits
    elsewhere (a column of epoch times written ``%.3f``), as an ``n`` x width digit matrix times the powers of
    ten; None when the texts are not so."""
    width = (len(joined) + 1) // n
    point = joined.find(b".", 0, width)
    if width * n != len(joined) + 1 or not 0 < point <= 16:
        return None
    rows = np.frombuffer(joined + b",", dtype=np.uint8).reshape(n, width)
    columns = [c for c in range(min(width - 1, point + 5)) if c != point]  # to the digit that rounds
    digits = rows[:, columns]
    if not ((rows[:, point] == ord(".")).all() and (rows[:, -1] == ord(",")).all()
            and ((digits >= ord("0")) & (digits <= ord("9"))).all()):
        return None
    powers = [10 ** (point - 1 - c + 3) for c in columns[:point]] + [100, 10, 1][:len(columns) - point]
    value = (digits[:, :len(powers)].astype(np.uint64) - np.uint64(ord("0"))) @ np.array(powers, dtype=np.uint64)
    if len(columns) > point + 3:
        value += (digits[:, -1] >= ord("5")).astype(np.uint64)  # the first digit below 1 ns rounds
    ok = value < MAX_NS
    return (np.where(ok, value, 0).astype(np.int64),
            np.where(ok, OK, OUT_OF_RANGE).astype(np.int8))


def _decimal(text: bytes) -> tuple[int, int]:
    try:
        value = Decimal(text.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        return 0, NOT_A_NUMBER
    if not value.is_finite() or value.copy_abs() >= MAX_US:  # copy_abs: no context, so no Overflow
        return 0, OUT_OF_RANGE
    ns = int((value * 1000).to_integral_value(ROUND_HALF_UP))
    return (ns, OK) if abs(ns) < MAX_NS else (0, OUT_OF_RANGE)
