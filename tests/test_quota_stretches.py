"""scripts/quota_stretches.py: two busy loops, each in a cgroup with a CFS quota of half a core per 10 ms. What it
reports is the kernel's: each loop runs the quota's share of the time, in stretches shorter than two periods, and
nothing is left behind. Where the stretches begin (docs/MODELS.md, "Are the ranks' periods aligned?": at one point
of each cgroup's own period on an idle machine) is not asserted: with other processes on the cores a loop gets its
core back on the scheduler's tick, not on its period (48 starts 8-12 ms apart, no phase of the period preferred,
beside two other busy loops)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import quota_stretches as qs  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not qs.CPU.is_dir(),
                                reason="needs root and the cgroup v1 cpu controller")


def test_each_loop_runs_its_quota_in_stretches_shorter_than_two_periods():
    period, quota = 0.010, 0.005
    runs = qs.stretches(int(period * 1e6), int(quota * 1e6), seconds=0.4)
    for one in runs:
        assert len(one) >= 20
        starts, ends = np.array(one).T
        # the share of a core it ran, between its first stretch's start and its last one's end: the quota's
        ran = float(np.sum(ends - starts)) / float(ends[-1] - starts[0])
        assert 0.35 < ran < 0.65, ran
        # no stretch runs past the budget by much (a loop outside its cgroup would run the whole 0.4 s in one)
        assert float(np.max(ends - starts)) < 2 * period
    assert not list(qs.CPU.glob(f"ddlt_stretches_{os.getpid()}_*"))  # the cgroups are gone
