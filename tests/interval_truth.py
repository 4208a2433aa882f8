"""Figures the tests compute from the input themselves, independently of ddltrace's code."""

from __future__ import annotations


def union_ns(intervals) -> int:
    """Length of the union of (start, end) intervals: each instant counted once."""
    busy, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            busy += end - start
            reach = end
        elif end > reach:
            busy += end - reach
            reach = end
    return busy
