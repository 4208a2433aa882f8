"""Stragglers and load imbalance: one worker far slower than the others.

It measures, per worker (parameter servers excluded), its compute time per step in the steady state (the compute
inside its steps divided by their number: not the steady state's time outside them, such as a worker's wait
between the initialisation's barrier and its first pull, 18-54 ms in ps-sgd's runs, which made a 300 % slower
straggler 283 % slower; the whole steady-state compute when no steps were found) and its median step time. For
each measure it computes the robust z-score of every worker, ``z = 0.6745 (x - median) / MAD`` (Iglewicz and
Hoaglin), with the MAD floored at ``straggler.mad_floor`` (2 %) of the median so that identical ranks do not make
any difference infinite. A worker is a straggler when z >= ``straggler.z_min`` (3.5, the usual
outlier cut) and it is at least ``straggler.excess_min`` (25 %) above the median: a shared machine's noise is
smaller than that, a slow node is not. Needs ``straggler.min_ranks`` (3) workers with a steady state for that test
(with fewer, other than two, it is listed as not made). With exactly two workers there is no outlier test (their
z-scores are +-0.67 whatever their difference): the slower is the straggler when its measure is at least
``straggler.excess_min`` above the other worker's (a 2-GPU or 2-rank job whose ranks differ by 25 % is a finding;
with one worker there is nothing to compare, and the analysis says so). Compute per step catches the slow rank even
in a synchronous job, where every rank's step time is the same because the fast ones wait for it. The evidence puts
the slowest worker beside the average (RALP).
Only the steps a worker finished count (:func:`finished_steps`): a rank that ended abruptly ended inside its last,
whose compute may hold a wait for a dead peer (a healthy rank 0 read 212 % slower from the one step in which rank 1
died); a rank that ended on its way out of an interrupted job (``ended`` "interrupted": its MPI_Finalize began after
the Ctrl-C) was stopped inside its last too, unless that step ended before the stop (a step the stop cut ends at
it: :func:`~ddltrace.analyses.phases.segment_rank`). Such a worker with no finished step leaves the analysis not
made.
Where the ranks meet at a host backend's collectives (PyTorch's gloo: at least ``gpu.late_min_instances`` of its
spans matched across ranks) compute per step is not measured: a wait for gloo's threads inside a leaf op stays
that op's compute (inside a span that holds others it is comm: :mod:`~ddltrace.analyses.segments`; before that
rule an H100 job's victim had 74.7 ms a step, the straggler 33.9 ms). It is listed as not made, and
:mod:`~ddltrace.analyses.detect_host_straggler` judges the ranks by their arrivals at the collectives.
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
from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.host_collectives import matched_count
from ddltrace.analyses.requirements import Skipped
from ddltrace.units import counted

ADVICE = ("Look at the named ranks' hosts (CPU frequency, other jobs, thermal throttling, a slower GPU or disk) "
          "and at their share of the data; balance the work (smaller shards for slow ranks), or use a protocol that "
          "does not wait for the slowest (softsync, backup workers).")


def robust_z(values: np.ndarray, mad_floor: float) -> tuple[np.ndarray, float, float, float]:
    """(z per value, median, MAD used, MAD measured): z = 0.6745 (x - median) / max(MAD, mad_floor * |median|)."""
    median = float(np.median(values))
    measured = float(np.median(np.abs(values - median)))
    mad = max(measured, mad_floor * abs(median), 1e-12)
    return 0.6745 * (values - median) / mad, median, mad, measured


#: ``ended`` of a rank whose MPI_Finalize began after the job's interrupt (the collectors' launcher's
#: ``ENDED_BY_INTERRUPT``): it left a stopped job, not the end of its work.
INTERRUPTED = "interrupted"
#: How a rank's ``ended`` says that it did not end at the end of its work.
CUT_SHORT = ("abrupt", INTERRUPTED)


def finished_steps(run, rank: int):
    """The rank's steps that it finished (the rows of its phases' ``steps``): all but the last of a rank that ended
    abruptly (it ended inside it), unless its profile left that one out already (the torch bootstrap's
    ``unfinished_step``); of a rank that ended on its way out of the interrupted job (``ended`` "interrupted"), the
    steps that ended before the stop (one the stop cut ends at it, :attr:`~ddltrace.analyses.phases.RankPhases.
    stop_ns`), all but the last where the stop is not known."""
    phases = run.phases[rank]
    steps = phases.steps
    info = run.store.rank_info(rank)
    if info.get("ended") not in CUT_SHORT or info.get("unfinished_step") is not None:
        return steps
    if info.get("ended") == INTERRUPTED and phases.stop_ns is not None:
        return steps[steps["end_ns"].to_numpy() < phases.stop_ns]
    return steps.iloc[:-1]


def unjudged(run, workers: list[int]) -> list[int]:
    """The ``workers`` that ended abruptly or on their way out of the interrupted job with no finished step: their
    compute is that of a step they did not finish."""
    return [w for w in workers if run.store.rank_info(w).get("ended") in CUT_SHORT and not len(finished_steps(run, w))]


def unjudged_words(run, cut: list[int]) -> tuple[str, str]:
    """(what the stragglers' analysis needs, what the input holds) where ``cut`` (:func:`unjudged`) is not empty."""
    ended = {run.store.rank_info(w).get("ended") for w in cut}
    how = " or ".join(w for e, w in (("abrupt", "ended abruptly"), (INTERRUPTED, "ended on the way out of the "
                                                                     "interrupted job")) if e in ended)
    why = "ended abruptly" if INTERRUPTED not in ended else "ended abruptly or on the way out of an interrupted job"
    return (f"a finished step on every worker (a rank that {why} did not finish its last)",
            f"rank{'s' * (len(cut) > 1)} {', '.join(map(str, cut))} {how} with no finished step")


def measures(run) -> dict[str, tuple[list[int], np.ndarray]]:
    """Per-worker compute per step and step time (ns), over the steps each finished."""
    workers = [w for w in run.worker_ranks if w in run.phases and run.phases[w].steady_ns > 0]
    table = run.table(run.main_phase)
    out = {}
    steps = {w: finished_steps(run, w) for w in workers}
    compute = np.array([_in_steps(steps[w]) / len(steps[w]) if len(steps[w]) else table.loc[w, "compute"]
                        for w in workers], dtype=float)
    whole = "steady-state compute" if run.main_phase == "steady" else "compute over the whole run"
    every = all(len(found) for found in steps.values())
    out["compute per step" if every else whole] = (workers, compute)
    if workers and every:
        out["step time"] = (workers, np.array([float(steps[w]["dur_ns"].median()) for w in workers]))
    return out


@detector("stragglers", "stragglers", {"totals", "two_workers", "one_run"})
def detect(runs, th) -> list[Finding | Skipped]:
    """Workers whose compute per step (or step time) is a robust outlier, or of two workers the one well above the
    other (see the module docstring)."""
    findings = []
    for run in runs:
        held = held_waits(run, th)
        if held:
            findings.append(short_of("stragglers", run.name, "compute per step that holds no collective's wait (on "
                                     "gloo, a wait for its threads' collective inside a leaf op stays compute)", held))
            continue
        measured = measures(run)
        workers = next(iter(measured.values()))[0]  # the same workers for each measure
        cut = unjudged(run, workers)
        if cut:
            findings.append(short_of("stragglers", run.name, *unjudged_words(run, cut)))
            continue
        if len(workers) != 2 and len(workers) < th["straggler.min_ranks"]:
            of = f" of its {counted(len(run.worker_ranks), 'worker')}" if len(run.worker_ranks) != len(workers) else ""
            findings.append(short_of("stragglers", run.name, f"{th['straggler.min_ranks']:g} or more workers with a "
                                     "steady state for the outlier test (straggler.min_ranks), or exactly 2 to "
                                     "compare", f"{counted(len(workers), 'worker')} with a steady state{of}"))
            continue
        node = slow_node(run, th)
        for what, (workers, values) in measured.items():
            if not np.all(np.isfinite(values)):
                continue
            if len(workers) == 2:
                pair = _pair(run, what, workers, values, th)
                if pair is not None:
                    findings.append(pair)
                    break
                continue
            if len(workers) < th["straggler.min_ranks"]:
                continue
            z, median, mad, measured = robust_z(values, th["straggler.mad_floor"])
            excess = values / median - 1 if median > 0 else np.zeros_like(values)
            slow = np.flatnonzero((z >= th["straggler.z_min"]) & (excess >= th["straggler.excess_min"]))
            if not len(slow):
                continue
            worst = int(slow[np.argmax(values[slow])])
            ranks = [int(workers[i]) for i in slow]
            if node is not None and set(ranks) <= set(node["ranks"]):
                break  # the slow node's finding names them
            times = max(1, len(finished_steps(run, workers[worst])))  # once for the whole compute
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
                    # the MAD the z is of, and the workers' own: they differ where the floor (straggler.mad_floor x
                    # the median) is the larger (QA: 'mad 269 us' read as measured where the workers' was 30.7 us)
                    "mad_used": Quantity(mad, "ns"),
                    "mad_measured": Quantity(measured, "ns"),
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


def _in_steps(steps) -> float:
    """The compute inside a worker's steps (ns; their ``compute_ns``, which the rank's summary adds)."""
    return float(steps["compute_ns"].sum())


def held_waits(run, th) -> str:
    """Where the run's ranks meet at a host backend's collectives (gloo's spans matched across ranks, at least
    ``gpu.late_min_instances``), what the store holds instead of an honest compute per step, in words; "" where
    they do not."""
    if "host_comm" not in run.capabilities:
        return ""
    matched = matched_count(run)
    if matched < th["gpu.late_min_instances"]:
        return ""
    return (f"{counted(matched, 'gloo collective')} matched across ranks, whose waits the ranks' compute may hold: "
            "the straggler at the host collectives judges the ranks by their arrivals there")


def _pair(run, what: str, workers: list[int], values: np.ndarray, th) -> Finding | None:
    """Of two workers, the slower one when its measure is ``straggler.excess_min`` or more above the other's."""
    slow, fast = (1, 0) if values[1] > values[0] else (0, 1)
    if not values[fast] > 0 or values[slow] / values[fast] - 1 < th["straggler.excess_min"]:
        return None
    excess = float(values[slow] / values[fast] - 1)
    times = max(1, len(finished_steps(run, workers[slow])))  # once for the whole compute
    lost = float(values[slow] - values[fast]) * times
    return Finding(
        id="straggler",
        title=f"Straggler: rank {workers[slow]} {Quantity(excess, 'fraction')} slower than the other worker, rank "
              f"{workers[fast]} ({what}; two workers: no outlier test)",
        severity="warning",
        evidence={"slowest_rank": Quantity(int(workers[slow]), "rank"),
                  "slowest": Quantity(float(values[slow]), "ns"),
                  "other": Quantity(float(values[fast]), "ns"),
                  "excess_over_other": Quantity(excess, "fraction"),
                  "workers": Quantity(2, "ranks"),
                  "time_lost": Quantity(lost, "ns")},
        ranks=[int(workers[slow])], phase=run.main_phase, advice=ADVICE, store=run.name, cost_ns=lost,
        cost_basis=f"the slower worker's {what} minus the other's"
                   + (f", times its {times} steps" if times > 1 else ""))
