"""A straggler rank at the GPU collectives: one rank arrives last at nearly every collective, and every other
rank's collective kernel waits for it.

It measures, from the collective instances matched across ranks (:mod:`~ddltrace.analyses.gpu_collectives`: by
process group, collective, step and order), the rank that starts last at each and its lead over the next latest
rank. A
finding when one rank is last at ``gpu.late_share_min`` (80 %) or more of at least ``gpu.late_min_instances`` (5)
matched instances (with fewer it is listed as not made) and its median lead is at least ``gpu.late_lead_min_ns``
(50 µs). Start times are compared on
the run's clock: on several hosts their clocks' skew is in the lead (the importer says when it was not
corrected).

Cost: the late rank's summed lead over the instances it was last at: how much later each collective started
than it would have without it (every rank waits for the last).
"""

from __future__ import annotations

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.gpu_collectives import late_arrivals
from ddltrace.analyses.requirements import Skipped
from ddltrace.units import counted

ADVICE = ("Find what the late rank does before each collective: more work (an uneven shard, a longer sequence), "
          "a slower GPU or host (clocks, thermal throttling, other jobs), or its own host-side stalls (input "
          "pipeline, logging, checkpoints on rank 0). Balance the work or move the extra work off the step.")


@detector("gpu_straggler", "a straggler rank at the GPU collectives",
          {"device", "device_comm", "device_ranks", "one_run"})
def detect(runs, th) -> list[Finding | Skipped]:
    """One rank last at most matched collectives, well behind the others (see the module docstring)."""
    findings = []
    for run in runs:
        instances = run.collectives()
        late = late_arrivals(instances)
        matched = int(late.iloc[0]["instances"]) if len(late) else 0
        if matched < th["gpu.late_min_instances"]:
            findings.append(short_of("gpu_straggler", run.name, f"{th['gpu.late_min_instances']:g} or more collectives "
                                     "matched across ranks (gpu.late_min_instances)",
                                     counted(matched, "matched collective")))
            continue
        top = late.iloc[0]
        share = top["late"] / matched
        if share < th["gpu.late_share_min"] or top["lead_median_ns"] < th["gpu.late_lead_min_ns"]:
            continue
        rank = int(top["rank"])
        skew = instances[instances["ranks"] >= 2]["skew_ns"]
        findings.append(Finding(
            id="gpu_straggler",
            title=f"Straggler at the GPU collectives: rank {rank} starts last at {int(top['late'])} of {matched} "
                  f"collectives, {Quantity(float(top['lead_median_ns']), 'ns')} after the next rank (median)",
            severity="warning",
            evidence={"late_rank": Quantity(rank, "rank"),
                      "late_share": Quantity(float(share), "fraction"),
                      "matched_collectives": Quantity(matched, "collectives"),
                      "lead_median": Quantity(float(top["lead_median_ns"]), "ns"),
                      "lead_total": Quantity(float(top["lead_ns"]), "ns"),
                      "others_wait_total": Quantity(float(top["caused_wait_ns"]), "ns"),
                      "skew_median": Quantity(float(skew.median()), "ns"),
                      "skew_max": Quantity(float(skew.max()), "ns")},
            ranks=[rank], phase="all", advice=ADVICE, store=run.name, cost_ns=float(top["lead_ns"]),
            cost_basis="the late rank's summed lead over the next latest rank at the collectives it started last"))
    return findings
