"""Fixes from a QA sweep of the model commands (model fit / predict, optimize, calibrate --compare): each test
fails on the code before its fix."""

from __future__ import annotations

import json

import pytest
from test_models_commands import series  # noqa: F401  (the fixture: a synthetic scaling series and a profile)

from ddltrace.cli import main


@pytest.fixture(scope="module")
def model_file(series, tmp_path_factory):  # noqa: F811
    """A model fitted on the series (batch 64, w = 1, 2, 4, 16), as model.json."""
    out = tmp_path_factory.mktemp("model") / "model.json"
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(out)]) == 0
    return out


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("change, said", [
    (lambda m: m["knee"].update(batch=-64), "knee batch = -64"),
    (lambda m: m["knee"].update(batch=0), "knee batch = 0: must be > 0"),
    (lambda m: m["workload"].update(d=0), "workload d = 0: must be > 0"),
    (lambda m: m["workload"].update(s=0), "workload s = 0: the bytes per value must be one of 1, 2, 4, 8"),
    (lambda m: m["workload"].update(epochs=0), "workload epochs = 0: must be > 0"),
    (lambda m: m["measurements"][0].update(b=-1), "measurements[0].b = -1: must be > 0"),
    (lambda m: m.update(constants=[["c_p", 1]]), "'constants' must be an object"),
    (lambda m: m.update(workload="x"), "'workload' must be an object"),
    (lambda m: m.update(knee=[1]), "'knee' must be an object"),
])
def test_a_model_file_s_bad_workload_or_knee_batch_is_one_line_not_a_default(model_file, tmp_path, capsys, change,
                                                                             said):
    """QA: knee.batch = -64 raised ValueError with a traceback (exit 1); knee.batch, workload d or s = 0 were replaced
    by defaults unsaid; 'constants' as a list said 'dictionary update sequence element #0'. One line, exit 2."""
    model = json.loads(model_file.read_text())
    change(model)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(model))
    assert main(["model", "predict", str(bad), "--workers", "1,2"]) == 2
    line = _one_error(capsys)
    assert line.startswith(f"ddltrace: error: {bad}: ") and said in line, line


def test_a_knee_under_one_worker_is_said_alike_by_fit_and_predict_with_no_made_up_value(tmp_path, capsys):
    """QA: where the transfers alone outlast a worker's batch, w* = (b A - send) / c_u is at or below 0 and was
    printed as exactly 1 worker with no note, while a slower worker (w* 0.03) printed 0.03: the knee ran backwards.
    w* is now continuous; fit and predict both say 'w* < 1' and what it means; model.json's knee.w and predict
    --json's are the formula's value."""
    from test_fit_hashemi import EPOCHS, N_F, N_W, D, write_run

    from ddltrace.models import hashemi

    true = hashemi.Constants(c_p=1e-5, c_u=2e-3, r_m=1e-10, w_m=1e-10, r_net=1e-7)
    wl = hashemi.Workload(d=D, b=64, n_f=N_F, n_w=N_W, epochs=EPOCHS)
    w_star, cause = hashemi.knee(wl, true)
    slower = hashemi.knee(wl, hashemi.Constants(**{**true.__dict__, "c_p": 1e-3}))[0]
    assert w_star < 0 and cause == "server" and w_star < slower  # a slower worker moves the knee out, not in
    stores = [str(write_run(tmp_path / f"w{w}", w, 64, EPOCHS * hashemi.t_phase(w, wl, true), 0.01))
              for w in (1, 2, 4, 16)]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"r_m": 1e-10, "w_m": 1e-10, "r_net": 1e-7}))
    out = tmp_path / "model.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(profile), "--out", str(out)]) == 0
    said = "w* < 1: the server/network term is the larger already at one worker"
    fitted = capsys.readouterr().out
    assert "knee: w* < 1 worker" in fitted and said in fitted and "w* = 1 workers" not in fitted
    knee_w = json.loads(out.read_text())["knee"]["w"]
    assert knee_w < 0
    assert main(["model", "predict", str(out), "--workers", "1,2,4"]) == 0
    predicted = capsys.readouterr().out
    assert "knee: w* < 1 worker (server)" in predicted and said in predicted
    assert main(["model", "predict", str(out), "--workers", "1,2,4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["knee"]["model"]["w"] == pytest.approx(knee_w)


def test_optimize_takes_the_compute_constants_at_the_dnn_s_precision(tmp_path, capsys):
    """QA: optimize read C_muladd's f32 curve, C_act and C_err (the profile's defaults, aliases of the f32
    constants) for a DNN in doubles, where model fit / predict take the _f64 ones: a profile whose f64 constants
    and curves are ten times slower gave the same epoch. Now a DNN of 8 bytes per value takes the f64 siblings (its
    compute ten times), one of 4 the f32 ones (unchanged)."""
    def profile(f64: float) -> dict:
        constants = {"C_nbw": {"value": 8e9, "unit": "bit/s"}, "C_ncost": {"value": 1e-5}}
        curves = {}
        for name, value in (("C_muladd_gemm", 1e-10), ("C_act_sigmoid_numpy", 2e-9), ("C_err_sigmoid_numpy", 3e-10)):
            for suffix, times in (("_f32", 1.0), ("_f64", f64)):
                constants[name + suffix] = {"value": value * times, "uncertainty": 0.01 * value * times}
                curves[name + suffix] = {"points": [{"x": 1e3, "y": value * times}, {"x": 1e9, "y": value * times}]}
            constants[name.split("_")[0] + "_" + name.split("_")[1]] = {
                "value": value, "uncertainty": 0.01 * value, "alias_of": name + "_f32"}
        return {"format": "ddltrace-hardware-profile", "machine": {"physical_cores": 1}, "constants": constants,
                "curves": curves}

    def compute(dnn: str, f64: float) -> float:
        path = tmp_path / f"hw-{f64}.json"
        path.write_text(json.dumps(profile(f64)))
        assert main(["optimize", "--dnn", dnn, "--profile", str(path), "--machines", "2", "--config", "1/1/1",
                     "--samples", "1000", "--json"]) == 0
        return json.loads(capsys.readouterr().out)["ranked"][0]["compute_s"]

    assert compute("mlp-2-10k-2", 10.0) == pytest.approx(10 * compute("mlp-2-10k-2", 1.0), rel=1e-9)
    assert compute("mnist-adam", 10.0) == pytest.approx(compute("mnist-adam", 1.0), rel=1e-9)


def test_a_profile_with_the_bandwidth_but_no_r_net_gives_r_net_from_it(series, tmp_path, capsys):  # noqa: F811
    """QA: a profile with C_nbw and no r_net gave optimize and plan B's network (1 / C_nbw), while model predict
    --profile kept A's r_net ("B's profile has no r_net; the model's ... is kept") and model fit held it at 0. Now
    r_net = 1 / C_nbw (8 / C_nbw in bit/s) with C_nbw's relative uncertainty: B without r_net predicts as B."""
    a = json.loads((series / "profile.json").read_text())
    b = json.loads(json.dumps(a))
    b["constants"]["r_net"].update(value=3e-9, uncertainty=3e-10)
    b["constants"]["C_nbw"].update(value=8 / 3e-9, uncertainty=0.1 * 8 / 3e-9)
    b_path, bare = tmp_path / "B.json", tmp_path / "B-no-r_net.json"
    b_path.write_text(json.dumps(b))
    del b["constants"]["r_net"]
    bare.write_text(json.dumps(b))
    model = tmp_path / "model.json"
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(series / "profile.json"),
                 "--out", str(model)]) == 0
    capsys.readouterr()
    rows = []
    for profile in (b_path, bare):
        assert main(["model", "predict", str(model), "--workers", "1,4,16", "--profile", str(profile), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert not any(note.startswith("r_net") for note in out["transfer"]["notes"]), out["transfer"]["notes"]
        rows.append([r[key] for r in out["rows"] for key in ("profile_s", "profile_low_s", "profile_high_s")])
    assert rows[1] == pytest.approx(rows[0], rel=1e-9)
    refit = tmp_path / "refit.json"
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(bare), "--out", str(refit)]) == 0
    assert "network term" not in capsys.readouterr().out
    r_net = json.loads(refit.read_text())["constants"]["r_net"]
    assert r_net["source"] == "profile" and r_net["value"] == pytest.approx(3e-9)
    assert r_net["uncertainty"] == pytest.approx(3e-10)


def test_the_best_count_past_the_knee_on_b_is_explained_when_it_is_the_first_past_it(tmp_path, capsys):
    """QA: the text explained a best worker count past the knee on B only where it lay beyond the first count asked
    past the knee; where the best is that first count, --json carried transfer.best_past_knee and the text said
    nothing. A's quota runs carried to a B with r_net x200 (knee on B about 6), asked at 1, 2, 4, 16: best 16."""
    from test_models_commands import slow_network_b

    model, b = slow_network_b(tmp_path)
    predict = ["model", "predict", str(model), "--workers", "1,2,4,16", "--profile", str(b)]
    capsys.readouterr()
    assert main([*predict, "--json"]) == 0
    past = json.loads(capsys.readouterr().out)["transfer"]["best_past_knee"]
    assert past["best_w"] == past["from_w"] == 16
    assert main(predict) == 0
    text = capsys.readouterr().out
    assert f"past the knee on B (w* = {past['knee_w']:.3g})" in text and "at w = 16, the first count asked" in text


def test_a_what_if_or_bytes_per_value_outside_its_domain_is_refused(model_file, series, capsys):  # noqa: F811
    """QA: --what-if net_duplex=2 was taken (a share from 0 to 1: past 2 the server's t (1 - net_duplex / 2) turns
    negative), and model fit --bytes-per-value 3 too, where a DNN description allows 1, 2, 4 or 8 bytes."""
    for change in ("net_duplex=2", "net_duplex=1.01"):
        assert main(["model", "predict", str(model_file), "--workers", "1,2", "--what-if", change]) == 2
        assert _one_error(capsys).startswith(f"ddltrace: error: --what-if {change}: net_duplex is a share from 0 to 1")
    assert main(["model", "predict", str(model_file), "--workers", "1,2", "--what-if", "net_duplex=1"]) == 0
    capsys.readouterr()
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4)]
    assert main(["model", "fit", *stores, "--bytes-per-value", "3"]) == 2
    assert _one_error(capsys) == ("ddltrace: error: --bytes-per-value 3: give one of 1, 2, 4, 8 (bytes of a value, "
                                  "as in a DNN description)")


def test_the_contention_term_adds_nothing_at_one_worker_where_the_knee_is_under_one():
    """kappa (w - w*) past the knee: with w* under one worker (the formula's own, no longer clipped to 1) it would
    add kappa (1 - w*) at w = 1, where one worker contends with no other; it counts from one worker there."""
    from ddltrace.models import hashemi

    wl = hashemi.Workload(d=4096, b=64, n_w=40_000)
    k = hashemi.Constants(c_p=1e-6, c_u=5e-3, r_net=4e-8, kappa=0.5)
    assert hashemi.w_star(wl, k) < 1
    plain = hashemi.t_phase(1, wl, hashemi.Constants(c_p=1e-6, c_u=5e-3, r_net=4e-8))
    assert hashemi.t_phase(1, wl, k) == plain
    assert hashemi.t_phase(3, wl, k) == pytest.approx(
        hashemi.t_phase(3, wl, hashemi.Constants(c_p=1e-6, c_u=5e-3, r_net=4e-8)) * (1 + 0.5 * 2))


def test_the_servers_busy_time_split_is_a_fit_that_was_made():
    """busy per update = cpu / share + rest over A's runs: where least squares gives a negative rest, the line is fit
    again through the origin (QA: the net B's runs printed 'server busy 0.96 ms / share + 0 ms', the slope of the
    fit whose rest was -0.99 ms, with the rest clipped: it said 0.96 ms at w = 1 where the run measured 0.125 ms)."""
    import numpy as np

    from ddltrace.models import transfer

    points = [(1, 1.0, 0.125e-3), (2, 1 / 1.633, 0.3315e-3), (4, 1 / 2.609, 1.616e-3)]  # (w, share, busy per update)
    runs = [{"w": w, "cpu_share": share, "d": 4096, "b": 64, "server_busy_s": busy * 64} for w, share, busy in points]
    got = transfer.server_measured({}, runs)
    x = np.array([1 / s for _, s, _ in points])
    y = np.array([b for _, _, b in points])
    assert np.polyfit(x, y, 1)[1] < 0  # the unconstrained rest
    slope = float(x @ y / (x @ x))
    assert got["how"] == f"server busy {1e3 * slope:.3g} ms / share + 0 ms per update over 3 runs"
    assert got["cpu_fraction"] == 1.0 and got["busy_s"] == pytest.approx(0.3315e-3)
