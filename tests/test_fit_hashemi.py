"""Fitting Hashemi et al.'s model: recovers known constants, reports intervals, held-out errors, the knee,
and reads runs from real trace stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddltrace.analyses.fit_hashemi import HashemiFit, measurements_from_stores
from ddltrace.errors import DdltraceError
from ddltrace.models import hashemi
from ddltrace.store import TraceStore

TRUE = hashemi.Constants(c_p=2e-4, c_b=5e-3, c_u=4e-4, r_m=1e-10, w_m=1e-10, r_net=1e-9)
PROFILE = {"r_m": 1e-10, "w_m": 1e-10, "r_net": 1e-9}
D, N_F, N_W, EPOCHS = 16384, 2, 40000, 3


def synthetic_runs(noise=0.003, seed=1, workers=(1, 2, 4, 8, 16, 32, 64), batches=(64, 256), true=TRUE):
    rng = np.random.default_rng(seed)
    rows = []
    for b in batches:
        wl = hashemi.Workload(d=D, b=b, n_f=N_F, n_w=N_W, epochs=EPOCHS)
        for w in workers:
            rows.append({"w": w, "b": b, "phase_s": EPOCHS * hashemi.t_phase(w, wl, true) * (1 + rng.normal(0, noise))})
    return pd.DataFrame(rows)


def test_fit_recovers_known_constants_within_2_percent():
    fit = HashemiFit(d=D, n_f=N_F, n_w=N_W, epochs=EPOCHS, profile=PROFILE).fit(synthetic_runs())
    assert fit is not None and fit.constants_.r_net == 1e-9  # profile constants held
    for name in ("c_p", "c_b", "c_u"):
        assert fit.params_[name] == pytest.approx(getattr(TRUE, name), rel=0.02)
        lo, hi = fit.ci_[name]
        assert lo <= getattr(TRUE, name) <= hi or abs(fit.params_[name] / getattr(TRUE, name) - 1) < 0.005
        assert hi > lo > 0
    true_knee, cause = hashemi.knee(hashemi.Workload(d=D, b=64, n_f=N_F, n_w=N_W, epochs=EPOCHS), TRUE)
    assert fit.knee_cause_ == cause == "server"
    assert fit.knee_ == pytest.approx(true_knee, rel=0.02)
    assert len(fit.loo_) == 14 and (fit.loo_["abs_pct_error"] >= 0).all()
    assert fit.rms_relative_error_ < 0.01
    div = fit.divergence_
    assert set(div["bound_by"]) == {"worker", "server/network"}
    assert not div["flagged"].any()


def test_divergent_points_are_named_by_term():
    runs = synthetic_runs(noise=0.0, batches=(64,), workers=(1, 2, 4, 8, 16, 32, 64))
    # past the knee the measured phase rises again (server contention), which no term of the model makes
    floor = EPOCHS * hashemi.t_phase(1000, hashemi.Workload(d=D, b=64, n_f=N_F, n_w=N_W, epochs=EPOCHS), TRUE)
    runs.loc[len(runs)] = {"w": 128, "b": 64, "phase_s": 1.5 * floor}
    fit = HashemiFit(d=D, n_f=N_F, n_w=N_W, epochs=EPOCHS, profile=PROFILE).fit(runs)
    div = fit.divergence_
    flagged = div[div["flagged"]]
    assert 128.0 in list(flagged["w"])
    assert (flagged["bound_by"] == "server/network").all() and flagged["past_knee"].all()
    assert div.loc[div["w"] == 128, "divergence"].iloc[0] > 0.1
    assert not div[div["bound_by"] == "worker"]["flagged"].any()
    assert any("c_b held" in note for note in fit.notes_)  # one batch size: c_b cannot be told from c_p


def test_held_out_prediction_and_unconstrained_server_cost():
    # runs far below the knee say nothing about c_u: it is reported as unconstrained, not as an estimate
    runs = synthetic_runs(noise=0.0, batches=(64, 256), workers=(1, 2, 4))
    fit = HashemiFit(d=D, n_f=N_F, n_w=N_W, epochs=EPOCHS, profile=PROFILE).fit(runs)
    assert any("c_u is not constrained" in note for note in fit.notes_)
    assert np.isnan(fit.ci_["c_u"][0])
    # the largest c_u these runs allow puts the knee at w = 4, the last run
    assert hashemi.knee(hashemi.Workload(d=D, b=64, n_f=N_F, n_w=N_W), hashemi.Constants(
        c_p=2e-4, c_b=5e-3, c_u=fit.unconstrained_["c_u"], r_m=1e-10, w_m=1e-10, r_net=1e-9))[0] == pytest.approx(
        4, rel=0.01)
    # predictions of w = 8 from w = 1, 2, 4 are still right (below the knee)
    wl = hashemi.Workload(d=D, b=64, n_f=N_F, n_w=N_W, epochs=EPOCHS)
    assert fit.predict(8, 64)[0] == pytest.approx(EPOCHS * hashemi.t_phase(8, wl, TRUE), rel=0.01)


def test_init_term_fits_r_d_on_shared_storage():
    runs = synthetic_runs(noise=0.0, batches=(64, 256), workers=(1, 2, 4, 8))
    k = hashemi.Constants(r_d=5e-9)
    runs["init_s"] = [hashemi.t_init(w, hashemi.Workload(d=D, b=64, n_f=N_F), k, "shared") for w in runs["w"]]
    fit = HashemiFit(d=D, n_f=N_F, n_w=N_W, epochs=EPOCHS, profile=PROFILE, storage="shared").fit(runs)
    assert fit.r_d_ == pytest.approx(5e-9, rel=1e-6)
    assert fit.to_dict()["constants"]["r_d"]["source"] == "fitted"


def test_bad_measurements_are_clear():
    with pytest.raises(DdltraceError, match="missing column"):
        HashemiFit(d=D).fit([{"w": 1, "phase_s": 3.0}])
    with pytest.raises(DdltraceError, match="2 or more configurations"):
        HashemiFit(d=D).fit([{"w": 1, "b": 64, "phase_s": 3.0}])
    with pytest.raises(DdltraceError, match="same workers and batch size"):
        HashemiFit(d=D).fit([{"w": 2, "b": 64, "phase_s": 3.0}, {"w": 2, "b": 64, "phase_s": 3.1}])
    with pytest.raises(DdltraceError, match="need w a whole number of workers >= 1"):
        HashemiFit(d=D).fit([{"w": 0, "b": 64, "phase_s": 3.0}, {"w": 2, "b": 64, "phase_s": 3.1}])
    with pytest.raises(DdltraceError, match="samples d is unknown"):
        HashemiFit().fit([{"w": 1, "b": 64, "phase_s": 3.0}, {"w": 2, "b": 64, "phase_s": 1.6}])
    with pytest.raises(DdltraceError, match="not fitted"):
        HashemiFit(d=D).predict(4)


# -- from trace stores ---------------------------------------------------------------------------------


def write_run(path, w, b, phase_s, init_s, job="train_mlp.py", server=True, steps=5):
    """A store of one ASGD run: rank 0 the server, ranks 1..w workers; each worker reads for init_s then runs
    `steps` steps spanning phase_s (the slowest worker exactly so)."""
    store = TraceStore.create(path, run={"command": f"mpiexec -n {w + 1} python {job} --batch {b}",
                                         "batch_size": b, "samples": D, "epochs": EPOCHS, "world_size": w + 1})
    if server:
        store.add_rank(0, pd.DataFrame({"rank": [0], "lane": ["main"], "name": ["serve"], "category": ["compute"],
                                        "start_ns": [0], "dur_ns": [int((init_s + phase_s) * 1e9)]}), role="server")
    for r in range(1, w + 1):
        scale = 1.0 if r == w else 0.9
        t0 = int(init_s * 1e9)
        step_ns = int(phase_s * scale * 1e9 / steps)
        rows = [{"rank": r, "lane": "main", "name": "read_data", "category": "io", "start_ns": 0, "dur_ns": t0}]
        rows += [{"rank": r, "lane": "main", "name": "train_step", "category": "compute",
                  "start_ns": t0 + i * step_ns, "dur_ns": step_ns, "step": i} for i in range(steps)]
        store.add_rank(r, pd.DataFrame(rows), role="worker")
    return path


def test_fit_from_trace_stores(tmp_path):
    true = hashemi.Constants(c_p=2e-4, c_b=5e-3, c_u=2e-3, r_m=1e-10, w_m=1e-10, r_net=1e-9)  # knee ~ 8.6 at b=64
    paths = []
    for b, workers in ((64, (1, 2, 4, 16)), (256, (1, 2, 8))):
        wl = hashemi.Workload(d=D, b=b, n_f=N_F, n_w=N_W, epochs=EPOCHS)
        for w in workers:
            phase = EPOCHS * hashemi.t_phase(w, wl, true)
            paths.append(write_run(tmp_path / f"run-b{b}-w{w}", w, b, phase, init_s=0.01 * w))
    runs = measurements_from_stores(paths)
    assert list(runs["w"][:3]) == [1.0, 2.0, 4.0]  # the server rank is not a worker
    assert runs["init_s"].iloc[2] == pytest.approx(0.04)
    fit = HashemiFit(n_f=N_F, n_w=N_W, profile=PROFILE).fit(runs)
    for name in ("c_p", "c_b", "c_u"):
        assert fit.params_[name] == pytest.approx(getattr(true, name), rel=0.02)


def test_inconsistent_stores_are_refused(tmp_path):
    a = write_run(tmp_path / "a", 1, 64, 10.0, 0.1)
    b = write_run(tmp_path / "b", 2, 64, 5.0, 0.1, job="other_job.py")
    with pytest.raises(DdltraceError, match="different jobs"):
        measurements_from_stores([a, b])
    with pytest.raises(DdltraceError, match="1 store given"):
        measurements_from_stores([a])
    c = write_run(tmp_path / "c", 1, 64, 9.0, 0.1)
    with pytest.raises(DdltraceError, match="same workers and batch size"):
        measurements_from_stores([a, c])
    store = TraceStore.create(tmp_path / "nobatch", run={"command": "python train_mlp.py"})
    store.add_rank(0, pd.DataFrame({"rank": [0], "lane": ["main"], "name": ["x"], "category": ["compute"],
                                    "start_ns": [0], "dur_ns": [5], "step": [0]}))
    with pytest.raises(DdltraceError, match="no batch_size"):
        measurements_from_stores([a, tmp_path / "nobatch"])
    unstepped = TraceStore.create(tmp_path / "nostep", run={"command": "python train_mlp.py", "batch_size": 64})
    unstepped.add_rank(0, pd.DataFrame({"rank": [0, 0], "lane": ["main"] * 2, "name": ["x"] * 2,
                                        "category": ["compute"] * 2, "start_ns": [0, 10], "dur_ns": [5, 5]}))
    with pytest.raises(DdltraceError, match="no steps and no repeating pattern"):
        measurements_from_stores([a, tmp_path / "nostep"])


def test_server_found_from_the_traffic(tmp_path):
    """Without roles in the manifest, the parameter server is the center of the star of messages."""
    from ddltrace.analyses.fit_hashemi import star_center

    def comm(rank, peer, t):
        return {"rank": rank, "lane": "main", "name": "MPI_Send", "category": "comm", "start_ns": t, "dur_ns": 5,
                "peer": peer}

    for w in (2, 3):
        store = TraceStore.create(tmp_path / f"w{w}", run={"command": "python ps.py --batch 64", "samples": D})
        server = [comm(0, r, 100 * i + r) for i in range(10) for r in range(1, w + 1)]
        store.add_rank(0, pd.DataFrame(server), role="rank")
        for r in range(1, w + 1):
            rows = [comm(r, 0, 100 * i + r) | {"step": i} for i in range(10)]
            rows.append(comm(r, 1 + r % w, 5000))  # one message between workers (an initialisation token)
            store.add_rank(r, pd.DataFrame(rows), role="rank")
        assert star_center(store) == 0
    runs = measurements_from_stores([tmp_path / "w2", tmp_path / "w3"])
    assert list(runs["w"]) == [2.0, 3.0] and list(runs["b"]) == [64.0, 64.0]


def test_a_worker_whose_timeline_is_lost_still_counts(tmp_path):
    """A 2-worker run of the committed series with one worker's timeline file gone is still a run at w = 2 (each
    worker did d / 2 samples): its phase is the other worker's, not a 1-worker run's; where the lost rank could be
    the server (no roles, no workload's server_rank, no star left) the store is refused unless --servers says which
    ranks serve."""
    import json
    import shutil
    import warnings

    from ddltrace.analyses.fit_hashemi import measurements_from_store

    series = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"
    whole = measurements_from_store(series / "par-w2" / "store")
    for lost in (0, 2):
        shutil.copytree(series / "par-w2" / "store", tmp_path / f"lost{lost}")
        (tmp_path / f"lost{lost}" / "timeline" / f"rank-0000{lost}.parquet").unlink()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        run = measurements_from_store(tmp_path / "lost2")
        assert (run["w"], run["workers_read"], run["ranks"]) == (2.0, 1.0, 3.0)
        assert run["phase_s"] <= whole["phase_s"]  # the slowest of the workers read
        said = measurements_from_store(tmp_path / "lost0")  # the workload's server_rank says rank 0 served
        manifest = tmp_path / "lost0" / "manifest.json"
        manifest.write_text(json.dumps({k: v for k, v in json.loads(manifest.read_text()).items() if k != "workload"}))
        with pytest.raises(DdltraceError, match=r"lost0: rank\(s\) 0 left out .*--servers N"):
            measurements_from_store(tmp_path / "lost0")
        served = measurements_from_store(tmp_path / "lost0", servers=1)
    assert (served["w"], served["workers_read"], served["phase_s"]) == (2.0, 2.0, whole["phase_s"])
    assert (said["w"], said["workers_read"], said["phase_s"]) == (2.0, 2.0, whole["phase_s"])


QUOTA = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd-quota"


@pytest.mark.parametrize("damage, named", [
    (lambda m: m["constants"]["c_u"].update(value=float("nan")), "constant c_u = nan"),
    (lambda m: m["constants"]["c_p"].update(value=-1e-4), "constant c_p = -0.0001"),
    (lambda m: m["constants"].pop("c_p"), "no constant c_p"),
    (lambda m: m["constants"]["c_p"].update(stderr=-1e-6), "c_p's stderr = -1e-06"),
    (lambda m: m.update(confidence=2), "confidence = 2"),
    (lambda m: m["measurements"][0].update(w="two"), "measurements[0].w must be a number"),
    (lambda m: m["profile"]["constants"]["C_muladd"].update(value=-1.0), "profile: constant C_muladd = -1.0"),
    (lambda m: m["profile"]["allowance"].update(cores=-2), "profile: allowance cores = -2"),
])
def test_a_damaged_model_file_is_named_not_predicted(tmp_path, capsys, damage, named):
    """A model fitted to the committed A runs, then one number of it damaged: `model predict --profile B.json`
    refuses it in one line naming the file and the number (it printed NaN phases, intervals up to 21 h from a
    negative stderr, predicted with a missing c_p as 0, or raised a traceback)."""
    import json

    from ddltrace.cli import main

    model = tmp_path / "model.json"
    stores = [str(QUOTA / f"A-compute-w{w}" / "store") for w in (1, 2, 4)]
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--profile", str(QUOTA / "A.json"),
                 "--servers", "1", "--out", str(model)]) == 0
    predict = ["model", "predict", str(model), "--workers", "1,2,4", "--profile", str(QUOTA / "B.json")]
    assert main(predict) == 0
    capsys.readouterr()
    data = json.loads(model.read_text())
    damage(data)
    model.write_text(json.dumps(data))
    assert main(predict) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "model.json" in err and named in err


def test_a_model_fitted_from_a_csv_with_a_text_column_still_predicts(tmp_path, capsys):
    """The model-file check reads only the run numbers predictions use: a --csv run's own text column (a note)
    is kept in the model and does not make it damaged."""
    from ddltrace.cli import main

    (tmp_path / "runs.csv").write_text("w,b,phase_s,note\n1,64,8.7,first\n2,64,4.1,second\n4,64,2.0,third\n")
    model = tmp_path / "model.json"
    assert main(["model", "fit", "--csv", str(tmp_path / "runs.csv"), "--samples", "16384", "--epochs", "2",
                 "--n-w", "40000", "--n-f", "2", "--out", str(model)]) == 0
    assert main(["model", "predict", str(model), "--workers", "1,2"]) == 0
    assert "4.1 s" in capsys.readouterr().out
