"""benchmarks/new_hardware.py's B runs (``--b-runs N``, and several B stores per w on two real machines): B's measured
phase at a w is the median of its runs, printed with each run, their range, and each model's error against the median
and against every run. On real saved runs of the quota B (sample_traces/ps-sgd-quota); no job is run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ddltrace.analyses.fit_hashemi import measurements_from_store


def _new_hardware():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import new_hardware

    return new_hardware


QUOTA = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd-quota"


def _cli_json(capsys, argv: list[str]) -> dict:
    from ddltrace.cli import main

    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_b_runs_are_compared_through_their_median_with_each_runs_error_kept(tmp_path, capsys):
    """Three real runs of the job on the quota B at w = 1 (sample_traces/ps-sgd-quota: predict2-4's and predict2-5's
    two repeats, the same job, 3.2-4.9 s): B's measured phase is their median, its range (max - min) / median, and
    each model's error is against the median, with every run's own error kept beside."""
    nh = _new_hardware()
    stores = [str(QUOTA / name / "store") for name in ("quota-compute-w1", "quota-compute-w1-run2",
                                                       "quota-compute-w1-run3")]
    phases = [float(measurements_from_store(s, servers=1)["phase_s"]) for s in stores]
    assert max(phases) > 1.2 * min(phases)  # one run of B is one draw
    b = nh.b_rows_from_stores(stores)
    assert list(b) == [1]
    assert b[1]["phases_s"] == phases and b[1]["stores"] == stores
    assert b[1]["phase_s"] == sorted(phases)[1]
    assert b[1]["spread"] == pytest.approx((max(phases) - min(phases)) / sorted(phases)[1])
    a = nh.b_rows_from_stores([str(QUOTA / f"A-compute-w{w}" / "store") for w in (1, 2, 4)])
    model = tmp_path / "model.json"
    _cli_json(capsys, ["model", "fit", *(a[w]["store"] for w in (1, 2, 4)), "--dnn", nh.DNN, "--servers", "1",
                       "--profile", str(QUOTA / "A.json"), "--json", "--out", str(model)])
    prediction = _cli_json(capsys, ["model", "predict", str(model), "--workers", "1,2", "--profile",
                                    str(QUOTA / "B.json"), "--json"])
    result = nh.compare(prediction, prediction, a, b)
    row = result["rows"][0]
    predicted = prediction["rows"][0]["profile_s"]
    assert row["measured_s"] == b[1]["phase_s"] and row["measured_runs_s"] == phases
    assert row["error"] == pytest.approx(predicted / sorted(phases)[1] - 1)
    assert row["run_errors"] == pytest.approx([predicted / p - 1 for p in phases])
    assert "measured_s" not in result["rows"][1]  # B ran at w = 1 only
    waits = [float(measurements_from_store(s, servers=1)["server_update_wait_s"]) for s in stores]
    assert row["update_waits_s"] == waits
    # A run again after B's runs (here the quota's first two runs stand for A's before and after): how far the
    # machine moved meanwhile, from the files
    again = {}
    for name in ("quota-compute-w1", "quota-compute-w1-run2"):
        truth = json.loads((QUOTA / name / "ground_truth.json").read_text())
        again[name] = {**nh.run_row(QUOTA / name / "store"),
                       "compute_per_sample_s": truth["compute_per_sample_s"]["measured"]}
    before, after = again["quota-compute-w1"], again["quota-compute-w1-run2"]
    result["a_again"] = nh.drift({1: before}, {1: after})
    moved = after["phase_s"] / before["phase_s"] - 1
    assert result["a_again"][1]["phase_moved"] == pytest.approx(moved)
    assert result["a_again"][1]["compute_moved"] == pytest.approx(
        after["compute_per_sample_s"] / before["compute_per_sample_s"] - 1)
    nh.print_comparison("quota B", result)
    printed = capsys.readouterr().out
    assert (f"A again after B's runs (not fitted): phase {after['phase_s']:.3f} s against {before['phase_s']:.3f} s "
            f"before them ({100 * moved:+.1f} %)") in printed
    listed = ", ".join(f"{1e3 * x:.2f}" for x in waits)
    assert f"the server's mean wait per update it received on B: {listed} ms" in printed
    assert f"B's 3 runs: {', '.join(f'{p:.3f}' for p in phases)} s; median {sorted(phases)[1]:.3f} s" in printed
    assert f"({100 * b[1]['spread']:.0f} % of the median)" in printed
    assert "max " + " / ".join(f"{100 * (predicted / p - 1):+.0f}" for p in phases) + " %" in printed
    result.update(b="quota", shape="compute")
    nh.summary([result])
    printed = capsys.readouterr().out
    within = sum(abs(predicted / p - 1) <= 0.10 for p in phases)
    assert f"A's phase moved {100 * moved:+.1f} .. {100 * moved:+.1f} %" in printed
    assert (f"max: {int(abs(row['error']) <= 0.10)} of 1 predictions within 10 % of B's median" in printed
            and f"of B's single runs {within} of 3 within 10 %" in printed), printed
    # --fit-a both: beside each row and in the summary, the errors of the fit on A's first runs alone (here the
    # same fit stands for it: the figures printed are first_only's, taken from compare's rows)
    alone = nh.first_only(result)
    assert alone[1] == {"error": row["error"], "serial_error": row["serial_error"]} and alone[2] == {}
    result.update(first_only=alone, fit_a="both")
    nh.print_comparison("quota B", result)
    printed = capsys.readouterr().out
    assert (f"fitted on A's first run at each w alone: max {100 * row['error']:+.1f} %, closed loop "
            f"{100 * row['serial_error']:+.1f} %") in printed
    assert "A again after B's runs (fitted too)" in printed
    nh.summary([result])
    assert (f"max, fitted on A's first run at each w alone: {int(abs(row['error']) <= 0.10)} of 1 within 10 %"
            in capsys.readouterr().out)
    # the knee is judged on the medians (B's w = 2 here is A's run, only to give the knee a second w)
    b2 = {**b, 2: nh.b_median([{"phase_s": a[2]["phase_s"], "store": a[2]["store"]}])}
    sides = nh.compare(prediction, prediction, a, b2)["knee_sides"]
    assert sides[0]["gain"] == pytest.approx(1 - a[2]["phase_s"] / sorted(phases)[1])


def test_the_servers_wait_per_update_is_its_receives_of_the_gradients():
    """``server_update_wait_s``: the mean time of the server's blocking receives of updates (the largest messages it
    receives; ps-sgd's gradients of n_w = 40,000 doubles, not its pull requests), checked against the store."""
    from ddltrace.analyses.fit_hashemi import server_update_wait_s
    from ddltrace.store import TraceStore

    for name in ("A-compute-w1", "A-compute-w4", "quota-compute-w1"):
        (_, frame), = TraceStore.open(QUOTA / name / "store").iter_timeline([0])
        received = frame[frame["name"].isin(["MPI_Recv", "MPI_Recv_c"])]
        updates = received[received["bytes"] >= received["bytes"].max() / 2]
        assert updates["bytes"].min() >= 40_000 * 8 and len(updates) < len(received)  # the pulls are left out
        start, end = int(frame["start_ns"].min()), int((frame["start_ns"] + frame["dur_ns"]).max())
        assert server_update_wait_s(frame, start, end + 1) == pytest.approx(updates["dur_ns"].mean() / 1e9)
        assert server_update_wait_s(frame, end + 1, end + 2) != server_update_wait_s(frame, end + 1, end + 2)  # NaN
