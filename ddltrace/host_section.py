"""The section of ``ddltrace analyze`` (text and ``--json``) and the report's tables on a host backend's
collectives (PyTorch's gloo, :mod:`ddltrace.analyses.host_collectives`): the same figures and definitions as the
GPU collectives', over the backend's spans of each collective instead of a device's kernels."""

from __future__ import annotations

import pandas as pd

from ddltrace.gpu_section import collective_tables, render_tables

COLLECTIVES = ("Collectives by kind (gloo's spans of each collective on its worker threads, from the thread taking "
               "the work to its end, the wait for the other ranks included; matched across ranks by step and order; "
               "time: the instances' durations summed, each the shortest span of the instance, the late arriver's; "
               "bytes: nccl-tests' size, summed over the instances: the buffer of an all-reduce, broadcast or "
               "reduce, an all-to-all's send buffer, the root's scatter list, all ranks' shares of an all-gather or "
               "gather, from the spans' input tensors (a profile with record_shapes), '-' where the trace gives "
               "none (below: where each kind's come from); bus bandwidth (nccl-tests): bytes / duration x 2(n-1)/n "
               "for all-reduce, (n-1)/n for all-gather, gather, scatter and all-to-all, 1 for broadcast, reduce and "
               "point-to-point, n the world size; skew: latest minus earliest start of a matched instance; wait: "
               "the early arrivers' summed wait; skew and wait '-' where no instance was matched)")
SIZES = ("Where each kind's bytes come from (input tensors: the spans' own inputs, the whole buffer, send buffer or "
         "scatter list; distributedInfo: an all-gather's or gather's input, one rank's share, x the size n that "
         "every process group the trace files list has (distributedInfo.pg_config; gloo's spans name no group); "
         "matched ranks: the share x the ranks the instance was matched on, every rank of the world, where the "
         "files list no groups; sized: instances with bytes, of all)")
LATE = ("Late arrivals at gloo's collectives (per rank: the matched instances it started last at, and the wait of "
        "the other ranks' spans for it, summed over the instances: gloo's two worker threads waiting at once count "
        "twice, so it can exceed the wall time; the wall-time waits are the next table's)")
WAITED = ("Each rank's own wait at gloo's collectives (wall time from its arrival to the last rank's, the union over "
          "the matched instances it was not last at: Scalasca's Wait at N x N; the breakdown counts that time as "
          "comm where the rank's thread waits inside a span that holds others, such as DistributedDataParallel"
          ".forward waiting for the buffers' broadcast, and as compute where it waits inside a leaf op)")


def host_tables(run) -> list[tuple[str, pd.DataFrame]]:
    """The host backend's collectives of one store (by kind, where their bytes come from, and the late arrivals)
    as (title, table) pairs; none where it has none."""
    tables = collective_tables(run.host_collectives(), COLLECTIVES, LATE)
    if not tables:
        return []
    return tables[:1] + [(SIZES, sizes(run))] + tables[1:] + ([(WAITED, own_waits(run))] if len(tables) > 1 else [])


def own_waits(run) -> pd.DataFrame:
    """Per rank of the host collectives' spans: its own wait at them (:func:`~ddltrace.analyses.gpu_collectives.
    waited`), as text cells."""
    from ddltrace.analyses.gpu_collectives import waited
    from ddltrace.units import format_ns

    found = waited(run.host_collective_spans).set_index("rank")
    ranks = sorted(set(run.host_collective_spans["rank"]))
    return pd.DataFrame([[r, format_ns(found["wait_ns"].get(r, 0)), int(found["instances"].get(r, 0))]
                         for r in ranks], columns=["rank", "waited", "instances"])


def sizes(run) -> pd.DataFrame:
    """Per collective of the host backend: how many instances are sized, where their bytes come from (the
    instances' ``size_from``), and why the others are not (:func:`~ddltrace.analyses.host_collectives.not_sized`,
    "-" where all are sized)."""
    from ddltrace.analyses.host_collectives import not_sized

    found = run.host_collectives()
    why = not_sized(found, run.store.world_size, run.host_group_sizes).set_index("collective")["reason"]
    rows = []
    for kind, part in found.groupby("collective", sort=True):
        sized = part["bytes"].notna().to_numpy(bool)
        rows.append([kind, f"{sized.sum()} of {len(part)}", ", ".join(sorted(set(part["size_from"][sized]))) or "-",
                     why.get(kind, "-")])
    return pd.DataFrame(rows, columns=["collective", "sized", "bytes from", "not sized: why"])


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
    from ddltrace.analyses.gpu_collectives import late_arrivals, waited
    from ddltrace.json_output import records

    instances = run.host_collectives()
    if not len(instances):
        return {}

    return {"definitions": {"collectives": COLLECTIVES + "; one row per instance, times in ns, bandwidths in bytes/s, "
                                           "share_bytes: an all-gather's or gather's one-rank share, group_size: the "
                                           "n it was multiplied by, size_from: where bytes come from",
                            "sizes": SIZES, "late_arrivals": LATE, "waited": WAITED + "; wait_ns in ns"},
            "collectives": records(instances), "sizes": records(sizes(run)),
            "late_arrivals": records(late_arrivals(instances)),
            "waited": records(waited(run.host_collective_spans))}
