"""Costly wait states (Scalasca's patterns, see :mod:`ddltrace.analyses.wait_states`) in the steady state.

For each pattern it measures the total time the ranks spend in it during their steady state, as a share of the
ranks' total steady-state time (the average rank's share). Parameter servers are left out: a server blocked in a
receive is waiting for requests, which is its job; whether it is too busy is the saturation detector's question.
A finding when a pattern reaches ``wait_states.share_max`` (30 %): the named ranks are blocked on late partners
for a third of the run, and the partner (the evidence names the one most waited for) is where to look.
Initialisation's waits belong to the sequential-initialisation detector. A store whose workers have no steady
state is listed as not made. It needs MPI calls on a real timeline:
on per-call aggregates (IPM) the calls' order and start times are the importer's, and no wait state can be told.

Cost: the pattern's steady-state time summed over the workers, divided by the number of workers (the average
worker's time in it: the wall-clock time each rank loses, not the sum over ranks).
"""

from __future__ import annotations

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.requirements import Skipped
from ddltrace.analyses.wait_states import PATTERNS

ADVICE = {
    "late_sender": "Receivers wait for senders that start late: balance the senders' work or post receives later "
                   "(non-blocking receives completed after useful work).",
    "late_receiver": "Senders block until receivers post their receives: post receives earlier (Irecv ahead of "
                     "time) or send without waiting (Isend).",
    "wait_at_barrier": "Ranks wait for the last one at barriers: remove barriers that are not needed, balance the "
                       "work before them.",
    "barrier_completion": "Barriers take long to complete: fewer barriers or a faster interconnect.",
    "wait_at_nxn": "Ranks wait for the last one at all-to-all collectives: balance the work before them, or overlap "
                   "them with computation (non-blocking collectives).",
    "early_reduce": "The root of a reduction waits for the others: reduce asynchronously or move the root's work "
                    "before the reduction.",
    "late_broadcast": "Ranks wait for the root of a broadcast: let the root broadcast earlier.",
}


@detector("wait_states", "costly wait states (Scalasca's patterns)", {"timeline", "mpi_calls"})
def detect(runs, th) -> list[Finding | Skipped]:
    """Scalasca wait-state patterns costing at least wait_states.share_max of the steady state."""
    findings = []
    for run in runs:
        states = run.wait_state_summary
        ranks = [r for r in run.worker_ranks if r in run.phases]
        steady = states[(states["phase"] == "steady") & states["rank"].isin(ranks)]
        total = sum(run.phases[r].steady_ns for r in ranks)
        if total <= 0:
            findings.append(short_of("wait_states", run.name, "a steady state on the workers (the share is of it)",
                                     "no steady state on any worker"))
            continue
        if not len(steady):
            continue
        for pattern, part in steady.groupby("pattern"):
            share = part["time_ns"].sum() / total
            lost = float(part["time_ns"].sum()) / len(ranks)
            if share < th["wait_states.share_max"]:
                continue
            per_rank = part.groupby("rank")["time_ns"].sum().sort_values(ascending=False)
            partners = part[part["peer"] >= 0].groupby("peer")["time_ns"].sum()
            evidence = {"time_total": Quantity(float(part["time_ns"].sum()), "ns"),
                        "share_of_steady_state": Quantity(float(share), "fraction"),
                        "instances": Quantity(int(part["instances"].sum()), "calls"),
                        "worst_rank": Quantity(int(per_rank.index[0]), "rank"),
                        "worst_rank_time": Quantity(float(per_rank.iloc[0]), "ns"),
                        "time_per_worker": Quantity(lost, "ns")}
            if len(partners):
                evidence["most_waited_for_rank"] = Quantity(int(partners.idxmax()), "rank")
            findings.append(Finding(
                id=f"wait_state_{pattern}",
                title=f"{PATTERNS[pattern]}: {Quantity(float(share), 'fraction')} of the steady state is spent "
                      f"in this wait state",
                severity="warning", evidence=evidence, ranks=[int(r) for r in per_rank.index], phase="steady",
                advice=ADVICE[pattern], store=run.name, cost_ns=lost,
                cost_basis=f"the time in {PATTERNS[pattern]} over all {len(ranks)} workers, divided by {len(ranks)}"))
    return findings
