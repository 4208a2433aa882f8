"""The slow-node detector (analyses/detect_slow_node.py) on small written stores: 6 ranks on 3 hosts, each step
compute then an all-reduce across all ranks; on host C both ranks compute twice as long, and the others wait for
them in the all-reduce. A balanced run and a run with one slow rank on C (a straggler, not a slow node) are the
negative cases."""

from __future__ import annotations

import pytest

from ddltrace.analyses.findings import detect
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.thresholds import Thresholds
from ddltrace.store import write_store
from ddltrace.timeline import make_timeline

MS = 1_000_000
HOSTS = {0: "A", 1: "A", 2: "B", 3: "B", 4: "C", 5: "C"}
STEPS, COMPUTE, REDUCE = 8, 10 * MS, 1 * MS


def _store(path, slow_ranks, factor=2.0, hosts=HOSTS):
    """Per step: each rank computes (factor x COMPUTE on slow_ranks), then enters the all-reduce, which ends
    REDUCE after the last rank entered. Returns the store and each rank's summed all-reduce wait (ns)."""
    rows, wait = [], dict.fromkeys(hosts, 0)
    t = 0
    for _ in range(STEPS):
        enter = {r: t + int(COMPUTE * (factor if r in slow_ranks else 1)) + r * 1000 for r in hosts}
        last = max(enter.values())
        for r in hosts:
            rows.append({"rank": r, "name": "compute", "category": "compute", "start_ns": t,
                         "dur_ns": enter[r] - t - 1000})
            rows.append({"rank": r, "name": "MPI_Allreduce", "category": "comm", "start_ns": enter[r],
                         "dur_ns": last + REDUCE - enter[r], "bytes": 4096, "comm": 0, "source": "pmpi"})
            wait[r] += last - enter[r]
        t = last + REDUCE
    info = {r: {"host": h} for r, h in hosts.items()}
    return write_store(path, make_timeline(rows), run={"world_size": len(hosts)}, rank_info=info), wait


def _findings(store):
    run = analyze_store(store.path)
    return run, detect([run], Thresholds())[0]


def test_the_slow_node_is_named_with_its_ranks(tmp_path):
    store, wait = _store(tmp_path / "slow", slow_ranks={4, 5})
    run, findings = _findings(store)
    found = [f for f in findings if f.id == "slow_node"]
    assert len(found) == 1 and found[0].ranks == [4, 5] and "C (ranks 4, 5)" in found[0].title
    # the straggler detector leaves ranks 4 and 5 to the slow-node finding
    assert not [f for f in findings if f.id == "straggler"]
    ev = found[0].evidence
    steps = {r: len(run.phases[r].steps) for r in HOSTS}
    compute = {r: float(run.table(run.main_phase).loc[r, "compute"]) / steps[r] for r in HOSTS}
    node = {h: sum(compute[r] for r in HOSTS if HOSTS[r] == h) / 2 for h in "ABC"}
    assert ev["compute per step C"].value == pytest.approx(node["C"])
    assert node["C"] == pytest.approx(2 * node["A"], rel=0.05)
    reference = (node["A"] + node["B"]) / 2  # the median of the other two nodes
    assert ev["reference_compute_per_step"].value == pytest.approx(reference)
    # the others' wait per step: their all-reduce waits summed over the steady-state steps, per step, mean over ranks
    assert ev["others_wait_per_step"].value > 0.9 * (node["C"] - reference)
    assert ev["others_wait_per_step"].value <= max(wait[r] for r in range(4)) / min(steps.values())
    assert found[0].cost_ns == pytest.approx((node["C"] - reference) * steps[4])


def test_no_finding_on_a_balanced_run(tmp_path):
    store, _ = _store(tmp_path / "balanced", slow_ranks=set())
    _, findings = _findings(store)
    assert not [f for f in findings if f.id in ("slow_node", "straggler")]


def test_one_slow_rank_is_a_straggler_not_a_slow_node(tmp_path):
    store, _ = _store(tmp_path / "one", slow_ranks={5})
    _, findings = _findings(store)
    assert not [f for f in findings if f.id == "slow_node"]
    assert [f.ranks for f in findings if f.id == "straggler"] == [[5]]


def test_one_rank_per_node_is_said_not_made(tmp_path):
    """Three nodes of one rank each: a node of one rank is a rank (the straggler detector's), so no node can be
    judged; the slow-node detector passed over the store in silence, and now says why, with its counts."""
    hosts = {0: "A", 1: "B", 2: "C"}
    store, _ = _store(tmp_path / "single", slow_ranks={2}, hosts=hosts)
    run, findings = _findings(store)
    assert not [f for f in findings if f.id == "slow_node"]
    (short,) = [s for s in detect([run], Thresholds())[1] if s.analysis == "slow_node"]
    assert short.holds == f"{len(hosts)} workers with steps on {len(set(hosts.values()))} nodes"
    assert "two or more of them on one node" in short.needs
