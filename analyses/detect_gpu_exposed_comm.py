"""Exposed communication on the GPUs: communication kernels running with no computation beside them.

It measures, per device, the exposed communication = the union of its communication kernels minus the part of
it during which a compute kernel also runs (:mod:`~ddltrace.analyses.gpu_overlap`, HTA's overlap), as a share of
the device's window (:mod:`~ddltrace.analyses.gpu_temporal`). A finding when the median over the devices reaches
``gpu.exposed_comm_min`` (10 %). Part of that time can be a collective waiting for a late rank (its kernel runs
from its own start); the evidence gives the early arrivers' wait at the matched collectives, and a straggler
finding names the late rank (this finding is ranked after it: a symptom).

Cost: the median over the devices of each device's exposed communication time (the share and the time are each a
median over the devices, not one device's pair).
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.findings import Finding, Quantity, detector

ADVICE = ("Overlap communication with computation: let gradients be reduced bucket by bucket during the backward "
          "pass (DDP's bucket_cap_mb, FSDP's prefetching), avoid synchronising after each collective, put "
          "communication on its own stream, and compress or shrink what is sent (mixed precision gradients).")


@detector("gpu_exposed_comm", "exposed communication on the GPUs", {"device", "device_comm"})
def detect(runs, th) -> list[Finding]:
    """Median device's exposed communication share at or above gpu.exposed_comm_min (see the module docstring)."""
    findings = []
    for run in runs:
        overlap = run.gpu.overlap_table()
        if not len(overlap):
            continue
        window = run.gpu.temporal_table().set_index(["rank", "device"])["window_ns"]
        exposed = (overlap["comm_ns"] - overlap["overlap_ns"]).to_numpy(float)
        spans = window.reindex(list(zip(overlap["rank"], overlap["device"], strict=True))).to_numpy(float)
        share = np.where(spans > 0, exposed / spans, 0.0)
        median = float(np.median(share))
        if median < th["gpu.exposed_comm_min"]:
            continue
        lost = float(np.median(exposed))
        instances = run.collectives()
        matched = instances[instances["ranks"] >= 2]
        evidence = {"exposed_share_median": Quantity(median, "fraction"),
                    "exposed_share_max": Quantity(float(share.max()), "fraction"),
                    "exposed_comm_median": Quantity(lost, "ns"),
                    "comm_median": Quantity(float(overlap["comm_ns"].median()), "ns"),
                    "overlap_median": Quantity(float(overlap["overlap"].median()), "fraction")}
        if len(matched):
            evidence["collective_wait_per_rank"] = Quantity(float(matched["wait_ns"].sum()) / len(run.gpu.device_ranks),
                                                            "ns")
        findings.append(Finding(
            id="gpu_exposed_comm",
            title=f"Exposed communication on the GPUs: {Quantity(median, 'fraction')} of a device's window runs "
                  f"communication kernels with no compute kernel beside them (the median over {len(share)} "
                  f"device{'s' if len(share) > 1 else ''})",
            severity="warning", evidence=evidence,
            ranks=sorted({int(r) for r in overlap["rank"][share >= th["gpu.exposed_comm_min"]]}),
            phase="all", advice=ADVICE, store=run.name, cost_ns=lost,
            cost_basis="the median over the devices of each device's communication-kernel time not overlapped by a "
                       "compute kernel"))
    return findings
