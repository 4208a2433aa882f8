"""The knee w* that `model predict MODEL --profile B.json` reports for B, with its interval (issue 17): the fit's
constants drawn as the fit's own knee interval draws them (Student's t with the fit's covariance), each draw carried
to B with both profiles' constants drawn from their uncertainties. On the committed real runs of the reference job
on A (sample_traces/ps-sgd-quota, A's and the quota B's calibrated profiles)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from ddltrace.analyses.fit_hashemi import KNEE_DRAWS, knee_draws, knee_interval
from ddltrace.cli import main
from ddltrace.commands.model import _on_profile, _workload
from ddltrace.models import drawn_knees, hashemi, transfer

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
    times (benchmarks/knee_draws.py's)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from knee_draws import uncertain

    return uncertain(scale, source, path)


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
    # knee's interval to 1 to 4 workers, and the phase's at w = 1 from A's own (1.44-2.15 s) to 0.4 s-16 h
    model = json.loads(plain.read_text())
    vague_a = _uncertain(30.0, tmp_path / "A-vague.json", DATA / "A.json")
    model["profile"] = transfer.profile_record(json.loads(vague_a.read_text()), str(vague_a), 8.0)
    (tmp_path / "model.json").write_text(json.dumps(model))
    constants, wl, _, _ = _workload(model, str(plain), None)
    runs = model["measurements"]
    expected = knee_interval(lambda drawn: np.array([transfer.knee_over_w(
        lambda w, i=i: transfer.phase_at(drawn_knees.one_draw(drawn, i), wl, w, model["profile"], runs), wl, 64)[0]
        for i in range(KNEE_DRAWS)]), constants, model["covariance"], model["confidence"])
    out = _predict(tmp_path / "model.json", vague_a, capsys)
    got = out["knee"]["profile"]["interval"]
    assert (got["low_w"], got["high_w"]) == expected
    assert got["low_w"] < got["high_w"]  # (the fit's uncertainty alone: 1 to 2 workers)
    for row in out["rows"]:  # the phase's interval likewise holds the fit's uncertainty alone: A's phase interval
        assert row["profile_s"] == pytest.approx(row["predicted_s"], rel=1e-9)
        assert (row["profile_low_s"], row["profile_high_s"]) == pytest.approx(
            (row["predicted_low_s"], row["predicted_high_s"]), rel=1e-9)
        assert row["profile_low_s"] < row["profile_s"] < row["profile_high_s"]


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


def _each(drawn, count: int, of) -> np.ndarray:
    """``of(draw, i)`` of the first ``count`` draws, one at a time (the functions on numbers)."""
    return np.array([of(drawn_knees.one_draw(drawn, i), i) for i in range(count)], dtype=float)


def _floats(drawn, count: int, of) -> np.ndarray:
    """:func:`_each`, checking that each draw's result is a Python float (what a caller of numbers formats)."""
    def checked(one, i):
        got = of(one, i)
        assert type(got) is float, got
        return got
    return _each(drawn, count, checked)


def _same_knees(wl, k) -> np.ndarray:
    """Hashemi's w* (and the phase, with kappa) of the draws of c_p, c_u and t_phase_min about ``k``, each with a
    standard deviation of twice its value (a third of them clipped at 0), from the same functions given the arrays
    of the draws and given one draw's numbers at a time."""
    names = ["c_p", "c_u", "t_phase_min"]
    drawn = knee_draws(k, {"names": names, "matrix": np.diag([(2 * getattr(k, name)) ** 2 for name in names]).tolist(),
                           "dof": 3})
    assert all((getattr(drawn, name) == 0).sum() > 300 for name in names)
    fast = hashemi.w_star(wl, drawn)
    assert fast.shape == (KNEE_DRAWS,)
    assert np.array_equal(fast, _floats(drawn, KNEE_DRAWS, lambda one, _: hashemi.knee(wl, one)[0]))
    assert np.array_equal(fast, _floats(drawn, KNEE_DRAWS, lambda one, _: hashemi.w_star(wl, one)))
    contended = dataclasses.replace(drawn, kappa=np.where(np.arange(KNEE_DRAWS) % 2, 0.05, 0.0))
    for w in (1, 3, 7.5):
        assert np.array_equal(hashemi.t_phase(w, wl, contended),
                              _floats(contended, KNEE_DRAWS, lambda one, _, w=w: hashemi.t_phase(w, wl, one)))
    return fast


def test_hashemis_knee_of_all_draws_at_once_is_each_draws_own(models):
    """The fit's knee interval takes Hashemi's w* of 2,000 draws at once (hashemi.w_star of arrays of the draws):
    the same numbers as hashemi.knee and w_star one draw at a time (Python floats), and likewise hashemi.t_phase
    with kappa in half the draws, for the max and the closed loop, with draws clipped at 0 (c_u 0 and t_phase_min
    0: neither the server nor a floor ever binds, the upper end inf), server knees at or below 0 workers (the
    formula's own, no longer clipped at 1), floors."""
    _, plain, _ = models
    model = json.loads(plain.read_text())
    constants, wl, _, _ = _workload(model, str(plain), None)
    k = dataclasses.replace(constants, t_phase_min=wl.d * constants.c_p / 4)  # a floor about w = 4
    knees = _same_knees(dataclasses.replace(wl, serial=False), k)
    assert np.isinf(knees).sum() > 10 and (knees <= 0).sum() > 10 and (np.isfinite(knees) & (knees > 1)).sum() > 100
    # the closed loop with no network (a message takes no time): inf where c_u and t_phase_min are drawn at 0
    knees = _same_knees(wl, dataclasses.replace(k, r_net=0.0, lat_net=0.0))
    assert np.isinf(knees).sum() > 10 and np.isfinite(knees).sum() > 100


def _same_knees_on_b(path: Path, profile: Path, serial_wl: bool, serial: bool, count: int, most: int) -> np.ndarray:
    """The first ``count`` draws' phases on B at w = 1, 2, 5 and their knees by the rule, at once and one draw at a
    time: a model's (``serial_wl``: as the closed loop, else Hashemi's max; ``serial``: predict's --serial-comm)
    knee on B's draws."""
    model = json.loads(path.read_text())
    constants, wl, _, _ = _workload(model, str(path), None)
    wl = dataclasses.replace(wl, serial=serial_wl)
    moved = _on_profile(model, str(path), str(profile), constants, wl, serial)
    a, b, counts, runs = moved["a"], moved["b"], moved["counts"], model["measurements"]
    z_a, z_b = transfer.profile_draws(a, b, count)
    pairs = [tuple({name: float(z[i]) for name, z in side.items()} for side in (z_a, z_b)) for i in range(count)]
    server = transfer.server_measured(a, runs)
    drawn = knee_draws(constants, model["covariance"], count)
    ratios = transfer.profile_ratios(wl, counts, a, b, z_a, z_b)

    def phase(one, i, w, on_b=True):
        return transfer.phase_at(one, wl, w, a, runs, *((b, counts, serial) if on_b else ()), z_a=pairs[i][0],
                                 z_b=pairs[i][1], server=server)["phase_s"]

    for w in (1, 2, 5):
        on_a = drawn_knees.phases_at(drawn, wl, w, a, runs)
        assert np.array_equal(on_a, _each(drawn, count, lambda one, i, w=w: phase(one, i, w, on_b=False)))
        fast = drawn_knees.phases_at(drawn, wl, w, a, runs, b, serial, ratios, server)
        if fast is None:  # B's quota holds every rank at w: the loop is played, one draw at a time
            assert wl.cpu_shares and transfer.phase_at(constants, wl, w, a, runs, b, counts)["loop"]
            continue
        assert np.array_equal(fast, _each(drawn, count, lambda one, i, w=w: phase(one, i, w)))
        carried = transfer.carry(drawn, wl, a, b, ratios, serial, w, runs, server)[0]  # each constant on B
        ones = [transfer.transfer(drawn_knees.one_draw(drawn, i), wl, counts, a, b, pairs[i][0], pairs[i][1], serial,
                                  w, runs, server)[0] for i in range(count)]
        for name in hashemi.NAMES:
            assert np.array_equal(np.broadcast_to(getattr(carried, name), (count,)),
                                  [getattr(one, name) for one in ones]), name
    fast = drawn_knees.searched_knees(
        lambda w: drawn_knees.phases_at(drawn, wl, w, a, runs, b, serial, ratios, server), count, most,
        lambda w, i: phase(drawn_knees.one_draw(drawn, i), i, w))
    slow = _each(drawn, count, lambda one, i: transfer.knee_search(lambda w: transfer.phase_at(
        one, wl, w, a, runs, b, counts, serial, z_a=pairs[i][0], z_b=pairs[i][1], server=server), wl, most)[0])
    assert np.array_equal(fast, slow)
    return fast


def test_the_knee_on_b_of_all_draws_at_once_is_each_draws_own(models):
    """The knee on B's draws at once (drawn_knees.phases_at, searched_knees): each draw's phases on A and B, its
    constants on B (transfer.carry given the arrays of the draws against transfer.transfer given each draw's numbers)
    and its knee by the rule, the same numbers as transfer.phase_at and knee_search one draw at a time; for the closed
    loop, Hashemi's max and the max with --serial-comm, B's calibration as is and 30 times as uncertain (knees from
    1 to past the search), and the --cpu-shares model, on A and on B, where B's quota loop is played one draw at
    a time."""
    root, plain, shares = models
    assert (_same_knees_on_b(plain, DATA / "B.json", True, False, 200, 64) == 3.0).mean() > 0.9  # (3 to 3)
    vaguer = _same_knees_on_b(plain, _uncertain(30.0, root / "B-vaguer.json"), True, False, 200, 16)
    assert len(set(vaguer)) >= 3 and np.isinf(vaguer).any()
    _same_knees_on_b(plain, DATA / "B.json", False, False, 100, 64)
    _same_knees_on_b(plain, DATA / "B.json", False, True, 100, 64)
    _same_knees_on_b(shares, DATA / "B.json", True, False, 2, 4)


def test_the_phase_interval_on_b_of_all_draws_at_once_is_each_draws_own(models, capsys):
    """B's phase interval (transfer.interval) carries all draws at once: the fit's draws from its covariance (as A's
    interval and the knee's draw them; before: each constant drawn on its own standard error, which overstates the
    interval where c_p and c_u trade off) with both profiles' draws. Its ends at w = 1, 2, 4, and a what-if's, are the
    percentiles of the same draws carried one at a time by transfer.transfer, and they are predict's."""
    _, plain, _ = models
    model = json.loads(plain.read_text())
    constants, wl, _, _ = _workload(model, str(plain), None)
    moved = _on_profile(model, str(plain), str(DATA / "B.json"), constants, wl, False)
    a, b, counts, runs = moved["a"], moved["b"], moved["counts"], model["measurements"]
    count, workers, what_if = 300, [1, 2, 4], {"r_net": ("scale", 2.0)}
    drawn = transfer.bounded_draws(knee_draws(constants, model["covariance"], count), model["constants"], count)
    fast = transfer.interval(drawn, wl, counts, a, b, workers, 0.95, what_ifs=(None, what_if), runs=runs,
                             draws=count)
    z_a, z_b = transfer.profile_draws(a, b, count)
    server = transfer.server_measured(a, runs)
    for m, change in enumerate((None, what_if)):
        phases = np.array([[wl.epochs * hashemi.t_phase(w, wl, (lambda on_b: on_b.scaled(change) if change else on_b)(
            transfer.transfer(drawn_knees.one_draw(drawn, i), wl, counts, a, b,
                              {name: float(z[i]) for name, z in z_a.items()},
                              {name: float(z[i]) for name, z in z_b.items()}, w=w, runs=runs, server=server)[0]))
                            for w in workers] for i in range(count)])
        low, high = np.percentile(phases, [2.5, 97.5], axis=0)
        assert np.allclose(fast[m][0], low, rtol=1e-12) and np.allclose(fast[m][1], high, rtol=1e-12)
        assert (low < high).all()
    rows = _predict(plain, DATA / "B.json", capsys)["rows"]
    full = transfer.bounded_draws(knee_draws(constants, model["covariance"], transfer.DRAWS), model["constants"],
                                  transfer.DRAWS)
    (low, high), = transfer.interval(full, wl, counts, a, b, workers, 0.95, runs=runs)
    assert [r["profile_low_s"] for r in rows] == pytest.approx(list(low), rel=1e-9)
    assert [r["profile_high_s"] for r in rows] == pytest.approx(list(high), rel=1e-9)


def _same_what_if_phases(path: Path, what_if: dict, count: int = 100) -> None:
    """The first ``count`` draws' phases with ``what_if`` at w = 1, 2, 5, on B and on A, at once and one at a time."""
    model = json.loads(path.read_text())
    constants, wl, _, _ = _workload(model, str(path), None)
    moved = _on_profile(model, str(path), str(DATA / "B.json"), constants, wl, False)
    a, b, counts, runs = moved["a"], moved["b"], moved["counts"], model["measurements"]
    z_a, z_b = transfer.profile_draws(a, b, count)
    pairs = [tuple({name: float(z[i]) for name, z in side.items()} for side in (z_a, z_b)) for i in range(count)]
    ratios = transfer.profile_ratios(wl, counts, a, b, z_a, z_b)
    server = transfer.server_measured(a, runs)
    drawn = knee_draws(constants, model["covariance"], count)

    def phase(one, i, w, on_b=True):
        return transfer.phase_at(one, wl, w, a, runs, *((b, counts, False) if on_b else ()), what_if=what_if,
                                 z_a=pairs[i][0], z_b=pairs[i][1], server=server)["phase_s"]

    for w in (1, 2, 5):
        fast = drawn_knees.phases_at(drawn, wl, w, a, runs, b, False, ratios, server, what_if)
        if fast is not None:  # (None where B's quota loop is played: one draw at a time there)
            assert np.array_equal(fast, _each(drawn, count, lambda one, i, w=w: phase(one, i, w)))
        on_a = _each(drawn, count, lambda one, i, w=w: phase(one, i, w, on_b=False))
        assert np.array_equal(drawn_knees.phases_at(drawn, wl, w, a, runs, what_if=what_if), on_a)


def test_the_what_if_s_knee_on_b_is_drawn_as_the_knee_on_b(models, capsys):
    """predict --profile --what-if said the what-if's knee on B's interval was not drawn. It is now drawn as the knee
    on B's is, with the what-if's changes made to B's constants at each w (drawn_knees.phases_at with what_if): each
    draw's phase on B with the what-if is transfer.phase_at's one draw at a time, on A too (a t_slice what-if
    changed before the messages' waits, for the --cpu-shares model); predict prints the interval, and it holds the
    what-if's knee."""
    root, plain, shares = models
    _same_what_if_phases(plain, {"c_p": ("scale", 3.0), "c_u": ("scale", 0.5)})
    _same_what_if_phases(shares, {"t_slice": ("scale", 2.0)})
    capsys.readouterr()
    assert main(["model", "predict", str(plain), "--workers", "1,2,4", "--profile", str(DATA / "B.json"),
                 "--what-if", "c_p=3x", "--what-if", "c_u=0.5x", "--json"]) == 0
    knee = json.loads(capsys.readouterr().out)["knee"]["what_if"]
    assert "why_not" not in knee["interval"], knee
    assert knee["interval"]["low_w"] <= knee["w"] <= knee["interval"]["high_w"]
    assert main(["model", "predict", str(plain), "--workers", "1,2,4", "--profile", str(DATA / "B.json"),
                 "--what-if", "c_p=3x"]) == 0
    text = capsys.readouterr().out
    assert "knee with c_p=3x on B: w* = " in text and "the what-if's knee's interval: not drawn" not in text


def test_a_knee_interval_under_one_worker_says_what_it_means(tmp_path, capsys):
    """The max model fitted on A's runs reads w* 1.04 [0.784 to 1.36]: a knee under one worker (Hashemi's w* is
    continuous) is a server term already the larger at w = 1, which the fit now says; the closed loop's interval
    (1 to 1.49) does not reach under 1 and says nothing of it. Which applies is read from each model file."""
    said = {}
    for name, options in (("max", FIT[:-1]), ("closed", FIT)):
        capsys.readouterr()
        assert main(["model", "fit", *A_STORES, *options, "--out", str(tmp_path / f"{name}.json")]) == 0
        text = capsys.readouterr().out
        low = json.loads((tmp_path / f"{name}.json").read_text())["knee"]["ci"][0]
        said[name] = (low < 1, "the interval's low end is under 1 worker" in text)
    assert said == {"max": (True, True), "closed": (False, False)}
