"""Formatting numbers with their units, for everything ddltrace prints."""

from __future__ import annotations

import math


def format_ns(ns: float) -> str:
    """A duration in nanoseconds as '812 ns', '3.40 us', '12.5 ms', '4.20 s', '1 h 02 min'."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "n/a"
    sign = "-" if ns < 0 else ""
    ns = abs(float(ns))
    if math.isinf(ns):  # (the inputs are bounded: ddltrace.options.LARGEST; a guard, not a figure)
        return f"{sign}inf s"
    if 999.5 <= ns < 3.6e12:  # three digits, rounded before the unit is chosen: 999.6 ms is '1 s', not '1e+03 ms'
        ns = float(f"{ns:.3g}")
    if ns < 1e3:
        return f"{sign}{ns:.0f} ns"
    if ns < 1e6:
        return f"{sign}{ns / 1e3:.3g} us"
    if ns < 1e9:
        return f"{sign}{ns / 1e6:.3g} ms"
    seconds = ns / 1e9
    if seconds < 3600:
        return f"{sign}{seconds:.3g} s" if seconds < 100 else f"{sign}{seconds:.0f} s"
    return f"{sign}{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def format_bytes(n: float) -> str:
    """A byte count as '512 B', '1.50 KiB', '3.2 MiB', ..."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "n/a"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if unit == "B" and abs(n) < 1024:
            return f"{n:.0f} B"
        if unit != "B" and abs(n) < 999.5:  # three digits; 1000-1023 KiB would print as '1e+03 KiB': 0.977 MiB
            return f"{n:.3g} {unit}"
        if unit == "TiB":
            return f"{n:.0f} TiB"
        n /= 1024
    raise AssertionError("unreachable")


def three_digits(value: float) -> str:
    """``value`` to three significant digits, never in exponent form at 1000 or more ('1234' for 1234.4, where
    '{:.3g}' writes '1.23e+03'); small values as '{:.3g}' does ('0.0123')."""
    return f"{value:.0f}" if abs(value) >= 999.5 else f"{value:.3g}"


def format_percent(fraction: float) -> str:
    """A fraction (0..1) as '12.3 %'."""
    return "n/a" if fraction is None or math.isnan(fraction) else f"{100 * fraction:.1f} %"


def format_count(n: float) -> str:
    """A count as '4', '1,048,576', '7,100,000' (thousands separated), a fractional one as :func:`three_digits`
    writes it: never in exponent form."""
    return f"{int(n):,}" if float(n).is_integer() else three_digits(n)


def counted(n: float, noun: str) -> str:
    """'1 rank', '3 ranks', '4 ranks' for 4.0, '1,048,576 messages': a count with its noun, plural unless it is
    one (never in exponent form)."""
    return f"{format_count(n)} {noun}{'' if n == 1 else 's'}"
