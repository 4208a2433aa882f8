"""The papers' formulas against worked examples and hand calculations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ddltrace.errors import DdltraceError
from ddltrace.models import chang, hashemi, ralp, rudra
from ddltrace.models.dnn import load_dnn
from ddltrace.models.quantities import parse_bandwidth, parse_bytes, parse_seconds, parse_what_if
from ddltrace.units import format_bytes

# -- Chang et al. ------------------------------------------------------------------------------------------


def test_lemma_3_1_paper_example():
    # "given four GPUs and target efficiency 0.8, the overhead ratio must not exceed 8.3 %"
    r_o = chang.max_overhead_ratio(4, 0.8)
    assert r_o == pytest.approx(1 / 12)
    assert round(100 * r_o, 1) == 8.3
    assert chang.efficiency(4, r_o) == pytest.approx(0.8)
    assert chang.speedup(4, r_o) == pytest.approx(3.2)


def test_lemma_3_1_inverse_and_bounds():
    n = chang.gpus_for_speedup(3.2, 1 / 12)
    assert n == pytest.approx(4.0)
    assert chang.speedup(n, 1 / 12) == pytest.approx(3.2)
    assert chang.speedup(1, 0.3) == pytest.approx(1.0)
    with pytest.raises(DdltraceError, match="out of reach"):
        chang.gpus_for_speedup(20, 0.1)  # S R_O >= 1: bounded by 10x
    with pytest.raises(DdltraceError, match="between 0 and 1"):
        chang.speedup(4, 1.5)


def test_lemma_3_2_parameter_servers():
    # 250 MB of parameters, 8 workers, 1.25 GB/s per server, 0.5 s of compute per round:
    # 2 * 250e6 * 8 / (1.25e9 * 0.5) = 6.4 servers
    assert chang.parameter_servers(250e6, 8, 1.25e9, 0.5) == pytest.approx(6.4)
    with pytest.raises(DdltraceError):
        chang.parameter_servers(250e6, 8, 0, 0.5)


def test_memory_of_a_batch_counts_the_dnns_bytes_per_value():
    dnn = load_dnn("mlp-2-10k-2")  # doubles: bytes_per_value 8
    assert dnn.bytes_per_value == 8
    # b * (2 + 10000 + 2) * 8 + 3 * 40000 * 8
    assert chang.memory_bytes(dnn, 16) == 16 * 10004 * 8 + 3 * 40000 * 8
    assert chang.memory_bytes(dnn, 16, value_bytes=4) == 16 * 10004 * 4 + 3 * 40000 * 4
    single = load_dnn("alexnet")
    assert single.bytes_per_value == 4
    neurons = single.input_neurons + sum(layer.neurons for layer in single.layers)
    assert chang.memory_bytes(single, 32) == 32 * neurons * 4 + 3 * single.parameters * 4


def _conv_table_dnn(tmp_path):
    from ddltrace.models.dnn import parse_dnn

    def costs(t, m):
        return {str(b): {"time_s": t * b, "workspace_bytes": m * b} for b in (32, 64, 128)}

    return parse_dnn({"name": "two-convs", "input": {"neurons": 1000}, "layers": [
        {"name": "c1", "type": "conv", "neurons": 1000, "fan_in": 9, "weights": 90,
         "algorithms": {"gemm": costs(1e-3, 1e3), "fft": costs(4e-4, 1e5)}},
        {"name": "c2", "type": "conv", "neurons": 1000, "fan_in": 9, "weights": 90,
         "algorithms": {"gemm": costs(2e-3, 1e3), "fft": costs(5e-4, 2e5)}}]})


def test_minibatch_program_picks_fast_algorithms_within_memory(tmp_path):
    dnn = _conv_table_dnn(tmp_path)
    base = chang.memory_bytes(dnn, 64)
    # room for both FFTs
    roomy = chang.choose_algorithms(dnn, 64, base + 64 * 3e5 + 1)
    assert roomy.algorithms == {"c1": "fft", "c2": "fft"}
    assert roomy.time_s == pytest.approx(64 * 9e-4)
    # room for one FFT only: the one that saves more time (c2: 1.5e-3 vs c1: 6e-4 per sample)
    tight = chang.choose_algorithms(dnn, 64, base + 64 * 2.1e5)
    assert tight.algorithms == {"c1": "gemm", "c2": "fft"}
    # no room for any workspace beyond gemm's
    none = chang.choose_algorithms(dnn, 64, base + 64 * 1e3)
    assert not none.feasible
    best, choices = chang.choose_batch(dnn, [32, 64, 128], base + 64 * 3e5 + 1)
    assert len(choices) == 3 and best.feasible
    assert best.samples_per_s == max(c.samples_per_s for c in choices)
    # a batch whose activations and parameters alone overflow the memory: said in bytes' units (was '7.451e+08 B')
    over = chang.choose_algorithms(dnn, 64, base / 2)
    assert not over.feasible and over.reason == (f"activations and parameters alone need {format_bytes(base)}, more "
                                                 f"than the {format_bytes(base / 2)} of the GPU")
    assert "e+" not in over.reason


def test_an_algorithm_whose_workspace_alone_overflows_is_left_out_not_the_batch(tmp_path):
    """QA s20: a gemm workspace of 1e15 B (or more) beside 1e9 B of memory made the solver find no mix, where c1's
    fft and c2's gemm fit; at 1e13 B it found it. Such an algorithm cannot be chosen: it is left out of the program."""
    from ddltrace.models.dnn import parse_dnn

    dnn = _conv_table_dnn(tmp_path)
    data = {"name": "two-convs", "input": {"neurons": 1000}, "layers": [
        {"name": layer.name, "type": "conv", "neurons": 1000, "fan_in": 9, "weights": 90,
         "algorithms": {a: {str(b): {"time_s": c.time_s, "workspace_bytes": c.workspace_bytes}
                            for b, c in per.items()} for a, per in layer.algorithms.items()}}
        for layer in dnn.layers]}
    data["layers"][0]["algorithms"]["gemm"]["64"]["workspace_bytes"] = 1e15
    huge = parse_dnn(data)
    base = chang.memory_bytes(huge, 64)
    choice = chang.choose_algorithms(huge, 64, base + 64 * 1.5e5)  # room for c1's fft, not c2's
    assert choice.feasible and choice.algorithms == {"c1": "fft", "c2": "gemm"}
    assert choice.time_s == pytest.approx(64 * (4e-4 + 2e-3))
    data["layers"][0]["algorithms"].pop("fft")  # c1's only algorithm now needs 1e15 B: the batch cannot fit
    alone = chang.choose_algorithms(parse_dnn(data), 64, base + 64 * 1.5e5)
    assert not alone.feasible and alone.reason.startswith("every algorithm of layer(s) c1 needs more workspace")


# -- RALP ------------------------------------------------------------------------------------------------


def test_skewness_of_a_known_layer_list():
    p = [1.0, 2.0, 3.0, 10.0]
    # by hand: mean 4, deviations -3 -2 -1 6; m2 = 50/4 = 12.5; m3 = (-27 - 8 - 1 + 216)/4 = 45
    assert ralp.skewness(p) == pytest.approx(45 / 12.5**1.5)
    assert ralp.skewness(p) == pytest.approx(stats.skew(p, bias=True))
    assert ralp.skewness([5, 5, 5]) == 0.0


def test_position_skewness_reproduces_ralp_table_1():
    alexnet = [layer.parameters for layer in load_dnn("alexnet").layers]
    vgg11 = [layer.parameters for layer in load_dnn("vgg11").layers]
    # the paper's Table 1: AlexNet -2.27, VGG11 -3.62
    assert round(ralp.position_skewness(alexnet), 2) == -2.27
    assert round(ralp.position_skewness(vgg11), 2) == -3.62
    # the moment formula on the sizes themselves is positive (a few huge layers): it cannot be the paper's S
    assert ralp.skewness(alexnet) > 0 and ralp.skewness(vgg11) > 0
    assert ralp.should_offload(alexnet) and not ralp.should_offload(alexnet, method="moments")
    # parameters in the first layers: right-skewed positions, no offload
    assert not ralp.should_offload(list(reversed(alexnet)))
    assert not ralp.should_offload(alexnet, k=-3.0)


def test_split_point_and_traffic():
    params = [10, 20, 400, 300]
    outputs = [500, 100, 50, 10]
    types = ["conv", "conv", "fc", "fc"]
    # costs: i=0 510 (but between two convs: skipped), i=1 130, i=2 480, i=3 740
    split = ralp.split_point(params, outputs, types)
    assert split.index == 1 and split.cost_bytes == 130
    assert ralp.ralp_traffic(split) == 260
    assert ralp.ps_traffic(730) == 1460
    assert ralp.ring_allreduce_traffic(730, 4) == pytest.approx(2 * 3 / 4 * 730)


def test_ralp_table_2_horovod_traffic():
    # Table 2: VGG11, model 0.50 GB, 32 GPUs: Horovod moves 2 * S * (W - 1) = 31 GB per step in all, i.e.
    # the per-worker ring volume times W; our per-worker figure times W gives it back.
    per_worker = ralp.ring_allreduce_traffic(0.50e9, 32)
    assert per_worker * 32 == pytest.approx(2 * 0.50e9 * 31)


def test_plan_placement_of_vgg11():
    dnn = load_dnn("vgg11")
    placement = ralp.plan_placement(dnn, batch=32, participants=8)
    assert placement.offload
    costs = {}
    total = 0.0
    for i, layer in enumerate(dnn.layers):
        total += layer.parameters * 4
        between_convs = i + 1 < len(dnn.layers) and layer.type == "conv" and dnn.layers[i + 1].type == "conv"
        if not between_convs:
            costs[layer.name] = layer.neurons * 4 * 32 + total
    assert placement.split.name == min(costs, key=costs.get)
    assert placement.ralp_bytes == pytest.approx(2 * min(costs.values()))
    assert placement.ralp_bytes < placement.ring_bytes < placement.ps_bytes


# -- Rudra -----------------------------------------------------------------------------------------------


def test_staleness_by_vector_clock():
    assert list(rudra.staleness([3, 4, 5], [5, 5, 6])) == [2, 1, 1]
    # the gradients that advanced ts_9 -> ts_10 were computed on 7, 8, 8: <sigma> = 9 - 23/3
    assert rudra.average_staleness(10, [7, 8, 8]) == pytest.approx(9 - 23 / 3)
    with pytest.raises(DdltraceError):
        rudra.staleness([5], [4])


def test_softsync_rules():
    assert rudra.gradients_per_update(30, 4) == 7
    assert rudra.expected_staleness("softsync", 30, 4) == (4.0, 8.0)
    assert rudra.expected_staleness("async", 30) == (30.0, 60.0)
    assert rudra.learning_rate(0.1, "softsync", mean_staleness=4) == pytest.approx(0.025)
    assert rudra.learning_rate(0.1, "hardsync", mu=4, learners=30, batch_ref=120) == pytest.approx(0.1)
    assert rudra.minibatch_for_learners(128, 4) == 32
    assert rudra.communication_overlap(9, 1) == pytest.approx(0.9)


# -- Hashemi et al. --------------------------------------------------------------------------------------


def test_hashemi_terms_by_hand():
    wl = hashemi.Workload(d=16384, b=256, n_f=2, n_w=40000, epochs=1, s=8)
    k = hashemi.Constants(c_p=1e-5, c_b=2e-4, c_u=3e-4, r_d=1e-8, r_m=1e-10, w_m=2e-10, r_net=1e-9, lat_net=1e-5)
    n = 16384 / 4
    assert hashemi.t_comp(n, wl, k) == pytest.approx(1e-5 * n + 2e-4 * n / 256)
    assert hashemi.t_mem(n, wl, k) == pytest.approx(8 * n * (1e-10 * 2 + 3e-10 * 40000 / 256))
    assert hashemi.t_send(n, wl, k) == pytest.approx((1e-9 * 8 * 40000 + 1e-5) * n / 256)
    assert hashemi.t_net(n, 4, wl, k) == pytest.approx(2 * hashemi.t_send(n, wl, k) + 4 * 3e-4 * n / 256)
    # the server's floor: T_net(d/w, w) -> (d/b) c_u as w grows
    assert hashemi.t_net(16384 / 1e6, 1e6, wl, k) == pytest.approx(16384 / 256 * 3e-4, rel=1e-2)
    # initialisation: shared storage read in turn grows with w
    assert hashemi.t_init(8, wl, k, "shared") == pytest.approx(8 * 1e-8 * 8 * 2 * 16384)
    assert hashemi.t_init(8, wl, k, "local") == pytest.approx(1e-8 * 8 * 2 * 16384)
    assert hashemi.t_init(8, wl, k, "partitioned") == pytest.approx(1e-8 * 8 * 2 * 16384 / 8)


def test_knee_is_where_the_server_term_takes_over():
    wl = hashemi.Workload(d=16384, b=64, n_f=2, n_w=40000)
    k = hashemi.Constants(c_p=2e-4, c_b=5e-3, c_u=4e-4, r_net=1e-9)
    w_star, cause = hashemi.knee(wl, k)
    assert cause == "server"
    terms = hashemi.phase_terms(w_star, wl, k)
    assert terms["net"] == pytest.approx(terms["worker"])
    assert hashemi.bound_by(hashemi.phase_terms(w_star * 2, wl, k)) == "server/network"
    assert hashemi.bound_by(hashemi.phase_terms(w_star / 2, wl, k)) == "worker"
    # the floor is a max: it caps how fast the phase gets
    floored = hashemi.Constants(c_p=2e-4, t_phase_min=0.5)
    assert hashemi.t_phase(1000, wl, floored) == 0.5
    assert hashemi.knee(wl, floored) == (pytest.approx(16384 * 2e-4 / 0.5), "floor")
    assert hashemi.knee(wl, hashemi.Constants(c_p=1e-4)) == (math.inf, "none")


def test_contention_extension_only_past_the_knee():
    wl = hashemi.Workload(d=16384, b=64)
    k = hashemi.Constants(c_p=2e-4, c_u=4e-4, kappa=0.1)
    w_star, _ = hashemi.knee(wl, k)
    plain = hashemi.Constants(c_p=2e-4, c_u=4e-4)
    assert hashemi.t_phase(w_star / 2, wl, k) == pytest.approx(hashemi.t_phase(w_star / 2, wl, plain))
    assert hashemi.t_phase(w_star + 10, wl, k) == pytest.approx(hashemi.t_phase(w_star + 10, wl, plain) * 2)
    np.testing.assert_allclose(hashemi.t_phase(np.array([1.0, 2.0]), wl, plain),
                               [hashemi.t_phase(1.0, wl, plain), hashemi.t_phase(2.0, wl, plain)])


def test_cache_cliff_working_set():
    # section 4.4: (2 + 1) * 8 * 64 = 1536 B of samples plus 40K doubles of weights
    assert hashemi.working_set_bytes(64, 2, 40000) == 3 * 8 * 64 + 320000
    assert hashemi.fits_cache(64, 2, 40000, 20480 * 1024)
    assert not hashemi.fits_cache(64, 2, 40000, 256 * 1024)


def test_what_if_scaling():
    k = hashemi.Constants(r_net=1e-9, c_u=1e-4)
    changed = k.scaled(parse_what_if(["r_net=0.1x", "c_u=2e-5"]))
    assert changed.r_net == pytest.approx(1e-10) and changed.c_u == 2e-5


# -- quantities ------------------------------------------------------------------------------------------


def test_quantities():
    assert parse_bytes("12GiB") == 12 * 2**30
    assert parse_bytes("250MB") == 250e6
    assert parse_bandwidth("10Gbit/s") == 1.25e9
    assert parse_bandwidth("10Gbps") == 1.25e9
    assert parse_bandwidth("1.25GB/s") == 1.25e9
    assert parse_seconds("500ms") == 0.5
    for bad, parse in (("12 parsecs", parse_bytes), ("fast", parse_bandwidth), ("1 week", parse_seconds)):
        with pytest.raises(DdltraceError):
            parse(bad)
    with pytest.raises(DdltraceError, match="NAME=VALUE"):
        parse_what_if(["r_net"])


def test_hardware_profile_from_calibrate():
    from ddltrace.models.quantities import profile_constants
    from ddltrace.models.yan import Hardware

    profile = {"format": "ddltrace-hardware-profile", "machine": {"physical_cores": 8, "logical_cpus": 16},
               "constants": {"C_nbw": {"value": 8e9, "uncertainty": 1e8, "unit": "bit/s"},
                             "r_net": {"value": 1e-9, "uncertainty": 1e-11, "unit": "s/B"},
                             "C_muladd": {"value": 2e-10, "unit": "s/muladd", "alias_of": "C_muladd_gemm_f32"}},
               "curves": {"C_muladd_gemm_f32": {"points": [{"x": 1e3, "y": 2e-10}, {"x": 1e9, "y": 9e-10}]},
                          "C_interf_cache": {"points": [{"x": 2, "y": 1.2}, {"x": 8, "y": 1.9}]}}}
    constants = profile_constants(profile, "hw.json")
    assert constants["C_nbw"] == 1e9 and constants["cores"] == 8.0
    assert constants["C_muladd"] == [[1e3, 2e-10], [1e9, 9e-10]]
    assert constants["C_interf"][0] == [1.0, 1.0]
    hw = Hardware.from_profile(constants, "hw.json")
    assert hw.cores == 8 and hw.interf(2) == pytest.approx(1.2) and hw.muladd(1e9) == pytest.approx(9e-10)
    with pytest.raises(DdltraceError, match="hw.json: constant r_net"):
        profile_constants({"constants": {"r_net": {"value": -1.0}}}, "hw.json")


@pytest.mark.parametrize("damage, named", [
    (lambda p: p["constants"]["C_nbw"].update(uncertainty=float("nan")), "C_nbw's uncertainty = nan"),
    (lambda p: p["constants"]["C_muladd"].update(uncertainty=-1e-12), "C_muladd's uncertainty = -1e-12"),
    (lambda p: p["constants"]["C_muladd"].update(uncertainty="big"), "C_muladd's uncertainty = 'big'"),
    (lambda p: p["curves"]["C_interf_cache"]["points"][1].update(y=float("nan")), "curve C_interf_cache point 1"),
])
def test_optimize_names_a_damaged_uncertainty_or_curve_of_a_real_profile(tmp_path, capsys, damage, named):
    """The committed quota B profile with one uncertainty or C_interf point damaged: `optimize` refuses it in one
    line naming the profile and the constant (a NaN uncertainty printed every interval as [n/a, n/a], a negative
    one was taken as positive, a string raised a traceback, a NaN C_interf point silently read C_interf(2) = 1)."""
    import json
    from pathlib import Path

    from ddltrace.cli import main

    quota = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd-quota"
    real = json.loads((quota / "B.json").read_text())
    command = ["optimize", "--dnn", "mnist-adam", "--machines", "4", "--samples", "6e4", "--profile"]
    damage(real)
    (tmp_path / "B.json").write_text(json.dumps(real))
    assert main([*command, str(tmp_path / "B.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "B.json" in err and named in err


@pytest.mark.parametrize("stamp, named", [
    ({"format": "ddltrace-dnn/1"}, "format is 'ddltrace-dnn/1'"),
    ({"format_version": 2}, "format_version 2: this ddltrace reads version 1"),
])
def test_a_profile_of_another_format_or_a_later_version_is_refused(tmp_path, capsys, stamp, named):
    """The committed quota B profile stamped as another format or a later format version: `model predict`,
    `optimize`, `plan ps` and `calibrate --compare` each refuse it in one line (the three model verbs read it as
    version 1, and --compare read any version)."""
    import json
    from pathlib import Path

    from ddltrace.cli import main
    from ddltrace.collectors.microbench import profile as prof
    from ddltrace.models import quantities

    assert (quantities.PROFILE_FORMAT, quantities.PROFILE_FORMAT_VERSION) == (prof.FORMAT, prof.FORMAT_VERSION)
    quota = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd-quota"
    stamped = tmp_path / "B.json"
    stamped.write_text(json.dumps({**json.loads((quota / "B.json").read_text()), **stamp}))
    model = tmp_path / "model.json"
    stores = [str(quota / f"A-compute-w{w}" / "store") for w in (1, 2)]
    assert main(["model", "fit", *stores, "--profile", str(quota / "A.json"), "--servers", "1",
                 "--out", str(model)]) == 0
    for command in (["model", "predict", str(model), "--workers", "1,2", "--profile", str(stamped)],
                    ["optimize", "--dnn", "mnist-adam", "--machines", "4", "--samples", "6e4", "--profile",
                     str(stamped)],
                    ["plan", "ps", "--param-bytes", "1MB", "--workers", "2", "--compute-time", "1s", "--profile",
                     str(stamped)],
                    ["calibrate", "--compare", str(quota / "B.json"), str(stamped)]):
        capsys.readouterr()
        assert main(command) == 2, command
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "B.json" in err and named in err, (command, err)
