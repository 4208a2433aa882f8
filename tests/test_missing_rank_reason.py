"""Why a rank is missing survives ``ddltrace export`` -> ``ddltrace import`` and ``ddltrace merge``: a rank whose
file the store finds damaged is named, with the store's reason, after the export's events (``ddltrace_missing``;
the header is written before the ranks are read) and in a note of the merged store, and ``info`` of the result
says which rank is missing and why (was: a warning on stderr only; then "not in the files imported" or "no usable
entry in the manifest").

The input: a copy of the sample store ps-sgd/seq-w2 (3 ranks) whose rank 1 timeline file is overwritten."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from ddltrace.cli import main
from ddltrace.merged_manifest import MergedPart, merged_notes, unfiled_ranks, unread_note
from ddltrace.store import TraceStore

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd" / "seq-w2" / "store"


@pytest.fixture
def damaged(tmp_path) -> tuple[Path, str]:
    """The sample store with rank 1's timeline file damaged, and the store's own reason for leaving rank 1 out."""
    store = tmp_path / "st"
    shutil.copytree(SAMPLE, store)
    (store / "timeline" / "rank-00001.parquet").write_bytes(b"not a parquet file\n")
    opened = TraceStore.open(store)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        list(opened.iter_timeline())
    assert list(opened.damaged) == [1]
    why = opened.damaged[1]
    assert why.startswith(f"{store / 'timeline' / 'rank-00001.parquet'}: ") and why.endswith("; rank 1 left out")
    return store, why


def _info(capsys, store: Path) -> dict[str, list[str]]:
    """``info``'s lines by their label (the first 12 characters)."""
    capsys.readouterr()
    assert main(["info", str(store)]) == 0
    lines: dict[str, list[str]] = {}
    for line in capsys.readouterr().out.splitlines():
        lines.setdefault(line[:12].strip(), []).append(line[12:])
    return lines


def assert_rank_1_named(capsys, path: Path, world: int, note: str) -> dict[str, list[str]]:
    """The store at ``path`` holds ranks 0 and 2 of ``world``, rank 1 missing for ``note``, and ``info`` says so;
    ``info``'s lines (:func:`_info`)."""
    store = TraceStore.open(path)
    assert store.ranks == [0, 2] and store.world_size == world
    assert store.missing() == {1: note}
    info = _info(capsys, path)
    assert info["not listed"] == [f"rank 1 of the world of {world}: the run's note: {note}, so no timeline here"]
    return info


def test_export_then_import_still_names_the_damaged_rank_and_why(damaged, tmp_path, capsys):
    store, why = damaged
    world = json.loads((store / "manifest.json").read_text())["run"]["world_size"]
    out, back = tmp_path / "st.json", tmp_path / "back"
    capsys.readouterr()
    assert main(["export", str(store), "--chrome", str(out)]) == 0
    said = capsys.readouterr()
    assert said.err == f"ddltrace: warning: {why}\n"  # (as before)
    assert said.out.rstrip().endswith(f"; not in it, each with why (ddltrace import keeps it): rank 1 of the world "
                                      f"of {world}")
    doc = json.loads(out.read_text())
    assert doc["ddltrace_missing"] == {"1": why}
    assert {e["pid"] for e in doc["traceEvents"] if e.get("ph") == "X"} == {0, 2}

    assert main(["import", str(out), "--out", str(back), "--progress", "never"]) == 0
    note = unread_note([1], f"not in the export {out}: {why}")
    assert note in assert_rank_1_named(capsys, back, world, note)["note"]

    again, back_again = tmp_path / "again.json", tmp_path / "back_again"  # a second round trip: the same, once
    assert main(["export", str(back), "--chrome", str(again)]) == 0
    assert main(["import", str(again), "--out", str(back_again), "--progress", "never"]) == 0
    assert TraceStore.open(back_again).missing() == {1: note}
    assert TraceStore.open(back_again).manifest["notes"].count(note) == 1


def test_merge_still_names_the_damaged_rank_and_why(damaged, tmp_path, capsys):
    """The damaged store cut into two of one job (ranks 0-1, rank 2) and merged: rank 1 is named with why."""
    store, why = damaged
    world = json.loads((store / "manifest.json").read_text())["run"]["world_size"]
    parts = {}
    for name, keep in (("a", [0, 1]), ("b", [2])):
        part = tmp_path / name
        shutil.copytree(store, part)
        manifest = json.loads((part / "manifest.json").read_text())
        manifest["ranks"] = {k: v for k, v in manifest["ranks"].items() if int(k) in keep}
        manifest["counter_ranks"] = [r for r in manifest["counter_ranks"] if r in keep or r == -1]
        (part / "manifest.json").write_text(json.dumps(manifest))
        parts[name] = part
    why_a = why.replace(str(store), str(parts["a"]))  # (the store's line names the file in the store merged)
    out = tmp_path / "merged"
    capsys.readouterr()
    assert main(["merge", str(parts["a"]), str(parts["b"]), "--out", str(out)]) == 0
    said = capsys.readouterr()
    assert said.err == f"ddltrace: warning: {why_a}\n"  # (as before)
    assert said.out.strip() == f"ddltrace: wrote {out}: 2 ranks; left out, damaged (its notes say why): rank 1"
    note = unread_note([1], f"left out of the merge: {why_a}")
    assert_rank_1_named(capsys, out, world, note)


def test_export_missing_of_the_wrong_kind_is_named_not_kept(damaged, tmp_path):
    store, _ = damaged
    out, bad, back = tmp_path / "st.json", tmp_path / "bad.json", tmp_path / "back"
    assert main(["export", str(store), "--chrome", str(out)]) == 0
    doc = json.loads(out.read_text())
    doc["ddltrace_missing"] = {"one": 5}
    bad.write_text(json.dumps(doc))
    assert main(["import", str(bad), "--out", str(back), "--progress", "never"]) == 0
    notes = TraceStore.open(back).manifest["notes"]
    assert (f"import problem: {bad}: ddltrace_missing is not an object of ranks and texts: why the ranks it names "
            "are not in the export is not kept") in notes
    assert not any(unfiled_ranks(n) for n in notes)


def _part(path: str, ranks: list[int], notes: list[str], shift: int = 0) -> MergedPart:
    return MergedPart(Path(path), {"notes": notes, "ranks": {str(r): {} for r in ranks}}, ranks, shift, 4, True)


def test_a_note_on_an_unread_rank_says_where_the_other_store_supplies_it_and_follows_renumbering():
    note = unread_note([1], "its file was given and did not read (rank 1 by its name): r1.json: empty file")
    assert unfiled_ranks(note) == {1}
    kept = merged_notes(_part("a", [0], [note]), _part("b", [2], []), [0, 2], {"world_size": 4})
    assert kept == [f"{note} (a note of a)"]  # still missing: kept, naming its store
    kept = merged_notes(_part("a", [0], [note]), _part("b", [1], []), [0, 1], {"world_size": 4})
    assert kept == [f"{note} (a note of a; the merged store holds rank 1, from b)"]
    kept = merged_notes(_part("a", [0, 2], []), _part("b", [0], [note], shift=3), [0, 2, 3], {"world_size": 5})
    assert kept == [unread_note([4], note.split(": ", 1)[1]) + " (a note of b)"]  # its rank 1 is rank 4 here
    with pytest.raises(ValueError):
        unread_note([1], "some other note")
