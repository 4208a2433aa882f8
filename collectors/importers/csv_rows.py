"""Damaged rows of a CSV trace (nsys' NVTX report, rocprofv3's trace files): each named by its line and skipped,
the rest kept, in one problem line."""

from __future__ import annotations

from pathlib import Path

#: How many damaged rows a problem line names one by one.
NAMED = 5


def row_damage(fields: list[str], header: list[str], integers: list[int]) -> str | None:
    """Why a row is damaged (None: it is whole): a field count other than the header's, bytes that are not text,
    or a field at one of the ``integers`` positions that is not an integer."""
    if len(fields) != len(header):
        return f"{len(fields)} fields where the header has {len(header)}"
    if any(ch < " " and ch != "\t" or ch in "\x7f\ufffd" for f in fields for ch in f):
        return "bytes that are not text"
    try:
        for i in integers:
            int(fields[i])
    except ValueError:
        return f"{', '.join(header[i] for i in integers)} not all integers"
    return None


def cut_line(text: str) -> int | None:
    """The line the file ends inside (it has no final newline), or None."""
    return text.count("\n") + 1 if text and not text.endswith("\n") else None


def listed(damaged: list[str]) -> str:
    """The first :data:`NAMED` damaged rows ("line 67 (21 fields where the header has 14)"), and how many more."""
    more = f", and {len(damaged) - NAMED} more" if len(damaged) > NAMED else ""
    return f"{', '.join(damaged[:NAMED])}{more}"


def problem(path: Path, damaged: list[str]) -> str:
    """The import problem of a file with ``damaged`` rows skipped."""
    return f"{path}: {len(damaged)} damaged row(s) skipped, the rest kept: {listed(damaged)}"
