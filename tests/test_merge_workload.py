"""``ddltrace merge A B --out C`` of two plain stores and the job's ``workload`` entry (its configuration: w, the
server rank, the batch, the ps-sgd options; ddltrace/workload_entry.py). Two stores of one run keep the run's entry,
its ground truth's path made relative to C; stores of different runs, or of which one has no entry, keep none, and
one line on stderr and a note in C's manifest name the stores and the fields that differ.

The stores are parts of real runs of the ps-sgd job (sample_traces/ps-sgd), made as a user splits a store: `ddltrace
export --ranks` of some of its ranks and `ddltrace import` of the export (which restores the run's entry, its
ground truth's path absolute). The merge of a node's part is tested on a simulated cluster
(tests/test_run_cluster_local.py::test_the_job_s_workload_entry_survives_the_merge_of_a_node_s_part)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddltrace.cli import main
from ddltrace.store import TraceStore

PS_SGD = Path(__file__).resolve().parents[1] / "sample_traces" / "ps-sgd"


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict[str, Path]:
    """Stores of some ranks of par-w4 (ranks 0-2: ``par-0-2``, 3-4: ``par-3-4``) and of seq-w4 (3-4: ``seq-3-4``),
    each with its run's workload entry; ``par-3-4-bare``: par-w4's ranks 3-4 imported from an export without the
    entry (a store whose run did not record it, as before ddltrace recorded it for any command of the job)."""
    folder = tmp_path_factory.mktemp("parts")
    made = {}
    for name, run, ranks in (("par-0-2", "par-w4", "0-2"), ("par-3-4", "par-w4", "3-4"), ("seq-3-4", "seq-w4", "3-4")):
        export = folder / f"{name}.json"
        assert main(["export", str(PS_SGD / run / "store"), "--ranks", ranks, "--chrome", str(export), "--quiet"]) == 0
        made[name] = folder / name
        assert main(["import", str(export), "--out", str(made[name]), "--progress", "never"]) == 0
    doc = json.loads((folder / "par-3-4.json").read_text())
    del doc["otherData"]["workload"]
    (folder / "par-3-4-bare.json").write_text(json.dumps(doc))
    made["par-3-4-bare"] = folder / "par-3-4-bare"
    assert main(["import", str(folder / "par-3-4-bare.json"), "--out", str(made["par-3-4-bare"]),
                 "--progress", "never"]) == 0
    return made


def test_two_stores_of_one_run_keep_its_workload_entry(parts, tmp_path, capsys):
    """par-w4's ranks 0-2 and 3-4 merged: the store has the run's entry (w = 4, server rank 0, batch 64), its ground
    truth's path relative to the merged store and naming par-w4's ground_truth.json, and the analyses read w and
    the roles from it, not inferred; no note (before: the entry was dropped, w and roles inferred)."""
    from ddltrace.analyses.run_analysis import analyze_store, ground_truth_path

    original = json.loads((PS_SGD / "par-w4" / "store" / "manifest.json").read_text())["workload"]
    truth = (PS_SGD / "par-w4" / "ground_truth.json").resolve()
    capsys.readouterr()
    out = tmp_path / "merged"
    assert main(["merge", str(parts["par-0-2"]), str(parts["par-3-4"]), "--out", str(out)]) == 0
    assert capsys.readouterr().err == ""
    merged = TraceStore.open(out)
    assert merged.ranks == [0, 1, 2, 3, 4]
    assert merged.manifest["workload"] == {**original, "ground_truth": os.path.relpath(truth, out.resolve())}
    assert not os.path.isabs(merged.manifest["workload"]["ground_truth"])
    assert ground_truth_path(merged) == truth
    assert merged.manifest["notes"] == []
    run = analyze_store(merged)
    assert (run.workers, run.server_ranks, run.workers_inferred) == (4, [0], None)
    assert run.workers == original["config"]["workers"]


def test_stores_of_different_runs_or_without_the_entry_keep_none_and_say_why(parts, tmp_path, capsys):
    """par-w4's ranks 0-2 with seq-w4's 3-4 (sequential, not parallel, initialisation; another ground truth): no
    entry, and one line on stderr, the same as the merged store's note, names both stores and the fields that
    differ; with par-w4's 3-4 imported without the entry: no entry either (no configuration is known to hold for
    the ranks without one), the line naming the store that has none. The analyses infer w and the roles."""
    from ddltrace.analyses.run_analysis import analyze_store

    a, seq, bare = parts["par-0-2"], parts["seq-3-4"], parts["par-3-4-bare"]
    entries = [TraceStore.open(p).manifest["workload"] for p in (a, seq)]
    (par, other), config = entries, entries[0]["config"]
    differ = sorted([k for k in par if k != "config" and par[k] != other[k]]
                    + [f"config.{k}" for k in config if config[k] != other["config"][k]])
    assert differ == ["config.init", "ground_truth", "init"]
    capsys.readouterr()
    cases = ((a, seq, tmp_path / "par-seq", f"those of {a} and {seq} differ in {', '.join(differ)} (not one run); "
              "the merged store keeps neither"),
             (bare, a, tmp_path / "bare-par", f"{a} has one, {bare} has none (not one run, or one store did not "
              "record it); the merged store keeps none"))
    for first, second, out, why in cases:
        assert main(["merge", str(first), str(second), "--out", str(out)]) == 0
        err = capsys.readouterr().err.strip().splitlines()
        note = f"no workload entry (the job's configuration): {why}"
        assert err == [f"ddltrace: note: {note}"]
        merged = TraceStore.open(out)
        assert "workload" not in merged.manifest and merged.manifest["notes"] == [note]
        assert merged.ranks == [0, 1, 2, 3, 4]
        assert analyze_store(merged).workers_inferred is not None


def test_an_entry_that_is_not_a_table_is_compared_whole(tmp_path):
    """A damaged entry (not a table: the analyses name it and leave it out) is kept where both stores carry the same
    one, and named as the field that differs where only one does, not a traceback."""
    from ddltrace.workload_entry import merged_workload

    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "ab"
    assert merged_workload((a, "w=4"), (b, "w=4"), out) == ("w=4", None)
    entry, why = merged_workload((a, "w=4"), (b, {"job": "ps-sgd"}), out)
    assert entry is None and why.endswith(f"those of {a} and {b} differ in workload (not one run); the merged store "
                                          "keeps neither")
