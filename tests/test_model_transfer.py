"""`model predict --profile B.json`: a model fitted on real runs of the reference job with a real calibrated
profile (A) carried to a machine B whose constants differ from A's by known factors (issue 17, item 1)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dnn_files import write_convs_dnn

from ddltrace.cli import main
from ddltrace.errors import DdltraceError

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"
VENV_DDLTRACE = Path(sys.executable).with_name("ddltrace")
CPU_PREFIXES = ("C_muladd", "C_act", "C_err")
#: B = A with compute twice as slow, memory 1.5 times, network 3 times, disk 4 times
FACTORS = {"cpu": 2.0, "r_m": 1.5, "w_m": 1.5, "r_net": 3.0, "lat_net": 3.0, "r_d": 4.0}
WORKERS = (1, 2, 4, 8, 16, 32)

pytestmark = pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(),
                                reason="the committed sample traces are absent")


def _derived(a: dict, factors: dict, cpu_relative: float | None = None) -> dict:
    """A's profile with the compute constants and curves times factors['cpu'] and each named constant times its
    factor; ``cpu_relative`` replaces the compute uncertainties by that share of their values. Without the CPU the
    network's packets cost (``net_cpu_per_byte``): B's phase would set its own share of it, and these tests check
    each constant's factor alone (tests/test_link_cpu.py checks that one)."""
    b = copy.deepcopy(a)
    b["constants"].pop("net_cpu_per_byte", None)
    k = factors.get("cpu", 1.0)
    for name, entry in b["constants"].items():
        if name.startswith(CPU_PREFIXES):
            entry["value"] *= k
            entry["uncertainty"] = (entry["value"] * cpu_relative if cpu_relative is not None
                                    else entry["uncertainty"] * k)
        elif name in factors:
            entry["value"] *= factors[name]
            entry["uncertainty"] *= factors[name]
    for name, curve in b["curves"].items():
        if name.startswith(CPU_PREFIXES):
            for point in curve["points"]:
                for y, spread in (("y", "spread"), ("cpu_y", "cpu_spread")):  # wall and CPU seconds alike
                    if y in point:
                        point[y] *= k
                        point[spread] = (point[y] * cpu_relative if cpu_relative is not None
                                         else point.get(spread, 0.0) * k)
    return b


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A real quick calibration of this machine (A), and a model fitted with it on the committed runs at
    w = 1, 2, 4."""
    root = tmp_path_factory.mktemp("transfer")
    a_path = root / "A.json"
    done = subprocess.run([str(VENV_DDLTRACE), "calibrate", "--quick", "--only", "cpu,mem,disk,net",
                           "--out", str(a_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    model = root / "model.json"
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4)]
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(a_path), "--out", str(model)]) == 0
    return root, json.loads(a_path.read_text()), model


def _predict(model: Path, profile: Path, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["model", "predict", str(model), "--workers", ",".join(map(str, WORKERS)), "--profile",
                 str(profile), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_fit_records_its_profile(fitted):
    root, a, model_path = fitted
    model = json.loads(model_path.read_text())
    record = model["profile"]
    assert record["source"] == str(root / "A.json")
    for name in ("r_m", "w_m", "r_net", "lat_net", "r_d", "C_muladd", "C_act", "C_err"):
        assert record["constants"][name]["value"] == a["constants"][name]["value"]
        assert record["constants"][name]["uncertainty"] == a["constants"][name]["uncertainty"]
    # mlp-2-10k-2 is in doubles: the f64 sibling of the profile's default (f32) curve
    assert record["curves"]["C_muladd"]["curve"].endswith("_f64")
    assert model["work_per_sample"]["muladds"] == 3 * 40000 and model["work_per_sample"]["neurons"] == 10002


def test_each_term_scales_by_its_constants_factor(fitted, capsys):
    root, a, model_path = fitted
    b_path = root / "B.json"
    b_path.write_text(json.dumps(_derived(a, FACTORS)))
    out = _predict(model_path, b_path, capsys)
    model = json.loads(model_path.read_text())
    assert model["constants"]["c_u"]["value"] == 0.0  # w = 1, 2, 4 do not show the server: no server term
    factors = out["transfer"]["factors"]
    for name in ("c_p", "c_b", "c_u", "t_phase_min"):
        assert factors[name] == pytest.approx(2.0, rel=1e-12)
    for name in ("r_m", "w_m", "r_net", "lat_net", "r_d"):
        assert factors[name] == pytest.approx(FACTORS[name], rel=1e-12)
    for row in out["rows"]:
        assert row["profile_comp_s"] == pytest.approx(2.0 * row["comp_s"], rel=1e-12)
        assert row["profile_mem_s"] == pytest.approx(1.5 * row["mem_s"], rel=1e-12)
        assert row["profile_net_s"] == pytest.approx(3.0 * row["net_s"], rel=1e-12)
        worker = row["profile_comp_s"] + row["profile_mem_s"]
        assert row["profile_s"] == pytest.approx(max(row["profile_net_s"], worker))
        assert row["profile_low_s"] <= row["profile_s"] <= row["profile_high_s"]
        assert row["profile_bound_by"] == "worker"
    # the knee on B: the largest c_u the runs allow, carried to B, against B's worker time
    assert out["knee"]["profile"]["at_least"] > 1
    assert out["transfer"]["best_w"] in WORKERS


def test_only_the_network_changed_moves_only_the_network_term(fitted, capsys):
    root, a, model_path = fitted
    b_path = root / "B-net.json"
    b_path.write_text(json.dumps(_derived(a, {"r_net": 10.0, "lat_net": 10.0})))
    out = _predict(model_path, b_path, capsys)
    for row in out["rows"]:
        assert row["profile_comp_s"] == pytest.approx(row["comp_s"], rel=1e-12)
        assert row["profile_mem_s"] == pytest.approx(row["mem_s"], rel=1e-12)
        assert row["profile_net_s"] == pytest.approx(10.0 * row["net_s"], rel=1e-12)


def test_serial_comm_adds_bs_extra_transfer_time_to_the_workers_term(fitted, capsys):
    """A job that pulls, computes and pushes one after another (ps-sgd) pays B's slower network on every batch:
    with --serial-comm the worker's term gains the two transfers of n_w values per batch at B's extra r_net and
    lat_net; the network term is as without it (Hashemi's max, where only that term moves)."""
    root, a, model_path = fitted
    b_path = root / "B-net-serial.json"
    b_path.write_text(json.dumps(_derived(a, {"r_net": 10.0, "lat_net": 10.0})))
    model = json.loads(model_path.read_text())
    wl = model["workload"]
    k = {name: entry["value"] for name, entry in model["constants"].items()}
    runs = model["measurements"]
    s, n_w, b = wl["s"], wl["n_w"], model["knee"]["batch"]
    d, epochs = wl["d"] or runs[0]["d"], runs[0]["epochs"] or 1.0
    serial = _predict(model_path, b_path, capsys, "--serial-comm")
    assert serial["transfer"]["serial_comm"] is True
    per_batch = 2 * s * n_w * 9.0 * k["r_net"] + 2 * 9.0 * k["lat_net"]  # B's extra over A's (10x - 1x)
    send_b = 10.0 * (k["r_net"] * s * n_w + k["lat_net"])
    for row in serial["rows"]:
        batches = epochs * d / row["w"] / b
        assert row["profile_comp_s"] == pytest.approx(row["comp_s"] + batches * per_batch, rel=1e-9)
        # the network term as without --serial-comm: B's sends, and the server's c_u as carried (not re-charged)
        assert row["profile_net_s"] == pytest.approx(batches * (2 * send_b + row["w"] * k["c_u"]), rel=1e-9)
    capsys.readouterr()
    assert main(["model", "predict", str(model_path), "--workers", "1", "--serial-comm"]) == 2
    assert "--serial-comm: only with --profile" in capsys.readouterr().err


def test_the_interval_widens_with_bs_uncertainty(fitted, capsys):
    """B's compute constants known exactly, then to 30 %: the same prediction, a wider interval."""
    root, a, model_path = fitted
    plain, vague = root / "B-plain.json", root / "B-vague.json"
    plain.write_text(json.dumps(_derived(a, FACTORS, cpu_relative=0.0)))
    vague.write_text(json.dumps(_derived(a, FACTORS, cpu_relative=0.3)))
    narrow = _predict(model_path, plain, capsys)["rows"]
    wide = _predict(model_path, vague, capsys)["rows"]
    for n, w in zip(narrow, wide, strict=True):
        assert n["profile_s"] == w["profile_s"]  # the same central prediction
        assert w["profile_high_s"] - w["profile_low_s"] > n["profile_high_s"] - n["profile_low_s"]


def test_the_text_report_says_what_binds_the_knee_and_the_best_count(fitted, capsys):
    root, a, model_path = fitted
    b_path = root / "B.json"
    b_path.write_text(json.dumps(_derived(a, FACTORS)))
    assert main(["model", "predict", str(model_path), "--workers", "1,4,16", "--profile", str(b_path)]) == 0
    text = capsys.readouterr().out
    assert "bound by on B" in text and "knee on B: w* >=" in text and "best worker count on B:" in text
    assert "compute per sample (c_p, t_phase_min) x2:" in text and "network r_net x3" in text


def test_a_model_without_a_profile_or_a_profile_without_compute_is_refused(fitted, tmp_path, capsys):
    root, a, model_path = fitted
    bare = tmp_path / "bare.json"
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4)]
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(bare)]) == 0
    capsys.readouterr()
    assert main(["model", "predict", str(bare), "--workers", "1", "--profile", str(root / "A.json")]) == 2
    assert "fitted without a hardware profile" in capsys.readouterr().err
    no_cpu = copy.deepcopy(a)
    no_cpu["constants"] = {k: v for k, v in a["constants"].items() if not k.startswith(CPU_PREFIXES)}
    (tmp_path / "no-cpu.json").write_text(json.dumps(no_cpu))
    assert main(["model", "predict", str(model_path), "--workers", "1", "--profile",
                 str(tmp_path / "no-cpu.json")]) == 2
    assert "no-cpu.json: the profile has no C_muladd" in capsys.readouterr().err



def _work_per_sample(model: dict, batch: float) -> float:
    """Seconds of feed-forward work per sample on A at the job's working set at ``batch``, from the curves the
    model recorded (model.json's profile): the DNN's multiply-adds and neurons times the curves there."""
    wl, counts, curves = model["workload"], model["work_per_sample"], model["profile"]["curves"]
    working_set = (batch * (wl["n_f"] + 1) + wl["n_w"]) * wl["s"]  # the batch with its labels, and the weights

    def at(name):
        points = np.asarray(curves[name]["points"], dtype=float)
        return float(np.interp(working_set, points[:, 0], points[:, 1]))

    return counts["muladds"] * at("C_muladd") + counts["neurons"] * (at("C_act") + at("C_err"))


def test_batch_sizes_on_b_move_the_per_sample_costs_along_as_curves(fitted, capsys):
    root, a, model_path = fitted
    b_path = root / "B.json"
    b_path.write_text(json.dumps(_derived(a, FACTORS)))
    model = json.loads(model_path.read_text())
    fit_b = model["knee"]["batch"]
    sizes = sorted({16, int(fit_b), 4096})
    def predict(*extra: str) -> dict:  # two worker counts: each call draws the interval at each
        capsys.readouterr()
        assert main(["model", "predict", str(model_path), "--workers", "1,8", "--profile", str(b_path), "--json",
                     *extra]) == 0
        return json.loads(capsys.readouterr().out)

    sweep = predict("--batches", ",".join(map(str, sizes)))["batches"]
    assert sweep["fit_b"] == fit_b
    rows = {(r["b"], r["w"]): r for r in sweep["rows"]}
    assert sorted(rows) == sorted((b, w) for b in sizes for w in (1, 8))
    for b in sizes:  # each batch as --batch alone gives it: the same prediction on B, and c_p moved by A's curves
        alone = predict("--batch", str(b))
        moved = _work_per_sample(model, b) / _work_per_sample(model, fit_b)
        assert alone["batch"]["c_p_factor"] == pytest.approx(moved, rel=1e-9)
        for row in alone["rows"]:  # and its interval, over the same draws
            for key in ("profile_s", "profile_low_s", "profile_high_s"):
                assert rows[(b, row["w"])][key] == pytest.approx(row[key], rel=1e-12)
            assert rows[(b, row["w"])]["c_p_batch_factor"] == alone["batch"]["c_p_factor"]
    fastest = min(r["profile_s"] for r in sweep["rows"])
    near = [(r["w"], r["b"]) for r in sweep["rows"] if r["profile_s"] <= 1.05 * fastest]
    assert (sweep["best"]["w"], sweep["best"]["b"]) == min(near)
    # the text: a row per batch, its working set (the batch with its labels and the weights) and each w's phase
    from ddltrace.units import format_ns

    capsys.readouterr()
    assert main(["model", "predict", str(model_path), "--workers", "1,8", "--profile", str(b_path), "--batches",
                 ",".join(map(str, sizes))]) == 0
    text = capsys.readouterr().out
    wl = model["workload"]
    for b in sizes:
        mib = (b * (wl["n_f"] + 1) + wl["n_w"]) * wl["s"] / 2**20
        cells = "  ".join(f"{format_ns(r['profile_s'] * 1e9):>9} [{format_ns(r['profile_low_s'] * 1e9)}, "
                          f"{format_ns(r['profile_high_s'] * 1e9)}]".rjust(28) for r in (rows[(b, w)] for w in (1, 8)))
        assert f"{b:>7}  {mib:>8.3g} MiB  {rows[(b, 1)]['c_p_batch_factor']:>6.3g}  {cells}" in text, text
    best = sweep["best"]
    assert (f"best on B over the batches and workers asked: w = {best['w']} at batch {best['b']}, "
            f"{format_ns(best['profile_s'] * 1e9)}") in text
    capsys.readouterr()
    assert main(["model", "predict", str(model_path), "--workers", "1", "--batches", "32,64"]) == 2
    assert "--batches: only with --profile" in capsys.readouterr().err
    # a model fitted with a profile that has no compute section: the per-sample costs stay as fitted at any batch
    no_cpu = copy.deepcopy(a)
    no_cpu["constants"] = {k: v for k, v in a["constants"].items() if not k.startswith(CPU_PREFIXES)}
    no_cpu["curves"] = {k: v for k, v in a["curves"].items() if not k.startswith(CPU_PREFIXES)}
    (root / "A-no-cpu.json").write_text(json.dumps(no_cpu))
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4)]
    assert main(["model", "fit", *stores, "--profile", str(root / "A-no-cpu.json"), "--out",
                 str(root / "model-no-cpu.json")]) == 0
    capsys.readouterr()
    assert main(["model", "predict", str(root / "model-no-cpu.json"), "--workers", "1", "--batch", "16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"]["c_p_factor"] == 1.0


# -- optimize --profile B.json --baseline A.json ----------------------------------------------------------------

def _slower(a: dict, k: float, cpu_relative: float) -> dict:
    """A's profile with every constant of Yan's model k times slower: compute and latency times k, bandwidth
    over k (C_interf, a ratio, kept); the compute uncertainties ``cpu_relative`` of their values."""
    b = _derived(a, {"cpu": k, "lat_net": k, "r_net": k, "C_ncost": k}, cpu_relative=cpu_relative)
    b["constants"]["C_nbw"]["value"] /= k
    b["constants"]["C_nbw"]["uncertainty"] /= k
    return b


def _optimize(b_path: Path, a_path: Path, capsys) -> dict:
    capsys.readouterr()
    assert main(["optimize", "--dnn", "mnist-adam", "--profile", str(b_path), "--baseline", str(a_path),
                 "--machines", "8", "--samples", "60000", "--top", "3", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_optimize_on_b_beside_a(fitted, capsys):
    root, a, _ = fitted
    a_path, b_path, vague = root / "A.json", root / "B-yan.json", root / "B-yan-vague.json"
    b_path.write_text(json.dumps(_slower(a, 2.0, cpu_relative=0.0)))
    uncertain = _slower(a, 2.0, cpu_relative=0.3)
    for entry in uncertain["constants"].values():  # every term uncertain, whichever binds with this A's constants
        if isinstance(entry, dict) and isinstance(entry.get("value"), int | float):
            entry["uncertainty"] = max(entry.get("uncertainty") or 0.0, 0.3 * abs(entry["value"]))
    vague.write_text(json.dumps(uncertain))
    out = _optimize(b_path, a_path, capsys)
    # every term of T_epoch is twice as slow on B: the same configurations and layouts win, each in twice the time
    assert out["baseline"]["best"] == out["ranked"][0]["config"]
    assert out["baseline"]["best_t_epoch_s"] == pytest.approx(out["ranked"][0]["t_epoch_s"] / 2, rel=1e-9)
    for row in out["ranked"][:3]:
        assert row["t_epoch_s"] == pytest.approx(2.0 * row["baseline_t_epoch_s"], rel=1e-9)
        assert row["t_epoch_low_s"] <= row["t_epoch_s"] <= row["t_epoch_high_s"]
    assert sum(row["fastest_share"] for row in out["ranked"][:3]) == pytest.approx(1.0)
    wide = _optimize(vague, a_path, capsys)
    for n, w in zip(out["ranked"][:3], wide["ranked"][:3], strict=True):
        assert n["t_epoch_s"] == w["t_epoch_s"]
        assert w["t_epoch_high_s"] - w["t_epoch_low_s"] > n["t_epoch_high_s"] - n["t_epoch_low_s"]


def test_hand_written_profiles_with_curves_as_pairs():
    from ddltrace.models import hashemi, transfer

    def profile(k):
        return {"C_muladd": [[1e4, 1e-10 * k], [1e8, 5e-10 * k]], "C_act": 1e-9 * k, "C_err": 1e-9 * k,
                "r_net": {"value": 1e-9 * k, "uncertainty": 1e-10}, "lat_net": 5e-5}

    wl = hashemi.Workload(d=16384, b=64, n_f=2, n_w=40000, s=8)
    a, b = transfer.profile_record(profile(1), "A", 8), transfer.profile_record(profile(3), "B", 8)
    assert a["curves"]["C_muladd"]["points"] == [[1e4, 1e-10, 0.0], [1e8, 5e-10, 0.0]]
    k = hashemi.Constants(c_p=1e-3, c_u=1e-4, r_net=1e-9, lat_net=5e-5)
    moved, factors, notes = transfer.transfer(k, wl, {"muladds": 120000, "neurons": 10002}, a, b)
    assert factors["c_p"] == pytest.approx(3.0) and factors["c_u"] == pytest.approx(3.0)
    assert moved.r_net == pytest.approx(3e-9) and moved.lat_net == 5e-5
    # every constant carried; the one note: neither profile measured the CPU the network's packets cost
    assert notes == ["A and B: no net_cpu_per_byte (calibrate's network section measures it): the CPU the "
                     "network's packets cost the ranks is left out"]
    with pytest.raises(DdltraceError, match="A: constant C_act"):
        transfer.profile_record({"C_act": -1}, "A", 8)


# -- plan ps|batch --profile B.json ----------------------------------------------------------------------------

def test_plan_ps_takes_the_bandwidth_of_a_real_profile(fitted, capsys):
    import math

    root, a, _ = fitted
    capsys.readouterr()
    assert main(["plan", "ps", "--param-bytes", "250MB", "--workers", "8", "--compute-time", "50ms",
                 "--profile", str(root / "A.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    c_nbw = a["constants"]["C_nbw"]
    assert c_nbw["unit"] == "bit/s"
    assert out["bandwidth_bytes_per_s"] == pytest.approx(c_nbw["value"] / 8)
    assert out["servers"] == math.ceil(2 * 250e6 * 8 / (c_nbw["value"] / 8 * 0.05))
    assert main(["plan", "ps", "--param-bytes", "250MB", "--workers", "8", "--compute-time", "50ms",
                 "--profile", str(root / "A.json"), "--bandwidth", "1GB/s"]) == 2
    assert "exactly one of --bandwidth or --profile" in capsys.readouterr().err


def test_plan_batch_takes_the_gpu_memory_of_a_profile(tmp_path, capsys):
    write_convs_dnn(tmp_path)
    profile = {"format": "ddltrace-hardware-profile", "constants": {},
               "machine": {"gpus": [{"name": "B's GPU", "memory_bytes": 100 * 2**20}]}}
    (tmp_path / "b.json").write_text(json.dumps(profile))
    args = ["plan", "batch", "--dnn", str(tmp_path / "convs.json"), "--batches", "32,64", "--json"]
    capsys.readouterr()
    assert main([*args, "--profile", str(tmp_path / "b.json")]) == 0
    from_profile = json.loads(capsys.readouterr().out)
    assert main([*args, "--gpu-memory", "100MiB"]) == 0
    assert from_profile == json.loads(capsys.readouterr().out) and from_profile["best_batch"] == 32
    (tmp_path / "cpu.json").write_text(json.dumps({**profile, "machine": {"gpus": []}}))
    assert main([*args, "--profile", str(tmp_path / "cpu.json")]) == 2
    assert "cpu.json: the profile describes no GPU memory" in capsys.readouterr().err
