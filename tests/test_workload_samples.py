"""The committed ps-sgd sample traces: what their stores show against the job's ground truth beside them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ddltrace.store import TraceStore

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"
NAMES = sorted(p.name for p in SAMPLES.glob("*") if (p / "store").is_dir()) if SAMPLES.is_dir() else []
pytestmark = pytest.mark.skipif(not NAMES, reason="no ps-sgd sample traces")


def load(name: str) -> tuple[TraceStore, dict]:
    return TraceStore.open(SAMPLES / name / "store"), json.loads((SAMPLES / name / "ground_truth.json").read_text())


def compute_per_sample_s(store: TraceStore, rank: int, samples: int) -> tuple[float, int]:
    """Time outside MPI between receiving the weights from rank 0 and sending the gradient to it, per sample."""
    events = store.timeline(ranks=[rank]).sort_values("start_ns").reset_index(drop=True)
    before, after = events.shift(1), events.shift(-1)
    compute = ((events["category"] == "compute") & before["name"].str.startswith("MPI_Recv").fillna(False)
               & (before["peer"] == 0) & after["name"].str.startswith("MPI_Send").fillna(False) & (after["peer"] == 0))
    return events.loc[compute, "dur_ns"].sum() / 1e9 / samples, int(compute.sum())


@pytest.mark.parametrize("name", NAMES)
def test_emulated_compute_comes_back_from_the_store_within_5_percent(name):
    store, truth = load(name)
    config = truth["config"]
    assert store.manifest["workload"]["compute"] == config["compute"] == "emulated"
    assert store.world_size == config["ranks"]
    for rank, worker in truth["workers"].items():
        per_sample, batches = compute_per_sample_s(store, int(rank), worker["samples"])
        assert batches == worker["batches"]
        slowdown = config["slowdown"] if config["straggler"] == int(rank) else 1.0
        assert per_sample == pytest.approx(config["sample_time"] * slowdown, rel=0.05), rank


def test_sequential_initialisation_shows_the_barrier_staircase():
    store, truth = load("seq-w8")
    timeline = store.timeline()
    barrier = timeline[timeline["name"] == "MPI_Barrier"].groupby("rank")["dur_ns"].sum()
    workers = barrier.loc[1:].to_numpy()
    assert np.all(np.diff(workers) < 0)  # the first worker waits longest, the last hardly at all
    slope, _ = np.polyfit(np.arange(len(workers)), workers, 1)
    residual = workers - np.polyval(np.polyfit(np.arange(len(workers)), workers, 1), np.arange(len(workers)))
    assert slope < 0 and np.abs(residual).max() < 0.1 * workers.max()  # and it falls linearly
    series = {w: load(f"seq-w{w}")[1]["init_s"] for w in (1, 2, 4, 8)}
    assert series[1] < series[2] < series[4] < series[8] and series[8] > 3 * series[2]


def test_staleness_of_the_protocol_pair():
    hard = load("hardsync-w4")[1]["server"]
    soft = load("softsync2-w4")[1]["server"]
    assert hard["staleness_max"] == 0
    assert 1.0 <= soft["staleness_mean"] <= 3.0 and soft["staleness_within_2n"] >= 0.95
