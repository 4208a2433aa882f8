"""`make demo-cluster` (scripts/demo_cluster.py): the reference ps-sgd job on a simulated 3-node cluster, the
server alone on node 0, node 2's link shaped to 100 Mbit/s, traced and reported end to end: the report names
the slow link between the server's node and node 2, the job's ground truth matches the store. About 10 s.

Needs root, iproute2, util-linux and MPICH; skips with the reason where any is missing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cluster_jobs import NEEDS_CLUSTER

from ddltrace.store import TraceStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import demo_cluster  # noqa: E402

pytestmark = NEEDS_CLUSTER


def test_the_cluster_demo_reports_the_slow_link(tmp_path):
    out = tmp_path / "demo"
    assert demo_cluster.main(["--out", str(out), "--samples", "2048"]) == 0
    store = TraceStore.open(out / "store")
    assert [store.rank_info(r)["host"] for r in store.ranks] == ["node0", "node1", "node2"]
    truth = json.loads((out / "truth" / "ground_truth.json").read_text())
    assert truth["server"]["gradients"] == sum(w["batches"] for w in truth["workers"].values())
    findings = json.loads((out / "report" / "findings.json").read_text())
    slow = [f for f in findings["findings"] if f["id"] == "slow_link"]
    assert len(slow) == 1 and "node0" in slow[0]["title"] and "node2" in slow[0]["title"], slow
    assert "node1" not in slow[0]["title"]
    html = (out / "report" / "report.html").read_text()
    # the star's server pair with node2 is the only slow one: node2's link, not node0's
    assert slow[0]["title"].startswith("Slow link: node node2's link (1 pair through it, node0 - node2)")
    assert html.count("Slow link: node node2") >= 1
