"""``model predict MODEL --profile B.json`` prints B's initialisation, carried from A's runs through the disks' r_d
(ddltrace.models.init_transfer; docs/MODELS.md, "The disk B"), on real saved runs: the disk B's first repeat of
diskb-2 (sample_traces/ps-sgd-disk: the job read its file cold at w = 1, 2, 4 on A; calibrate's disk section on A
and inside B, whose data disk read at 256 KiB/s)."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ddltrace.analyses.fit_hashemi import measurements_from_store
from ddltrace.cli import main

DISK = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd-disk"
STORES = [str(DISK / f"A-cold-init-w{w}" / "store") for w in (1, 2, 4)]


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The model fitted on A's three runs with A's disk section apart, and one without it."""
    folder = tmp_path_factory.mktemp("init-on-b")
    fit = ["model", "fit", *STORES, "--dnn", "mlp-2-10k-2", "--servers", "1", "--profile", str(DISK / "A.json")]
    assert main([*fit, "--disk-profile", str(DISK / "A-disk.json"), "--out", str(folder / "model.json")]) == 0
    assert main([*fit, "--out", str(folder / "no-disk.json")]) == 0
    return folder / "model.json", folder / "no-disk.json"


def _from_the_files(model: Path) -> dict[int, float]:
    """B's initialisation per w computed here from the files: the fit's r_d x s n_f d (mlp-2-10k-2 in doubles, 2
    features, 8,192 samples) plus (r_d(B) - r_d(A)) x the median of the bytes A's workers fetched from the device."""
    r_d = {k: json.loads((DISK / f"{k}-disk.json").read_text())["constants"]["r_d"]["value"] for k in "AB"}
    device = statistics.median(r["device_bytes"] for s in STORES for r in json.loads(
        (Path(s).parent / "ground_truth.json").read_text())["init"] if r["role"] == "worker")
    fitted = json.loads(model.read_text())["constants"]["r_d"]
    assert fitted["source"] == "fitted"
    return {w: w * (fitted["value"] * 8 * 2 * 8192 + (r_d["B"] - r_d["A"]) * device) for w in (1, 2, 4)}


def test_predict_prints_bs_initialisation_carried_through_r_d(models, capsys):
    model, _ = models
    expected = _from_the_files(model)
    argv = ["model", "predict", str(model), "--workers", "1,2,4", "--profile", str(DISK / "B.json"),
            "--disk-profile", str(DISK / "B-disk.json")]
    code, out, _ = _run(capsys, argv)
    assert code == 0
    lines = out[out.index("initialisation on B"):].splitlines()
    assert "carried through r_d" in lines[0] and "s/B" in lines[1] and "KiB/s" in lines[1]
    for w, value in expected.items():
        (line,) = [x for x in lines if x.split()[:1] == [str(w)]]
        assert line.split()[1:3] == [f"{value:.4g}", "s"], line
        low, high = (float(x) for x in line[line.index("[") + 1:line.index("]")].replace(" s", "").split(","))
        assert low < value < high
    # diskb-2's B measured 0.737, 1.390, 2.735 s at w = 1, 2, 4 in this repeat (docs/MODELS.md): within 5 %
    assert list(expected.values()) == pytest.approx([0.737, 1.390, 2.735], rel=0.05)


def test_the_benchmark_prints_the_initialisation_model_predict_carries(tmp_path, capsys):
    """benchmarks/new_hardware.py on two machines with the disk sections apart (--disk-a, --disk-b) fits and predicts
    through 'model fit --disk-profile' and 'model predict --disk-profile' (the same carry, not one of its own), and
    prints each figure of its initialisation columns as the files give it: here A's stores stand for B's runs too,
    so that the measured and error columns are filled."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import new_hardware

    capsys.readouterr()
    assert new_hardware.main(["--out", str(tmp_path), "--profile-a", str(DISK / "A.json"), "--runs-a", *STORES,
                              "--profile-b", str(DISK / "B.json"), "--runs-b", *STORES, "--disk-a",
                              str(DISK / "A-disk.json"), "--disk-b", str(DISK / "B-disk.json")]) == 0
    out = capsys.readouterr().out
    # from the files: A's initialisations as the fit reads them; T_init = w r_d s n_f d fitted through the origin
    # (shared storage; mlp-2-10k-2 in doubles, 2 features, 8,192 samples); both disks' r_d; D the median of the
    # bytes A's workers fetched from the device
    init = {w: measurements_from_store(s, servers=1)["init_s"] for w, s in zip((1, 2, 4), STORES, strict=True)}
    size = 8 * 2 * 8192
    r_d = sum(w * size * t for w, t in init.items()) / sum((w * size) ** 2 for w in init)
    x = np.array([w * size for w in init])
    resid = np.array(list(init.values())) - r_d * x
    half = stats.t.ppf(0.975, 2) * math.sqrt(resid @ resid / 2 / (x @ x))  # the fit's 95 % interval of r_d
    entries = {k: json.loads((DISK / f"{k}-disk.json").read_text())["constants"]["r_d"] for k in "AB"}
    disks = {k: entry["value"] for k, entry in entries.items()}
    spread = stats.norm.ppf(0.975) * math.hypot(entries["A"]["uncertainty"], entries["B"]["uncertainty"])
    device = statistics.median(r["device_bytes"] for s in STORES for r in json.loads(
        (Path(s).parent / "ground_truth.json").read_text())["init"] if r["role"] == "worker")
    lines = out[out.index("  initialisation (shared storage, T_init = w x T_disk)"):].splitlines()
    assert (f"T_disk = {1e3 * r_d * size:.1f} ms (r_d {r_d:.3g} s/B x s n_f d = {size} B); disk r_d A "
            f"{disks['A']:.3g}, B {disks['B']:.3g} s/B ({1 / disks['B'] / 2**10:.0f} KiB/s); a worker fetched "
            f"{device:.0f} B from the device") in lines[0]
    for w, measured in init.items():
        predicted = w * (r_d * size + (disks["B"] - disks["A"]) * device)
        (line,) = [x for x in lines[2:5] if x.split()[:1] == [str(w)]]
        words = line.replace("[", " ").replace(",", " ").replace("]", " ").split()
        assert words[1:5] == [f"{measured:.3f}", "s", f"{measured:.3f}", "s"], line
        assert words[5:7] == [f"{predicted:.3f}", "s"], line
        delta = disks["B"] - disks["A"]
        assert words[7:9] == [f"{w * (max(0.0, r_d - half) * size + (delta - spread) * device):.3f}",
                              f"{w * ((r_d + half) * size + (delta + spread) * device):.3f}"], line
        assert words[9:11] == [f"{100 * (predicted / measured - 1):+.1f}", "%"], line
        assert words[11:13] == [f"{w * r_d * size * disks['B'] / disks['A']:.3f}", "s"], line
    # and results.json keeps the figures model predict gave
    (result,) = json.loads((tmp_path / "results.json").read_text())
    model = tmp_path / "model.json"
    assert [r["predicted_s"] for r in result["init"]["rows"]] == pytest.approx(list(_from_the_files(model).values()),
                                                                              rel=1e-12)


def test_predict_says_what_bs_initialisation_lacks(models, capsys):
    model, no_disk = models
    code, out, _ = _run(capsys, ["model", "predict", str(model), "--workers", "1", "--profile", str(DISK / "B.json")])
    assert code == 0
    assert ("initialisation on B: not predicted: " + str(DISK / "B.json") + ": no disk section (r_d") in out
    code, out, _ = _run(capsys, ["model", "predict", str(no_disk), "--workers", "1", "--profile", str(DISK / "B.json"),
                                 "--disk-profile", str(DISK / "B-disk.json"), "--json"])
    assert code == 0
    assert "no disk section of A" in json.loads(out)["init_on_b"]["missing"]
    # A's profile with its disk section: r_d held at the device's, the fit says the carry is not possible and why
    code, out, _ = _run(capsys, ["model", "fit", *STORES, "--dnn", "mlp-2-10k-2", "--servers", "1", "--profile",
                                 str(DISK / "A-disk.json"), "--disk-profile", str(DISK / "A-disk.json")])
    assert code == 0 and "initialisation to carry to B's disk: not possible: r_d was held at the fit's profile" in out
    # a --disk-profile without a disk section is bad input: one line, exit 2
    code, out, err = _run(capsys, ["model", "predict", str(model), "--workers", "1", "--profile",
                                   str(DISK / "B.json"), "--disk-profile", str(DISK / "A.json")])
    assert code == 2 and err.strip().splitlines() == [f"ddltrace: error: {DISK / 'A.json'}: no disk section (r_d, "
                                                      "s/B; 'ddltrace calibrate --only disk' measures it)"]


def test_fit_prints_the_disk_section_it_keeps_for_the_carry(tmp_path, capsys):
    """'model fit --disk-profile A-disk.json' prints A's r_d and the bytes a worker fetched from A's device: the
    disk section's value and the median of the workers' device_bytes in the ground_truth.json beside A's stores."""
    entries = [r for s in STORES for r in json.loads((Path(s).parent / "ground_truth.json").read_text())["init"]
               if r["role"] == "worker"]
    r_d = json.loads((DISK / "A-disk.json").read_text())["constants"]["r_d"]["value"]
    code, out, _ = _run(capsys, ["model", "fit", *STORES, "--dnn", "mlp-2-10k-2", "--servers", "1", "--profile",
                                 str(DISK / "A.json"), "--disk-profile", str(DISK / "A-disk.json")])
    assert code == 0
    assert (f"initialisation to carry to B's disk: A's r_d {r_d:.4g} s/B ({DISK / 'A-disk.json'}), a worker fetched "
            f"{statistics.median(r['device_bytes'] for r in entries):.0f} B from A's device (median over "
            f"{len(entries)} workers)") in out.splitlines()
    assert len(entries) == 1 + 2 + 4
