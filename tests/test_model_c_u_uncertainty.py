"""QA s20b #3 and #6: c_u measured from the server's trace (--c-u-from-trace, --cpu-shares) carries the spread of
the runs' own figures into the intervals (it was held exact: a server-bound prediction's 95 % interval had zero
width, 635 ms [635 ms, 635 ms] at w = 32 on ps-sgd's par-w1..8); and the notes said of a c_u held at 0 that the
errors were "lower without it (4.4 % vs 4.4 %)" and, in predict, "no server busy time in the runs" of runs that
recorded it. Checked against the committed stores' own figures."""

import json
import re
import statistics
from dataclasses import replace
from pathlib import Path

from ddltrace.analyses.fit_hashemi import constants_from_model
from ddltrace.cli import main
from ddltrace.models import hashemi

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
PAR = [str(SAMPLES / "ps-sgd" / f"par-w{w}" / "store") for w in (1, 2, 4, 8)]


def _per_update(run: dict) -> float:
    return run["server_busy_s"] / (run["d"] * run["epochs"] / run["b"])


def test_c_u_from_the_trace_has_the_runs_spread_in_the_intervals(tmp_path, capsys):
    out = tmp_path / "mcu.json"
    assert main(["model", "fit", *PAR, "--c-u-from-trace", "--out", str(out)]) == 0
    model = json.loads(out.read_text())
    figures = [_per_update(run) for run in model["measurements"]]
    entry = model["constants"]["c_u"]
    assert sorted(entry["runs"]) == sorted(figures) and entry["spread"] == [min(figures), max(figures)]
    assert entry["value"] == statistics.median(figures)  # the point value is the median, as before
    assert max(figures) / min(figures) > 3  # the runs disagree: 0.698 to 2.6 ms per update
    capsys.readouterr()
    assert main(["model", "predict", str(out), "--workers", "1,8,16,32", "--json"]) == 0
    rows = {row["w"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    k, _ = constants_from_model(model)
    wl = hashemi.Workload(d=model["workload"]["d"], b=model["knee"]["batch"], n_w=model["workload"]["n_w"],
                          epochs=model["workload"]["epochs"])
    for w in (16, 32):
        row = rows[w]
        assert row["predicted_s"] == wl.epochs * hashemi.t_phase(w, wl, k)  # the point prediction is unchanged
        assert row["predicted_high_s"] > row["predicted_low_s"]
        for c_u in figures:  # each run's own c_u predicts inside the interval
            own = wl.epochs * hashemi.t_phase(w, wl, replace(k, c_u=c_u))
            assert row["predicted_low_s"] * (1 - 1e-9) <= own <= row["predicted_high_s"] * (1 + 1e-9), (w, c_u)
    # at w = 32 the server binds in every draw (no profile: no transfers): the interval is the runs' own
    # predictions, E (d / b) c_u, 0.357 to 1.33 s (QA's by hand)
    assert abs(rows[32]["predicted_low_s"] - wl.epochs * wl.d / wl.b * min(figures)) < 1e-9
    assert abs(rows[32]["predicted_high_s"] - wl.epochs * wl.d / wl.b * max(figures)) < 1e-9
    # the knee's interval holds the knees of the runs' own c_u (it held c_p's spread only: 7.08 to 21.3)
    low, high = model["knee"]["ci"]
    for c_u in figures:
        assert low <= hashemi.knee(wl, replace(k, c_u=c_u))[0] <= high, c_u
    assert main(["model", "fit", *PAR, "--c-u-from-trace"]) == 0
    text = capsys.readouterr().out
    assert f"[{min(figures):.4e}, {max(figures):.4e}]  measured from the server's trace" in text


def test_a_c_u_held_at_0_is_said_as_it_is(tmp_path, capsys):
    profile = str(SAMPLES / "ps-sgd-quota" / "A.json")
    out = tmp_path / "mA.json"
    assert main(["model", "fit", *PAR[:3], "--dnn", "mlp-2-10k-2", "--profile", profile, "--out", str(out)]) == 0
    model = json.loads(out.read_text())
    assert model["constants"]["c_u"]["value"] == 0  # held at 0: not supported by the runs
    note = next(n for n in model["notes"] if n.startswith("c_u is not supported"))
    same = re.search(r"the same without it as with it \(([\d.]+) % both, equal to 4 decimals\)", note)
    lower = re.search(r"lower without it \(([\d.]+) % vs ([\d.]+) %\)", note)
    assert same or (lower and float(lower[1]) < float(lower[2])), note  # never two equal figures called lower
    capsys.readouterr()
    assert main(["model", "predict", str(out), "--workers", "1,2", "--profile", profile]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "per update (c_u)" in x)
    figures = [_per_update(run) for run in model["measurements"]]
    assert "no server busy time in the runs" not in line
    assert (f"c_u is 0 in the model, so none of the server's measured busy time is in it (the runs measured "
            f"{1e3 * min(figures):.3g} to {1e3 * max(figures):.3g} ms per update, median "
            f"{1e3 * statistics.median(figures):.3g} ms)") in line, line
