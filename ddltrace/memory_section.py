"""The section of ``ddltrace analyze`` (text and ``--json``) and the report's table on the memory the framework's
allocator held (:mod:`ddltrace.analyses.allocator_memory`), for every store whose ranks hold PyTorch's allocator
events: a GPU job's devices and a CPU job's ``cpu`` alike (``profile_memory=True``)."""

from __future__ import annotations

import pandas as pd

from ddltrace.gpu_section import render_tables
from ddltrace.units import format_bytes, format_ns, format_percent

ALLOCATOR = ("Memory the framework's allocator held (PyTorch's [memory] events; bytes allocated, after each event: "
             "'total' the allocator's own figure, 'since the trace began' the events' bytes summed where the trace "
             "writes no total; peak at: the time from the device's first event to the peak; growth: last minus "
             "first; of reserved: the peak over the most the allocator reserved from the device; of device "
             "memory: the peak and the most reserved over the device's memory, where the trace gives it)")


def _or_dash(value: float, text) -> str:
    return "-" if value != value else text(value)


def _of_device(a: dict) -> str:
    if a["device_memory_bytes"] != a["device_memory_bytes"]:
        return "-"
    return (f"{format_bytes(a['device_memory_bytes'])}: peak {format_percent(a['peak_share_of_device'])}, reserved "
            f"{format_percent(a['reserved_share_of_device'])}")


def allocator_table(run) -> pd.DataFrame:
    """The allocator's figures of one store, one row per rank and device, as the text and the report show them
    (empty when the store has no allocator events)."""
    return pd.DataFrame(
        [[a["rank"], a["device"], a["basis"], f"{a['allocations']:,} / {a['frees']:,}",
          format_bytes(a["peak_bytes"]), format_ns(a["peak_ns"] - a["first_ns"]), format_bytes(a["start_bytes"]),
          format_bytes(a["end_bytes"]), ("+" if a["growth_bytes"] > 0 else "") + format_bytes(a["growth_bytes"]),
          _or_dash(a["reserved_peak_bytes"], format_bytes), _or_dash(a["peak_share_of_reserved"], format_percent),
          _of_device(a)] for a in run.allocator.to_dict("records")],
        columns=["rank", "device", "basis", "allocations / frees", "peak", "peak at", "first", "last", "growth",
                 "reserved peak", "of reserved", "of device memory"])


def render_memory(run) -> list[str]:
    """The allocator's memory of one store as text lines (empty when it has no allocator events)."""
    if not len(run.allocator):
        return []
    ranks = run.allocator["rank"].nunique()
    return render_tables(f"Allocator memory of {run.name}: {ranks} rank{'s' if ranks != 1 else ''}",
                         [(ALLOCATOR, allocator_table(run))])


def memory_json(run) -> dict:
    """The allocator's figures of one store for ``--json`` (bytes, times in ns); empty when it has none."""
    from ddltrace.json_output import records

    if not len(run.allocator):
        return {}
    return {"definitions": {"allocator": ALLOCATOR + "; bytes, times in ns (peak_ns and first_ns: since the epoch, "
                                                     "on the run's clock)"},
            "allocator": records(run.allocator)}
