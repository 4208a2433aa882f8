"""A model fitted on real runs of the reference job on this machine (A) predicts the job on a slower machine B that
it has not seen: B is this machine with every process under a CPU quota (collectors/cpu_quota.py), calibrated
inside the quota (issue 17, item 3; the full figures: benchmarks/new_hardware.py, docs/MODELS.md).

Needs root, the cgroup v1 cpu controller and MPICH; skips with the reason where any is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddltrace.analyses.fit_hashemi import measurements_from_store
from ddltrace.collectors import cpu_quota
from ddltrace.collectors.mpi_env import find_tool

DDLTRACE = str(Path(sys.executable).with_name("ddltrace"))
JOB = [sys.executable, "-m", "ddltrace.collectors.workloads.ps_sgd", "--samples", "2048", "--epochs", "1",
       "--batch", "64", "--init", "parallel", "--compute", "real"]
#: B's share of a core: low enough to bind on this 2-core machine even when other processes take half of a core
SHARE = 0.25
#: the prediction's tolerance on B's measured phase: the machine is shared, A's and B's runs and calibrations
#: are taken seconds apart under a load that drifts (the benchmark repeats and reports the spread)
TOLERANCE = 0.30

pytestmark = [pytest.mark.skipif(cpu_quota.missing() is not None, reason=str(cpu_quota.missing())),
              pytest.mark.skipif(find_tool("mpiexec") is None, reason="MPI (the mpich wheel) not installed")]


def _run(argv: list[str], what: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{what}: {done.stderr[-1500:]}"
    return done.stdout


def _job(tmp: Path, name: str, w: int, wrap=lambda argv: argv) -> float:
    """The job at w workers under ``ddltrace run``: its computation phase read from the store (s)."""
    out = tmp / name
    out.mkdir()
    _run([DDLTRACE, "run", "--no-progress", "--np", str(w + 1), "--out", str(out / "store"), "--",
          *wrap([*JOB, "--out", str(out)])], f"job {name}")
    return float(measurements_from_store(out / "store", servers=1)["phase_s"])


def test_quota_cleans_up_its_cgroups_and_processes(tmp_path):
    with cpu_quota.CpuQuota(0.5) as quota:
        sleeper = subprocess.Popen(quota.wrap(["sleep", "300"]))
        for _ in range(100):  # the wrapper enters its cgroup, then execs sleep
            groups = quota.throttled()
            if groups:
                break
            subprocess.run(["sleep", "0.05"])
        (group,) = groups
        assert group == f"pid{sleeper.pid}"
        assert (quota.root / group / "cpu.cfs_quota_us").read_text().strip() == "5000"
        assert (quota.root / group / "cpu.cfs_period_us").read_text().strip() == "10000"
        assert str(sleeper.pid) in (quota.root / group / "cgroup.procs").read_text().split()
        root = quota.root
    assert sleeper.wait(timeout=10) == -9  # killed when the block ended
    assert not root.exists()


def test_prediction_on_a_cpu_quota_machine_matches_its_run(tmp_path):
    profile_a, profile_b = tmp_path / "A.json", tmp_path / "B.json"
    calibrate = ["calibrate", "--quick", "--only", "cpu", "--cpu-window", "0.03"]
    with cpu_quota.CpuQuota(SHARE) as quota:
        _run([DDLTRACE, *calibrate, "--out", str(profile_a)], "calibrate on A")
        _run(quota.wrap([DDLTRACE, *calibrate, "--out", str(profile_b)]), "calibrate inside the quota")
        a1 = _job(tmp_path, "a1", 1)
        b1 = _job(tmp_path, "b1", 1, quota.wrap)
        _job(tmp_path, "a2", 2)  # the fit needs a second worker count
        throttled = quota.throttled()
    assert any(g["nr_throttled"] > 0 for g in throttled.values()), throttled
    model = tmp_path / "model.json"
    _run([DDLTRACE, "model", "fit", str(tmp_path / "a1" / "store"), str(tmp_path / "a2" / "store"), "--dnn",
          "mlp-2-10k-2", "--servers", "1", "--profile", str(profile_a), "--out", str(model)], "model fit")
    doc = json.loads(_run([DDLTRACE, "model", "predict", str(model), "--workers", "1", "--profile", str(profile_b),
                           "--json"], "model predict"))
    (row,) = doc["rows"]
    assert row["measured_s"] == pytest.approx(a1)  # the model's own record of A's run at w = 1
    factor = doc["transfer"]["factors"]["c_p"]
    # the quota slowed both the job and the calibration (the runs of --cpu-window see it, not only bursts)
    assert b1 > 1.3 * a1 and factor > 1.3, (a1, b1, factor, os.getloadavg())
    error = row["profile_s"] / b1 - 1
    assert abs(error) <= TOLERANCE, (f"predicted {row['profile_s']:.3f} s on B, measured {b1:.3f} s "
                                     f"(A {a1:.3f} s, factor {factor:.2f}, load {os.getloadavg()})")
