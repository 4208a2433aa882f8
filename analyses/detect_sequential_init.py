"""Sequential initialisation: ranks initialise one after another instead of at once (paper 002, section 5.2.2).

**Within a run** it measures, per rank, where the rank's own initialisation work ended (``init_work_end``, from
the start of the run) and the barrier/wait time that closes its initialisation (``init_trailing_sync``), and fits
each against the rank number (least squares, with the t test of the slope). A staircase (CNTK's reader: rank 1 reads,
then rank 2, ... while the others wait in MPI_Barrier) is a line with R^2 >= ``seq_init.r2_min`` (0.8), a slope
significant at ``seq_init.p_max`` (1 %), and a spread (|slope| x rank range) of at least ``seq_init.spread_min``
(25 %) of the job's initialisation and ``seq_init.spread_min_ns`` (1 ms). The job's initialisation is the median
over the fitted ranks of :attr:`~ddltrace.analyses.phases.RankPhases.job_init_ns` (from the end of the rank's
MPI_Init to the end of its initialisation phase, paper 002's term), as across runs; the MPI start-up before it
(``startup_ns``: the rank's first event to the end of MPI_Init) is reported beside it (``startup_median``), not
counted. The fit is over the workers when there
are at least ``seq_init.min_ranks`` (4) of them (a parameter server sets up weights, not data), else over all
ranks, and needs that many: on fewer ranks the detector is listed as not made, with the count.
Ranks that start together and read in parallel finish in random order: no line, or a line too small to matter.

**Across runs** (per series: the runs of one job at one batch size, :mod:`~ddltrace.analyses.same_job`, each fitted
alone; a series of fewer than three w is listed as not made; several runs at one w give the median of each figure)
it fits the job's
initialisation time against w (paper 002 figure 9): per run the median over its ranks of
:attr:`~ddltrace.analyses.phases.RankPhases.job_init_ns`, from the end of the rank's MPI_Init (the PMPI collector's
clock synchronisation inside it included) to the end of its initialisation phase: the paper's initialisation term
(reading the data, setting up, up to the first batch). A finding when R^2 >= ``seq_init.series_r2_min`` (0.8), the
slope is positive and significant, and the time at the largest w is at least ``seq_init.growth_min`` (1.5) times
that at the smallest. The start-up before it (the rank's first event to the end of MPI_Init: the MPI library's and
the launcher's work, which grows with the ranks on a shared machine too) is fitted the same way and reported beside
it (``startup_*``), not counted in the finding.

Severity: warning; error when the job's initialisation is at least ``seq_init.error_share`` (50 %) of the run (the
first event of any rank to the last).

Cost: within a run, the staircase's spread (|slope| x rank range: how much later the last rank's initialisation
ended than the first's, time every rank waits); across runs, the initialisation time at the largest w minus that
at the smallest.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.requirements import Skipped
from ddltrace.analyses.same_job import series_of
from ddltrace.units import counted

ADVICE = ("Initialisation is serialised across ranks: each rank starts its own setup only when the previous one "
          "is done, while the others wait. Read the input in parallel (each rank its own byte range or shard), "
          "from local disks, or pre-partition the data set; paper 002 found CNTK's reader reading the whole file on "
          "every worker, one after another.")


@dataclass(frozen=True)
class LineFit:
    """Least-squares line y = intercept + slope x; rvalue**2 is R^2, pvalue the two-sided t test of slope = 0
    (with ``dof`` degrees of freedom), computed when first read: it imports scipy (0.14 s), which a run whose fit
    fails the cheaper tests does without."""

    slope: float
    intercept: float
    rvalue: float
    stderr: float
    dof: int

    @cached_property
    def pvalue(self) -> float:
        if self.stderr == 0:
            return 0.0
        from scipy.special import stdtr

        return float(2 * stdtr(self.dof, -abs(self.slope) / self.stderr))


def _fit(x, y) -> LineFit | None:
    """Least squares with the slope's standard error and p-value (n - 2 degrees of freedom); None if degenerate."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy, sxy = float(dx @ dx), float(dy @ dy), float(dx @ dy)
    slope = sxy / sxx
    r = max(-1.0, min(1.0, sxy / np.sqrt(sxx * syy)))
    residual = max(syy - slope * sxy, 0.0)
    stderr = float(np.sqrt(residual / (n - 2) / sxx))
    return LineFit(slope, float(y.mean() - slope * x.mean()), r, stderr, n - 2)


def _ranks_fitted(run, least: int):
    """The phase table of the ranks whose initialisation is read: the workers where there are ``least`` of them (a
    parameter server initialises differently: weights, not data), else every rank."""
    table = run.phase_table
    workers = [r for r in run.worker_ranks if r in table.index]
    return table.loc[workers] if len(workers) >= max(least, 1) else table


def within_run(run, th) -> list[Finding | Skipped]:
    least = th["seq_init.min_ranks"]
    table = _ranks_fitted(run, least)
    if len(table) < least:
        return [short_of("sequential_init", run.name, f"{least:g} or more ranks to fit the end of each rank's "
                         "initialisation against its rank number (seq_init.min_ranks)", counted(len(table), "rank"))]
    ranks = table.index.to_numpy()
    t0 = table["start_ns"].min()
    init_ns = float(np.median(table["job_init_ns"]))  # the job's own, from the end of MPI_Init
    startup_ns = float(np.median(table["startup_ns"]))
    run_ns = max(run.run_span_ns, 1)
    measures = {
        "init_work_end": ("end of each rank's own initialisation work", table["init_work_end_ns"] - t0),
        "init_trailing_sync": ("barrier/wait that closes each rank's initialisation", table["init_trailing_sync_ns"]),
    }
    best = None
    for key, (what, y) in measures.items():
        fit = _fit(ranks, y.to_numpy(float))
        if fit is None:
            continue
        spread = abs(fit.slope) * float(np.ptp(ranks))
        ok = (fit.rvalue ** 2 >= th["seq_init.r2_min"] and spread >= th["seq_init.spread_min"] * init_ns
              and spread >= th["seq_init.spread_min_ns"] and fit.pvalue <= th["seq_init.p_max"])
        if ok and (best is None or fit.rvalue ** 2 > best[2].rvalue ** 2):
            best = (key, what, fit, spread)
    if best is None:
        return []
    key, what, fit, spread = best
    share = init_ns / run_ns
    order = "ascending" if (fit.slope > 0) == (key == "init_work_end") else "descending"
    return [Finding(
        id="sequential_init",
        title=f"Sequential initialisation: ranks initialise one after another ({order} rank order), "
              f"{Quantity(abs(fit.slope), 'ns/rank')} apart; the job's initialisation (from the end of MPI_Init to "
              f"the first step, median rank) is {Quantity(init_ns, 'ns')}, {Quantity(share, 'fraction')} of the "
              f"run; MPI start-up before it (first event to the end of MPI_Init) {Quantity(startup_ns, 'ns')} "
              f"(fitted: {what} against rank)",
        severity="error" if share >= th["seq_init.error_share"] else "warning",
        evidence={
            "slope": Quantity(float(fit.slope), "ns/rank"),
            "r2": Quantity(float(fit.rvalue ** 2), "1"),
            "p_value": Quantity(float(fit.pvalue), "1"),
            "slope_stderr": Quantity(fit.stderr, "ns/rank"),
            "spread": Quantity(spread, "ns"),
            "init_median": Quantity(init_ns, "ns"),
            "init_share_of_run": Quantity(share, "fraction"),
            "startup_median": Quantity(startup_ns, "ns"),
            "ranks_fitted": Quantity(len(ranks), "ranks"),
        },
        ranks=[int(r) for r in ranks],
        phase="init",
        advice=ADVICE,
        store=run.name,
        cost_ns=spread,
        cost_basis="the staircase's spread (|slope| x rank range), waited by every rank",
    )]


def across_runs(runs, th) -> list[Finding | Skipped]:
    return [f for members in series_of(runs).values() for f in _series(members, th)]


def _series(runs, th) -> list[Finding | Skipped]:
    """The across-run finding of one series (runs of one job at one batch size), by w; several runs at one w:
    the median of their initialisations (and start-ups, and spans)."""
    points: dict[int, list] = {}
    for run in runs:
        table = _ranks_fitted(run, 1)  # its workers, as the scaling table's medians and within_run's (w >= min_ranks)
        if len(table):
            points.setdefault(run.workers, []).append((float(np.median(table["job_init_ns"])),
                                                       float(np.median(table["startup_ns"])), run.run_span_ns))
    if len(points) < 3:
        at = f" at w = {', '.join(map(str, sorted(points)))}" if points else ""
        return [short_of("sequential_init", ", ".join(r.name for r in runs), "runs of one job at 3 or more worker "
                         "counts (a line of initialisation time against w)", counted(len(runs), "store") + at,
                         part="across runs")]
    w = np.array(sorted(points), dtype=float)
    init, startup, span = np.array([np.median(points[k], axis=0) for k in sorted(points)]).T
    fit = _fit(w, init)
    if fit is None or fit.slope <= 0:
        return []
    growth = init[-1] / max(init[0], 1.0)
    if fit.rvalue ** 2 < th["seq_init.series_r2_min"] or fit.pvalue > 0.05 or growth < th["seq_init.growth_min"]:
        return []
    share = init[-1] / max(span[-1], 1)
    startup_fit = _fit(w, startup)
    return [Finding(
        id="sequential_init_scaling",
        title=f"Initialisation grows linearly with the number of workers: +{Quantity(fit.slope, 'ns/worker')}, "
              f"{growth:.1f}x from w = {int(w[0])} to w = {int(w[-1])} (the job's own: from the end of MPI_Init to "
              "the first step, median worker of each run)"
              + (f"; start-up before it (first event to the end of MPI_Init): "
                 f"{'+' if startup_fit.slope >= 0 else ''}{Quantity(startup_fit.slope, 'ns/worker')}"
                 if startup_fit else ""),
        severity="error" if share >= th["seq_init.error_share"] else "warning",
        evidence={
            "slope": Quantity(float(fit.slope), "ns/worker"),
            "r2": Quantity(float(fit.rvalue ** 2), "1"),
            "p_value": Quantity(float(fit.pvalue), "1"),
            "init_at_min_w": Quantity(float(init[0]), "ns"),
            "init_at_max_w": Quantity(float(init[-1]), "ns"),
            "min_w": Quantity(int(w[0]), "workers"),
            "max_w": Quantity(int(w[-1]), "workers"),
            "init_share_at_max_w": Quantity(float(share), "fraction"),
            "startup_slope": Quantity(float(startup_fit.slope) if startup_fit else 0.0, "ns/worker"),
            "startup_at_min_w": Quantity(float(startup[0]), "ns"),
            "startup_at_max_w": Quantity(float(startup[-1]), "ns"),
            "runs": Quantity(len(runs), "runs"),
        },
        phase="init",
        advice=ADVICE,
        store=", ".join(r.name for r in runs),
        cost_ns=float(init[-1] - init[0]),
        cost_basis=f"initialisation at w = {int(w[-1])} minus that at w = {int(w[0])}",
    )]


@detector("sequential_init", "sequential initialisation", {"timeline"})
def detect(runs, th) -> list[Finding | Skipped]:
    """Sequential initialisation within each run and across a series of runs (see the module docstring); a
    :class:`Skipped` for each run with too few ranks, and for a series of too few worker counts."""
    findings = [f for run in runs for f in within_run(run, th)]
    return findings + across_runs(runs, th)
