"""Runs of one job: the scaling series (analyses/same_job.py) and the scaling table built on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.same_job import job_of, series_labels, series_of
from ddltrace.analyses.scaling import scaling_notes, scaling_table
from ddltrace.analyses.synthetic import write_ps_store

TRACES = Path(__file__).parent.parent / "sample_traces"
NAMES = {"par-w1": "ps-sgd/par-w1", "par-w2": "ps-sgd/par-w2", "par-w4": "ps-sgd/par-w4",
         "seq-w4": "ps-sgd/seq-w4", "saturated-w4": "ps-sgd/server-saturated-w4",
         "quota-A-w4": "ps-sgd-quota/A-compute-w4", "disk-w1": "ps-sgd-disk/A-cold-init-w1",
         "disk-w2": "ps-sgd-disk/A-cold-init-w2", "disk-w4": "ps-sgd-disk/A-cold-init-w4"}


@pytest.fixture(scope="module")
def runs():
    if not all((TRACES / path / "store").is_dir() for path in NAMES.values()):
        pytest.skip("sample_traces is not complete in this tree")
    return {name: analyze_store(TRACES / path / "store") for name, path in NAMES.items()}


def test_runs_differing_only_in_workers_are_one_job(runs):
    assert job_of(runs["par-w1"]) == job_of(runs["par-w4"])
    for other in ("seq-w4", "saturated-w4", "quota-A-w4", "disk-w2"):  # init, server_cost, compute, samples differ
        assert job_of(runs[other]) != job_of(runs["par-w4"]), other
    assert job_of(runs["disk-w1"]) == job_of(runs["disk-w4"])


def test_series_do_not_depend_on_the_order_given(runs):
    given = list(runs.values())
    forward, backward = series_of(given), series_of(given[::-1])
    assert {k: [r.name for r in v] for k, v in forward.items()} == {k: [r.name for r in v] for k, v in backward.items()}
    labels = series_labels(forward)
    assert len(set(labels.values())) == len(labels)  # each series its own name
    par = next(k for k, v in forward.items() if runs["par-w1"] in v)
    assert [r.name for r in forward[par]] == [runs[n].name for n in ("par-w1", "par-w2", "par-w4")]
    assert "init=sequential" in labels[next(k for k, v in forward.items() if runs["seq-w4"] in v)]


def test_the_scaling_table_compares_runs_of_one_job_only(runs):
    """QA: par-w1, -w2, -w4 with the quota job's A-compute-w4 and the disk job's A-cold-init-w2 were one series by
    batch size: the disk job's w = 2 row read S 16.12x, E 805.8 % against par-w1 (another job: 16384 samples and 2
    epochs against 8192 and 1). Now par is a series, and the two others are left out, each with why."""
    given = [runs[n] for n in ("par-w1", "par-w2", "par-w4", "quota-A-w4", "disk-w2")]
    table = scaling_table(given)
    pd.testing.assert_frame_equal(table, scaling_table(given[::-1]))
    by_store = table.set_index("store")
    par = by_store.loc[[runs[n].name for n in ("par-w1", "par-w2", "par-w4")]]
    assert par["series"].nunique() == 1 and par["left_out"].isna().all()
    assert par["speedup_steady"].tolist() == pytest.approx(
        [1.0, *(par["steady_ns"].iloc[0] / par["steady_ns"].iloc[1:]).tolist()])
    for name in ("quota-A-w4", "disk-w2"):
        row = by_store.loc[runs[name].name]
        assert np.isnan(row["speedup_steady"]) and np.isnan(row["efficiency_steady"])
        assert row["left_out"] == "no other run of its job at its batch size"
        assert row["series"] not in set(par["series"])
    notes = [n for n in scaling_notes(table) if "left out" in n]
    assert len(notes) == 2 and all("left out, no other run of its job at its batch size" in n for n in notes)
    assert any(n.startswith(runs["disk-w2"].name) and "samples=8192" in n for n in notes)


def test_several_runs_of_one_job_at_w0_are_the_median_base(runs, tmp_path):
    """Runs of one job at one w each keep their row; the base T(w0) is their median, whatever their order."""
    stores = [analyze_store(write_ps_store(tmp_path / f"s{i}", workers=w, steps=24 // w, seed=i))
              for i, w in enumerate((1, 1, 1, 2))]
    table = scaling_table(stores)
    pd.testing.assert_frame_equal(table, scaling_table(stores[::-1]))
    base = float(np.median(table.loc[table["workers"] == 1, "steady_ns"]))
    w2 = table[table["workers"] == 2].iloc[0]
    assert w2["speedup_steady"] == pytest.approx(base / w2["steady_ns"])
    alone = scaling_table(stores[:3])
    assert alone["speedup_steady"].isna().all()
    assert set(alone["left_out"]) == {"its job's 3 runs at its batch size are all at w = 1"}


def test_undescribed_stores_are_one_job_per_framework_never_a_described_one(runs, tmp_path):
    """A store with no workload entry (an imported trace, a synthetic store) cannot be told from another: the
    undescribed stores of one framework given together are one job, never joined with a described job."""
    synthetic = [analyze_store(write_ps_store(tmp_path / f"w{w}", workers=w, steps=8)) for w in (1, 2)]
    assert job_of(synthetic[0]) == job_of(synthetic[1]) == {"undescribed": "synthetic"}
    groups = series_of([*synthetic, runs["par-w1"], runs["par-w2"]])
    assert sorted(len(v) for v in groups.values()) == [2, 2]
    assert "undescribed (synthetic), batch 64" in series_labels(groups).values()


def test_a_wrapper_that_changes_the_machine_parts_jobs(tmp_path):
    """ps-sgd-quota's runs on the CPU-quota B (its command under a cgroup's in-quota) have A's configuration: the
    programs the job runs under tell them apart, so B's three w = 1 runs are left out, not A's base."""
    paths = sorted((TRACES / "ps-sgd-quota").glob("*/store"))
    if len(paths) != 6:
        pytest.skip("sample_traces/ps-sgd-quota is not complete in this tree")
    quota = [analyze_store(p) for p in paths]
    table = scaling_table(quota).set_index("store")
    a = table.loc[[str(p) for p in paths if p.parent.name.startswith("A-")]]
    b = table.loc[[str(p) for p in paths if p.parent.name.startswith("quota-")]]
    assert a["series"].nunique() == b["series"].nunique() == 1 and set(a["series"]) != set(b["series"])
    assert "wrapper=in-quota" in b["series"].iloc[0] and a["left_out"].isna().all()
    assert set(b["left_out"]) == {"its job's 3 runs at its batch size are all at w = 1"}
    assert a["speedup_steady"].iloc[0] == 1.0


def test_both_lemma_columns_are_normalised_to_the_base(runs):
    """QA: par-w2, -w4, -w8's E lemma (own) read 85.1 % at w0 = 2 beside E lemma (base) 100.0 % and a measured
    100 %: the own column was lemma(R_O, w), not normalised to E(w0) = 1 as the others are."""
    from ddltrace.analyses.scaling import lemma_efficiency

    par = [analyze_store(TRACES / "ps-sgd" / f"par-w{w}" / "store") for w in (2, 4, 8)]
    table = scaling_table(par)
    assert table["efficiency_lemma_own"].iloc[0] == table["efficiency_lemma_base"].iloc[0] == 1.0
    for r_o, w, own in zip(table["overhead_ratio"], table["workers"], table["efficiency_lemma_own"], strict=True):
        assert own == pytest.approx(lemma_efficiency(r_o, w) / lemma_efficiency(r_o, 2))
    assert np.isnan(scaling_table([runs["par-w4"], runs["seq-w4"]])["efficiency_lemma_own"]).all()  # left out


def test_efficiency_above_100_percent_gets_a_note(runs):
    """QA: the disk series' E steady 179.1 % and 200.2 % (seq-w2's 113.3 %) were printed with no word. A run with E
    above 100 % gets a note saying so and what its R_O against the base's says: here below it, the base run's
    overhead hidden behind compute at the larger w; no note for a run at or under 100 %."""
    table = scaling_table([runs[f"disk-w{w}"] for w in (1, 2, 4)])
    notes = scaling_notes(table)
    e = table.set_index("workers")["efficiency_steady"]
    assert e[2] == pytest.approx(1.791, abs=0.001) and e[4] == pytest.approx(2.002, abs=0.001)
    assert [n.split(" (w = ")[1][0] for n in notes] == ["2", "4"]
    assert notes[1].startswith(f"{runs['disk-w4'].name} (w = 4): E above 100 % (steady 200.2 %), superlinear: its R_O")
    assert "is below the base's 57.4 %: the base run's overhead (waits, exposed communication) hid behind compute" \
        in notes[1]
    assert not scaling_notes(scaling_table([runs["par-w1"], runs["disk-w1"]]))[2:]  # two left out, no E at all
