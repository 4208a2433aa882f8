"""Low communication overlap (Rudra, paper 004 table 1).

It measures, per worker in the steady state, Rudra's communication overlap = compute / (compute + exposed
communication), where exposed communication is the comm and wait time not hidden behind compute on another lane
(see :mod:`ddltrace.analyses.breakdown`). A finding when the median over workers is below ``overlap.min`` (50 %):
more time goes to moving and waiting for data than to computing, so adding workers mostly adds communication.
Rudra measured 56 % to 99 % on its configurations. Workers with no compute recorded at all (a trace whose
importer put the computation in another category) are left out: their overlap says nothing; a store with no
worker left is listed as not made. On per-call
aggregates (no steady state) it is measured over the whole run (all time in MPI is exposed there). Made only where
there is communication: two or more ranks, or communication time on the one rank (a single process's waits are for
its own devices, MXNet's WaitForVar on a one-GPU job, not for other ranks' data).

A worker that waits at the host backend's collectives (PyTorch's gloo) for a rank that arrives late is not short of
overlap: that wait is the late rank's doing, which :mod:`~ddltrace.analyses.detect_host_straggler` names and costs.
So the finding judges the overlap without the waits for late arrivals at those collectives in the phase
(:func:`~ddltrace.analyses.gpu_collectives.wait_intervals`, clipped to the worker's phase), and says both figures
(a gloo DDP job whose rank 1 sleeps 50 ms a step read 47.6 % and cost 149 ms beside the straggler's 255 ms over a
368 ms window, the same waits twice; the job balanced had no finding).

Cost: the median worker's exposed communication (comm + wait not hidden behind compute) less those waits, the
time that more overlap could hide.
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.requirements import Skipped

#: The phase the overlap is measured over, as the finding's title says it.
PHASE_WORDS = {"steady": "in the steady state", "all": "over the whole run"}
ADVICE = ("Hide communication behind computation: send gradients layer by layer as they are ready (non-blocking "
          "sends, a communication thread), pull the next weights while computing, use larger batches (more compute "
          "per byte sent), or compress the gradients.")


@detector("low_overlap", "communication overlap", {"totals", "communication"})
def detect(runs, th) -> list[Finding | Skipped]:
    """Median steady-state communication overlap below overlap.min (see the module docstring)."""
    findings = []
    for run in runs:
        table = run.table(run.main_phase)
        workers = [w for w in run.worker_ranks if w in table.index and table.loc[w, "compute"] > 0]
        if not workers:
            findings.append(short_of("low_overlap", run.name, "compute time on a worker (the overlap is compute "
                                     "over compute plus exposed communication)",
                                     f"no compute time on any worker {PHASE_WORDS[run.main_phase]}"))
            continue
        part = table.loc[workers]
        late = late_arrival_waits(run, workers)  # ns per worker: its waits for late ranks, not for data
        compute = part["compute"]
        exposed = compute / part["overlap"] - compute  # (comm + wait + barrier not hidden behind compute)
        own = compute / (compute + (exposed - late).clip(lower=0))  # the overlap without those waits
        median = float(np.median(own))
        if median >= th["overlap.min"]:
            continue
        measured = float(np.median(part["overlap"]))
        lost = float((part["comm"] + part["wait"] - late).clip(lower=0).median())
        waited = float(late.median())
        findings.append(Finding(
            id="low_overlap",
            title=f"Low communication overlap {PHASE_WORDS[run.main_phase]}: {Quantity(median, 'fraction')} (median "
                  f"worker; compute over compute plus exposed communication"
                  + (f"; {Quantity(measured, 'fraction')} with the waits for late ranks at the host collectives, "
                     "which the host straggler finding counts" if waited > 0 else "") + ")",
            severity="warning",
            evidence={"overlap_median": Quantity(median, "fraction"),
                      "overlap_min": Quantity(float(own.min()), "fraction"),
                      "compute_median": Quantity(float(compute.median()), "ns"),
                      "exposed_comm_median": Quantity(lost, "ns"),
                      **({"overlap_with_late_waits_median": Quantity(measured, "fraction"),
                          "late_arrival_wait_median": Quantity(waited, "ns")} if waited > 0 else {})},
            ranks=[int(w) for w in own.index[own < th["overlap.min"]]],
            phase=run.main_phase, advice=ADVICE, store=run.name, cost_ns=lost,
            cost_basis="the median worker's exposed communication (comm + wait)"
                       + (" less its waits for late ranks at the host collectives" if waited > 0 else "")))
    return findings


def late_arrival_waits(run, workers: list[int]):
    """Per worker (a Series, ns): the time in the detectors' phase it waited at the host backend's collectives for a
    rank that arrived later (the union of those intervals); 0 where the store holds no such collectives."""
    import pandas as pd

    out = pd.Series(0.0, index=workers)
    if "host_comm" not in run.capabilities:
        return out
    from ddltrace.analyses.gpu_collectives import wait_intervals
    from ddltrace.analyses.gpu_lanes import union_ns

    intervals = wait_intervals(run.host_collective_spans)
    for w in workers:
        p = run.phases.get(w)
        mine = intervals[intervals["rank"] == w]
        if p is None or not len(mine):
            continue
        lo, hi = (p.init_end_ns, p.steady_end_ns) if run.main_phase == "steady" else (p.start_ns, p.end_ns)
        starts = mine["start_ns"].to_numpy(np.int64).clip(lo, hi)
        ends = mine["end_ns"].to_numpy(np.int64).clip(lo, hi)
        out[w] = float(union_ns(starts, ends))
    return out
