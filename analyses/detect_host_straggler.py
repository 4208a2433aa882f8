"""A straggler rank at the host backend's collectives (PyTorch's gloo): the rank the others wait for at the
collectives, told by when each rank arrives there, not by its compute.

In a PyTorch job on gloo the framework's ops hold the collectives' waits: ``DistributedDataParallel.forward`` waits
for gloo's broadcast of the buffers from rank 0, the end of ``backward`` for the last all-reduce. A rank that
waits for a late one spends that time inside a compute op, so its compute per step is the *larger* one and
:mod:`~ddltrace.analyses.detect_stragglers` would name the victim (measured on an H100, ResNet-18 DDP over gloo,
rank 1 sleeping 40 ms a step: rank 0's compute per step 74.7 ms, rank 1's 33.9 ms). The arrivals do not mislead:
gloo's spans (:mod:`~ddltrace.analyses.host_collectives`) of the early rank start when it arrives and end when the
collective does, the late rank's start when it arrives.

It measures the arrivals: it matches the spans into instances across ranks (by collective, step and order) and
takes, for each pair of a late rank L and another rank r, the wall time r's spans of the instances L started last at
spent before L arrived (:func:`~ddltrace.analyses.gpu_collectives.waits_for`: the union of the intervals, so gloo's
two worker threads waiting at once count once). L's *caused wait* is the median of that over the other workers. A
finding when the rank with the most caused wait has ``host.late_wait_share_min`` (80 %) or more of all ranks' caused
wait, over at least ``gpu.late_min_instances`` (5) matched instances (with fewer it is listed as not made), and it
is at least ``host.late_wait_step_min`` (25 %) of the others' median step time per step (the same job without a
straggler: 0.1 to 23.6 % in seven GPU runs, the most where rank 1 reached the first all-reduce 6 to 14 ms late, two
ranks sharing one GPU; with one sleeping 40 ms: 49 to 53 %). Start times are compared on the run's clock: on several
hosts their clocks' skew is in them (the importer says when it was not corrected).

Only the steps each rank finished count (:func:`~ddltrace.analyses.detect_stragglers.finished_steps`, as for the
stragglers): the spans that start inside them, their number and their median time. After a rank died, the others'
waits in the step it did not finish were divided among the finished steps alone (sample_traces/h100-ddp/run-straggler
with its straggler dead after its broadcasts in the last of 5 steps: 207.1 ms over 4 steps, 51.8 ms a step for its
40 ms sleep; now 167.1 ms, 41.8 ms); a worker that ended abruptly, or on its way out of an interrupted job, with no
finished step leaves the analysis not made.

Cost: the late rank's caused wait, the others' time waiting for it (the median other worker's).
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.detect_stragglers import finished_steps, unjudged, unjudged_words
from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.gpu_collectives import match_instances, waits_for
from ddltrace.analyses.requirements import Skipped
from ddltrace.units import counted

ADVICE = ("Find what the late rank does before each collective that the others do not: a sleep or a slow input "
          "pipeline, logging or checkpoints on that rank, more work (an uneven shard), a slower host or GPU. Move "
          "the extra work off the step or balance the shards.")


def finished_spans(run):
    """The host backend's collective spans (:attr:`~ddltrace.analyses.run_analysis.RunAnalysis.
    host_collective_spans`) that start inside a step their rank finished (:func:`~ddltrace.analyses.
    detect_stragglers.finished_steps`; a rank without phases has none)."""
    spans = run.host_collective_spans
    keep = np.zeros(len(spans), dtype=bool)
    for rank in set(spans["rank"]) & set(run.phases):
        steps = finished_steps(run, int(rank))
        mine = np.flatnonzero((spans["rank"] == rank).to_numpy())
        start = spans["start_ns"].to_numpy(np.int64)[mine]
        at = np.searchsorted(steps["start_ns"].to_numpy(np.int64), start, side="right") - 1
        ends = steps["end_ns"].to_numpy(np.int64)
        keep[mine] = (at >= 0) & (start < ends[np.maximum(at, 0)]) if len(steps) else False
    return spans[keep]


def caused_waits(run) -> tuple[dict[int, float], int]:
    """(caused wait per late rank in ns: the median over the other workers of their wall-time wait for it, the
    number of instances matched across two or more ranks), both over the spans of :func:`finished_spans`."""
    spans = finished_spans(run)
    found = match_instances(spans, run.store.world_size)
    matched = int((found["ranks"] >= 2).sum()) if len(found) else 0
    waits = waits_for(spans)
    workers = [w for w in run.worker_ranks if w in set(spans["rank"])]
    caused = {}
    for late, part in waits.groupby("late_rank"):
        each = dict(zip(part["rank"], part["wait_ns"], strict=True))
        caused[int(late)] = float(np.median([each.get(w, 0) for w in workers if w != late]))
    return caused, matched


def step_time(run, ranks: list[int]) -> float | None:
    """The median step time (ns) over the steps ``ranks`` finished; None where they have none."""
    times = [finished_steps(run, r)["dur_ns"].to_numpy(float) for r in ranks if r in run.phases]
    times = [t for t in times if len(t)]
    return float(np.median(np.concatenate(times))) if times else None


@detector("host_straggler", "a straggler rank at the host backend's collectives",
          {"host_comm", "two_workers", "one_run"})
def detect(runs, th) -> list[Finding | Skipped]:
    """One rank the others wait for at the host backend's collectives (see the module docstring)."""
    findings = []
    for run in runs:
        cut = unjudged(run, [w for w in run.worker_ranks if w in run.phases])
        if cut:
            findings.append(short_of("host_straggler", run.name, *unjudged_words(run, cut)))
            continue
        caused, matched = caused_waits(run)
        if matched < th["gpu.late_min_instances"]:
            findings.append(short_of("host_straggler", run.name, f"{th['gpu.late_min_instances']:g} or more "
                                     "collectives matched across ranks (gpu.late_min_instances)",
                                     counted(matched, "matched collective")))
            continue
        if not caused or not sum(caused.values()) > 0:
            continue
        late = max(caused, key=caused.get)
        share = caused[late] / sum(caused.values())
        others = [w for w in run.worker_ranks if w != late]
        step = step_time(run, others)
        steps = int(np.median([len(finished_steps(run, w)) for w in others if w in run.phases] or [0]))
        per_step = caused[late] / steps if steps else None
        if share < th["host.late_wait_share_min"] or step is None or per_step is None \
                or per_step / step < th["host.late_wait_step_min"]:
            continue
        findings.append(Finding(
            id="host_straggler",
            title=f"Straggler at the host collectives: the other workers wait {Quantity(per_step, 'ns')} a step "
                  f"for rank {late} ({Quantity(per_step / step, 'fraction')} of their median step)",
            severity="warning",
            evidence={"late_rank": Quantity(late, "rank"),
                      "others_wait_wall": Quantity(caused[late], "ns"),
                      "others_wait_wall_share": Quantity(share, "fraction"),
                      "others_wait_wall_per_step": Quantity(per_step, "ns"),
                      "step_time_median": Quantity(step, "ns"),
                      "steps": Quantity(steps, "steps"),
                      "matched_collectives": Quantity(matched, "collectives")},
            ranks=[late], phase="all", advice=ADVICE, store=run.name, cost_ns=caused[late],
            cost_basis="the other workers' wall time waiting at the collectives for the late rank (the median "
                       "worker's)"))
    return findings
