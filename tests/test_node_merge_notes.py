"""``ddltrace merge STORE PART`` of a node's part (collectors/node_merge.py) keeps the store's notes on ranks whose
trace was given but gave no timeline (ddltrace/merged_manifest.py's ``unread_note``: a file that did not read, a rank an
export did not hold, a rank a merge left out): they stay the reason :meth:`TraceStore.missing` gives for those ranks
(was: dropped with the notes on ranks that wrote no record file, which the join rebuilds for the ranks still
without one). The run's store is written directly (3 ranks: rank 0 held, rank 1 on the missing node, rank 2 not in
the export the store was imported from); the part holds rank 1's record file damaged (no MPI job needed)."""

from __future__ import annotations

from test_node_merge_part import _run_store as merge_part_store

from ddltrace.cli import main
from ddltrace.merged_manifest import unread_note
from ddltrace.store import TraceStore

NOT_EXPORTED = unread_note([2], "not in the export /data/run.json: /data/st/timeline/rank-00002.parquet: not a "
                                "parquet file; rank 2 left out")


def _run_store(path, notes):
    """A 3-rank run's store whose node nodeB (rank 1) was lost, with ``notes``."""
    return merge_part_store(path, notes, world=3, clock=None)


def _part(tmp_path):
    part = tmp_path / "partB"
    (part / "records" / "nodes" / "nodeB").mkdir(parents=True)
    (part / "records" / "rank-00001.pmpi").write_bytes(b"not a record file" * 6)
    return part


def test_joining_a_part_keeps_the_note_on_a_rank_the_export_did_not_hold(tmp_path, capsys):
    store = _run_store(tmp_path / "st", ["ranks [1] wrote no record file (died before MPI_Init, or never started)",
                                         NOT_EXPORTED])
    assert TraceStore.open(store).missing()[2] == NOT_EXPORTED
    out = tmp_path / "joined"
    assert main(["merge", str(store), str(_part(tmp_path)), "--out", str(out)]) == 0
    merged = TraceStore.open(out)
    notes = merged.manifest["notes"]
    assert notes.count(NOT_EXPORTED) == 1  # (was: not there)
    assert merged.missing()[2] == NOT_EXPORTED  # (was: '... rank 2 ... has no usable entry in the manifest')
    assert not [n for n in notes if "wrote no record file" in n]  # rank 1's file is in the part, unreadable


def test_joining_a_part_keeps_every_kind_of_unread_note(tmp_path):
    said = [unread_note([2], "its file was given and did not read (rank 2 by its name): r2.json: empty file"),
            unread_note([2], "left out of the merge: /x/timeline/rank-00002.parquet: not a parquet file"),
            unread_note([2], "in no file read; of the files given, 1 did not read and may hold it: r.json: empty")]
    for i, note in enumerate(said):
        store = _run_store(tmp_path / f"st{i}", [note])
        out = tmp_path / f"joined{i}"
        (tmp_path / f"p{i}").mkdir()
        assert main(["merge", str(store), str(_part(tmp_path / f"p{i}")), "--out", str(out)]) == 0
        merged = TraceStore.open(out)
        assert note in merged.manifest["notes"]
        assert merged.missing()[2] == note


def test_a_kept_note_says_which_of_its_ranks_the_part_gives(tmp_path):
    from ddltrace.collectors.node_merge import _unread_kept

    part = tmp_path / "partB"
    note = unread_note([1, 2], "not in the export /data/run.json: damaged")
    assert _unread_kept(note, [0], part) == note
    assert _unread_kept(note, [2, 3], part) == f"{note} (the merged store holds rank 2, from {part})"
    assert _unread_kept(note, [1, 2], part) == f"{note} (the merged store holds ranks 1-2, from {part})"
