"""A note on ranks with no timeline (ddltrace/merged_manifest.py: ``ranks [R] wrote no record file``, ``ranks [R]:
not in the export ...``) is read as the ranges it lists (:class:`Ranks`), not one number each: a damaged or hostile
manifest's ``ranks [0-2147483647] wrote no record file`` made ``unfiled_ranks`` build a set of 2^31 ranks (a
MemoryError, or gigabytes, in ``info``, ``analyze`` and ``merge``), and ``ranks [1-2-3] ...`` a ValueError. A note
naming ranks past its store's world is named damaged by ``merge`` (and a node's part joined), not read: the merged
store makes no note on the ranks it lists, and does not give it as why a rank is missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from test_node_merge_notes import _part, _run_store

from ddltrace.cli import main
from ddltrace.merged_manifest import Ranks, past_the_world, still_unfiled, unfiled_ranks, unread_note, unread_ranks
from ddltrace.store import TraceStore, write_store
from ddltrace.timeline import make_timeline

HOSTILE = "ranks [0-2147483647] wrote no record file (died before MPI_Init, or never started)"


def test_a_note_s_ranks_are_read_as_ranges():
    ranks = unfiled_ranks(HOSTILE)
    assert isinstance(ranks, Ranks) and len(ranks) == 2**31 and ranks.top == 2**31 - 1
    assert 0 in ranks and 2**31 - 1 in ranks and 2**31 not in ranks and -1 not in ranks and "3" not in ranks
    assert ranks.without([0, 5, 2**31 - 1]).text() == "1-4, 6-2147483646"
    assert ranks.shifted(3).text() == "3-2147483650"
    assert Ranks.parse("3, 4, 7") == {3, 4, 7} and Ranks.parse("0-4, 7").text() == "0-4, 7"
    assert Ranks.parse("5, 3-4") == {3, 4, 5} and Ranks.parse("5, 3-4").text() == "3-5"
    assert Ranks.parse("") == set() and Ranks().text() == "none"
    for damaged in ("1-2-3", "-5", "5-3", "9" * 5000, "1,, x"):  # (was: ValueError)
        assert Ranks.parse(damaged) is None
        assert unfiled_ranks(f"ranks [{damaged}] wrote no record file") is None
    assert unfiled_ranks(HOSTILE, world=4) is None and unfiled_ranks(HOSTILE, world=2**31) == ranks
    note = unread_note([1, 2], "not in the export F: why")
    assert unread_ranks(note) == {1, 2} and unread_ranks(note, world=2) is None


def test_the_note_on_ranks_still_without_a_file_is_made_from_ranges():
    assert still_unfiled([(HOSTILE, 0)], held=[0, 1], world=2**31, missing_nodes=None) == \
        "ranks [2-2147483647] wrote no record file (died before MPI_Init, or never started)"
    assert still_unfiled([(HOSTILE, 0)], held=[0, 1], world=4, missing_nodes=None) is None  # past the world: not read
    assert past_the_world(HOSTILE, 4) == ("damaged note (it names rank 2147483647, past the world of 4: not read as "
                                          f"the ranks the run has no timeline of): {HOSTILE}")
    assert past_the_world(HOSTILE, 2**31) is None and past_the_world("another note", 4) is None


def _store(path, ranks, notes, world=4):
    timeline = make_timeline([{"rank": r, "lane": "main", "name": "op", "category": "other",
                               "start_ns": 10**9 + i * 1000, "dur_ns": 500, "source": "chrome"}
                              for r in ranks for i in range(2)])
    store = write_store(path, timeline, run={"world_size": world})
    store.manifest["notes"] = notes
    store.save_manifest()
    return path


def test_merge_names_a_note_past_the_world_damaged_in_bounded_memory(tmp_path):
    """Run with its address space bounded (4 GiB): the old code's set of 2^31 ranks cannot be made there."""
    a, b, out = _store(tmp_path / "a", [0, 1], [HOSTILE]), _store(tmp_path / "b", [2], []), tmp_path / "m"
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        from ddltrace.cli import main
        from ddltrace.store import TraceStore
        assert TraceStore.open({str(a)!r}).missing(), "a lacks rank 3"
        sys.exit(main(["merge", {str(a)!r}, {str(b)!r}, "--out", {str(out)!r}]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    merged = TraceStore.open(out)
    damaged = f"{past_the_world(HOSTILE, 4)} (a note of {a})"
    assert merged.manifest["notes"] == [damaged]  # (no note made on ranks [3-2147483647])
    assert merged.missing() == {3: f"{out}/manifest.json: rank 3 of the world of 4 has no usable entry in the manifest"}


def test_joining_a_node_s_part_names_a_note_past_the_world_damaged(tmp_path):
    store = _run_store(tmp_path / "st", ["ranks [1] wrote no record file (died before MPI_Init, or never started)",
                                         "ranks [2-2147483647]: not in the export F: why"])
    out = tmp_path / "joined"
    assert main(["merge", str(store), str(_part(tmp_path)), "--out", str(out)]) == 0
    notes = TraceStore.open(out).manifest["notes"]
    assert past_the_world("ranks [2-2147483647]: not in the export F: why", 3) in notes
    assert not [n for n in notes if unfiled_ranks(n) is not None]


def test_info_reads_a_store_whose_note_lists_no_ranks(tmp_path, capsys):
    store = _store(tmp_path / "a", [0, 1], ["ranks [1-2-3] wrote no record file (died before MPI_Init)"])
    assert main(["info", str(store)]) == 0  # (was: ValueError: invalid literal for int() with base 10: '2-3')
    assert "not listed  rank 2, 3 of the world of 4: no usable entry in the manifest" in capsys.readouterr().out


def test_a_store_s_missing_rank_reason_is_no_note_past_its_world(tmp_path):
    """missing() gave the hostile note as why rank 3 of a world of 4 is missing (it lists rank 3 and 2^31 more)."""
    store = TraceStore.open(_store(tmp_path / "a", [0, 1, 2], [HOSTILE]))
    assert store.missing() == {3: f"{tmp_path / 'a'}/manifest.json: rank 3 of the world of 4 has no usable entry in "
                                  "the manifest"}
    fair = "ranks [3] wrote no record file (died before MPI_Init, or never started)"
    assert TraceStore.open(_store(tmp_path / "b", [0, 1, 2], [fair])).missing() == {3: fair}


def test_importing_an_export_with_a_hostile_note_runs_in_bounded_memory(tmp_path):
    """The import's notes on unread ranks made a set of every rank the run's notes list: an export carrying the
    hostile note ran out of memory under 4 GiB (MemoryError). Now the notes' own lists are asked."""
    store = _store(tmp_path / "a", [0, 1], [HOSTILE])
    exported, out = tmp_path / "x.json", tmp_path / "back"
    assert main(["export", str(store), "--chrome", str(exported)]) == 0
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        from ddltrace.cli import main
        sys.exit(main(["import", {str(exported)!r}, "--out", {str(out)!r}]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert TraceStore.open(out).ranks == [0, 1]
