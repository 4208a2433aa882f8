"""The section of ``ddltrace analyze`` (text and ``--json``) and the report's tables on a host backend's
collectives (PyTorch's gloo, :mod:`ddltrace.analyses.host_collectives`): the same figures and definitions as the
GPU collectives', over the backend's spans of each collective instead of a device's kernels."""

from __future__ import annotations

import pandas as pd

from ddltrace.gpu_section import collective_tables, render_tables

COLLECTIVES = ("Collectives by kind (gloo's spans of each collective on its worker threads, from the thread taking "
               "the work to its end, the wait for the other ranks included; matched across ranks by step and order; "
               "time: the instances' durations summed, each the shortest span of the instance, the late arriver's; "
               "bytes: the buffer of an all-reduce, broadcast or reduce, an all-to-all's send buffer, from the "
               "span's input tensors (a profile with record_shapes), '-' where the trace gives none; bus bandwidth "
               "(nccl-tests): bytes / duration x 2(n-1)/n for all-reduce, (n-1)/n for all-to-all, 1 for broadcast, "
               "reduce and point-to-point, n the world size; skew: latest minus earliest start of a matched "
               "instance; wait: the early arrivers' summed wait)")
LATE = ("Late arrivals at gloo's collectives (per rank: the matched instances it started last at, and the wait of "
        "the other ranks' spans for it)")


def host_tables(run) -> list[tuple[str, pd.DataFrame]]:
    """The host backend's collectives of one store (by kind, and the late arrivals) as (title, table) pairs;
    none where it has none."""
    return collective_tables(run.host_collectives(), COLLECTIVES, LATE)


def render_host_collectives(run) -> list[str]:
    """The host backend's collectives of one store as text lines (empty when it has none)."""
    tables = host_tables(run)
    if not tables:
        return []
    ranks = run.host_collective_spans["rank"].nunique()
    return render_tables(f"Collectives of the host backend (gloo) of {run.name}: {ranks} rank(s)", tables)


def host_collectives_json(run) -> dict:
    """The host backend's collective instances of one store for ``--json`` (times in ns, bandwidths in
    bytes/s); empty when it has none."""
    from ddltrace.analyses.gpu_collectives import late_arrivals

    instances = run.host_collectives()
    if not len(instances):
        return {}

    def records(frame) -> list[dict]:
        return frame.astype(object).where(frame.notna(), None).to_dict(orient="records")

    return {"definitions": {"collectives": COLLECTIVES + "; one row per instance, times in ns, bandwidths in bytes/s",
                            "late_arrivals": LATE},
            "collectives": records(instances), "late_arrivals": records(late_arrivals(instances))}
