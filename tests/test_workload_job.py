"""The ps-sgd job run for real under mpiexec, small: what its ground truth says against what it must show."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ddltrace.collectors.mpi_env import find_tool, mpiexec_command

pytestmark = pytest.mark.skipif(find_tool("mpiexec") is None, reason="no mpiexec")

SMALL = ["--hidden", "100", "--samples", "2048", "--epochs", "1", "--compute", "emulated"]


def run_job(out: Path, np_: int, *options: str) -> dict:
    """Run the job on ``np_`` ranks with mpiexec; its ground_truth.json."""
    argv = [sys.executable, "-m", "ddltrace.collectors.workloads.ps_sgd", "--out", str(out), *options]
    cmd, env = mpiexec_command(np_, argv)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "ground_truth.json").read_text())


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("ranks", [1, 8])  # 2, 3 and 5 ranks run in the tests below
def test_runs_on_1_to_8_ranks_here_with_a_slow_server(tmp_path, ranks):
    doc = run_job(tmp_path, ranks, *SMALL, "--batch", "32", "--server-cost", "0.003")
    workers = max(1, ranks - 1)
    assert doc["config"]["workers"] == workers and doc["config"]["n_w"] == 400
    assert sorted(r["rank"] for r in doc["init"]) == list(range(ranks))
    samples = sum(w["samples"] for w in doc["workers"].values())
    assert samples == 2048  # one epoch: every sample once, across the workers
    batches = sum(w["batches"] for w in doc["workers"].values())
    assert doc["server"]["gradients"] == batches
    gradients = read_csv(tmp_path / "gradients.csv")
    assert len(gradients) == batches
    assert doc["server"]["final_ts"] == doc["server"]["updates"] == len(read_csv(tmp_path / "updates.csv"))
    steps = read_csv(tmp_path / "steps.csv")
    assert {int(s["rank"]) for s in steps} == ({0} if ranks == 1 else set(range(1, ranks)))
    assert doc["train_s"] > 0 and doc["init_s"] > 0
    # the extra server cost is spent on every gradient; a batch takes 32 * 50 us = 1.6 ms to compute, a
    # gradient 3 ms to aggregate: the server is busy most of the time (and the bottleneck past one worker)
    assert min(int(g["busy_ns"]) for g in gradients) >= 3_000_000
    assert doc["server"]["busy_fraction"] > 0.5


def test_loss_falls_with_real_compute(tmp_path):
    doc = run_job(tmp_path, 3, "--hidden", "200", "--samples", "4096", "--epochs", "3", "--batch", "32")
    loss = [r["loss"] for r in doc["loss"]]
    assert len(loss) == 3 and all(r["samples"] == 4096 for r in doc["loss"])
    assert loss[0] < math.log(2) + 0.1  # starts near chance (ln 2 nats for two classes)
    assert loss[2] < 0.8 * loss[0]
    assert doc["compute_per_sample_s"]["configured"] is None


@pytest.fixture(scope="module")
def softsync_runs(tmp_path_factory):
    """4 workers, emulated compute long enough for the server to keep up (Rudra's homogeneous learners)."""
    runs = {}
    for n in (1, 2):
        out = tmp_path_factory.mktemp(f"softsync{n}")
        runs[n] = (out, run_job(out, 5, "--hidden", "100", "--samples", "3072", "--epochs", "1", "--batch", "32",
                                "--compute", "emulated", "--sample-time", "200e-6", "--sync", "softsync", str(n)))
    return runs


@pytest.mark.parametrize("n", [1, 2])
def test_softsync_staleness_is_about_n_and_at_most_2n(softsync_runs, n):
    out, doc = softsync_runs[n]
    assert doc["config"]["gradients_per_update"] == 4 // n
    staleness = np.array([int(g["staleness"]) for g in read_csv(out / "gradients.csv")])
    assert 0.5 * n <= staleness.mean() <= 1.5 * n, staleness.mean()
    assert np.mean(staleness <= 2 * n) >= 0.95
    assert doc["server"]["staleness_mean"] == pytest.approx(staleness.mean())
    # Rudra's <sigma> per update: the mean staleness of the gradients that advanced the timestamp
    updates = read_csv(out / "updates.csv")
    assert sum(int(u["gradients"]) for u in updates) == len(staleness)


def test_hardsync_has_no_staleness_and_a_straggler_computes_slower(tmp_path):
    doc = run_job(tmp_path, 5, "--hidden", "100", "--samples", "4096", "--epochs", "1", "--batch", "32",
                  "--compute", "emulated", "--sample-time", "200e-6", "--sync", "hardsync",
                  "--straggler", "2", "--slowdown", "3")
    gradients = read_csv(tmp_path / "gradients.csv")
    assert {int(g["staleness"]) for g in gradients} == {0}
    assert doc["server"]["updates"] == 32  # 1024 samples per worker / 32 per batch, one update per round
    assert all(int(u["gradients"]) == 4 for u in read_csv(tmp_path / "updates.csv"))
    per_sample = {int(r): w["compute_per_sample_s"] for r, w in doc["workers"].items()}
    # The emulated c_p is what the job really spent per sample (sleep overshoot is paid back)
    for rank in (1, 3, 4):
        assert per_sample[rank] == pytest.approx(200e-6, rel=0.10)
    assert per_sample[2] == pytest.approx(3 * 200e-6, rel=0.10)
    assert doc["compute_per_sample_s"]["measured"] == pytest.approx(200e-6, rel=0.10)
    steps = read_csv(tmp_path / "steps.csv")
    assert sum(int(s["compute_ns"]) for s in steps if s["rank"] == "1") == pytest.approx(
        doc["workers"]["1"]["compute_ns"])


INIT = ["--hidden", "50", "--samples", "2048", "--epochs", "1", "--compute", "emulated",
        "--read-delay", "0.02", "--read-block", "8192"]


@pytest.fixture(scope="module")
def init_runs(tmp_path_factory):
    data = tmp_path_factory.mktemp("data") / "d.tsv"
    runs = {}
    # with one worker both readers read the whole file once: ("sequential", 1) is the reference for both
    for init, workers in (("sequential", 1), ("sequential", 2), ("sequential", 4), ("parallel", 4)):
        out = tmp_path_factory.mktemp(f"{init}{workers}")
        runs[init, workers] = run_job(out, workers + 1, *INIT, "--init", init, "--data", str(data))
    return runs, data.stat().st_size


def _reading_s(doc: dict) -> list[float]:
    return [(r["read_end_ns"] - r["read_start_ns"]) / 1e9 for r in doc["init"] if r["role"] == "worker"]


def test_sequential_initialisation_grows_linearly_with_workers(init_runs):
    runs, size = init_runs
    t = {w: runs["sequential", w]["init_s"] for w in (1, 2, 4)}
    # Linear in w: initialisation is w whole-file reads one after another (each about the same time) ...
    for w in (1, 2, 4):
        reads = _reading_s(runs["sequential", w])
        assert len(reads) == w and max(reads) < 2 * min(reads)
        assert sum(reads) <= t[w] <= 1.5 * sum(reads) + 0.05, (w, t[w], reads)
    # ... and each read is at least its storage latency, so the time grows with w (generous: a busy machine)
    one_read = math.ceil(size / 8192) * 0.02
    assert min(_reading_s(runs["sequential", 4])) >= one_read
    assert 1.5 <= t[2] / t[1] <= 3.0 and 2.5 <= t[4] / t[1] <= 8.0, t
    init = runs["sequential", 4]["init"]
    workers = [r for r in init if r["role"] == "worker"]
    assert all(r["bytes"] == size for r in workers)  # each reads the whole file
    assert sum(r["lines"] for r in workers) == 2048  # and keeps its own 1/w
    # one after another: each starts reading when the previous one has finished (the paper's staircase)
    for a, b in zip(workers, workers[1:], strict=False):
        assert b["read_start_ns"] >= a["read_end_ns"]


def test_parallel_initialisation_does_not_grow(init_runs):
    runs, size = init_runs
    t1, t4 = runs["sequential", 1]["init_s"], runs["parallel", 4]["init_s"]
    assert t4 < 0.8 * t1, (t1, t4)
    workers = [r for r in runs["parallel", 4]["init"] if r["role"] == "worker"]
    assert sum(r["bytes"] for r in workers) == size  # each reads only its own byte range
    assert sum(r["lines"] for r in workers) == 2048
    assert runs["parallel", 4]["init_s"] < 0.5 * runs["sequential", 4]["init_s"]
