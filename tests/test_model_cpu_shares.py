"""The closed loop in CPU seconds (``model fit --serial-comm --cpu-shares``) and the quota loop (issue 17).

On a machine with fewer cores than ranks the reference job's phases are flat in w: the ranks wait for the cores.
The closed loop fitted freely put all of it into c_u (the server) and c_p at 0, so a B that slows compute carried
the workers' compute as the server's. Fitted with each run's sampled share of a core, c_p is the workers' CPU per
sample. And under a CFS quota a rank is not a core half as fast: it runs in its periods' budgets, so a compute
that fits in the budget runs at full speed and the loop locks onto the periods, differently for each start of
the ranks' periods (the quota B's w = 1 batch took 10.9-21.3 ms over ten runs with the same shares)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ddltrace.analyses.fit_hashemi import ALONE_SHARE, HashemiFit, measurements_from_store, measurements_from_stores
from ddltrace.cli import main
from ddltrace.models import quota_loop

DATA = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd-quota"
A_STORES = [str(DATA / f"A-compute-w{w}" / "store") for w in (1, 2, 4)]
PERIOD = 0.010


def test_the_quota_loop_without_a_quota_is_the_closed_loop_in_a_row():
    compute, message, server_cpu, sleep = 5.2e-3, 1e-4, 3e-4, 2e-3
    got = quota_loop.cycles(1, compute, message, server_cpu, sleep, 1.0, PERIOD, draws=3)
    # one worker with a core of its own: its compute, the weights, the push and the update, in a row (each step of
    # the loop is a hundredth of the period)
    assert got == pytest.approx(np.full(3, compute + 2 * message + server_cpu + sleep), abs=5 * PERIOD / 100)


def test_a_compute_that_fits_in_the_quota_runs_at_full_speed_and_the_loop_locks_onto_the_periods():
    # the server-bound shape: the worker computes 4 ms, the server sleeps 14 ms per update; half a core each
    compute, message, server_cpu, sleep, quota = 4e-3, 5e-5, 1e-4, 14e-3, 0.5
    got = quota_loop.cycles(1, compute, message, server_cpu, sleep, quota, PERIOD, draws=12)
    step = PERIOD / 100
    alone = compute + 2 * message + server_cpu + sleep
    as_half_a_core = (compute + 2 * message + server_cpu) / quota + sleep
    assert (got >= alone - step).all()
    # the worker polls its budget away while the server sleeps, waits for its next period and computes there at
    # full speed: at best two whole periods a batch, shorter than a core half as fast would take
    assert got.min() == pytest.approx(2 * PERIOD, abs=2 * step)
    assert got.min() < as_half_a_core - 10 * step
    # and at worse starts of the ranks' periods, whole periods more (the batch locks onto them)
    assert got.max() >= 2.5 * PERIOD - 2 * step


def test_where_the_ranks_periods_start_moves_the_batch():
    # the compute-bound shape at w = 1: 5.2 ms of compute per batch, just over the 5 ms budget, a busy server
    got = quota_loop.cycles(1, 5.2e-3, 1e-4, 3e-4, 0.0, 0.5, PERIOD, draws=12)
    assert got.max() / got.min() > 1.3
    assert got.min() > 5.2e-3 / 0.5  # the compute itself crosses a throttled stretch every time




def test_periods_half_a_period_apart_lock_the_loop_and_are_left_out():
    # three workers at half a core each, the first one's period starting half a period after the server's: the two
    # poll in turns and never run together, so the weights never pass in the loop (the real ranks' socket buffers
    # carry them): NaN, where the same start 0.15 of a period earlier plays out
    compute, message, server_cpu, period = 4.8e-3, 9e-5, 4e-4, 0.002
    others = [0.1 * period, 0.2 * period]
    locked = quota_loop.cycle(3, compute, message, server_cpu, 0.0, 0.5, period, np.array([0.0, 0.5 * period, *others]))
    assert math.isnan(locked)
    played = quota_loop.cycle(3, compute, message, server_cpu, 0.0, 0.5, period,
                              np.array([0.0, 0.35 * period, *others]))
    assert compute / 0.5 < played < 20 * period
    # the starts of a real B's knee (w = 3 at a period of 2 ms, where the loop used to raise): one of twelve locks
    draws = quota_loop.cycles(3, compute, message, server_cpu, 0.0, 0.5, period)
    assert np.isnan(draws).sum() == 1 and np.isfinite(draws).sum() == quota_loop.STARTS - 1


def test_the_cpu_shares_fit_finds_the_workers_cpu_on_real_runs():
    runs = measurements_from_stores(A_STORES, servers=1)
    truth = json.loads((DATA / "A-compute-w1" / "ground_truth.json").read_text())
    at_w1 = runs[runs["w"] == 1].iloc[0]
    cpu_per_sample = truth["compute_per_sample_s"]["measured"] * at_w1["cpu_share"]  # s of CPU per sample
    settings = {"d": 16384, "n_f": 2, "n_w": 40000, "profile": {"r_net": 2.4e-10, "lat_net": 1e-5}}
    free = HashemiFit(**settings, serial=True).fit(runs)
    shares = HashemiFit(**settings, serial=True, cpu_shares=True).fit(runs)
    # fitted freely, the closed loop takes the ranks' wait for the 2 cores as the server's: c_p near 0
    assert free.constants_.c_p < 0.1 * cpu_per_sample
    # at each run's share of a core, c_p is the workers' own CPU per sample, and the round of the ranks' wait for
    # the cores is a few of the scheduler's slices
    assert shares.constants_.c_p == pytest.approx(cpu_per_sample, rel=0.3)
    assert 1e-3 < shares.constants_.t_slice < 0.1
    # c_u is the server's busy time per update where every rank had a core (w = 1 on A's 2 cores); beyond the
    # cores its blocking sends wait for workers off theirs, and its busy time per update grows with w
    busy = runs["server_busy_s"] / (runs["d"] / runs["b"])
    alone = (runs["cpu_share"] >= ALONE_SHARE) & (runs["server_cpu_share"] >= ALONE_SHARE)
    assert list(runs["w"][alone]) == [1]
    assert shares.constants_.c_u == pytest.approx(busy[alone].iloc[0])
    assert (busy[~alone] > 2 * busy[alone].iloc[0]).all()
    assert free.constants_.c_u > 3 * shares.constants_.c_u
    # the plain --c-u-from-trace fit (no shares to charge the waits) keeps the median over every run
    traced = HashemiFit(**settings, serial=True, c_u_from_trace=True).fit(runs)
    assert traced.constants_.c_u == pytest.approx(np.median(busy))
    assert shares.rms_relative_error_ < 0.1


def test_predict_plays_the_loop_where_the_quota_holds_every_rank(tmp_path, capsys):
    model = tmp_path / "model.json"
    assert main(["model", "fit", *A_STORES, "--dnn", "mlp-2-10k-2", "--servers", "1", "--profile",
                 str(DATA / "A.json"), "--serial-comm", "--cpu-shares", "--out", str(model)]) == 0
    fitted = json.loads(model.read_text())
    assert fitted["workload"]["cpu_shares"] is True
    capsys.readouterr()
    assert main(["model", "predict", str(model), "--workers", "1,2,4", "--profile", str(DATA / "B.json"),
                 "--json"]) == 0
    rows = {row["w"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    # B's quota (half a core) holds every rank at w = 1 and 2 (3 ranks x 0.5 <= 2 cores), not at w = 4 (A's
    # ranks had 0.39 of a core there)
    assert rows[1].get("quota_loop_s") and rows[2].get("quota_loop_s")
    assert rows[4].get("quota_loop_s") is None
    for w in (1, 2):
        assert rows[w]["profile_s"] == rows[w]["quota_loop_s"]
        assert rows[w]["quota_loop_low_s"] < rows[w]["quota_loop_high_s"]  # the periods' starts move the loop
    # B's own run at w = 1 lies within the interval, which spans the starts of the ranks' periods
    b_w1 = measurements_from_store(DATA / "quota-compute-w1" / "store", servers=1)["phase_s"]
    assert rows[1]["profile_low_s"] <= b_w1 <= rows[1]["profile_high_s"]
    # a model fitted without --cpu-shares is carried as before (no loop)
    plain = tmp_path / "plain.json"
    assert main(["model", "fit", *A_STORES, "--dnn", "mlp-2-10k-2", "--servers", "1", "--profile",
                 str(DATA / "A.json"), "--serial-comm", "--out", str(plain)]) == 0
    capsys.readouterr()
    assert main(["model", "predict", str(plain), "--workers", "1,2", "--profile", str(DATA / "B.json"),
                 "--json"]) == 0
    assert all(row.get("quota_loop_s") is None for row in json.loads(capsys.readouterr().out)["rows"])


def test_cpu_shares_needs_the_closed_loop_and_the_runs_shares(tmp_path, capsys):
    assert main(["model", "fit", *A_STORES, "--servers", "1", "--n-w", "40000", "--cpu-shares"]) == 2
    assert "--cpu-shares: only with --serial-comm" in capsys.readouterr().err
    runs = measurements_from_stores(A_STORES, servers=1).drop(columns=["cpu_share"])
    with pytest.raises(Exception, match="no workers' CPU share"):
        HashemiFit(d=16384, n_w=40000, serial=True, cpu_shares=True).fit(runs)


def test_without_a_profile_more_workers_than_the_runs_share_the_cores_the_runs_showed(tmp_path, capsys):
    model = tmp_path / "model.json"
    assert main(["model", "fit", *A_STORES, "--dnn", "mlp-2-10k-2", "--servers", "1", "--serial-comm",
                 "--cpu-shares", "--out", str(model)]) == 0
    capsys.readouterr()
    assert main(["model", "predict", str(model), "--workers", "4,8", "--what-if", "c_p=2x", "--json"]) == 0
    rows = {row["w"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    # the runs' ranks had 0.39 of a core at w = 4 (5 ranks on the 2 cores): 8 workers share the same 2 cores, so
    # the phase cannot halve (a core each would make it a sixth); the what-if is taken at the same shares
    assert rows[8]["predicted_s"] > 0.6 * rows[4]["predicted_s"]
    assert rows[8]["what_if_s"] > 0.6 * rows[4]["what_if_s"]
    assert rows[4]["what_if_s"] > 1.3 * rows[4]["predicted_s"]


def _knee_of(phases: dict[int, float]) -> float:
    """The knee by the rule model predict states, from predicted phases at w = 1, 2, ...: the first w from which one
    more worker gains less than half of its ideal share, T(w + 1) > T(w) (1 - 0.5 / (w + 1))."""
    for w in sorted(phases)[:-1]:
        if phases[w + 1] > phases[w] * (1 - 0.5 / (w + 1)):
            return float(w)
    raise AssertionError(f"no knee within the predicted w: {phases}")


def test_the_knee_and_the_what_if_are_the_predictions_own_at_the_shares(tmp_path, capsys):
    """A model in CPU seconds: the knee printed (model.json's and predict's, on A and on B) and the what-if on B are
    computed from the constants at each w at the ranks' shares, as the predicted phases are: on these runs A's
    phases are flat in w (the ranks wait for the 2 cores), so A's knee is at 1 worker, not Hashemi's w* of the
    constants at a whole core (6.5)."""
    model = tmp_path / "model.json"
    assert main(["model", "fit", *A_STORES, "--dnn", "mlp-2-10k-2", "--servers", "1", "--profile",
                 str(DATA / "A.json"), "--serial-comm", "--cpu-shares", "--out", str(model)]) == 0
    fitted = json.loads(model.read_text())
    doubled = tmp_path / "doubled.json"  # the same model with c_p twice: what the what-if c_p=2x must predict
    fitted["constants"]["c_p"]["value"] *= 2
    doubled.write_text(json.dumps(fitted))
    workers = list(range(1, 9))
    predict = ["--workers", ",".join(map(str, workers)), "--profile", str(DATA / "B.json"), "--json"]
    capsys.readouterr()
    assert main(["model", "predict", str(model), *predict, "--what-if", "c_p=2x"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert main(["model", "predict", str(doubled), *predict]) == 0
    twice = json.loads(capsys.readouterr().out)
    rows = {row["w"]: row for row in out["rows"]}
    on_a = {w: rows[w]["predicted_s"] for w in workers}
    on_b = {w: rows[w]["profile_s"] for w in workers}
    assert out["knee"]["model"]["w"] == _knee_of(on_a) == json.loads(model.read_text())["knee"]["w"]
    assert out["knee"]["profile"]["w"] == _knee_of(on_b)
    # the what-if on B is the prediction of the changed model on B, at every w and in its knee
    changed = {row["w"]: row["profile_s"] for row in twice["rows"]}
    assert [rows[w]["what_if_s"] for w in workers] == pytest.approx([changed[w] for w in workers], rel=1e-9)
    assert out["knee"]["what_if"]["w"] == _knee_of(changed) == twice["knee"]["profile"]["w"]
    assert rows[1]["what_if_s"] > 1.5 * rows[1]["profile_s"]


def test_a_cpu_shares_knee_on_a_is_drawn_with_a_what_if_and_at_another_batch(tmp_path, capsys):
    """A --cpu-shares model's knee on A is a search over w in each draw: predict gave its interval only at the fit's
    batch without what-ifs (model.json's knee.ci) and said 'not drawn' otherwise. It is now drawn there too
    (drawn_knees.searched_knees of each draw's phases with the what-if); drawn the same way at the fit's batch with
    no what-if it is model.json's knee.ci, and a what-if that slows compute (c_p 0.25x) moves the knee's interval
    out with the knee, which lies within it."""
    from analyses.fit_hashemi import knee_interval
    from ddltrace.commands.model import _knee_interval_on_a, _workload

    model = tmp_path / "model.json"
    assert main(["model", "fit", *A_STORES, "--dnn", "mlp-2-10k-2", "--servers", "1", "--profile",
                 str(DATA / "A.json"), "--serial-comm", "--cpu-shares", "--out", str(model)]) == 0
    fitted = json.loads(model.read_text())
    capsys.readouterr()
    assert main(["model", "predict", str(model), "--workers", "1,2,4", "--what-if", "c_p=0.25x", "--batch", "128",
                 "--json"]) == 0
    knee = json.loads(capsys.readouterr().out)["knee"]
    for name in ("model", "what_if"):
        drawn = knee[name]["interval"]
        assert "why_not" not in drawn, drawn
        assert drawn["low_w"] <= knee[name]["w"] <= (drawn["high_w"] or math.inf)
    constants, wl, fit_b, _ = _workload(fitted, str(model), None)
    from ddltrace.models import drawn_knees, transfer

    fresh = knee_interval(lambda drawn: drawn_knees.searched_knees(lambda w: drawn_knees.phases_at(
        drawn, wl, w, fitted["profile"], fitted["measurements"]), 2000, transfer.KNEE_MOST), constants,
        fitted["covariance"], fitted["confidence"])
    assert list(fresh) == fitted["knee"]["ci"]
    assert _knee_interval_on_a(fitted, str(model), constants, wl, 1.0, fit_b, None, fitted["knee"]["w"])["ci"] == (
        tuple(fitted["knee"]["ci"]))


def test_the_fit_of_a_run_and_the_prediction_at_its_w_count_the_same_messages():
    """One count of a worker's messages per batch (transfer.messages_per_batch): the runs at that w, else all runs.
    The real runs with w = 4's count raised to 4 sends a batch (as if its trace had counted one more): the fit of
    that run and the model's prediction at w = 4 take the same waits, so the prediction is the fit's there; at a w
    no run measured, the median over the runs (3 messages)."""
    from ddltrace.models import transfer

    runs = measurements_from_stores(A_STORES, servers=1)
    runs.loc[runs["w"] == 4, "sent_per_batch"] = 4.0
    records = runs.to_dict("records")
    assert transfer.messages_per_batch(records, 4) == 5.0
    assert transfer.messages_per_batch(records, 8) == 3.0
    fit = HashemiFit(d=16384, n_f=2, n_w=40000, profile={"r_net": 2.4e-10, "lat_net": 1e-5}, serial=True,
                     cpu_shares=True).fit(runs)
    fitted = fit.divergence_.query("term == 'phase'").set_index("w")["predicted_s"]
    for w in (1, 2, 4):
        predicted = transfer.phase_at(fit.constants_, fit.workload_, w, {}, records)["phase_s"]
        assert predicted == pytest.approx(fitted[w], rel=1e-12)


def test_a_what_if_on_the_schedulers_round_changes_the_waits_it_draws():
    """t_slice is spent in the constants at w (the messages' waits for ranks off their cores, in c_b): a what-if on
    it is the model with that round, on A and carried to B, where the ranks share the cores (w = 4)."""
    from dataclasses import replace

    from ddltrace.models import transfer

    runs = measurements_from_stores(A_STORES, servers=1)
    records = runs.to_dict("records")
    fit = HashemiFit(d=16384, n_f=2, n_w=40000, profile={"r_net": 2.4e-10, "lat_net": 1e-5}, serial=True,
                     cpu_shares=True).fit(runs)
    k, wl = fit.constants_, fit.workload_
    a, b = (transfer.profile_record(json.loads((DATA / f"{x}.json").read_text()), x, 8) for x in "AB")
    for on_b in ({}, {"b": b, "counts": {"muladds": 120000.0, "neurons": 10002.0}}):
        changed = transfer.phase_at(k, wl, 4, a, records, what_if={"t_slice": ("scale", 3.0)}, **on_b)["phase_s"]
        model = transfer.phase_at(replace(k, t_slice=3 * k.t_slice), wl, 4, a, records, **on_b)["phase_s"]
        assert changed == pytest.approx(model, rel=1e-12)
        assert changed > 1.01 * transfer.phase_at(k, wl, 4, a, records, **on_b)["phase_s"]


def test_predict_counts_the_starts_that_lock_the_loop(tmp_path, capsys):
    """The quota B of the committed runs with a period of 2 ms (a B's quota_period_s, as in a run that found it):
    at w = 3 one of the twelve starts of the ranks' periods locks the loop (model predict raised there): the row
    counts it and the printed line says so, the mean being of the others."""
    model, b = tmp_path / "model.json", tmp_path / "B-2ms.json"
    assert main(["model", "fit", *A_STORES, "--dnn", "mlp-2-10k-2", "--servers", "1", "--profile",
                 str(DATA / "A.json"), "--serial-comm", "--cpu-shares", "--out", str(model)]) == 0
    profile = json.loads((DATA / "B.json").read_text())
    profile["machine"]["cpu_allowance"]["quota_period_s"] = 0.002
    b.write_text(json.dumps(profile))
    predict = ["model", "predict", str(model), "--workers", "1,2,3", "--profile", str(b)]
    capsys.readouterr()
    assert main([*predict, "--json"]) == 0
    rows = {row["w"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    assert [rows[w]["quota_loop_locked"] for w in (1, 2, 3)] == [0, 0, 1]
    assert rows[3]["quota_loop_low_s"] <= rows[3]["quota_loop_s"] <= rows[3]["quota_loop_high_s"]
    assert main(predict) == 0
    text = capsys.readouterr().out
    assert text.count("of the starts left out") == 1
    assert "(1 of the starts left out: they lock the loop, a message's two ranks never running together)" in text
