"""The model, optimize and plan verbs: real files, the CLI entry point and one real subprocess."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dnn_files import write_convs_dnn
from test_fit_hashemi import EPOCHS, N_F, N_W, D, write_run

from ddltrace.cli import main
from ddltrace.models import hashemi

TRUE = hashemi.Constants(c_p=2e-4, c_b=5e-3, c_u=2e-3, r_m=1e-10, w_m=1e-10, r_net=1e-9)
VENV_DDLTRACE = Path(sys.executable).with_name("ddltrace")


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    root = tmp_path_factory.mktemp("series")
    for b, workers in ((64, (1, 2, 4, 16)), (256, (1, 2))):
        wl = hashemi.Workload(d=D, b=b, n_f=N_F, n_w=N_W, epochs=EPOCHS)
        for w in workers:
            write_run(root / f"run-b{b}-w{w}", w, b, EPOCHS * hashemi.t_phase(w, wl, TRUE), init_s=0.01 * w)
    profile = {"format": "ddltrace-hardware-profile", "machine": {"physical_cores": 4},
               "constants": {"r_m": {"value": 1e-10, "unit": "s/B"}, "w_m": {"value": 1e-10, "unit": "s/B"},
                             "r_net": {"value": 1e-9, "unit": "s/B"}, "C_nbw": {"value": 8e9, "unit": "bit/s"},
                             "lat_net": {"value": 5e-5, "unit": "s"},
                             "C_muladd": {"value": 1e-10, "unit": "s/muladd", "alias_of": "C_muladd_gemm_f32"},
                             "C_act": {"value": 1e-9, "unit": "s/neuron"}, "C_err": {"value": 1e-9, "unit": "s"}},
               "curves": {"C_muladd_gemm_f32": {"points": [{"x": 1e4, "y": 1e-10}, {"x": 1e8, "y": 5e-10}]},
                          "C_interf_cache": {"points": [{"x": 2, "y": 1.1}, {"x": 4, "y": 1.3}]}}}
    (root / "profile.json").write_text(json.dumps(profile))
    return root


def test_model_fit_and_predict(series, tmp_path, capsys):
    stores = sorted(str(p) for p in series.glob("run-*"))
    out = tmp_path / "model.json"
    rc = main(["model", "fit", *stores, "--profile", str(series / "profile.json"), "--dnn", "mlp-2-10k-2",
               "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "c_u" in text and "knee: w* = 8." in text and "leave-one-out" in text and "s/update" in text
    model = json.loads(out.read_text())
    # the profile's latency (absent from the synthetic runs) is absorbed by c_u: within 1 %
    assert model["constants"]["c_u"]["value"] == pytest.approx(2e-3, rel=0.01)
    assert model["knee"]["w"] == pytest.approx(8.6, rel=0.01) and model["knee"]["cause"] == "server"
    assert model["constants"]["r_net"]["source"] == "profile"
    assert model["job"] == "train_mlp.py"
    rc = main(["model", "predict", str(out), "--workers", "1,4,16,64", "--what-if", "c_u=0.5x",
               "--plot", str(tmp_path / "p.png"), "--json"])
    predicted = json.loads(capsys.readouterr().out)
    rows = predicted["rows"]
    assert predicted["knee"]["what_if"]["w"] == pytest.approx(2 * predicted["knee"]["model"]["w"], rel=0.1)
    assert rc == 0 and (tmp_path / "p.png").stat().st_size > 1000
    assert [r["w"] for r in rows] == [1, 4, 16, 64]
    assert rows[2]["measured_s"] == pytest.approx(rows[2]["predicted_s"], rel=0.02)
    assert rows[3]["bound_by"] == "server/network" and rows[3]["what_if_s"] == pytest.approx(
        rows[3]["predicted_s"] / 2, rel=0.05)
    assert rows[1]["measured_s"] is not None and rows[3]["measured_s"] is None


def test_model_bad_inputs(series, tmp_path, capsys):
    one = str(series / "run-b64-w1")
    assert main(["model", "fit", one]) == 2
    assert "1 store given" in capsys.readouterr().err
    other = write_run(tmp_path / "other", 2, 64, 5.0, 0.1, job="other.py")
    assert main(["model", "fit", one, str(other)]) == 2
    assert "different jobs" in capsys.readouterr().err
    assert main(["model", "fit", one, str(tmp_path / "missing")]) == 2
    assert "no such trace store" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert main(["model", "predict", str(tmp_path / "bad.json"), "--workers", "1,2"]) == 2
    assert "not a fitted ASGD model" in capsys.readouterr().err
    assert main(["model", "fit", one, str(series / "run-b64-w2"), "--fix", "c_u=fast"]) == 2
    assert "--fix" in capsys.readouterr().err
    # a negative constant was fitted around and written to model.json, which model predict then refused
    assert main(["model", "fit", one, str(series / "run-b64-w2"), str(series / "run-b64-w4"), "--fix", "c_u=-1",
                 "--out", str(tmp_path / "m.json")]) == 2
    assert capsys.readouterr().err.strip() == "ddltrace: error: --fix 'c_u=-1': c_u must be >= 0"
    assert not (tmp_path / "m.json").exists()


def test_optimize_command(series, capsys):
    rc = main(["optimize", "--dnn", "mnist-adam", "--profile", str(series / "profile.json"), "--machines", "6",
               "--samples", "60000", "--max-workers", "2", "--threads", "1,4", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0
    times = [r["t_epoch_s"] for r in result["ranked"]]
    assert times == sorted(times) and len(times) > 4
    assert all(r["N_ps"] + r["N_mr"] * r["N_wr"] <= 6 for r in result["ranked"])
    assert len(result["ranked"][0]["layers"]) == 5
    assert main(["optimize", "--dnn", "mnist-adam", "--profile", str(series / "profile.json"), "--machines", "6",
                 "--samples", "7.1e6", "--max-workers", "2", "--threads", "1"]) == 0
    assert "configurations, 7,100,000 samples per epoch" in capsys.readouterr().out  # (it read 7.1e+06)
    assert main(["optimize", "--dnn", "mnist-adam", "--profile", str(series / "profile.json"), "--machines", "6",
                 "--config", "4/4/4"]) == 2
    assert "does not fit 6 machines" in capsys.readouterr().err
    assert main(["optimize", "--dnn", "nonet", "--profile", str(series / "profile.json"), "--machines", "6"]) == 2
    assert "no bundled DNN" in capsys.readouterr().err
    # what if the network were 10 times faster: every configuration's weight reads shrink ten-fold
    base = {r["config"] + str(r["H"]): r for r in result["ranked"]}
    assert main(["optimize", "--dnn", "mnist-adam", "--profile", str(series / "profile.json"), "--machines", "6",
                 "--samples", "60000", "--max-workers", "2", "--threads", "1,4", "--what-if", "C_nbw=10x",
                 "--what-if", "C_ncost=0", "--json"]) == 0
    faster = json.loads(capsys.readouterr().out)["ranked"]
    for row in faster:
        before = base[row["config"] + str(row["H"])]
        assert row["t_epoch_s"] < before["t_epoch_s"]
    assert main(["optimize", "--dnn", "mnist-adam", "--profile", str(series / "profile.json"), "--machines", "6",
                 "--what-if", "warp=2x"]) == 2
    assert "'warp' cannot change" in capsys.readouterr().err


def test_plan_commands(capsys):
    assert main(["plan", "gpus", "--overhead-ratio", "0.0833333", "--gpus", "4", "--speedup", "3"]) == 0
    text = capsys.readouterr().out
    assert "80.0 %" in text and "3.20x" in text
    assert main(["plan", "gpus", "--efficiency", "0.8", "--gpus", "4"]) == 0
    assert "R_O <= 8.3 %" in capsys.readouterr().out
    assert main(["plan", "ps", "--param-bytes", "250MB", "--workers", "8", "--bandwidth", "10Gbit/s",
                 "--compute-time", "500ms", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["servers"] == 7
    assert main(["plan", "ps", "--param-bytes", "250 parsecs", "--workers", "8", "--bandwidth", "10Gbit/s",
                 "--compute-time", "1s"]) == 2
    assert "unknown size unit" in capsys.readouterr().err
    assert main(["plan", "gpus", "--overhead-ratio", "0.2", "--speedup", "9"]) == 2
    assert "out of reach" in capsys.readouterr().err
    # --speedup alone was refused by a line saying to give --speedup; with --efficiency it was dropped unsaid
    for extra in ([], ["--efficiency", "0.8"]):
        assert main(["plan", "gpus", "--speedup", "3", *extra]) == 2
        assert capsys.readouterr().err.strip() == ("ddltrace: error: plan gpus: --speedup needs --overhead-ratio R_O "
                                                   "(the GPUs a speedup takes depend on it)")
    assert main(["plan", "placement", "--dnn", "vgg11", "--batch", "32", "--workers", "8"]) == 0
    assert "S = -3.62" in capsys.readouterr().out
    assert main(["plan", "batch", "--dnn", "vgg11", "--gpu-memory", "12GiB", "--batches", "32"]) == 2
    assert "no layer has an algorithm table" in capsys.readouterr().err


def test_plan_batch_subprocess(tmp_path):
    write_convs_dnn(tmp_path)
    done = subprocess.run([str(VENV_DDLTRACE), "plan", "batch", "--dnn", str(tmp_path / "convs.json"),
                           "--gpu-memory", "100MiB", "--batches", "32,64", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # 64 x 2 MB of FFT workspace does not fit beside the activations: gemm at 64, fft at 32
    by_batch = {c["batch"]: c for c in result["choices"]}
    assert by_batch[32]["algorithms"] == {"c1": "fft"} and by_batch[64]["algorithms"] == {"c1": "gemm"}
    assert result["best_batch"] == 32
    assert main(["plan", "batch", "--dnn", str(tmp_path / "nope.json"), "--gpu-memory", "1GiB", "--batches", "32"]) == 2


SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"


@pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(), reason="the committed sample traces are absent")
def test_model_fit_on_the_committed_scaling_series(tmp_path, capsys):
    """Real traced runs of the shipped job at w = 1, 2, 4, 8; the server (rank 0) is found from the traffic."""
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4, 8)]
    out = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fitted to 4 runs" in text and "leave-one-out" in text and "knee: w* =" in text
    model = json.loads(out.read_text())
    truth = json.loads((SAMPLES / "par-w1" / "ground_truth.json").read_text())["compute_per_sample_s"]["measured"]
    c_p = model["constants"]["c_p"]
    # c_p carries the per-batch overhead of the one batch size: at least the job's own compute, not much more
    assert truth <= c_p["value"] <= 1.5 * truth and c_p["ci"][0] < c_p["value"] < c_p["ci"][1]
    assert [m["w"] for m in model["measurements"]] == [1.0, 2.0, 4.0, 8.0]
    assert 2 < model["knee"]["w"] < 16 and len(model["leave_one_out"]) == 4
    # the model's workload is the runs' (2 epochs of 16,384 samples, as the job's ground truth says), not the fit's
    # defaults for runs lacking them (it read d null, 1 epoch)
    config = json.loads((SAMPLES / "par-w1" / "ground_truth.json").read_text())["config"]
    assert (model["workload"]["d"], model["workload"]["epochs"]) == (config["samples"], config["epochs"]) == (16384, 2)
    # the knee is an estimate too: its interval over the fitted constants (drawn with their covariance) brackets it,
    # and is narrower than the knees at the corners of c_p's and c_u's own intervals (they move together)
    from dataclasses import replace

    from ddltrace.models import hashemi

    low, high = model["knee"]["ci"]
    assert low < model["knee"]["w"] < high
    assert f"w* = {model['knee']['w']:.3g} workers [95 %: {low:.3g} to {high:.3g}" in text
    fit = replace(hashemi.Constants(), **{n: model["constants"][n]["value"] for n in ("c_p", "c_u", "r_d")})
    c_p, c_u = model["constants"]["c_p"]["ci"], model["constants"]["c_u"]["ci"]
    run = model["measurements"][0]  # (every run: b = 64, d = 16,384 samples, 2 epochs)
    wl = hashemi.Workload(d=run["d"], b=model["knee"]["batch"], epochs=run["epochs"],
                          **{k: model["workload"][k] for k in ("n_f", "n_w", "s")})
    assert hashemi.knee(wl, fit)[0] == pytest.approx(model["knee"]["w"])
    corners = [hashemi.knee(wl, replace(fit, c_p=p, c_u=u))[0] for p in c_p for u in c_u]
    assert min(corners) < low and high < max(corners)


@pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(), reason="the committed sample traces are absent")
def test_without_a_dnn_the_fit_takes_the_runs_own_n_w(tmp_path, capsys):
    """The job records its n_w (40,000: the 2 - 10K - 2 network) in the manifest: a fit given no --dnn nor --n-w
    keeps it, so a network what-if moves the prediction (QA: n_w was 0 and r_net=1e-8 changed nothing)."""
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4, 8)]
    out = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--out", str(out)]) == 0
    config = json.loads((SAMPLES / "par-w1" / "ground_truth.json").read_text())["config"]
    assert json.loads(out.read_text())["workload"]["n_w"] == config["n_w"] == 40000
    capsys.readouterr()
    assert main(["model", "predict", str(out), "--workers", "4", "--what-if", "r_net=1e-8", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["what_if_s"] > 1.1 * rows[0]["predicted_s"]


@pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(), reason="the committed sample traces are absent")
def test_a_store_given_twice_is_refused_not_fitted_twice(tmp_path, capsys):
    """The same run named twice (another spelling of its path too) is one line and exit 2: fitted twice it added a
    degree of freedom and narrowed every interval without a word."""
    one = SAMPLES / "par-w1" / "store"
    assert main(["model", "fit", str(one), f"{one}/", str(SAMPLES / "par-w2" / "store"), "--dnn", "mlp-2-10k-2",
                 "--out", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "given twice" in err[0] and not (tmp_path / "m.json").exists()


@pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(), reason="the committed sample traces are absent")
def test_server_cost_from_the_trace_names_the_divergent_run(capsys):
    from ddltrace.analyses.fit_hashemi import measurements_from_store

    for w in (1, 8):
        measured = measurements_from_store(SAMPLES / f"par-w{w}" / "store")["server_busy_s"]
        truth = json.loads((SAMPLES / f"par-w{w}" / "ground_truth.json").read_text())["server"]["busy_ns"] / 1e9
        assert measured == pytest.approx(truth, rel=0.15)
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4, 8)]
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--c-u-from-trace", "--json"]) == 0
    model = json.loads(capsys.readouterr().out)
    assert model["constants"]["c_u"]["source"] == "measured from the server's trace"
    # the server is not what slows w = 8 (9 ranks on 2 cores are): the run diverges from the model
    flagged = [d["w"] for d in model["divergence"] if d["flagged"]]
    assert 8.0 in flagged and model["knee"]["w"] > 8


def test_model_fit_from_csv(tmp_path, capsys):
    rows = ["w,b,phase_s"] + [f"{w},{b},{EPOCHS * hashemi.t_phase(w, hashemi.Workload(d=D, b=b), TRUE):.6f}"
                              for b in (64, 256) for w in (1, 2, 4, 16, 32)]
    (tmp_path / "runs.csv").write_text("\n".join(rows) + "\n")
    assert main(["model", "fit", "--csv", str(tmp_path / "runs.csv"), "--samples", str(D), "--epochs", str(EPOCHS),
                 "--json"]) == 0
    model = json.loads(capsys.readouterr().out)
    for name in ("c_p", "c_b", "c_u"):
        assert model["constants"][name]["value"] == pytest.approx(getattr(TRUE, name), rel=0.02)
    (tmp_path / "bad.csv").write_text("workers,time\n1,2\n")
    assert main(["model", "fit", "--csv", str(tmp_path / "bad.csv"), "--samples", "10"]) == 2
    assert "bad.csv: missing column(s) w, b, phase_s" in capsys.readouterr().err
    # a run out of range is named by the file and its line (it read 'measurements: run(s) [0]'), and a worker count
    # must be whole (w = 1.5 was fitted)
    for w, b, phase in (("-1", "64", "8.7"), ("0", "64", "8.7"), ("1.5", "64", "8.7"), ("2", "0", "4"),
                        ("2", "64", "abc")):
        (tmp_path / "one.csv").write_text(f"w,b,phase_s\n4,64,2.02\n{w},{b},{phase}\n8,64,2.3\n")
        assert main(["model", "fit", "--csv", str(tmp_path / "one.csv"), "--samples", str(D)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ddltrace: error: {tmp_path / 'one.csv'}: line(s) [3] need w a whole number of workers >= 1, "
                       "b > 0 and phase_s > 0 s, and every number at most 1e+15"], (w, b, phase)


QUOTA = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd-quota"


def slow_network_b(tmp_path) -> tuple[Path, Path]:
    """(model, B's profile): a model fitted to the committed A runs of the quota sample, and A's profile with r_net
    x200 (a B whose network is 200 times slower: the knee on B about 6)."""
    model = tmp_path / "model.json"
    stores = [str(QUOTA / f"A-compute-w{w}" / "store") for w in (1, 2, 4)]
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(QUOTA / "A.json"),
                 "--servers", "1", "--out", str(model)]) == 0
    b = json.loads((QUOTA / "A.json").read_text())
    b["constants"]["r_net"]["value"] *= 200
    b["constants"]["r_net"]["uncertainty"] *= 200
    (tmp_path / "B.json").write_text(json.dumps(b))
    return model, tmp_path / "B.json"


def test_a_best_count_past_the_knee_on_b_says_the_phase_still_falls(tmp_path, capsys):
    """A model fitted to the committed A runs, carried to a B whose network is 200 times slower (A's profile with
    r_net x200): the network term shrinks as 1/w, so the phase keeps falling past the knee on B and the best of
    1..16 workers is 16. The report says so, with the phases of its own rows (it printed knee 6, best 16 and no
    word why)."""
    model, b = slow_network_b(tmp_path)
    predict = ["model", "predict", str(model), "--workers", "1,2,4,8,16", "--profile", str(b)]
    capsys.readouterr()
    assert main([*predict, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    knee, best = out["knee"]["profile"]["w"], out["transfer"]["best_w"]
    assert best > knee
    phase = {row["w"]: row["profile_s"] for row in out["rows"]}
    first = min(w for w in phase if w > knee)
    assert out["transfer"]["best_past_knee"] == {"knee_w": knee, "from_w": first, "from_s": phase[first],
                                                 "best_w": best, "best_s": phase[best]}
    assert phase[best] < phase[first]
    assert main(predict) == 0
    text = capsys.readouterr().out
    assert f"past the knee on B (w* = {knee:.3g})" in text and f"at w = {first}" in text and f"at w = {best}" in text


def test_optimize_refuses_a_what_if_without_bandwidth_or_with_no_whole_cores(series, capsys):
    """--what-if C_nbw=0 (or 0x) divided every weight read by zero (a ZeroDivisionError traceback, exit 1);
    cores=0 and cores=2.5 ran as 0 and 2 cores unsaid. Each is one line naming the what-if, exit 2."""
    profile = str(series / "profile.json")
    for change, said in (("C_nbw=0", "C_nbw must stay above 0"), ("C_nbw=0x", "C_nbw must stay above 0"),
                         ("cores=0", "whole number >= 1"), ("cores=2.5", "whole number >= 1")):
        assert main(["optimize", "--dnn", "mnist-adam", "--profile", profile, "--machines", "6", "--max-workers",
                     "2", "--what-if", change]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--what-if {change}" in err[0] and said in err[0]
    assert main(["optimize", "--dnn", "mnist-adam", "--profile", profile, "--machines", "6", "--max-workers", "2",
                 "--what-if", "cores=2", "--json"]) == 0
    assert {r["H"] for r in json.loads(capsys.readouterr().out)["ranked"]} <= {1, 2}


def test_a_fitted_model_given_as_a_hardware_profile_is_named_as_such(series, tmp_path, capsys, monkeypatch):
    """model.json has "constants" too (c_p, r_m = 0, ...): given where a hardware profile goes it was read as one and
    refused for 'constant r_m = 0.0: must be a finite number > 0' (predict --profile) or 'lacks C_muladd, C_nbw'
    (optimize), which says nothing of the mix-up. Each command now names the file as a fitted model, exit 2.
    Progress lines every 0 s: optimize read --baseline after its search, whose progress lines came first on a busy
    machine (a flaky failure of this test under 8 workers); now before it."""
    from ddltrace.commands import optimize

    monkeypatch.setattr(optimize, "PROGRESS_EVERY_S", 0.0)
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4)]
    model = tmp_path / "model.json"
    profile = str(series / "profile.json")
    assert main(["model", "fit", *stores, "--profile", profile, "--dnn", "mlp-2-10k-2", "--out", str(model)]) == 0
    capsys.readouterr()
    for args in (["model", "fit", *stores, "--profile", str(model)],
                 ["model", "predict", str(model), "--workers", "1,2", "--profile", str(model)],
                 ["optimize", "--dnn", "mnist-adam", "--profile", str(model), "--machines", "6"],
                 ["optimize", "--dnn", "mnist-adam", "--profile", profile, "--baseline", str(model), "--machines", "6"],
                 ["plan", "ps", "--dnn", "mnist-adam", "--workers", "4", "--compute-time", "1s", "--profile",
                  str(model)]):
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ddltrace: error: {model}: a fitted model ('ddltrace model fit --out'), not a hardware "
                       "profile (written by 'ddltrace calibrate')"], args


def test_a_profile_lacking_sections_is_said_in_the_fit_and_an_empty_one_refused(series, tmp_path, capsys):
    """A profile from 'calibrate --only disk' (r_d alone, as sample_traces/ps-sgd-disk/A-disk.json) held r_m, w_m,
    r_net and lat_net at 0 without a word: the fit's table does not list a constant at 0, so the model's memory and
    network terms were silently zero. The fit now says which sections the profile lacks; a profile holding nothing
    the fit holds or keeps ({}) is refused, exit 2, where it was fitted as if absent."""
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4)]
    disk = tmp_path / "A-disk.json"
    disk.write_text(json.dumps({"format": "ddltrace-hardware-profile",
                                "constants": {"r_d": {"value": 1.6e-10, "unit": "s/B", "uncertainty": 1e-12}}}))
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(disk), "--json"]) == 0
    model = json.loads(capsys.readouterr().out)
    said = (f"{disk} has no r_m, w_m (calibrate's mem section), r_net, lat_net (calibrate's net section): held at 0, "
            "so the model's memory and network terms are zero")
    assert said in model["notes"] and all(model["constants"][k]["value"] == 0 for k in ("r_m", "w_m", "r_net"))
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(disk)]) == 0
    assert f"  - {said}" in capsys.readouterr().out
    net_only = tmp_path / "net.json"
    net_only.write_text(json.dumps({"constants": {"r_net": {"value": 1e-9}, "lat_net": {"value": 5e-5}}}))
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(net_only), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert (f"{net_only} has no r_m, w_m (calibrate's mem section): held at 0, so the model's memory term is zero"
            in notes)
    assert main(["model", "fit", *stores, "--profile", str(series / "profile.json"), "--json"]) == 0
    assert not [n for n in json.loads(capsys.readouterr().out)["notes"] if "held at 0, so" in n]
    (tmp_path / "empty.json").write_text("{}")
    assert main(["model", "fit", *stores, "--profile", str(tmp_path / "empty.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "empty.json: the hardware profile holds none of what the fit holds" in err[0]


def test_a_what_if_factor_on_a_constant_at_0_is_refused_not_printed_as_a_change(series, tmp_path, capsys):
    """A model fitted without a profile holds r_net at 0 (its default): docs/MODELS.md's 'model predict model.json
    --what-if r_net=0.1x' printed a what-if column equal to the prediction, and a knee 'with r_net=0.1x', as if a
    ten times faster network changed nothing. A factor of a constant at 0 is now one line naming it, exit 2; a value
    still sets it."""
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    bare, with_profile = tmp_path / "bare.json", tmp_path / "a.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(bare)]) == 0
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(series / "profile.json"),
                 "--out", str(with_profile)]) == 0
    capsys.readouterr()
    assert main(["model", "predict", str(bare), "--workers", "1,4", "--what-if", "r_net=0.1x"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"ddltrace: error: --what-if r_net=0.1x: r_net is 0 in {bare} (default (0)), so a factor changes nothing; "
        "give a value instead (r_net=VALUE, in s/B)"]
    assert main(["model", "predict", str(bare), "--workers", "1,64", "--what-if", "r_net=1e-9", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[1]["what_if_s"] > rows[1]["predicted_s"]
    assert main(["model", "predict", str(with_profile), "--workers", "1,64", "--what-if", "r_net=0.1x", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[1]["what_if_s"] < rows[1]["predicted_s"]


@pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(), reason="the committed sample traces are absent")
def test_predict_gives_the_formula_s_phase_with_its_interval_and_the_knee_s(tmp_path, capsys):
    """model predict printed A's predicted phase, its what-if and the knee without an interval or a word on why:
    now each has the one drawn from the fit's covariance, and the prediction is MODELS.md section 1's formula on the
    model file's own constants (the committed par series: 2 epochs of 16,384 samples at batch 64, r_net 0)."""
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4, 8)]
    out = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(out)]) == 0
    capsys.readouterr()
    model = json.loads(out.read_text())
    assert main(["model", "predict", str(out), "--workers", "1,16", "--what-if", "c_u=2e-5", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    one, sixteen = result["rows"]
    run = model["measurements"][0]
    d, epochs, b = run["d"], run["epochs"], run["b"]
    c_p, c_u = (model["constants"][n] for n in ("c_p", "c_u"))
    # T_phase = E max(T_net, T_comp): T_comp(d / w) = c_p d / w (c_b 0, no memory term), T_net = (d / b) c_u (r_net 0)
    assert one["predicted_s"] == pytest.approx(epochs * c_p["value"] * d, rel=1e-9) and one["bound_by"] == "worker"
    assert sixteen["predicted_s"] == pytest.approx(epochs * d / b * c_u["value"], rel=1e-9)
    assert sixteen["what_if_s"] == pytest.approx(epochs * c_p["value"] * d / 16, rel=1e-9)
    # at w = 1 (and w = 16 with the what-if) the phase is c_p's alone: its interval is c_p's own, drawn
    for row, key, w in ((one, "predicted", 1), (sixteen, "what_if", 16)):
        assert row[f"{key}_low_s"] < row[f"{key}_s"] < row[f"{key}_high_s"]
        assert row[f"{key}_low_s"] == pytest.approx(epochs * c_p["ci"][0] * d / w, rel=0.05)
        assert row[f"{key}_high_s"] == pytest.approx(epochs * c_p["ci"][1] * d / w, rel=0.05)
    assert sixteen["predicted_low_s"] == pytest.approx(epochs * d / b * c_u["ci"][0], rel=0.05)
    assert result["interval_on_a"]["draws"] == 2000 and "predicted" in result["definitions"]
    knee = result["knee"]["model"]["interval"]
    assert [knee["low_w"], knee["high_w"]] == model["knee"]["ci"]  # the fit's own draws
    what_if_knee = result["knee"]["what_if"]["interval"]
    assert what_if_knee["low_w"] < result["knee"]["what_if"]["w"] < what_if_knee["high_w"]
    assert main(["model", "predict", str(out), "--workers", "1,16"]) == 0
    text = capsys.readouterr().out
    low, high = model["knee"]["ci"]
    assert "95 % interval" in text.splitlines()[1] and f"  95 % interval: {low:.3g} to {high:.3g} workers" in text
    assert "  predicted: the model's computation phase at w workers, all epochs, seconds" in text
    # two runs for c_p and c_u: no degrees of freedom, no covariance: the table says why it has no interval
    two = tmp_path / "two.json"
    assert main(["model", "fit", *stores[:2], "--dnn", "mlp-2-10k-2", "--out", str(two)]) == 0
    capsys.readouterr()
    assert main(["model", "predict", str(two), "--workers", "1,2"]) == 0
    assert f"no interval: {two} has no covariance of its fitted constants (no degrees of freedom left" in (
        capsys.readouterr().out)


def test_plan_ps_from_a_profile_gives_the_servers_interval_from_the_bandwidth_s_uncertainty(capsys):
    """plan ps --profile B.json took B's calibrated C_nbw (a measurement with its uncertainty: 31 % in the committed
    quota B) and printed N_ps bare, as if exact. N_ps = 2 S_p N_w / (B T_C) is 1 / B: its interval is B's (the
    uncertainty one standard deviation of the log, as every model reads a profile); with --bandwidth given it says
    why it has none. The numbers are the file's own, computed here from B.json."""
    from statistics import NormalDist

    profile = QUOTA / "B.json"
    entry = json.loads(profile.read_text())["constants"]["C_nbw"]
    bandwidth, relative = entry["value"] / 8, entry["uncertainty"] / entry["value"]  # bit/s -> B/s
    need = 2 * 250e6 * 8 / (bandwidth * 0.5)
    spread = math.exp(NormalDist().inv_cdf(0.975) * relative)
    args = ["plan", "ps", "--param-bytes", "250MB", "--workers", "8", "--compute-time", "500ms"]
    assert main([*args, "--profile", str(profile), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bandwidth_bytes_per_s"] == pytest.approx(bandwidth) and out["min_servers"] == pytest.approx(need)
    assert out["interval"]["min_servers"] == pytest.approx([need / spread, need * spread])
    assert out["interval"]["servers"] == [math.ceil(need / spread), math.ceil(need * spread)]
    assert main([*args, "--profile", str(profile)]) == 0
    text = capsys.readouterr().out
    assert f"N_ps >= {need:.2f} [95 %: {need / spread:.2f} to {need * spread:.2f} over the bandwidth's" in text
    assert f"({profile}'s C_nbw)" in text
    assert main([*args, "--bandwidth", "10Gbit/s", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["interval"] is None and "given" in out["why_no_interval"] and out["servers"] == 7


@pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(), reason="the committed sample traces are absent")
def test_a_series_mixing_job_configurations_is_refused_naming_the_setting(tmp_path, capsys):
    """The job was told by its program's name alone, so par-w1 and par-w2 (async) fitted together with hardsync-w4
    (4 gradients per update), straggler-w4 (one worker 4x slower) or server-saturated-w4 (2 ms more per update) as
    one scaling series, exit 0. Their recorded configurations say they are other jobs: refused, one line naming the
    setting and each store's value, exit 2."""
    series = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2)]
    for other, key, values in (("hardsync-w4", "sync", ("async", "hardsync")), ("straggler-w4", "straggler",
                                                                                   ("none", "2")),
                               ("server-saturated-w4", "server_cost", ("0.0", "0.002"))):
        store = str(SAMPLES / other / "store")
        assert main(["model", "fit", *series, store, "--dnn", "mlp-2-10k-2", "--out", str(tmp_path / "m.json")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"their recorded {key} differs ({series[0]}: {values[0]}, " in err[0], err
        assert f"{store}: {values[1]})" in err[0] and not (tmp_path / "m.json").exists()
    # the initialisation is the series' own variable: seq and par runs of the one job still fit together
    assert main(["model", "fit", series[0], str(SAMPLES / "seq-w2" / "store"), str(SAMPLES / "par-w4" / "store"),
                 "--dnn", "mlp-2-10k-2", "--json"]) == 0
    assert [m["w"] for m in json.loads(capsys.readouterr().out)["measurements"]] == [1.0, 2.0, 4.0]


def test_plan_gpus_without_overhead_says_unbounded_and_one_gpu_needs_no_bound(capsys):
    """R_O = 0 printed 'speedup bounded by infx', and a target efficiency on 1 GPU 'needs R_O <= 100.0 %' of
    '1 GPUs', where E(1) = 1 whatever R_O (Lemma 3.1)."""
    assert main(["plan", "gpus", "--overhead-ratio", "0", "--gpus", "1,4", "--efficiency", "0.8"]) == 0
    text = capsys.readouterr().out
    assert "infx" not in text and "(no overhead: the speedup is N, unbounded)" in text
    assert "efficiency 80.0 % on 1 GPU: any R_O (one GPU is always 100 % efficient)" in text
    assert "efficiency 80.0 % on 4 GPUs needs R_O <= 8.3 %" in text and "1 GPUs" not in text


@pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(), reason="the committed sample traces are absent")
def test_fit_and_optimize_say_what_their_columns_are(series, capsys):
    """The fit's leave-one-out lines printed 'measured', 'predicted' and 'error' without saying of what (the
    computation phase, all epochs) or how the error is taken, its divergent runs a signed percentage of unsaid
    sense; optimize printed compute, activ. and reads with no legend. Each now has its definition, and optimize's
    T_epoch is the sum of its three terms (--json)."""
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4, 8)]
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2"]) == 0
    text = capsys.readouterr().out
    assert ("leave-one-out (each run's computation phase, all epochs: measured, the slowest worker's steady state as "
            "read from its store; predicted by the model fitted to the other runs; error = |predicted - measured| / "
            "measured):") in text
    assert "by more than 10.0 %; in brackets (measured - model) / model):" in text
    args = ["optimize", "--dnn", "mnist-adam", "--profile", str(series / "profile.json"), "--machines", "6",
            "--max-workers", "2", "--threads", "1,4"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "T_epoch: time per epoch, the sum of compute (U_f + U_b + U_w" in text
    assert "bottleneck: the largest" in text
    assert main([*args, "--json"]) == 0
    for row in json.loads(capsys.readouterr().out)["ranked"]:
        assert row["t_epoch_s"] == pytest.approx(row["compute_s"] + row["activations_s"] + row["weight_reads_s"])


def test_the_batch_sizes_on_b_have_their_intervals(series, tmp_path, capsys):
    """predict --batches printed B's phase at each batch and w bare, then said the intervals were not drawn (one draw
    at a time, 0.5 s each). All draws are now carried at once: each batch's row has the interval that `--batch B`
    alone gives (the same draws), the text prints it and says what it is."""
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    model, profile = tmp_path / "a.json", str(series / "profile.json")
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", profile, "--out", str(model)]) == 0
    capsys.readouterr()
    args = ["model", "predict", str(model), "--workers", "1,2", "--profile", profile]
    assert main([*args, "--batches", "64,256"]) == 0
    text = capsys.readouterr().out
    assert "  [ ]: 95 % interval over 2000 draws of the fit's and both profiles' constants" in text
    assert main([*args, "--batches", "64,256", "--json"]) == 0
    sweep = {(r["b"], r["w"]): r for r in json.loads(capsys.readouterr().out)["batches"]["rows"]}
    for b in (64, 256):
        assert main([*args, "--batch", str(b), "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["rows"]
        assert all(r["b"] == b and r["profile_low_s"] < r["profile_s"] < r["profile_high_s"] for r in rows)
        for r in rows:
            assert (sweep[(b, r["w"])]["profile_low_s"], sweep[(b, r["w"])]["profile_high_s"]) == (
                r["profile_low_s"], r["profile_high_s"])


def test_the_profile_s_constants_the_fit_holds_carry_their_calibrated_uncertainty(tmp_path, capsys):
    """The fit's table printed r_m, w_m, r_net and lat_net as 'profile', bare, and model.json kept no uncertainty of
    them, though A.json has one for each (r_net 17 %). Each now carries the profile's own, in the text (relative) and
    the model (the constant's unit)."""
    stores = [str(QUOTA / f"A-compute-w{w}" / "store") for w in (1, 2, 4)]
    profile = json.loads((QUOTA / "A.json").read_text())["constants"]
    out = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--servers", "1", "--profile",
                 str(QUOTA / "A.json"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    model = json.loads(out.read_text())
    for name in ("r_m", "w_m", "r_net", "lat_net"):
        entry = model["constants"][name]
        assert entry["source"] == "profile" and entry["value"] == profile[name]["value"]
        assert entry["uncertainty"] == profile[name]["uncertainty"]
        relative = 100 * profile[name]["uncertainty"] / profile[name]["value"]
        assert f"profile (± {relative:.1f} %, one standard uncertainty; held, not fitted)" in text


def test_plan_batch_says_what_its_columns_are_and_they_are_the_formula_s(tmp_path, capsys):
    """plan batch printed memory, workspace, time and samples/s with no legend: which memory (M(b)), time of what.
    The legend is there, and the numbers are MODELS.md section 3's M(b) and the algorithm table's own, from the
    file: one conv layer of 8,000 neurons, 864 weights, 3,000 input values, 4 bytes per value."""
    write_convs_dnn(tmp_path)
    args = ["plan", "batch", "--dnn", str(tmp_path / "convs.json"), "--gpu-memory", "100MiB", "--batches", "32,64"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "  memory: M(b) = b x (input + all feature maps) x bytes per value + 3 x (weights + biases)" in text
    assert "time: one mini-batch through every layer with the chosen algorithm" in text
    assert main([*args, "--json"]) == 0
    by_batch = {c["batch"]: c for c in json.loads(capsys.readouterr().out)["choices"]}
    assert by_batch[32]["memory_bytes"] == 32 * (3000 + 8000) * 4 + 3 * 864 * 4
    assert by_batch[32]["time_s"] == pytest.approx(3e-4 * 32) and by_batch[32]["workspace_bytes"] == 2e6 * 32
    assert by_batch[64]["samples_per_s"] == pytest.approx(64 / (1e-3 * 64))


def test_optimize_prints_yan_s_epoch_time_of_the_profile_s_constants(tmp_path, capsys):
    """One worker, one replica, one server, one thread: every layer whole (1x1), no remote activations, and T_epoch
    is MODELS.md section 2's sum computed here from the files: (U_f + U_b + U_w) N_sample / Q + M_w N_sample / N_read,
    U_f = C_muladd W + C_act N, U_b = C_muladd W' + C_err N, U_w = C_muladd W, M_w = sum (C_ncost + W(l) C_bits /
    C_nbw) (eq. 11 with min(N_ps, N_wr) = 1)."""
    dnn = {"format": "ddltrace-dnn/1", "name": "two-fc", "input": {"neurons": 100}, "layers": [
        {"name": "fc1", "type": "fc", "neurons": 50, "fan_in": 100, "weights": 5000, "biases": 50},
        {"name": "fc2", "type": "fc", "neurons": 10, "fan_in": 50, "weights": 500, "biases": 10}]}
    profile = {"format": "ddltrace-hardware-profile", "machine": {"physical_cores": 1},
               "constants": {"C_muladd": {"value": 1e-9}, "C_act": {"value": 2e-9}, "C_err": {"value": 3e-9},
                             "C_nbw": {"value": 8e9, "unit": "bit/s"}, "C_ncost": {"value": 1e-5}}}
    (tmp_path / "dnn.json").write_text(json.dumps(dnn))
    (tmp_path / "hw.json").write_text(json.dumps(profile))
    assert main(["optimize", "--dnn", str(tmp_path / "dnn.json"), "--profile", str(tmp_path / "hw.json"),
                 "--machines", "2", "--config", "1/1/1", "--threads", "1", "--samples", "1000", "--read-every", "10",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["ranked"][0]
    muladd, act, err, nbw, ncost = 1e-9, 2e-9, 3e-9, 1e9, 1e-5
    u = [muladd * 5000 + act * 50 + muladd * 500 + err * 50 + muladd * 5000,  # fc1: W' = fc2's 500 connections
         muladd * 500 + act * 10 + 0 + err * 10 + muladd * 500]               # fc2: the top layer, W' = 0
    reads = sum(ncost + (w + b) * 4 / nbw for w, b in ((5000, 50), (500, 10))) * 1000 / 10
    assert (row["N_wr"], row["N_mr"], row["N_ps"], row["H"]) == (1, 1, 1, 1)
    assert row["compute_s"] == pytest.approx(sum(u) * 1000, rel=1e-9)
    assert row["activations_s"] == 0 and row["weight_reads_s"] == pytest.approx(reads, rel=1e-9)
    assert row["t_epoch_s"] == pytest.approx(sum(u) * 1000 + reads, rel=1e-9)


@pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(), reason="the committed sample traces are absent")
def test_predict_at_another_batch_says_what_the_model_cannot_move(tmp_path, capsys):
    """At --batch 128 a model fitted without a profile said 'c_p x1 at this batch's working set by the fit's profile's
    compute curves': there are none, c_p was kept as fitted. And the committed runs all had batch 64 (c_b held at 0),
    so c_p holds their per-batch cost, counted per sample at another batch. Both are said, in the text and --json."""
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4)]
    out = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["model", "predict", str(out), "--workers", "1,8", "--batch", "128"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "by the fit's profile's compute curves" not in first
    assert ("(the fit's batch 64; c_p kept as fitted: the model has no profile's compute curves to move it to this "
            "batch's working set; the runs had one batch size, so c_p also holds their per-batch cost, which counts "
            "per sample here)") in first
    assert main(["model", "predict", str(out), "--workers", "1,8", "--batch", "128", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"]["note"] in first
    assert main(["model", "predict", str(out), "--workers", "1,8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"]["note"] is None


def test_a_model_file_s_damaged_covariance_is_named_not_a_traceback(series, tmp_path, capsys):
    """model predict draws the fitted constants from model.json's covariance (for every prediction's interval now,
    for the knee on B before): a damaged one raised AttributeError, ValueError ('df <= 0') with a traceback, or drew
    from a matrix of the wrong size or a negative variance without a word. Each is one line naming the file, exit 2."""
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    good = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(good)]) == 0
    capsys.readouterr()
    model = json.loads(good.read_text())
    assert model["covariance"]["names"] == ["c_p", "c_u"] and model["covariance"]["dof"] == 2
    for change, said in (({"names": ["c_p", "foo"]}, "names ['c_p', 'foo'] must be distinct constants"),
                         ({"names": ["c_p", "c_p"]}, "must be distinct constants"),
                         ({"dof": 0}, "dof = 0 must be a whole number >= 1"),
                         ({"matrix": [[1e-10]]}, "matrix must be 2 x 2 finite numbers"),
                         ({"matrix": [[1e-10, "x"], [0, 1e-8]]}, "matrix must be 2 x 2 finite numbers"),
                         ({"matrix": [[-1e-10, 0], [0, 1e-8]]}, "symmetric with variances >= 0")):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**model, "covariance": {**model["covariance"], **change}}))
        assert main(["model", "predict", str(bad), "--workers", "1,2"]) == 2, change
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{bad}: covariance: " in err[0] and said in err[0], err


def test_plan_placement_s_traffic_is_section_4_s_on_the_bundled_file(capsys):
    """RALP's bytes per step and worker (MODELS.md section 4) computed here from ddltrace/models/dnns/alexnet.json:
    PS = 2 x model bytes, ring all-reduce = 2 (W - 1) / W x model bytes, RALP = 2 (O_i* + sum_{x <= i*} P_x); the
    split the argmin of O_i + sum P_x; found correct."""
    raw = json.loads((Path(__file__).resolve().parent.parent / "ddltrace" / "models" / "dnns" /
                      "alexnet.json").read_text())
    size = raw["bytes_per_value"]
    dense = ("fc", "softmax")  # the format's defaults (ddltrace/models/dnn.py): fc weights n x fan_in, biases n
    params = [(layer.get("weights", layer["neurons"] * layer["fan_in"] if layer["type"] in dense else 0)
               + layer.get("biases", layer["neurons"] if layer["type"] in dense else 0)) * size
              for layer in raw["layers"]]
    model_bytes = sum(params)
    assert main(["plan", "placement", "--dnn", "alexnet", "--batch", "32", "--workers", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ps_bytes"] == pytest.approx(2 * model_bytes)
    assert out["ring_bytes"] == pytest.approx(2 * 7 / 8 * model_bytes)
    assert out["ralp_bytes"] == pytest.approx(2 * out["split_cost_bytes"])
    names = [layer["name"] for layer in raw["layers"]]
    i = names.index(out["split_after"])
    assert out["split_cost_bytes"] == raw["layers"][i]["neurons"] * size * 32 + sum(params[:i + 1])


def test_a_constant_changed_twice_by_what_ifs_is_refused(series, tmp_path, capsys):
    """--what-if c_p=2x --what-if c_p=3x printed 'what-if: c_p=2x c_p=3x' with the phase of c_p x3 alone (the second
    replaced the first unsaid); optimize likewise. One line naming the constant, exit 2."""
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    model = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(model)]) == 0
    capsys.readouterr()
    for args in (["model", "predict", str(model), "--workers", "1"],
                 ["optimize", "--dnn", "mnist-adam", "--profile", str(series / "profile.json"), "--machines", "6"]):
        name = "c_p" if args[0] == "model" else "C_nbw"
        assert main([*args, "--what-if", f"{name}=2x", "--what-if", f"{name}=3x"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ddltrace: error: --what-if '{name}=3x': {name} is changed twice; give one value or factor "
                       "for it"]


def test_predict_s_plot_shades_the_model_s_interval_and_names_its_window(series, tmp_path, capsys, monkeypatch):
    """--plot drew A's prediction as a bare line (its interval only on B), its axis 'computation phase (s)' of no
    window: the band of the fit's interval is drawn and the axis says all epochs."""
    import matplotlib.figure

    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    model = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(model)]) == 0
    saved = []
    real = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: (saved.append(fig), real(fig, *a, **k)))
    assert main(["model", "predict", str(model), "--workers", "1,4,16", "--plot", str(tmp_path / "p.png")]) == 0
    ax = saved[0].axes[0]
    assert ax.get_ylabel() == "computation phase, all epochs (s)"
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "model, 95 % interval (the fit's constants)" in labels and (tmp_path / "p.png").stat().st_size > 1000


def test_predict_serial_comm_on_a_closed_loop_model_is_refused(series, tmp_path, capsys):
    """predict --serial-comm on a model fitted with --serial-comm changed nothing (the closed loop has the transfers in
    its cycle) yet printed '--serial-comm: c_p also gains B's extra time of the two transfers'. Refused, exit 2."""
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    model = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(series / "profile.json"),
                 "--serial-comm", "--out", str(model)]) == 0
    capsys.readouterr()
    assert main(["model", "predict", str(model), "--workers", "1,2", "--profile", str(series / "profile.json"),
                 "--serial-comm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--serial-comm: {model} is the closed loop already" in err[0]


def test_predict_puts_the_worker_counts_in_order_once_each(series, tmp_path, capsys):
    """--workers 16,1,4,4 printed the rows in that order, w = 4 twice, and plotted a line doubling back; the best
    count past the knee on B took 'the first w asked past the knee' in the order given. Rows are by w, once each."""
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    model = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(model)]) == 0
    capsys.readouterr()
    assert main(["model", "predict", str(model), "--workers", "16,1,4,4", "--json"]) == 0
    assert [r["w"] for r in json.loads(capsys.readouterr().out)["rows"]] == [1, 4, 16]


def test_numbers_past_any_machine_are_one_line_not_an_overflow(series, tmp_path, capsys):
    """Finite numbers so large (or small) that the models' products overflowed were tracebacks, exit 1 (QA of
    2026-11-26: a model's c_u = 1e300, a CSV's phase_s = 1e308, --samples 1e300, plan ps --compute-time 1e-300s);
    now one line naming the thing, exit 2. So are a --workers list with an empty item and a count past MPI's."""
    stores = sorted(str(p) for p in series.glob("run-*"))
    model = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(model)]) == 0
    doc = json.loads(model.read_text())
    doc["constants"]["c_u"]["value"] = 1e300
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(doc))
    csv = tmp_path / "runs.csv"
    csv.write_text("w,b,phase_s\n1,64,1e308\n2,64,1e308\n4,64,1e308\n")
    capsys.readouterr()
    for argv, says in (
            (["model", "predict", huge, "--workers", "1,4"], f"{huge}: constant c_u = 1e+300: must be a finite "
                                                             "number from 0 to 1e+15"),
            (["model", "fit", "--csv", csv, "--samples", "16384"], f"{csv}: line(s) [2, 3, 4] need"),
            (["model", "predict", model, "--workers", "1,,2"], "--workers: '1,,2' has an empty item"),
            (["model", "predict", model, "--workers", "99999999999999999999"], "must be a whole number from 1 to"),
            (["model", "predict", model, "--workers", "1,4", "--plot", tmp_path / "keep.json"],
             "not a picture file matplotlib writes"),
            (["plan", "ps", "--param-bytes", "1e300GB", "--workers", "8", "--bandwidth", "10Gbit/s",
              "--compute-time", "0.5s"], "--param-bytes: '1e300GB' is out of range"),
            (["plan", "ps", "--param-bytes", "250MB", "--workers", "8", "--bandwidth", "10Gbit/s",
              "--compute-time", "1e-300s"], "--compute-time: '1e-300s' is out of range")):
        assert main([str(a) for a in argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    with pytest.raises(SystemExit) as exited:  # argparse's range check
        main(["model", "fit", "--csv", str(csv), "--samples", "1e300"])
    assert exited.value.code == 2 and "1e300 is out of range" in capsys.readouterr().err


def test_the_plot_types_are_the_ones_matplotlib_writes():
    """--plot is checked against a list kept here (matplotlib is imported only to draw): every type on it is one
    matplotlib writes (newer versions write more: avif, gif)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from ddltrace.commands.model import PLOT_TYPES

    matplotlib.use("Agg")
    assert set(PLOT_TYPES) <= set(FigureCanvasAgg.get_supported_filetypes())


def test_a_missing_store_is_named_before_the_series_is_counted(tmp_path, capsys):
    """QA: 'model fit MISSING' said "1 store given: fitting needs a series", not that the store is not there."""
    assert main(["model", "fit", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip() == f"ddltrace: error: {tmp_path / 'nowhere'}: no such trace store"


@pytest.mark.skipif(not (SAMPLES / "par-w1" / "store").exists(), reason="the committed sample traces are absent")
def test_a_fitted_c_u_the_servers_trace_contradicts_is_said(capsys):
    """On 2 cores the par series flattens at w = 8 because its 9 ranks share the cores: a free c_u takes the plateau
    (4.2 ms an update) where the server's own trace says it was busy far less: the fit says so, with the trace's
    figure, the median over the runs of busy seconds over d E / b updates (their ground truth's busy time)."""
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4, 8)]
    assert main(["model", "fit", *stores]) == 0
    text = capsys.readouterr().out
    (note,) = [line for line in text.splitlines() if "the server's own trace says" in line]
    per_update = []
    for w in (1, 2, 4, 8):
        truth = json.loads((SAMPLES / f"par-w{w}" / "ground_truth.json").read_text())
        config = truth["config"]
        per_update.append(truth["server"]["busy_ns"] / 1e9 / (config["samples"] * config["epochs"] / config["batch"]))
    measured = float(re.search(r"says ([0-9.e-]+) s busy per update", note).group(1))
    assert measured == pytest.approx(float(np.median(per_update)), rel=0.15)
    low, high = (float(x) for x in re.search(r"\[([0-9.e-]+), ([0-9.e-]+)\]", note).groups())
    assert not low <= measured <= high


def test_optimize_intervals_sharing_a_draw_s_cache_equal_one_search_per_configuration(series):
    """The intervals solve the printed configurations of one draw with one boundary-cost cache: each T_epoch equals
    yan.optimise's for that configuration alone (a fresh cache), the search each draw used to run."""
    import argparse

    from ddltrace.commands import optimize
    from ddltrace.models import yan
    from ddltrace.models.dnn import load_dnn

    dnn = load_dnn("mnist-adam")
    hw, raw = optimize._hardware(str(series / "profile.json"), [], dnn.bytes_per_value)
    args = argparse.Namespace(machines=6, samples=6e4, read_every=70, read_bound="min")
    configs = [(2, 1, 1, 1), (1, 2, 2, 4), (2, 2, 2, 4), (1, 1, 5, 1)]
    shared: dict = {}
    for wr, mr, ps, h in configs:
        alone = yan.optimise(dnn, hw, 6, N_sample=6e4, N_read=70, threads=[h], configurations=[(wr, mr, ps)])
        assert optimize._one(dnn, hw, args, (wr, mr, ps, h), shared) == alone[0].t_epoch
    lines = []
    low, high, fastest = optimize._intervals(dnn, hw, raw, args, configs, lines.append)
    assert all(lo <= hi for lo, hi in zip(low, high, strict=True)) and math.isclose(sum(fastest), 1.0)


def test_optimize_progress_lines_come_every_two_seconds_of_work_and_not_for_short_work(monkeypatch):
    from ddltrace.commands import optimize

    clock = iter([0.0, 0.5, 1.0, 2.1, 3.0, 4.2, 4.3])  # the start, then one reading per tick
    monkeypatch.setattr(optimize.time, "perf_counter", lambda: next(clock))
    said = []
    tick = optimize.progress_ticks(said.append, "configurations searched")
    for done in range(1, 7):
        tick(done, 6)
    assert said == ["3 of 6 configurations searched (2 s)", "5 of 6 configurations searched (4 s)",
                    "6 of 6 configurations searched (4 s)"]
    clock = iter([0.0, 0.1, 0.2])
    quiet = []
    tick = optimize.progress_ticks(quiet.append, "draws")
    tick(1, 2), tick(2, 2)
    assert quiet == []
