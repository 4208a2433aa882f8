"""Scaling study over several stores of one job, and Chang's Lemma 3.1 (paper 001; MODELS.md section 3).

:func:`scaling_table` puts the runs side by side by number of workers w (one block per series): phase times
(medians over the workers, ns: the MPI start-up ``startup_ns``, each worker's first event to the end of its MPI_Init,
over the workers that traced one: 0 and ``startup_traced`` False where none did, a framework's profile;
the job's own initialisation ``job_init_ns``, from there to its first step, paper 002's term; ``steady_ns``,
``final_ns``; the whole run ``total_ns``, first event of any rank to the last), speedup and efficiency of the steady
state (the training phase) and of the whole run, and the overhead ratio R_O measured from the trace: the share of a
worker's steady state that is not compute (exposed communication, waits, barriers, I/O, idle), median over workers,
with the range over workers as its uncertainty.

Runs are compared within a series, the runs of one job at one batch size (:mod:`~ddltrace.analyses.same_job`;
the ``series`` column names it); speedup is against the series' base, the median of its runs at the fewest
workers w0 (NaN, and ``left_out`` saying why, for a run whose series holds no other worker count: there is nothing
to compare it with; :func:`scaling_notes` gives a line for each), assuming that run scaled perfectly:
S(w) = w0 T(w0) / T(w); efficiency E(w) = S(w) / w. Lemma 3.1 predicts E(N) = 1 / (1 + (N - 1) R_O) from the
R_O of the base run (``efficiency_lemma_base``) and from each run's own R_O (``efficiency_lemma_own``), both
normalised as the measured efficiency is, to E(w0) = 1: lemma(R_O, w) / lemma(R_O, w0), the efficiency against w0
the lemma predicts had the overhead ratio been that R_O at every w (NaN for a run left out); a measured
efficiency well below the prediction means the overhead grows with w (a saturating server), one above it means the
base run's overhead hid behind compute at larger w.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.same_job import series_labels, series_of
from ddltrace.units import format_percent


def lemma_speedup(overhead_ratio: float, n: float) -> float:
    """Chang's Lemma 3.1: S(N) = 1 / (R_O + (1 - R_O) / N)."""
    return 1.0 / (overhead_ratio + (1.0 - overhead_ratio) / n)


def lemma_efficiency(overhead_ratio: float, n: float) -> float:
    """E(N) = S(N) / N = 1 / (1 + (N - 1) R_O)."""
    return 1.0 / (1.0 + (n - 1.0) * overhead_ratio)


def max_overhead_ratio(efficiency: float, n: float) -> float:
    """The largest R_O that still gives efficiency E on N workers: (1/E - 1) / (N - 1)."""
    return (1.0 / efficiency - 1.0) / (n - 1.0)


def workers_for_speedup(speedup: float, overhead_ratio: float) -> float:
    """N for a target speedup S: S (1 - R_O) / (1 - S R_O); inf when S R_O >= 1 (unreachable)."""
    if speedup * overhead_ratio >= 1:
        return float("inf")
    return speedup * (1.0 - overhead_ratio) / (1.0 - speedup * overhead_ratio)


def overhead_ratio(run) -> tuple[float, float, float]:
    """(median, min, max) over workers of R_O = 1 - compute share of the steady state."""
    table = run.table("steady")
    workers = [w for w in run.worker_ranks if w in table.index and table.loc[w, "total_ns"] > 0]
    if not workers:
        return float("nan"), float("nan"), float("nan")
    values = 1.0 - table.loc[workers, "share_compute"].to_numpy(float)
    return float(np.median(values)), float(values.min()), float(values.max())


def scaling_table(runs) -> pd.DataFrame:
    """One row per run, by series (:func:`~ddltrace.analyses.same_job.series_of`: one job at one batch size) then w
    and store; see the module docstring for the columns' meaning."""
    groups = series_of(runs)
    labels = series_labels(groups)
    rows = []
    for key, members in groups.items():
        for run in members:
            phases = run.phase_table
            if not len(phases):
                continue
            workers = [w for w in run.worker_ranks if w in phases.index] or list(phases.index)
            r_o, r_lo, r_hi = overhead_ratio(run)
            traced = [w for w in workers if phases.loc[w, "startup_traced"]]
            rows.append({"store": run.name, "series": labels[key], "workers": run.workers,
                         "batch_size": run.batch_size,
                         "startup_ns": float(np.median(phases.loc[traced, "startup_ns"])) if traced else 0.0,
                         "startup_traced": bool(traced),
                         "job_init_ns": float(np.median(phases.loc[workers, "job_init_ns"])),
                         "steady_ns": float(np.median(phases.loc[workers, "steady_ns"])),
                         "final_ns": float(np.median(phases.loc[workers, "final_ns"])),
                         "total_ns": float(run.run_span_ns), "overhead_ratio": r_o, "overhead_ratio_min": r_lo,
                         "overhead_ratio_max": r_hi})
    table = pd.DataFrame(rows)
    if not len(table):
        return table
    return pd.concat([_compared(part) for _, part in table.groupby("series", sort=False)], ignore_index=True)


def _compared(part: pd.DataFrame) -> pd.DataFrame:
    """One series' rows with speedup, efficiency and Lemma 3.1's predictions against its base: the median of its
    runs at the fewest workers w0 (time and R_O); NaN, and ``left_out`` saying why, where all its runs are at one w."""
    part = part.copy()
    w0 = int(part["workers"].min())
    base = part[part["workers"] == w0].median(numeric_only=True)
    alone = part["workers"].nunique() < 2  # nothing to compare with (NaN, not S = w0)
    part["left_out"] = None
    if alone:
        part["left_out"] = ("no other run of its job at its batch size" if len(part) == 1 else
                            f"its job's {len(part)} runs at its batch size are all at w = {w0}")
    w0 = max(w0, 1)
    for what in ("steady", "total"):
        part[f"speedup_{what}"] = np.nan if alone else w0 * base[f"{what}_ns"] / part[f"{what}_ns"]
        part[f"efficiency_{what}"] = part[f"speedup_{what}"] / part["workers"].clip(lower=1)
    part["efficiency_lemma_base"] = np.nan if alone else [lemma_efficiency(base["overhead_ratio"], n) / (
        lemma_efficiency(base["overhead_ratio"], w0)) for n in part["workers"]]
    part["efficiency_lemma_own"] = np.nan if alone else [lemma_efficiency(r, n) / lemma_efficiency(r, w0) for r, n in
                                                         zip(part["overhead_ratio"], part["workers"], strict=True)]
    return part


def scaling_notes(table: pd.DataFrame) -> list[str]:
    """Lines to print under :func:`scaling_table`'s ``table``: each run left out of every series, and why; each run
    whose efficiency is above 100 % (superlinear), and what its R_O against its base's says of why."""
    if not len(table):
        return []
    notes = [f"{row.store} (w = {row.workers}, {row.series}): left out, {row.left_out}"
             for row in table.itertuples() if row.left_out]
    for _, part in table.groupby("series", sort=False):
        base = float(part.loc[part["workers"] == part["workers"].min(), "overhead_ratio"].median())
        for row in part.itertuples():
            above = [f"{what} {format_percent(e)}" for what, e in (("steady", row.efficiency_steady),
                                                                   ("total", row.efficiency_total)) if e > 1]
            if above:
                notes.append(f"{row.store} (w = {row.workers}): E above 100 % ({', '.join(above)}), superlinear: "
                             + _superlinear_why(row.overhead_ratio, base, row.workers))
    return notes


def _superlinear_why(r_o: float, base: float, workers: int) -> str:
    """Why a run did more than w times its base's work per second, as far as R_O tells."""
    if r_o < base:
        return (f"its R_O {format_percent(r_o)} is below the base's {format_percent(base)}: the base run's overhead "
                f"(waits, exposed communication) hid behind compute at w = {workers}")
    return (f"its R_O {format_percent(r_o)} is not below the base's {format_percent(base)}: each worker's compute "
            "was faster than the base's (a smaller share of the data per worker, in cache), or the base run was "
            "slowed (timings on a shared machine move by tens of per cent)")
