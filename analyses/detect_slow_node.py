"""A slow node: every rank of one node computing markedly longer per step than the other nodes' ranks, so that the
other nodes' ranks wait for it at the collectives (all-reduce, barrier) that close each step.

It measures, per worker rank with steps in the steady state (:mod:`~ddltrace.analyses.phases`) and a node (the
manifest's ``host``): its **compute per step**, the steady-state compute divided by its number of steps, and its
**collective wait per step**, the steady-state Wait at N x N and Wait at Barrier time
(:mod:`~ddltrace.analyses.wait_states`: from its entry to the last rank's entry) divided by its steps. A node's
figure is the mean over its ranks. A node of two or more ranks is slow when

* even its fastest rank computes at least ``slow_node.excess_min`` (25 %) more per step than the reference, the
  median over the other nodes of their mean compute per step (the whole node is slow, not one rank of it), and
* the other nodes' ranks wait for it: their mean collective wait per step is at least ``slow_node.wait_share_min``
  (0.5) of the node's excess compute per step (in a synchronous step the fast ranks wait about the whole excess).

The slowest such node is named with its ranks. A node of one rank is a rank, which the straggler detector
(:mod:`~ddltrace.analyses.detect_stragglers`) judges among all ranks; when the straggler detector would name only
ranks of the slow node, it leaves them to this finding (one cause, the node, reported once). A store whose workers
with steps sit on fewer than two nodes, or on nodes of one such worker each, is listed as not made, with its
nodes and workers.

Cost: the node's excess compute per step (its mean minus the reference) times its ranks' median number of steps:
what the other ranks wait for it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.node_traffic import rank_hosts
from ddltrace.analyses.requirements import Skipped
from ddltrace.units import counted

NEEDS = frozenset({"timeline", "collectives", "hosts"})
WAITS = ("wait_at_nxn", "wait_at_barrier")

ADVICE = ("Look at the named node as a whole: its CPU model and frequency (lscpu, cpupower), throttling, other jobs "
          "on it (top), its GPUs' clocks (nvidia-smi -q -d CLOCK), its memory and disk; until fixed, give its ranks "
          "smaller shards, or exclude the node.")


def node_rates(run) -> pd.DataFrame:
    """One row per worker rank with steps and a host: rank, host, steps, compute_per_step_ns, wait_per_step_ns
    (steady-state Wait at N x N + Wait at Barrier per step)."""
    hosts = rank_hosts(run.store)
    table = run.table(run.main_phase)
    waits = run.wait_state_table(run.main_phase)
    rows = []
    for rank in run.worker_ranks:
        phases = run.phases.get(rank)
        if rank not in hosts or phases is None or phases.steady_ns <= 0 or not len(phases.steps):
            continue
        steps = len(phases.steps)
        wait = float(sum(waits.loc[rank, w] for w in WAITS)) if rank in waits.index else 0.0
        rows.append({"rank": int(rank), "host": hosts[rank], "steps": steps,
                     "compute_per_step_ns": float(table.loc[rank, "compute"]) / steps,
                     "wait_per_step_ns": wait / steps})
    return pd.DataFrame(rows, columns=["rank", "host", "steps", "compute_per_step_ns", "wait_per_step_ns"])


def slow_node(run, th) -> dict | None:
    """The slowest node that is slow (see the module docstring): host, ranks, its and the reference compute per
    step, the others' wait per step, steps, the per-node means; None when there is none."""
    if not NEEDS <= run.capabilities:
        return None
    rates = node_rates(run)
    nodes = rates.groupby("host").agg(ranks=("rank", list), compute=("compute_per_step_ns", "mean"),
                                      fastest=("compute_per_step_ns", "min"), wait=("wait_per_step_ns", "mean"))
    if len(nodes) < 2:
        return None
    best = None
    for host, row in nodes.iterrows():
        others = nodes.drop(index=host)
        reference = float(others["compute"].median())
        excess = float(row["compute"]) - reference
        others_wait = float(rates[rates["host"] != host]["wait_per_step_ns"].mean())
        if (len(row["ranks"]) >= 2 and reference > 0
                and row["fastest"] >= (1 + th["slow_node.excess_min"]) * reference
                and others_wait >= th["slow_node.wait_share_min"] * excess
                and (best is None or row["compute"] > best["compute"])):
            mine = rates[rates["host"] == host]
            best = {"host": str(host), "ranks": sorted(int(r) for r in row["ranks"]), "compute": float(row["compute"]),
                    "reference": reference, "wait": float(row["wait"]), "others_wait": others_wait,
                    "steps": int(np.median(mine["steps"])), "nodes": nodes}
    return best


def too_few_nodes(run) -> Skipped | None:
    """The :class:`Skipped` of a store with no node to judge: its workers with steps on fewer than two nodes, or
    one on each (None when there is a node to judge)."""
    per_node = node_rates(run).groupby("host")["rank"].count()
    if len(per_node) >= 2 and (per_node >= 2).any():
        return None
    return short_of("slow_node", run.name, "workers with steps on two or more nodes, two or more of them on one "
                    "node (a node of one rank is a straggler's business)",
                    f"{counted(int(per_node.sum()), 'worker')} with steps on {counted(len(per_node), 'node')}")


@detector("slow_node", "slow node", NEEDS)
def detect(runs, th) -> list[Finding | Skipped]:
    """A node whose ranks all compute well beyond the other nodes' per step (see the module docstring)."""
    findings = []
    for run in runs:
        short = too_few_nodes(run)
        if short is not None:
            findings.append(short)
            continue
        node = slow_node(run, th)
        if node is None:
            continue
        excess = node["compute"] - node["reference"]
        lost = excess * node["steps"]
        evidence = {}
        for host, row in node["nodes"].iterrows():
            evidence[f"compute per step {host}"] = Quantity(float(row["compute"]), "ns")
            evidence[f"collective wait per step {host}"] = Quantity(float(row["wait"]), "ns")
        evidence.update({
            "reference_compute_per_step": Quantity(node["reference"], "ns"),
            "excess_over_reference": Quantity(excess / node["reference"], "fraction"),
            "others_wait_per_step": Quantity(node["others_wait"], "ns"),
            "steps": Quantity(node["steps"], "steps"),
            "time_lost": Quantity(lost, "ns"),
        })
        findings.append(Finding(
            id="slow_node",
            title=f"Slow node: {node['host']} (ranks {', '.join(map(str, node['ranks']))}) computes "
                  f"{Quantity(excess / node['reference'], 'fraction')} more per step than the other nodes; their "
                  f"ranks wait {Quantity(node['others_wait'], 'ns')} per step at collectives",
            severity="warning",
            evidence=evidence,
            ranks=node["ranks"],
            phase=run.main_phase,
            advice=ADVICE,
            store=run.name,
            cost_ns=lost,
            cost_basis=f"the node's mean compute per step minus the other nodes' median, times its {node['steps']} "
                       "steps",
        ))
    return findings
