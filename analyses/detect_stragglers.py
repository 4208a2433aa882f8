"""Stragglers and load imbalance: one worker far slower than the others.

It measures, per worker (parameter servers excluded), its compute time per step in the steady state (the
steady-state compute divided by its number of steps; the whole steady-state compute when no steps were found) and
its median step time. For each measure it computes the robust z-score of every worker,
``z = 0.6745 (x - median) / MAD`` (Iglewicz and Hoaglin), with the MAD floored at ``straggler.mad_floor`` (2 %) of
the median so that identical ranks do not make any difference infinite. A worker is a straggler when
z >= ``straggler.z_min`` (3.5, the usual outlier cut) and it is at least ``straggler.excess_min`` (25 %) above
the median: a shared machine's noise is smaller than that, a slow node is not. Needs ``straggler.min_ranks`` (3)
workers. Compute per step catches the slow rank even in a synchronous job, where every rank's step time is the
same because the fast ones wait for it. The evidence puts the slowest worker beside the average (RALP).
On per-call aggregates (IPM) there are no steps and no steady state: the measure is each worker's compute over
the whole run. Ranks that are all ranks of a slow node (:mod:`~ddltrace.analyses.detect_slow_node`: every rank of
one node slow) are left to that finding: one cause, the node, reported once.

Cost: the time the others wait for the slowest worker, (slowest - median) of the measure times the slowest
worker's steps (once when the measure is its whole compute): the slowest worker's compute minus the median
worker's.
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.detect_slow_node import slow_node
from ddltrace.analyses.findings import Finding, Quantity, detector

ADVICE = ("Look at the named ranks' hosts (CPU frequency, other jobs, thermal throttling, a slower GPU or disk) "
          "and at their share of the data; balance the work (smaller shards for slow ranks), or use a protocol that "
          "does not wait for the slowest (softsync, backup workers).")


def robust_z(values: np.ndarray, mad_floor: float) -> tuple[np.ndarray, float, float]:
    """(z per value, median, MAD used): z = 0.6745 (x - median) / max(MAD, mad_floor * |median|)."""
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median)))
    mad = max(mad, mad_floor * abs(median), 1e-12)
    return 0.6745 * (values - median) / mad, median, mad


def measures(run) -> dict[str, tuple[list[int], np.ndarray]]:
    """Per-worker compute per step and step time (ns)."""
    workers = [w for w in run.worker_ranks if w in run.phases and run.phases[w].steady_ns > 0]
    table = run.table(run.main_phase)
    out = {}
    steps = {w: len(run.phases[w].steps) for w in workers}
    compute = np.array([table.loc[w, "compute"] / max(1, steps[w]) for w in workers], dtype=float)
    whole = "steady-state compute" if run.main_phase == "steady" else "compute over the whole run"
    out["compute per step" if all(steps.values()) else whole] = (workers, compute)
    if workers and all(steps.values()):
        out["step time"] = (workers, np.array([float(run.phases[w].steps["dur_ns"].median()) for w in workers]))
    return out


@detector("stragglers", "stragglers", {"totals"})
def detect(runs, th) -> list[Finding]:
    """Workers whose compute per step (or step time) is a robust outlier (see the module docstring)."""
    findings = []
    for run in runs:
        node = slow_node(run, th)
        for what, (workers, values) in measures(run).items():
            if len(workers) < th["straggler.min_ranks"] or not np.all(np.isfinite(values)):
                continue
            z, median, mad = robust_z(values, th["straggler.mad_floor"])
            excess = values / median - 1 if median > 0 else np.zeros_like(values)
            slow = np.flatnonzero((z >= th["straggler.z_min"]) & (excess >= th["straggler.excess_min"]))
            if not len(slow):
                continue
            worst = int(slow[np.argmax(values[slow])])
            ranks = [int(workers[i]) for i in slow]
            if node is not None and set(ranks) <= set(node["ranks"]):
                break  # the slow node's finding names them
            times = max(1, len(run.phases[workers[worst]].steps))  # once for the whole compute
            lost = (float(values[worst]) - median) * times
            findings.append(Finding(
                id="straggler",
                title=f"Straggler: rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} "
                      f"{Quantity(float(excess[worst]), 'fraction')} slower than the median worker ({what})",
                severity="warning",
                evidence={
                    "slowest_rank": Quantity(int(workers[worst]), "rank"),
                    "slowest": Quantity(float(values[worst]), "ns"),
                    "median": Quantity(median, "ns"),
                    "average": Quantity(float(np.mean(values)), "ns"),
                    "mad": Quantity(mad, "ns"),
                    "robust_z": Quantity(float(z[worst]), "1"),
                    "excess_over_median": Quantity(float(excess[worst]), "fraction"),
                    "workers": Quantity(len(workers), "ranks"),
                    "time_lost": Quantity(lost, "ns"),
                },
                ranks=ranks,
                phase=run.main_phase,
                advice=ADVICE,
                store=run.name,
                cost_ns=lost,
                cost_basis=f"the slowest worker's {what} minus the median worker's"
                           + (f", times its {times} steps" if times > 1 else ""),
            ))
            break  # one finding per run: the first measure that names a straggler
    return findings
