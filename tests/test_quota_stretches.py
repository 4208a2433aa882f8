"""scripts/quota_stretches.py: two busy loops, each in a cgroup with a CFS quota of half a core per 10 ms. What it
reports is the kernel's: each loop runs the quota's share of the time, in stretches that begin at one point of its
own cgroup's period (docs/MODELS.md, "Are the ranks' periods aligned?"), and nothing is left behind."""

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


def test_each_loop_runs_its_quota_in_stretches_on_its_own_periods_grid():
    period, quota = 0.010, 0.005
    runs = qs.stretches(int(period * 1e6), int(quota * 1e6), seconds=0.4)
    for one in runs:
        assert len(one) >= 20
        starts, ends = np.array(one).T
        # the share of a core it ran, between its first stretch's start and its last one's end: the quota's
        ran = float(np.sum(ends - starts)) / float(ends[-1] - starts[0])
        assert 0.35 < ran < 0.65, ran
        # every stretch begins at one point of the period (the refill of its budget), to within a tenth of it
        phase = np.angle(np.mean(np.exp(2j * np.pi * starts / period)))
        offset = (starts / period - phase / (2 * np.pi) + 0.5) % 1 - 0.5
        assert np.median(np.abs(offset)) < 0.1
    assert not list(qs.CPU.glob(f"ddlt_stretches_{os.getpid()}_*"))  # the cgroups are gone
