"""I/O- or input-bound steady state: the input pipeline, not the model, sets the pace.

It measures, per rank, the share of its steady state spent in the io category (disk reads, data loading; an
importer puts a framework's input-pipeline calls there: ``IteratorGetNext``, ``__Get Minibatch``, ...). A finding
when the median over workers reaches ``io.share_max`` (25 %): a quarter of every step waiting for input means a
faster model or more workers will not help. Initialisation I/O is the sequential-initialisation detector's business.
On per-call aggregates (no steady state) the share is of the whole run. A store whose workers hold no time in that
phase is listed as not made. The time is the rank's breakdown's: an instant counts as io only where none of the
rank's lanes computes (its other threads, its device's streams), so the input time hidden behind compute is not in
it (a Kineto trace whose DataLoader took 416 ms on the host: 356 ms in io, the rest while the GPU computed).

Cost: the median worker's I/O time in that phase with nothing computing (the time each step waits for input).
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.requirements import Skipped

ADVICE = ("Overlap input with compute (prefetch, more reader threads or processes), cache the decoded data set in "
          "memory or on local disk, or use a faster input format; check the storage with the disk probe.")


@detector("io_bound", "input-bound steady state", {"totals"})
def detect(runs, th) -> list[Finding | Skipped]:
    """Steady-state I/O share at or above io.share_max (see the module docstring)."""
    findings = []
    for run in runs:
        table = run.table(run.main_phase)
        workers = [w for w in run.worker_ranks if w in table.index and table.loc[w, "total_ns"] > 0]
        if not workers:
            phase = "steady state" if run.main_phase == "steady" else "run"
            findings.append(short_of("io_bound", run.name, "a worker with time in the phase measured",
                                     f"no time on any worker in its {phase}"))
            continue
        shares = table.loc[workers, "share_io"]
        median = float(np.median(shares))
        if median < th["io.share_max"]:
            continue
        worst = int(shares.idxmax())
        lost = float(np.median(table.loc[workers, "io"]))
        findings.append(Finding(
            id="io_bound",
            title=f"Input-bound: workers spend {Quantity(median, 'fraction')} of the "
                  f"{'steady state' if run.main_phase == 'steady' else 'run'} in I/O with nothing computing "
                  "(median)",
            severity="warning",
            evidence={"io_share_median": Quantity(median, "fraction"),
                      "io_share_max": Quantity(float(shares.max()), "fraction"),
                      "io_share_max_rank": Quantity(worst, "rank"),
                      "io_time_total": Quantity(float(table.loc[workers, "io"].sum()), "ns"),
                      "io_time_median": Quantity(lost, "ns")},
            ranks=[int(w) for w in shares.index[shares >= th["io.share_max"]]],
            phase=run.main_phase, advice=ADVICE, store=run.name, cost_ns=lost,
            cost_basis="the median worker's I/O time with none of its lanes computing (input hidden behind "
                       "compute left out)"))
    return findings
