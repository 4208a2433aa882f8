"""Cache cliff across a batch-size series (paper 002 section 4.4; MODELS.md section 1).

Given stores of one job at one w with different batch sizes b (``batch_size`` / ``batch`` in the run or workload
configuration), it measures the compute time per sample: steady-state compute per step over b, median over workers.
Per-sample time should be flat or fall as b grows (better reuse); a finding when it jumps by at least
``cache.jump_min`` (2x) between two adjacent batch sizes: the working set, b (n_f + 1) s + n_w s bytes, has left
the last-level cache (paper 002 saw ~100x). When the configuration gives n_w (and n_f, s, llc_bytes), the
evidence shows the working set on each side of the jump. Stores among which no two share a w with different
batch sizes (or say none) are listed as not made, with the w and batch size of each.

Cost: the extra compute of the run above the jump, (per-sample time above - below) x its batch size x the median
worker's steps in that run.
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.findings import REQUIREMENTS, Finding, Quantity, detector, short_of
from ddltrace.analyses.requirements import Skipped
from ddltrace.units import counted

ADVICE = ("Keep the batch below the jump (or block the computation so that a batch's activations and the weights "
          "fit in the last-level cache); compare the working set with the cache size from the hardware profile.")


def per_sample_ns(run) -> float:
    """Median over workers of steady-state compute per step divided by the batch size (ns per sample)."""
    table = run.table("steady")
    values = []
    for w in run.worker_ranks:
        steps = len(run.phases[w].steps) if w in run.phases else 0
        if steps and w in table.index:
            values.append(table.loc[w, "compute"] / steps / run.batch_size)
    return float(np.median(values)) if values else float("nan")


def working_set_bytes(config: dict, batch: int) -> float | None:
    """b (n_f + 1) s + n_w s bytes (inputs, label, weights), when n_w and n_f are known."""
    n_w, n_f = config.get("n_w"), config.get("n_f", config.get("features"))
    if n_w is None or n_f is None:
        return None
    s = config.get("bytes_per_value", 8)
    return float(batch * (n_f + 1) * s + n_w * s)


@detector("cache_cliff", "cache cliff across batch sizes", {"timeline"}, min_stores=2,
          series="runs of one job at one worker count with two or more batch sizes")
def detect(runs, th) -> list[Finding | Skipped]:
    """A jump of per-sample compute time between adjacent batch sizes (see the module docstring); a
    :class:`Skipped` when no two stores are of one w with different batch sizes."""
    findings = []
    groups: dict = {}
    for run in runs:
        if run.batch_size:
            groups.setdefault(run.workers, {}).setdefault(run.batch_size, run)
    if all(len(series) < 2 for series in groups.values()):
        held = "; ".join(f"w = {r.workers}, batch {r.batch_size or 'not given'}" for r in runs)
        return [short_of("cache_cliff", ", ".join(r.name for r in runs),
                         REQUIREMENTS["cache_cliff"].series + " (the batch size in the run's or workload's "
                         "configuration)", f"{counted(len(runs), 'store')}: {held}")]
    for workers, series in groups.items():
        if len(series) < 2:
            continue
        batches = sorted(series)
        times = [per_sample_ns(series[b]) for b in batches]
        for i in range(len(batches) - 1):
            lo, hi = times[i], times[i + 1]
            if not (np.isfinite(lo) and np.isfinite(hi)) or lo <= 0 or hi / lo < th["cache.jump_min"]:
                continue
            above = series[batches[i + 1]]
            config = above.config
            steps = float(np.median([len(above.phases[w].steps) for w in above.worker_ranks if w in above.phases]
                                    or [0]))
            lost = (hi - lo) * batches[i + 1] * steps
            evidence = {"batch_below": Quantity(batches[i], "samples"),
                        "batch_above": Quantity(batches[i + 1], "samples"),
                        "per_sample_below": Quantity(lo, "ns"), "per_sample_above": Quantity(hi, "ns"),
                        "jump": Quantity(hi / lo, "ratio")}
            below, above = working_set_bytes(config, batches[i]), working_set_bytes(config, batches[i + 1])
            if below is not None:
                evidence["working_set_below"] = Quantity(below, "bytes")
                evidence["working_set_above"] = Quantity(above, "bytes")
            if config.get("llc_bytes"):
                evidence["llc"] = Quantity(float(config["llc_bytes"]), "bytes")
            findings.append(Finding(
                id="cache_cliff",
                title=f"Cache cliff: compute per sample jumps {hi / lo:.1f}x from batch {batches[i]} to "
                      f"{batches[i + 1]} (w = {workers})",
                severity="warning", evidence=evidence, phase="steady", advice=ADVICE,
                store=", ".join(series[b].name for b in batches), cost_ns=lost,
                cost_basis=f"(per-sample compute above - below) x batch {batches[i + 1]} x {steps:.0f} steps"))
    return findings
