"""A finding's cost is the time the job loses to it, and the headline ranks by it (issue 20, item 9).

On an IPM profile the report said "Straggler ... costing about <the slowest rank's compute>"; the time lost is
the slowest rank's compute minus the median rank's. The expected values come from the XML itself
(compute = wtime - mtime per rank, as IPM counts it).
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from shared_data import SHARED

from ddltrace.analyses.findings import load_detectors
from ddltrace.analyses.synthetic import write_ps_store
from ddltrace.cli import main
from ddltrace.report import build_report
from ddltrace.units import format_ns

IPM27 = SHARED / "mpi_traces/ipm-xml"
needs_ipm = pytest.mark.skipif(not IPM27.is_dir(), reason=f"{IPM27} is not here (the shared real traces)")


def compute_per_rank_ns(folder: Path) -> dict[int, float]:
    (path,) = folder.glob("*.ipm.xml")
    out = {}
    for task in ET.parse(path).getroot().iter("task"):
        perf = task.find("perf")
        out[int(task.get("mpi_rank"))] = (float(perf.get("wtime")) - float(perf.get("mtime"))) * 1e9
    return out


@needs_ipm
def test_straggler_costs_slowest_minus_median(tmp_path, capsys):
    compute = compute_per_rank_ns(IPM27)
    values = np.array(list(compute.values()))
    slowest, median = values.max(), float(np.median(values))
    store = tmp_path / "store"
    assert main(["import", str(IPM27), "--out", str(store)]) == 0
    capsys.readouterr()
    assert main(["analyze", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (straggler,) = [f for f in doc["findings"] if f["id"] == "straggler"]
    assert straggler["ranks"] == [max(compute, key=compute.get)]
    assert straggler["cost_ns"] == pytest.approx(slowest - median, abs=2)
    assert straggler["cost_ns"] < 0.5 * slowest  # not the slowest rank's compute itself
    assert straggler["phase"] == "all"  # per-call totals: there is no steady state to speak of

    files = build_report([store], tmp_path / "r")
    verdict = next(line for line in files.markdown.read_text().splitlines() if line.startswith("> "))
    assert f"costing about {format_ns(slowest - median)}" in verdict.replace("\\", "")
    assert format_ns(slowest) not in verdict


def test_findings_and_headline_rank_by_cost(tmp_path):
    from ddltrace.analyses.findings import SYMPTOM_DISCOUNT, SYMPTOMS

    stores = [str(write_ps_store(tmp_path / f"w{w}", workers=w, server_ns=4e6, compute_ns=10e6).path)
              for w in (1, 2, 4, 8)]
    files = build_report(stores, tmp_path / "rep")
    findings = json.loads(files.findings.read_text())["findings"]
    assert len(findings) >= 3 and all(f["cost_ns"] >= 0 and f["cost_basis"] for f in findings)
    ranked = [f["cost_ns"] * (SYMPTOM_DISCOUNT if f["id"].startswith(SYMPTOMS) else 1) for f in findings]
    assert ranked == sorted(ranked, reverse=True)
    # the saturated server and its workers' Late Sender time are the same seconds: the cause heads the list
    first = findings[0]
    assert first["id"] == "ps_saturation"
    wait = next(f for f in findings if f["id"] == "wait_state_late_sender" and f["store"] == first["store"])
    assert wait["cost_ns"] == pytest.approx(first["cost_ns"], rel=0.1)
    verdict = next(line for line in files.markdown.read_text().splitlines() if line.startswith("> "))
    assert format_ns(first["cost_ns"]) in verdict


def test_every_detector_defines_its_cost():
    from ddltrace.analyses.findings import REQUIREMENTS

    docs = (Path(__file__).parent.parent / "docs" / "ANALYSES.md").read_text()
    section = docs.split("## What a finding costs", 1)[1].split("\n## ", 1)[0]
    for name, fn in load_detectors().items():
        assert "Cost:" in sys.modules[fn.__module__].__doc__, name
        assert re.search(rf"`{name}`", section), name
        assert REQUIREMENTS[name].title


def test_straggler_cost_on_a_timeline_counts_its_steps(tmp_path):
    from ddltrace.analyses.findings import run_detectors
    from ddltrace.analyses.run_analysis import analyze_store
    from ddltrace.analyses.thresholds import Thresholds

    run = analyze_store(write_ps_store(tmp_path / "s", workers=4, steps=12, straggler=3, straggler_factor=2.0).path)
    (finding,) = [f for f in run_detectors([run], Thresholds()) if f.id == "straggler"]
    steady = run.table("steady")
    per_step = {w: steady.loc[w, "compute"] / len(run.phases[w].steps) for w in run.worker_ranks}
    median = float(np.median(list(per_step.values())))
    assert finding.ranks == [3]
    assert finding.cost_ns == pytest.approx((per_step[3] - median) * len(run.phases[3].steps))
    assert finding.cost_ns < steady.loc[3, "compute"]  # not the straggler's whole compute
