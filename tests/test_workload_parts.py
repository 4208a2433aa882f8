"""The ps-sgd job's parts without MPI: the network's gradient, the data set readers, the server's rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ddltrace.collectors.workloads import dataset, mlp
from ddltrace.collectors.workloads.parameter_server import ParameterServer, Protocol


def test_gradient_matches_finite_differences():
    hidden = 7
    rng = np.random.default_rng(3)
    w = mlp.init_weights(hidden, seed=1)
    x, y = rng.normal(size=(5, 2)), rng.integers(0, 2, size=5)
    grad = np.empty_like(w)
    loss = mlp.loss_and_gradient(w, x, y, hidden, grad)
    assert len(w) == mlp.n_weights(hidden) == 4 * hidden
    assert math.isclose(loss / 5, mlp.mean_loss(w, x, y, hidden))
    eps = 1e-6
    for i in range(len(w)):
        d = np.zeros_like(w)
        d[i] = eps
        numeric = (mlp.mean_loss(w + d, x, y, hidden) - mlp.mean_loss(w - d, x, y, hidden)) / (2 * eps)
        assert grad[i] == pytest.approx(numeric, rel=1e-4, abs=1e-8)


def test_paper_weight_count():
    assert mlp.n_weights(10_000) == 40_000  # n_w of Hashemi et al. for d_h = 10K


def test_dataset_is_deterministic_tsv(tmp_path):
    a = dataset.make_dataset(tmp_path / "a.tsv", 300, seed=5)
    b = dataset.make_dataset(tmp_path / "b.tsv", 300, seed=5)
    c = dataset.make_dataset(tmp_path / "c.tsv", 300, seed=6)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    lines = a.read_text().splitlines()
    assert len(lines) == 300
    fields = [line.split("\t") for line in lines]
    assert all(len(f) == 3 and f[2] in ("0", "1") for f in fields)
    labels = [int(f[2]) for f in fields]
    assert 0.3 < np.mean(labels) < 0.7


@pytest.mark.parametrize("workers", [1, 3, 4])
def test_parallel_readers_partition_the_file(tmp_path, workers):
    path = dataset.make_dataset(tmp_path / "d.tsv", 1000, seed=0)
    x_all, y_all = dataset.parse_lines(path.read_bytes())
    parts, reads = [], 0
    for k in range(workers):
        reader = dataset.StorageReader(path, block=4096, delay=0.0)
        x, y = dataset.read_parallel(reader, k, workers)
        parts.append(x)
        reads += reader.stats.reads
        assert reader.stats.lines == len(y)
    joined = np.concatenate(parts)
    np.testing.assert_array_equal(joined, x_all)  # every line once, in order
    assert reads <= math.ceil(path.stat().st_size / 4096) + workers


def test_sequential_readers_keep_disjoint_random_shares(tmp_path):
    path = dataset.make_dataset(tmp_path / "d.tsv", 1000, seed=0)
    size, workers = path.stat().st_size, 4
    shares = []
    for k in range(workers):
        reader = dataset.StorageReader(path, block=4096, delay=0.0)
        x, _ = dataset.read_sequential(reader, k, workers, seed=9)
        assert reader.stats.bytes == size  # each worker reads the whole file
        assert reader.stats.reads == math.ceil(size / 4096)
        shares.append({tuple(row) for row in x})
        assert 200 <= len(x) <= 300
    assert sum(len(s) for s in shares) == 1000
    assert len(set().union(*shares)) == 1000


def test_protocol_parsing_and_rules():
    assert Protocol.parse(["softsync", "2"]) == Protocol("softsync", 2) == Protocol.parse("softsync:2")
    assert Protocol.parse("async").gradients_per_update(6) == 1
    assert Protocol.parse("hardsync").gradients_per_update(6) == 6
    assert Protocol.parse("softsync 2").gradients_per_update(6) == 3
    assert Protocol.parse("softsync 4").gradients_per_update(6) == 1
    assert Protocol.parse("softsync 2").learning_rate(1.0, 6) == 0.5
    assert Protocol.parse("hardsync").learning_rate(1.0, 4) == 2.0
    for bad in (["softsync"], ["softsync", "0"], ["sometimes"], ["async", "2"]):
        with pytest.raises(ValueError, match="--sync"):
            Protocol.parse(bad)


def test_hardsync_holds_pulls_until_everyone_pushed():
    ps = ParameterServer(np.zeros(3), Protocol("hardsync"), [1, 2, 3], alpha0=1.0)
    assert not ps.push(1, np.ones(3), 0)
    assert not ps.may_serve_pull(1) and ps.may_serve_pull(2)
    assert not ps.push(2, np.ones(3), 0)
    assert ps.push(3, 3 * np.ones(3), 0)
    assert ps.ts == 1 and ps.may_serve_pull(1)
    np.testing.assert_allclose(ps.weights, -math.sqrt(3) * 5 / 3)  # alpha0 sqrt(lambda) * mean
    assert [g.staleness for g in ps.gradients] == [0, 0, 0]
    # a worker that has finished is not waited for
    ps.push(1, np.ones(3), 1)
    ps.push(2, np.ones(3), 1)
    assert ps.retire(3) and ps.ts == 2


def test_softsync_counts_staleness():
    ps = ParameterServer(np.zeros(2), Protocol("softsync", 2), [1, 2, 3, 4], alpha0=1.0)  # c = 2
    assert not ps.push(1, np.ones(2), 0)
    assert ps.push(2, np.ones(2), 0)
    assert ps.push(3, np.ones(2), 0) is False and ps.push(4, np.ones(2), 0)
    assert [g.staleness for g in ps.gradients] == [0, 0, 1, 1]
    assert [u.mean_staleness for u in ps.updates] == [0.0, 1.0]
    assert ps.may_serve_pull(1)
    assert not ps.push(1, np.ones(2), 2)
    assert ps.retire(1) is False  # others are still active
    for w in (2, 3):
        ps.retire(w)
    assert ps.retire(4) and ps.ts == 3  # the last partial update is applied when all are done
