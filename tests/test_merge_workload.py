"""``ddltrace merge A B --out C`` of two plain stores and the job's ``workload`` entry (its configuration: w, the
server rank, the batch, the ps-sgd options; ddltrace/workload_entry.py). Two stores of one run keep the run's entry,
its ground truth's path made relative to C; stores of different runs, or of which one has no entry, keep none, and
one line on stderr and a note in C's manifest name the stores and the fields that differ. What else the stores'
manifests say is kept where it stays true of C (ddltrace/merged_manifest.py): their notes (an import's problems, which
name a rank missing; the notes on ranks with no file only for ranks C still lacks), each rank's clock offsets from the
store that held it, the world size they declare.

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
#: collectors/launcher.py's note on a rank whose record file could not be read
LOST = ("unreadable record file: /scratch/.run.x1y2/records/rank-00004.pmpi: the file ends in its header (0 of 64 "
        "bytes; too short); rank 4 left out")


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict[str, Path]:
    """Stores of some ranks of par-w4 (ranks 0-2: ``par-0-2``, 3-4: ``par-3-4``, 3: ``par-3``) and of seq-w4 (3-4:
    ``seq-3-4``), each with its run's workload entry, clock and notes; ``par-3-4-bare``: par-w4's ranks 3-4 imported
    from an export without the entry (a store whose run did not record it, as before ddltrace recorded it for any
    command of the job); ``par-3-4-own-clock``: imported from an export without the run's clock (its times on the
    trace's own clock); ``par-0-2-unfiled``: par-w4's ranks 0-2 of a run whose ranks 3 and 4 wrote no record file
    (the export carries the launcher's note, collectors/launcher.py's no_record_note); ``par-3-lost``: rank 3 of a
    run whose rank 4's record file was unreadable (the launcher's note: rank 4 left out), ``par-4``: rank 4;
    ``par-3-4-cut``: the exports of rank 3 and of rank 4, rank 4's cut short, imported together (rank 4 holds no
    events; an ``import problem:`` note names its file)."""
    from ddltrace.merged_manifest import no_record_note

    folder = tmp_path_factory.mktemp("parts")
    made = {}
    for name, run, ranks in (("par-0-2", "par-w4", "0-2"), ("par-3-4", "par-w4", "3-4"), ("seq-3-4", "seq-w4", "3-4"),
                             ("par-3", "par-w4", "3"), ("par-4", "par-w4", "4")):
        export = folder / f"{name}.json"
        assert main(["export", str(PS_SGD / run / "store"), "--ranks", ranks, "--chrome", str(export), "--quiet"]) == 0
        made[name] = folder / name
        assert main(["import", str(export), "--out", str(made[name]), "--progress", "never"]) == 0
    changes = {"par-3-4-bare": ("par-3-4", lambda other: other.pop("workload")),
               "par-3-4-own-clock": ("par-3-4", lambda other: other.pop("clock")),
               "par-0-2-unfiled": ("par-0-2", lambda other: other["notes"].append(no_record_note([3, 4], 5, True,
                                                                                                 None))),
               "par-3-lost": ("par-3", lambda other: other["notes"].append(LOST))}
    for name, (source, change) in changes.items():
        doc = json.loads((folder / f"{source}.json").read_text())
        change(doc["otherData"])
        (folder / f"{name}.json").write_text(json.dumps(doc))
        made[name] = folder / name
        assert main(["import", str(folder / f"{name}.json"), "--out", str(made[name]), "--progress", "never"]) == 0
    cut = folder / "cut"
    cut.mkdir()
    (cut / "par-3.json").write_bytes((folder / "par-3.json").read_bytes())
    (cut / "par-4.json").write_bytes((folder / "par-4.json").read_bytes()[:3000])
    made["par-3-4-cut"] = folder / "par-3-4-cut"
    assert main(["import", str(cut), "--out", str(made["par-3-4-cut"]), "--progress", "never"]) == 0
    return made


def _notes(path: Path) -> list[str]:
    return json.loads((path / "manifest.json").read_text())["notes"]


def _kept(a: Path, b: Path) -> list[str]:
    """The notes of stores a and b that a merge of the two keeps, as the test reads them from the manifests: those
    both carry once, the others naming their store."""
    notes_a, notes_b = _notes(a), _notes(b)
    return ([n if n in notes_b else f"{n} (a note of {a})" for n in notes_a]
            + [f"{n} (a note of {b})" for n in notes_b if n not in notes_a])


def test_two_stores_of_one_run_keep_its_workload_entry(parts, tmp_path, capsys):
    """par-w4's ranks 0-2 and 3-4 merged: the store has the run's entry (w = 4, server rank 0, batch 64), its ground
    truth's path relative to the merged store and naming par-w4's ground_truth.json, and the analyses read w and
    the roles from it, not inferred; no note (before: the entry was dropped, w and roles inferred)."""
    from ddltrace.analyses.run_analysis import analyze_store, ground_truth_path

    original = json.loads((PS_SGD / "par-w4" / "store" / "manifest.json").read_text())["workload"]
    original_notes = json.loads((PS_SGD / "par-w4" / "store" / "manifest.json").read_text())["notes"]
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
    # the run's notes (the GPU sampler off, the workload's compute) once, each import's naming its store; none
    # of the merge's own (before: no note at all)
    assert merged.manifest["notes"] == _kept(parts["par-0-2"], parts["par-3-4"])
    assert [n for n in merged.manifest["notes"] if "(a note of" not in n] == original_notes[:2]
    assert merged.world_size == 5 and merged.missing() == {}
    run = analyze_store(merged)
    assert (run.workers, run.server_ranks, run.workers_inferred) == (4, [0], None)
    assert run.workers == original["config"]["workers"]


def test_stores_of_different_runs_or_without_the_entry_keep_none_and_say_why(parts, tmp_path, capsys):
    """par-w4's ranks 0-2 with seq-w4's 3-4 (sequential, not parallel, initialisation; another ground truth): no
    entry, and one line on stderr, the same as the merged store's note, names both stores and the fields that
    differ; with par-w4's 3-4 imported without the entry: no entry either (no configuration is known to hold for
    the ranks without one), the line naming the store that has none. The analyses infer w and the roles. par-w4 with
    seq-w4 is not one run (their job configurations and commands differ): refused unless --as-one-run, whose merge
    says so in a note too (tests/test_merge_refuses_two_runs.py)."""
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
    assert main(["merge", str(a), str(seq), "--out", str(tmp_path / "par-seq")]) == 2
    assert "config.init" in capsys.readouterr().err and not (tmp_path / "par-seq").exists()
    for first, second, out, why in cases:
        assert main(["merge", str(first), str(second), "--out", str(out),
                     *(["--as-one-run"] if second == seq else [])]) == 0
        err = capsys.readouterr().err.strip().splitlines()
        note = f"no workload entry (the job's configuration): {why}"
        merged = TraceStore.open(out)
        # seq-w4 ran apart from par-w4: the merged ranks' times fall into two groups, said as an import says it
        apart = [n for n in merged.manifest["notes"] if "the ranks' times fall into 2 groups" in n]
        apart += [n for n in merged.manifest["notes"] if n.startswith("merged as one run on the user's word")]
        assert len(apart) == (2 if second == seq else 0)
        assert all("config.init" in n for n in apart[1:])
        assert err == [f"ddltrace: note: {note}", *(f"ddltrace: note: {n}" for n in apart)]
        assert "workload" not in merged.manifest and merged.manifest["notes"] == [*_kept(first, second), note, *apart]
        assert merged.ranks == [0, 1, 2, 3, 4]
        assert analyze_store(merged).workers_inferred is not None
    # ranks 3-4 of seq-w4 keep their own clock offsets and uncertainties (before: par-w4's, the first store's)
    clock = TraceStore.open(tmp_path / "par-seq").manifest["clock"]
    for run, ranks in (("par-w4", "012"), ("seq-w4", "34")):
        source = json.loads((PS_SGD / run / "store" / "manifest.json").read_text())["clock"]
        for key in ("offsets_ns", "uncertainty_ns", "finalize_offsets_ns", "drift_ppm"):
            assert {r: clock[key][r] for r in ranks} == {r: source[key][r] for r in ranks}, (run, key)
    assert clock["offsets_ns"]["3"] != json.loads((PS_SGD / "par-w4" / "store" / "manifest.json").read_text())[
        "clock"]["offsets_ns"]["3"]


def test_an_entry_that_is_not_a_table_is_compared_whole(tmp_path):
    """A damaged entry (not a table: the analyses name it and leave it out) is kept where both stores carry the same
    one, and named as the field that differs where only one does, not a traceback."""
    from ddltrace.workload_entry import merged_workload

    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "ab"
    assert merged_workload((a, "w=4"), (b, "w=4"), out) == ("w=4", None)
    entry, why = merged_workload((a, "w=4"), (b, {"job": "ps-sgd"}), out)
    assert entry is None and why.endswith(f"those of {a} and {b} differ in workload (not one run); the merged store "
                                          "keeps neither")


def test_a_note_on_ranks_with_no_file_is_kept_for_those_still_missing_and_the_world_size_is_the_runs(parts, tmp_path,
                                                                                                     capsys):
    """par-w4's ranks 0-2 (its run's note: ranks 3 and 4 wrote no record file) merged with its rank 3: the merged
    store is of the run's world of 5 (each store's export declares it; before: 4, the ranks held, and rank 4 missing
    from nothing), names rank 4 missing, and its note says rank 4 alone wrote no file (before: no note at all; copied
    as it was, it would say rank 3 too). The other notes are kept, and the merge has nothing of its own to say."""
    from ddltrace.merged_manifest import no_record_note

    a, b, out = parts["par-0-2-unfiled"], parts["par-3"], tmp_path / "merged"
    declared = json.loads((PS_SGD / "par-w4" / "store" / "manifest.json").read_text())["run"]["world_size"]
    assert TraceStore.open(a).world_size == TraceStore.open(b).world_size == declared == 5
    capsys.readouterr()
    assert main(["merge", str(a), str(b), "--out", str(out)]) == 0
    assert capsys.readouterr().err == ""
    merged = TraceStore.open(out)
    assert merged.ranks == [0, 1, 2, 3] and merged.world_size == 5
    assert merged.missing() == {4: "ranks [4] wrote no record file (died before MPI_Init, or never started)"}
    unfiled = no_record_note([3, 4], 5, True, None)
    assert unfiled in _notes(a)
    assert merged.manifest["notes"] == [*[n for n in _kept(a, b) if not n.startswith(unfiled)],
                                        "ranks [4] wrote no record file (died before MPI_Init, or never started)"]


def test_a_note_on_a_rank_left_out_says_where_the_other_store_supplies_it(parts, tmp_path):
    """par-w4's rank 3 of a run whose rank 4 was left out (its record file unreadable) merged with a store of rank 4:
    the note says the merged store holds rank 4, and from which store (before: no note; copied as it was, it would
    say rank 4 is left out of the store that holds it)."""
    a, b, out = parts["par-3-lost"], parts["par-4"], tmp_path / "merged"
    assert LOST in _notes(a)
    assert main(["merge", str(a), str(b), "--out", str(out)]) == 0
    merged = TraceStore.open(out)
    assert merged.ranks == [3, 4] and sorted(merged.missing()) == [0, 1, 2]
    notes = merged.manifest["notes"]
    assert f"{LOST} (a note of {a}; the merged store holds rank 4, from {b})" in notes
    assert not any(n.startswith(LOST) and "holds rank 4" not in n for n in notes)


def test_an_imports_problem_still_names_why_a_rank_is_missing(parts, tmp_path):
    """par-w4's ranks 0-2 merged with ranks 3-4 imported from rank 4's export cut short: rank 4 (no events) is named
    missing with the problem the import found in its file, as in the store it came from (before: the note was lost,
    and only 'holds no events' said)."""
    a, b, out = parts["par-0-2"], parts["par-3-4-cut"], tmp_path / "merged"
    (problem,) = [n for n in _notes(b) if n.startswith("import problem: ")]
    file = TraceStore.open(b).rank_info(4)["file"]
    assert problem.startswith(f"import problem: {file}: JSON truncated at byte 3000")
    assert TraceStore.open(b).missing()[4].startswith(problem.removeprefix("import problem: "))
    assert main(["merge", str(a), str(b), "--out", str(out)]) == 0
    merged = TraceStore.open(out)
    assert merged.ranks == [0, 1, 2, 3, 4]
    assert f"{problem} (a note of {b})" in merged.manifest["notes"]
    assert merged.missing() == {4: f"{problem.removeprefix('import problem: ')} (a note of {b}); rank 4 holds no "
                                   "events"}


def test_a_renumbered_store_s_notes_say_how_its_ranks_map(parts, tmp_path):
    """ranks 3-4 of par-w4 (rank 4 cut short) merged with themselves, renumbered (``merge_stores(renumber=True)``:
    the second store's ranks 3, 4 are 8, 9 in the merged store): the second store's notes, which still say "rank 4",
    name their store and the mapping, and each copy of a note both carry is kept (one is on rank 4, the other on rank
    9); both empty ranks are named missing with the import's problem (before: the second copy was dropped as a note
    both carry, and no note said its rank numbers were not the merged store's)."""
    from ddltrace.store import merge_stores

    b = parts["par-3-4-cut"]
    (problem,) = [n for n in _notes(b) if n.startswith("import problem: ")]
    merged = merge_stores(TraceStore.open(b), TraceStore.open(b), tmp_path / "merged", renumber=True)
    assert merged.ranks == [3, 4, 8, 9]
    notes = merged.manifest["notes"]
    assert f"{problem} (a note of {b})" in notes
    assert f"{problem} (a note of {b}, whose rank r is rank r + 5 here)" in notes
    assert [n for n in notes if f"(a note of {b}" in n] == [*(f"{n} (a note of {b})" for n in _notes(b)), *(
        f"{n} (a note of {b}, whose rank r is rank r + 5 here)" for n in _notes(b))]
    assert sorted(r for r in merged.missing() if r in merged.ranks) == [4, 9]
    assert merged.missing()[9].startswith(problem.removeprefix("import problem: "))


def test_stores_on_clocks_aligned_differently_say_so(parts, tmp_path, capsys):
    """par-w4's ranks 0-2 (on rank 0's clock, by the PMPI ping-pong) merged with its ranks 3-4 imported without the
    run's clock (each rank's own wall clock): one line on stderr and a note say the two are not on one clock, the
    clock's method names each store's ranks and method and no reference rank, and ranks 0-2 keep their offsets (before:
    presented as one alignment onto rank 0's clock, and ranks 3-4 given offsets their times never had)."""
    a, b, out = parts["par-0-2"], parts["par-3-4-own-clock"], tmp_path / "merged"
    clocks = [json.loads((p / "manifest.json").read_text())["clock"] for p in (a, b)]
    assert clocks[0]["method"] != clocks[1]["method"] and clocks[1]["offsets_ns"] == {}
    capsys.readouterr()
    assert main(["merge", str(a), str(b), "--out", str(out)]) == 0
    ways = (f"ranks 0-2: {clocks[0]['method']}, onto rank {clocks[0]['reference_rank']}'s clock; ranks 3-4: "
            f"{clocks[1]['method']}")
    note = (f"clocks not aligned to each other: {a} and {b} were put on their clocks differently ({ways}); the times "
            "of ranks 0-2 and those of ranks 3-4 are not on one clock")
    assert capsys.readouterr().err.strip().splitlines() == [f"ddltrace: note: {note}"]
    merged = TraceStore.open(out)
    assert merged.manifest["notes"][-1] == note
    clock = merged.manifest["clock"]
    assert clock["method"] == f"not one alignment: {ways}" and "reference_rank" not in clock
    assert clock["offsets_ns"] == {r: clocks[0]["offsets_ns"][r] for r in "012"}
    assert clock["per_rank"] == clocks[1]["per_rank"]


def _on_nodes(source: Path, out: Path, hosts: dict[int, str], missing: dict[str, str] | None = None) -> Path:
    """A copy of the store ``source`` at ``out``, its manifest hand-edited (no cluster run): each rank of ``hosts``
    on that host, and the nodes ``missing`` (host -> the folder of its part) named missing as ``ddltrace run`` names
    a node whose part was not gathered (``run.missing_nodes`` and collectors/node_clock.py's note)."""
    import shutil

    from ddltrace.collectors.node_clock import lost_notes

    shutil.copytree(source, out)
    manifest = json.loads((out / "manifest.json").read_text())
    for rank, host in hosts.items():
        manifest["ranks"][str(rank)]["host"] = host
    if missing:
        manifest["run"]["missing_nodes"] = missing
        manifest["notes"] += lost_notes({h: {"state": "lost", "error": "connection reset", "part": part}
                                         for h, part in missing.items()}, str(out))
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_a_missing_nodes_part_merged_as_a_store_is_no_longer_missing(parts, tmp_path, capsys):
    """par-w4's ranks 0-2 on node0, of a run whose node1 and node2 were not gathered, merged with its ranks 3-4 on
    node1 (node1's part, made a store): node1 is no longer missing (run.missing_nodes, its note, merge's line), node2
    still is; merged with ranks 3-4 on node3 instead, both stay missing (before: A's missing nodes and notes were
    kept whatever B held; only a part joined by collectors/node_merge.py cleared them)."""
    missing = {"node1": "/local/.store.a1/", "node2": "/local/.store.a2/"}
    a = _on_nodes(parts["par-0-2"], tmp_path / "a", dict.fromkeys((0, 1, 2), "node0"), missing)
    assert TraceStore.open(a).run["missing_nodes"] == missing
    for hosts_b, still in (("node1", ["node2"]), ("node3", ["node1", "node2"])):
        b = _on_nodes(parts["par-3-4"], tmp_path / f"b-{hosts_b}", dict.fromkeys((3, 4), hosts_b))
        out = tmp_path / f"merged-{hosts_b}"
        capsys.readouterr()
        assert main(["merge", str(a), str(b), "--out", str(out)]) == 0
        assert f"still missing: node(s) {', '.join(still)}" in capsys.readouterr().out
        merged = TraceStore.open(out)
        assert merged.ranks == [0, 1, 2, 3, 4]
        assert merged.run["missing_nodes"] == {h: missing[h] for h in still}
        named = sorted(n.split(":", 1)[0].removeprefix("missing node ") for n in merged.manifest["notes"]
                       if n.startswith("missing node "))
        assert named == still, merged.manifest["notes"]
    # and the other way round: the store of node1's ranks first
    out = tmp_path / "merged-b-first"
    assert main(["merge", str(tmp_path / "b-node1"), str(a), "--out", str(out)]) == 0
    assert TraceStore.open(out).run["missing_nodes"] == {"node2": missing["node2"]}


def test_a_store_merged_again_names_each_notes_store_once(parts, tmp_path):
    """par-w4's ranks 0-2 and 3 merged, and that store merged with rank 4: each note of one store names it once,
    "(a note of par-0-2)" as in the first merge (before: "(a note of par-0-2) (a note of merged)"), and the notes
    of rank 4's store name it."""
    a, b, c = parts["par-0-2"], parts["par-3"], parts["par-4"]
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["merge", str(a), str(b), "--out", str(first)]) == 0
    assert main(["merge", str(first), str(c), "--out", str(again)]) == 0
    tagged = [n for n in _notes(first) if "(a note of " in n]
    assert tagged and all(n.count("(a note of ") <= 1 for n in _notes(again))
    assert set(tagged) <= set(_notes(again))
    assert [n for n in _notes(again) if n not in _notes(first)] == [f"{n} (a note of {c})" for n in _notes(c)
                                                                    if n not in _notes(first)]


def test_the_note_on_ranks_without_a_file_lists_ranges_and_reads_both_forms():
    """A job of 100,000 ranks none of which wrote a file had a note of 100,000 numbers (QA: `run --np 100000`); it
    lists ranges now, and the ranks are read back from it and from a note written before, which merge relies on."""
    from ddltrace.merged_manifest import no_record_note, still_unfiled, unfiled_ranks

    note = no_record_note(list(range(100_000)), 100_000, True, None)
    assert note.startswith("ranks [0-99999] wrote no record file") and len(note) < 100
    assert unfiled_ranks(note) == set(range(100_000))
    old = "ranks [3, 4, 7] of 8 wrote no framework profile"
    assert unfiled_ranks(old) == {3, 4, 7}
    assert still_unfiled([(old, 0)], held=[3], world=8, missing_nodes=None) == \
        "ranks [4, 7] of 8 wrote no framework profile"
    assert unfiled_ranks(no_record_note([0, 1, 2, 5], 6, False, None)) == {0, 1, 2, 5}
