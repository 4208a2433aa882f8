"""Yan et al.'s layer-wise model and its optimiser: terms by hand, the DP against brute force."""

from __future__ import annotations

import random

import pytest

from ddltrace.errors import DdltraceError
from ddltrace.models import yan
from ddltrace.models.dnn import load_dnn, parse_dnn


def small_dnn(rng: random.Random | None = None):
    rng = rng or random.Random(0)
    rows = rng.choice([6, 8, 12])
    chans = rng.choice([2, 4, 8])
    hidden = rng.choice([50, 300, 2000])
    return parse_dnn({"name": "small", "input": {"neurons": rows * rows, "rows": rows}, "layers": [
        {"name": "c1", "type": "conv", "neurons": rows * rows * chans, "fan_in": 9, "weights": 9 * chans,
         "rows": rows, "kernel": 3, "channels": chans},
        {"name": "f1", "type": "fc", "neurons": hidden, "fan_in": rows * rows * chans},
        {"name": "f2", "type": "fc", "neurons": 10, "fan_in": hidden}]})


def test_terms_by_hand():
    hw = yan.Hardware(C_muladd=2e-9, C_act=5e-9, C_err=7e-9, C_ncost=1e-4, C_nbw=1e9, C_interf=((1, 1.0), (4, 1.5)))
    assert hw.interf(4) == 1.5 and hw.interf(1) == 1.0
    assert yan.u_f(1000, 10, hw, H=4) == pytest.approx(1.5 * (2e-9 * 1000 + 5e-9 * 10))
    assert yan.u_b(500, 10, hw, H=1) == pytest.approx(2e-9 * 500 + 7e-9 * 10)
    assert yan.u_w(1000, hw) == pytest.approx(2e-6)
    # 1000 remote activations of 4 bytes with 4 threads sharing 1 GB/s
    assert yan.m_comm(1000, hw, H=4, bytes_per_value=4) == pytest.approx(1e-4 + 4000 / 0.25e9)
    assert yan.m_comm(0, hw) == 0.0
    weights = [4e6, 1e6]
    assert yan.m_w_max(weights, 3, hw, H=1) == pytest.approx(2e-4 + 3 * 5e6 / 1e9)
    assert yan.m_w_min(weights, N_ps=4, N_wr=2, hw=hw, H=1) == pytest.approx(2e-4 + 5e6 / 2e9)
    assert yan.m_w(weights, 4, 3, 2, hw, 1, "mean") == pytest.approx(
        (yan.m_w_max(weights, 3, hw) + yan.m_w_min(weights, 4, 2, hw)) / 2)


def test_cache_curve_interpolates():
    hw = yan.Hardware.from_profile({"C_muladd": [[1e6, 1e-10], [1e8, 1e-9]], "C_nbw": 1e9})
    assert hw.muladd(1e5) == pytest.approx(1e-10)
    assert hw.muladd(1e9) == pytest.approx(1e-9)
    assert 1e-10 < hw.muladd(5e7) < 1e-9
    with pytest.raises(DdltraceError, match="lacks C_muladd"):
        yan.Hardware.from_profile({"C_nbw": 1e9})


def test_one_worker_epoch_by_hand():
    dnn = parse_dnn({"name": "two", "input": {"neurons": 10}, "layers": [
        {"name": "a", "type": "fc", "neurons": 20, "fan_in": 10},
        {"name": "b", "type": "fc", "neurons": 5, "fan_in": 20}]})
    hw = yan.Hardware(C_muladd=1e-9, C_act=1e-8, C_err=2e-8, C_ncost=0.0, C_nbw=1e9)
    res = yan.Resources(N_ps=1, N_mr=1, N_wr=1, H=1, N_sample=100, N_read=10, read_bound="min")
    result = yan.optimise_layers(dnn, res, hw)
    per_sample = (1e-9 * 200 + 1e-8 * 20 + 1e-9 * 100 + 2e-8 * 20 + 1e-9 * 200) + \
                 (1e-9 * 100 + 1e-8 * 5 + 0 + 2e-8 * 5 + 1e-9 * 100)
    reads = (220 + 105) * 4 / 1e9 * 100 / 10
    assert result.activations == 0.0
    assert result.t_epoch == pytest.approx(per_sample * 100 + reads)
    assert result.states == ((1, 1), (1, 1))


@pytest.mark.parametrize("seed", range(6))
def test_dp_equals_brute_force(seed):
    rng = random.Random(seed)
    dnn = small_dnn(rng)
    hw = yan.Hardware(C_muladd=rng.choice([1e-10, 1e-9, 1e-8]), C_act=1e-8, C_err=1e-8,
                      C_ncost=rng.choice([0.0, 1e-6, 1e-4]), C_nbw=rng.choice([1e6, 1e8, 1e10]), cores=4)
    res = yan.Resources(N_ps=rng.choice([1, 2]), N_mr=rng.choice([1, 2]), N_wr=3, H=rng.choice([1, 2]),
                        N_sample=1000, N_read=rng.choice([10, 100]), read_bound=rng.choice(yan.READ_BOUNDS))
    dp = yan.optimise_layers(dnn, res, hw)
    brute = yan.brute_force_layers(dnn, res, hw)
    assert dp.t_epoch == pytest.approx(brute.t_epoch, rel=1e-9)
    # the DP's own answer, re-evaluated through explicit greedy layouts, is what it claims
    layouts = [yan.Layout.canonical(dp.states[0])]
    for i, state in enumerate(dp.states[1:], start=1):
        layouts.append(yan.greedy_layout(layouts[-1], state, dnn.layers[i].local, dnn.halo_fraction(i), res.N_wr))
    assert yan.evaluate(dnn, res, hw, layouts).t_epoch == pytest.approx(dp.t_epoch, rel=1e-9)


def test_partitioning_pays_when_it_brings_weights_into_cache():
    dnn = small_dnn(random.Random(3))
    slow_net = dict(C_ncost=1e-3, C_nbw=1e6, C_act=0.0, C_err=0.0, cores=1)
    cached = yan.Hardware(C_muladd=((0, 1e-10), (1000, 1e-10), (1001, 1e-7)), **slow_net)
    flat = yan.Hardware(C_muladd=1e-10, **slow_net)
    res = yan.Resources(N_ps=1, N_mr=1, N_wr=4, H=1, N_sample=1000, N_read=1e9)
    assert max(p for p, _ in yan.optimise_layers(dnn, res, cached).states) > 1
    # without the cache cliff, the slow network makes partitioning a loss: no layer is split
    assert all(p == 1 for p, _ in yan.optimise_layers(dnn, res, flat).states)


def test_optimise_ranks_and_checks_constraints():
    dnn = load_dnn("mnist-adam")
    hw = yan.Hardware(C_muladd=1e-10, C_act=1e-9, C_err=1e-9, C_ncost=5e-5, C_nbw=1.25e9, cores=16)
    ranked = yan.optimise(dnn, hw, 8, N_sample=60000, N_read=70, threads=[16], max_workers=2)
    assert ranked == sorted(ranked, key=lambda c: c.t_epoch)
    assert all(c.N_ps + c.N_mr * c.N_wr <= 8 for c in ranked)
    assert ranked[0].breakdown.bottleneck in ("compute (U)", "activations (M_f + M_b)", "weight reads (M_w)")
    with pytest.raises(DdltraceError, match="does not fit"):
        yan.optimise(dnn, hw, 8, N_sample=1, N_read=1, configurations=[(4, 4, 1)])
    with pytest.raises(DdltraceError, match="cores"):
        yan.optimise(dnn, hw, 8, N_sample=1, N_read=1, threads=[32])


def test_a_search_too_large_is_refused_with_its_size(monkeypatch):
    """The configurations are counted before they are made: 8 machines at --max-workers 2 are the 30 ranked
    (N_ps + N_mr N_wr <= 8); 100,000 machines (QA: ran the machine out of memory) are refused, naming the count."""
    dnn = load_dnn("mnist-adam")
    hw = yan.Hardware(C_muladd=1e-10, C_act=1e-9, C_err=1e-9, C_ncost=5e-5, C_nbw=1.25e9, cores=16)
    ranked = yan.optimise(dnn, hw, 8, N_sample=60000, N_read=70, threads=[16], max_workers=2)
    assert len(ranked) == sum(1 for wr in (1, 2) for mr in range(1, 8) for ps in range(1, 8) if ps + mr * wr <= 8)
    monkeypatch.setattr(yan, "MAX_CONFIGURATIONS", len(ranked) - 1)
    with pytest.raises(DdltraceError, match=f"machines: 8: {len(ranked)} configurations"):
        yan.optimise(dnn, hw, 8, N_sample=60000, N_read=70, threads=[16], max_workers=2)
    monkeypatch.undo()
    with pytest.raises(DdltraceError, match="machines: 100000: 4,999,950,000 configurations"):
        yan.optimise(dnn, hw, 100_000, N_sample=60000, N_read=70, max_workers=1)


def test_the_default_search_tries_every_thread_count_up_to_the_cores():
    """QA: the default searched only H = cores, where the NIC split H ways (C_nbw(H) = C_nbw / H) made reads-bound
    configurations twice as slow; every H from 1 to the cores is searched now, so the best is the model's own."""
    dnn = load_dnn("mnist-adam")
    hw = yan.Hardware(C_muladd=1e-10, C_act=1e-9, C_err=1e-9, C_ncost=5e-5, C_nbw=2.4e7, cores=2)
    ranked = yan.optimise(dnn, hw, 8, N_sample=60000, N_read=70, max_workers=2)
    assert {c.H for c in ranked} == {1, 2}
    best_each = [yan.optimise(dnn, hw, 8, N_sample=60000, N_read=70, threads=[h], max_workers=2)[0] for h in (1, 2)]
    assert ranked[0].t_epoch == min(c.t_epoch for c in best_each)
    assert ranked[0].H == 1  # the weight reads dominate: one thread keeps the whole NIC
