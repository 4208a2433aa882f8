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

Cost: the median worker's exposed communication (comm + wait not hidden behind compute), the time that more
overlap could hide.
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
        overlap = table.loc[workers, "overlap"]
        median = float(np.median(overlap))
        if median >= th["overlap.min"]:
            continue
        part = table.loc[workers]
        lost = float((part["comm"] + part["wait"]).median())
        findings.append(Finding(
            id="low_overlap",
            title=f"Low communication overlap {PHASE_WORDS[run.main_phase]}: {Quantity(median, 'fraction')} (median "
                  f"worker; compute over compute plus exposed communication)",
            severity="warning",
            evidence={"overlap_median": Quantity(median, "fraction"),
                      "overlap_min": Quantity(float(overlap.min()), "fraction"),
                      "compute_median": Quantity(float(part["compute"].median()), "ns"),
                      "exposed_comm_median": Quantity(lost, "ns")},
            ranks=[int(w) for w in overlap.index[overlap < th["overlap.min"]]],
            phase=run.main_phase, advice=ADVICE, store=run.name, cost_ns=lost,
            cost_basis="the median worker's exposed communication (comm + wait)"))
    return findings
