"""The knee w* that `model predict MODEL --profile B.json` reports for B, with its interval (issue 17): the fit's
constants drawn as the fit's own knee interval draws them (Student's t with the fit's covariance), each draw carried
to B with both profiles' constants drawn from their uncertainties. On the committed real runs of the reference job
on A (sample_traces/ps-sgd-quota, A's and the quota B's calibrated profiles)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyses.fit_hashemi import knee_interval
from ddltrace.cli import main
from ddltrace.commands.model import _workload
from ddltrace.models import transfer

DATA = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd-quota"
A_STORES = [str(DATA / f"A-compute-w{w}" / "store") for w in (1, 2, 4)]
FIT = ["--dnn", "mlp-2-10k-2", "--servers", "1", "--profile", str(DATA / "A.json"), "--serial-comm"]

pytestmark = pytest.mark.skipif(not (DATA / "A-compute-w1" / "store").exists(),
                                reason="the committed sample traces are absent")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The closed loop fitted on A's runs at w = 1, 2, 4: as Hashemi's constants, and in CPU seconds."""
    root = tmp_path_factory.mktemp("knee")
    plain, shares = root / "plain.json", root / "shares.json"
    assert main(["model", "fit", *A_STORES, *FIT, "--out", str(plain)]) == 0
    assert main(["model", "fit", *A_STORES, *FIT, "--cpu-shares", "--out", str(shares)]) == 0
    return root, plain, shares


def _predict(model: Path, profile: Path, capsys) -> dict:
    capsys.readouterr()
    assert main(["model", "predict", str(model), "--workers", "1,2,4", "--profile", str(profile), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _knee_on_b(model: Path, profile: Path, capsys) -> dict:
    return _predict(model, profile, capsys)["knee"]["profile"]


def _uncertain(scale: float, path: Path, source: Path = DATA / "B.json") -> Path:
    """B's profile (or ``source``) with every uncertainty (constants and the compute curves' spreads) ``scale``
    times."""
    b = json.loads(source.read_text())
    for entry in b["constants"].values():
        if isinstance(entry, dict) and "uncertainty" in entry:
            entry["uncertainty"] *= scale
    for curve in b["curves"].values():
        for point in curve["points"]:
            for key in ("spread", "cpu_spread"):
                if key in point:
                    point[key] *= scale
    path.write_text(json.dumps(b))
    return path


def test_the_knee_on_b_lies_in_its_interval_and_widens_with_bs_uncertainty(models, capsys):
    root, plain, _ = models
    knee = _knee_on_b(plain, DATA / "B.json", capsys)
    interval = knee["interval"]
    assert interval["low_w"] <= knee["w"] <= interval["high_w"]
    assert interval["draws"] == 2000 and "T(w + 1) > T(w) (1 - 0.5 / (w + 1))" in interval["definition"]
    # B's calibration ten times as uncertain: the same knee, a wider interval (3 to 3 workers as calibrated)
    vague = _knee_on_b(plain, _uncertain(10.0, root / "B-vague.json"), capsys)
    assert vague["w"] == knee["w"]
    assert vague["interval"]["high_w"] - vague["interval"]["low_w"] > interval["high_w"] - interval["low_w"]
    assert vague["interval"]["low_w"] <= vague["w"] <= vague["interval"]["high_w"]
    # the text says it with its unit and its definition
    assert main(["model", "predict", str(plain), "--workers", "1,2,4", "--profile", str(DATA / "B.json")]) == 0
    text = capsys.readouterr().out
    assert f"knee on B: w* = {knee['w']:.3g} workers" in text
    assert (f"  95 % interval: {interval['low_w']:.3g} to {interval['high_w']:.3g} workers, over 2000 draws of the "
            "fit's constants drawn together from Student's t with the fit's covariance") in text
    assert "  w* on B: the fewest workers w from which one more worker gains less than half" in text


def test_with_as_own_profile_as_b_the_interval_is_the_fits(models, capsys, tmp_path):
    """B's profile is A's own: each profile constant is one measurement on both sides (its ratio exactly 1), so the
    knee on B's interval is the fit's own draws under the knee's rule: for the fit in CPU seconds, whose knee is
    that rule on A's predicted phases, the interval model.json records."""
    _, plain, shares = models
    fitted = json.loads(shares.read_text())
    assert fitted["knee"]["ci"][0] <= fitted["knee"]["w"] <= fitted["knee"]["ci"][1]  # was [null, null]
    on_a = _knee_on_b(shares, DATA / "A.json", capsys)["interval"]
    assert [on_a["low_w"], on_a["high_w"]] == fitted["knee"]["ci"]
    # Hashemi's constants: the fit's draws (its covariance, its seed) with each draw's knee by the rule on A; A's
    # calibration taken 30 times as uncertain (in the model and as B), which drawn apart for A and B would widen the
    # knee's interval to 1 to 4 workers, and the phase's at w = 1 from 1.48-1.64 s to 0.4 s-16 h
    model = json.loads(plain.read_text())
    vague_a = _uncertain(30.0, tmp_path / "A-vague.json", DATA / "A.json")
    model["profile"] = transfer.profile_record(json.loads(vague_a.read_text()), str(vague_a), 8.0)
    (tmp_path / "model.json").write_text(json.dumps(model))
    constants, wl, _, _ = _workload(model, str(plain), None)
    runs = model["measurements"]
    expected = knee_interval(lambda k, _: transfer.knee_over_w(
        lambda w: transfer.phase_at(k, wl, w, model["profile"], runs), wl, 64)[0],
        constants, model["covariance"], model["confidence"])
    out = _predict(tmp_path / "model.json", vague_a, capsys)
    got = out["knee"]["profile"]["interval"]
    assert (got["low_w"], got["high_w"]) == expected
    assert got["low_w"] < got["high_w"]  # (the fit's uncertainty alone: 1 to 2 workers)
    for row in out["rows"]:  # the phase's interval likewise holds the fit's uncertainty alone
        assert row["profile_s"] == pytest.approx(row["predicted_s"], rel=1e-9)
        assert row["profile_low_s"] < row["profile_s"] < row["profile_high_s"] < 1.2 * row["profile_low_s"]


def test_where_the_interval_is_not_drawn_predict_says_why(models, capsys):
    root, plain, shares = models
    knee = _knee_on_b(shares, DATA / "B.json", capsys)
    assert knee["interval"]["why_not"].startswith("B's quota holds every rank at w = 1, 2, 3")
    old = json.loads(plain.read_text())  # a model file written before the fit kept its covariance
    del old["covariance"]
    (root / "old.json").write_text(json.dumps(old))
    knee = _knee_on_b(root / "old.json", DATA / "B.json", capsys)
    assert knee["w"] == 3 and "has no covariance of its fitted constants" in knee["interval"]["why_not"]
    assert main(["model", "predict", str(root / "old.json"), "--workers", "1,2,4", "--profile",
                 str(DATA / "B.json")]) == 0
    assert "  knee on B's interval: not drawn: " in capsys.readouterr().out
