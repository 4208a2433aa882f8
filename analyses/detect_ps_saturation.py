"""Parameter-server saturation: one server cannot keep up with its workers (paper 002, sections 5.2.3 and 5.4).

**Within a run** (a server is known: the manifest or the workload names it, or the steady-state messages form a
star around it) it measures the server's *busy fraction*: the share of its steady state it spends outside
blocking receives and probes, waits and collectives, i.e. aggregating updates and sending weights; and the time its
clients lose to it: Late Sender and Late Receiver time (Scalasca) on each worker with the server as the partner, as a
share of the worker's steady state (median over workers). A finding when the server is busy at least
``ps.busy_min`` (80 %) of the time *and* its clients wait at least ``ps.client_wait_min`` (20 %): a busy server
whose clients do not wait is well sized. It also estimates the saturation point w* = (worker compute per step) /
(server busy time per worker step): the number of workers at which the server's work per round equals the
workers' compute (MODELS.md section 1).

**Across runs** (per series: the runs of one job at one batch size, :mod:`~ddltrace.analyses.same_job`, each judged
alone; a series of fewer than three w is listed as not made, as is a run with no server; several runs of a series
at one w give the median of each figure) it looks for the knee of paper 002's figure 9: the steady-state (computation
phase) time, median over workers, should fall as w grows; the knee w* is the last w after which one more step in w
cuts it by less than ``ps.knee_gain_min`` (10 %). A finding when the knee comes before the largest w and the wait
per update (exposed communication + wait + barrier time of a worker per step, median over workers) at the largest w
is at least ``ps.wait_growth_min`` (1.5) times that at the smallest: the workers wait more, the server is the limit.
Error when past the knee the time rises again: at the largest w at least ``ps.rise_min`` (10 %) above the knee's.

Cost: within a run, the median worker's Late Sender + Late Receiver time on the server in the steady state; across
runs, the growth of the wait per update (at the largest w minus at the smallest) times the median worker's
updates at the largest w.
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.requirements import Skipped
from ddltrace.analyses.same_job import series_of
from ddltrace.analyses.wait_states import COLLECTIVES, RECV_BLOCKING, RECV_NONBLOCKING, WAITS, base_name
from ddltrace.units import counted

BLOCKING = RECV_BLOCKING | WAITS | COLLECTIVES
#: a blocking probe waits for the next message as a blocking receive does (the ps-sgd job's ``--server-receive
#: probe``); not among the calls wait-state analysis keeps, so read from the server's timeline
PROBES = frozenset({"MPI_Probe", "MPI_Mprobe"})
ADVICE = ("The single parameter server is the bottleneck: add servers and shard the parameters across them "
          "(Chang's Lemma 3.2: N_ps >= 2 S_p N_w / (B T_C)), make each update cheaper on the server, or use larger "
          "batches so that there are fewer updates per sample. Past w* more workers make each epoch slower.")


def _clipped(calls, lo: int, hi: int) -> int:
    start = calls["start_ns"].clip(lo, hi)
    end = calls["end_ns"].clip(lo, hi)
    return int((end - start).sum())


def _probing_ns(run, server: int, lo: int, hi: int) -> int:
    """Time (ns) the server spent in blocking probes between ``lo`` and ``hi``."""
    timeline = run.store.timeline([server])
    probes = timeline[timeline["name"].map(base_name).isin(PROBES)]
    return _clipped(probes.assign(end_ns=probes["start_ns"] + probes["dur_ns"]), lo, hi)


def server_load(run, server: int) -> dict | None:
    """Busy fraction, requests served, client wait of one server rank in its steady state (ns, fractions)."""
    phases = run.phases.get(server)
    if phases is None or phases.steady_ns <= 0:
        return None
    lo, hi = phases.init_end_ns, phases.steady_end_ns
    mine = run.rank_calls(server)
    blocked = _clipped(mine[mine["name"].isin(BLOCKING)], lo, hi) + _probing_ns(run, server, lo, hi)
    busy_ns = phases.steady_ns - blocked
    received = mine[mine["name"].isin(RECV_BLOCKING | RECV_NONBLOCKING) & (mine["start_ns"] >= lo)
                    & (mine["start_ns"] < hi)]
    states = run.wait_state_summary
    workers = [w for w in run.worker_ranks if w in run.phases and run.phases[w].steady_ns > 0]
    suffered = states[(states["peer"] == server) & states["rank"].isin(workers) & (states["phase"] == "steady")
                      & states["pattern"].isin(["late_sender", "late_receiver"])]
    per_worker = suffered.groupby("rank")["time_ns"].sum().reindex(workers, fill_value=0)
    wait_median = float(np.median(per_worker)) if len(per_worker) else 0.0
    share = [per_worker[w] / run.phases[w].steady_ns for w in workers]
    steps = run.steps[run.steps["rank"].isin(workers)] if len(run.steps) else run.steps
    table = run.table("steady")
    total_steps = int(len(steps))
    compute_per_step = float(np.median([table.loc[w, "compute"] / max(1, (steps["rank"] == w).sum())
                                        for w in workers])) if workers and total_steps else float("nan")
    busy_per_step = busy_ns / total_steps if total_steps else float("nan")
    return {
        "busy_fraction": busy_ns / phases.steady_ns,
        "busy_ns": float(busy_ns),
        "requests": int(len(received)),
        "busy_per_request_ns": busy_ns / len(received) if len(received) else float("nan"),
        "client_wait_fraction": float(np.median(share)) if share else 0.0,
        "client_wait_ns": float(per_worker.sum()),
        "client_wait_median_ns": wait_median,
        "worker_steps": total_steps,
        "compute_per_step_ns": compute_per_step,
        "w_star": compute_per_step / busy_per_step if total_steps and busy_per_step > 0 else float("nan"),
    }


def within_run(run, th) -> list[Finding | Skipped]:
    if not run.server_ranks:
        return [short_of("ps_saturation", run.name, "a parameter server: a rank whose role is server (said by the "
                         "manifest or the workload, or the centre of a star of steady-state messages)",
                         f"no server among its {counted(len(run.ranks), 'rank')}")]
    findings = []
    for server in run.server_ranks:
        load = server_load(run, server)
        if load is None:
            findings.append(short_of("ps_saturation", run.name, "a steady state on the server (its busy fraction is "
                                     "of its steady state)", f"none on server rank {server}"))
            continue
        if load["busy_fraction"] < th["ps.busy_min"] or load["client_wait_fraction"] < th["ps.client_wait_min"]:
            continue
        findings.append(Finding(
            id="ps_saturation",
            title=f"Parameter server (rank {server}) saturated: busy {Quantity(load['busy_fraction'], 'fraction')} "
                  f"of the steady state while its workers wait {Quantity(load['client_wait_fraction'], 'fraction')} "
                  f"of theirs on it",
            severity="warning",
            evidence={
                "server_busy": Quantity(load["busy_fraction"], "fraction"),
                "client_wait_median": Quantity(load["client_wait_fraction"], "fraction"),
                "client_wait_total": Quantity(load["client_wait_ns"], "ns"),
                "client_wait_per_worker_median": Quantity(load["client_wait_median_ns"], "ns"),
                "server_busy_per_request": Quantity(load["busy_per_request_ns"], "ns"),
                "requests_served": Quantity(load["requests"], "messages"),
                "worker_compute_per_step": Quantity(load["compute_per_step_ns"], "ns"),
                "w_star": Quantity(load["w_star"], "workers"),
                "workers": Quantity(run.workers, "workers"),
            },
            ranks=[server],
            phase="steady",
            advice=ADVICE,
            store=run.name,
            cost_ns=load["client_wait_median_ns"],
            cost_basis="the median worker's Late Sender + Late Receiver time on the server",
        ))
    return findings


def _steady_per_run(run) -> tuple[float, float, float]:
    """(steady-state time, wait per update, updates) of a run: medians over workers (ns, ns, steps)."""
    workers = [w for w in run.worker_ranks if w in run.phases]
    table = run.table("steady")
    steady = [run.phases[w].steady_ns for w in workers]
    waits, updates = [], []
    for w in workers:
        steps = max(1, len(run.phases[w].steps))
        updates.append(steps)
        waits.append(float(table.loc[w, ["comm", "wait", "barrier"]].sum()) / steps)
    return float(np.median(steady)), float(np.median(waits)), float(np.median(updates))


def across_runs(runs, th) -> list[Finding | Skipped]:
    findings = []
    for members in series_of([run for run in runs if run.worker_ranks]).values():
        at: dict[int, list] = {}
        for run in members:
            at.setdefault(run.workers, []).append(_steady_per_run(run))
        w = sorted(at)
        batch = members[0].batch_size
        names = ", ".join(run.name for run in members)
        if len(w) < 3:
            findings.append(short_of("ps_saturation", names, "runs of one job at one batch size and 3 or more worker "
                                     "counts (the knee of the steady state against w)",
                                     f"{counted(len(members), 'store')} at batch {batch if batch else 'unknown'}, "
                                     f"w = {', '.join(map(str, w))}", part="across runs"))
            continue
        values = [np.median(at[k], axis=0) for k in w]  # several runs at one w: the median of each figure
        steady = np.array([v[0] for v in values])
        wait = np.array([v[1] for v in values])
        knee = next((i for i in range(len(w) - 1) if steady[i + 1] > steady[i] * (1 - th["ps.knee_gain_min"])), None)
        if knee is None:
            continue
        growth = wait[-1] / wait[0] if wait[0] > 0 else float("inf")
        if growth < th["ps.wait_growth_min"]:
            continue
        rises = steady[-1] >= steady[knee] * (1 + th["ps.rise_min"])
        lost = max(float(wait[-1] - wait[0]), 0.0) * values[-1][2]
        findings.append(Finding(
            id="ps_saturation_scaling",
            title=f"The steady state stops scaling at w* = {w[knee]} workers while the wait per update grows "
                  f"{growth:.1f}x (w = {w[0]} to {w[-1]}): the server saturates",
            severity="error" if rises else "warning",
            evidence={
                "knee_w": Quantity(w[knee], "workers"),
                "steady_at_min_w": Quantity(float(steady[0]), "ns"),
                "steady_at_knee": Quantity(float(steady[knee]), "ns"),
                "steady_at_max_w": Quantity(float(steady[-1]), "ns"),
                "wait_per_update_at_min_w": Quantity(float(wait[0]), "ns"),
                "wait_per_update_at_max_w": Quantity(float(wait[-1]), "ns"),
                "wait_growth": Quantity(float(growth), "ratio"),
                "batch_size": Quantity(batch if batch is not None else float("nan"), "samples"),
                "runs": Quantity(len(members), "runs"),
            },
            phase="steady",
            advice=ADVICE,
            store=names,
            cost_ns=lost,
            cost_basis=f"the wait per update at w = {w[-1]} minus that at w = {w[0]}, times the median worker's "
                       f"{values[-1][2]:.0f} updates at w = {w[-1]}",
        ))
    return findings


@detector("ps_saturation", "parameter-server saturation", {"timeline", "messages"})
def detect(runs, th) -> list[Finding | Skipped]:
    """Parameter-server saturation within each run and across a scaling series (see the module docstring); a
    :class:`Skipped` for a run with no server, a server with no steady state, a batch size of fewer than 3 w."""
    return [f for run in runs for f in within_run(run, th)] + across_runs(runs, th)
