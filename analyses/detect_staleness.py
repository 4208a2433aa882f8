"""Gradient staleness (Rudra, paper 004 section 3; MODELS.md section 5).

It needs a staleness log: the ``staleness`` column of the job's ``gradients.csv`` beside the ``ground_truth.json``
that ``ddltrace workload`` records in the manifest, or counters named ``staleness`` (one sample per gradient, in
updates). It measures the mean <sigma>, the maximum and the histogram of the staleness of every gradient, and,
when the protocol is known (``sync`` and ``softsync_n`` in the run or workload configuration: hardsync n = 0,
n-softsync n, async = lambda-softsync with n = the number of workers), the share of gradients above Rudra's bound
sigma <= 2n. The statistics are always reported (info); a warning when more than ``staleness.violation_max``
(5 %) of the gradients break the bound: the protocol is not behaving as configured, and the learning rate should
follow the staleness actually seen, alpha = alpha_0 / <sigma> (Rudra's staleness-dependent rate).
Cost: none in time (0 ns): stale gradients cost convergence (more epochs), not the time of this run.
"""

from __future__ import annotations

import csv

import numpy as np

from ddltrace.analyses.findings import Finding, Quantity, detector
from ddltrace.analyses.run_analysis import ground_truth_path

HISTOGRAM_BINS = 8


def staleness_log(run) -> np.ndarray | None:
    """Staleness of every gradient (in updates), or None when the run has no staleness log."""
    truth = ground_truth_path(run.store)
    if truth is not None and (truth.parent / "gradients.csv").exists():
        with open(truth.parent / "gradients.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        if rows and "staleness" in rows[0]:
            return np.array([int(float(r["staleness"])) for r in rows], dtype=np.int64)
    if run.store.counter_ranks:
        counters = run.store.counters()
        values = counters.loc[counters["name"] == "staleness", "value"]
        if len(values):
            return values.to_numpy().round().astype(np.int64)
    return None


def splitting(config: dict) -> int | None:
    """n of n-softsync from the configuration (hardsync 0, async the number of workers), or None if unknown."""
    if config.get("softsync_n") is not None:
        return int(config["softsync_n"])
    sync = str(config.get("sync", "")).replace(":", " ").split()
    if not sync:
        return None
    if sync[0] == "hardsync":
        return 0
    if sync[0] == "async" and config.get("workers"):
        return int(config["workers"])
    if sync[0] == "softsync" and len(sync) == 2 and sync[1].isdigit():
        return int(sync[1])
    return None


def staleness_stats(sigma: np.ndarray, n: int | None) -> dict:
    """mean, max, histogram (counts of sigma = 0 .. HISTOGRAM_BINS - 2, and the rest) and share above 2n."""
    counts = np.bincount(np.clip(sigma, 0, HISTOGRAM_BINS - 1), minlength=HISTOGRAM_BINS)
    return {"gradients": int(len(sigma)), "mean": float(sigma.mean()), "max": int(sigma.max()),
            "histogram": counts.tolist(),
            "above_2n": float(np.mean(sigma > 2 * n)) if n is not None else float("nan")}


@detector("staleness", "gradient staleness", {"staleness_log"})
def detect(runs, th) -> list[Finding]:
    """Staleness statistics, and Rudra's 2n bound when the protocol is known (see the module docstring)."""
    findings = []
    for run in runs:
        sigma = staleness_log(run)
        if sigma is None or not len(sigma):
            continue
        n = splitting(run.config)
        s = staleness_stats(sigma, n)
        evidence = {"mean_staleness": Quantity(s["mean"], "updates"), "max_staleness": Quantity(s["max"], "updates"),
                    "gradients": Quantity(s["gradients"], "gradients")}
        for k, count in enumerate(s["histogram"]):
            label = f"sigma={k}" if k < HISTOGRAM_BINS - 1 else f"sigma>={k}"
            evidence[f"histogram_{label}"] = Quantity(int(count), "gradients")
        if n is not None:
            evidence["softsync_n"] = Quantity(n, "1")
            evidence["bound_2n"] = Quantity(2 * n, "updates")
            evidence["share_above_2n"] = Quantity(s["above_2n"], "fraction")
        violated = n is not None and s["above_2n"] > th["staleness.violation_max"]
        advice = ""
        if violated:
            alpha0 = run.config.get("alpha0")
            rate = f"alpha = alpha_0 / <sigma> = {alpha0 / max(s['mean'], 1):.3g}" if alpha0 else \
                "alpha = alpha_0 / <sigma>"
            advice = (f"Staleness exceeds Rudra's 2n bound: scale the learning rate by the staleness actually seen "
                      f"({rate}), lower n (fewer gradients in flight per update), or keep mu * lambda constant "
                      f"when adding learners.")
        title = (f"Staleness: mean {s['mean']:.2f} updates, max {s['max']} over {s['gradients']} gradients"
                 + (f"; {Quantity(s['above_2n'], 'fraction')} above the 2n = {2 * n} bound" if n is not None else ""))
        findings.append(Finding(id="staleness", title=title, severity="warning" if violated else "info",
                                evidence=evidence, ranks=run.server_ranks, phase="steady", advice=advice,
                                store=run.name, cost_ns=0.0,
                                cost_basis="none in time: staleness costs convergence, not this run's time"))
    return findings
