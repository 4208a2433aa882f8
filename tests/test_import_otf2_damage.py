"""An OTF2 archive with one location's event file missing or cut short (a 3-rank archive written here with the
otf2 package): the other ranks are imported whole and the damaged one is named. The global event reader stops
every location at the first damage in any, so the importer reads each location on its own once it meets one."""

from __future__ import annotations

import shutil

import pytest
from shared_data import SHARED

from ddltrace.cli import main
from ddltrace.store import TraceStore

CALLS = 2000  # MPI_Allreduce calls per rank: a few OTF2 chunks per location


def _write_archive(folder, calls: int = CALLS) -> None:
    otf2 = pytest.importorskip("otf2")
    with otf2.writer.open(str(folder), timer_resolution=10**9) as w:
        d = w.definitions
        root = d.system_tree_node("node0")
        locs = [d.location("Master thread", group=d.location_group(f"MPI Rank {r}", system_tree_parent=root))
                for r in range(3)]
        work, allreduce = d.region("compute"), d.region("MPI_Allreduce")
        for rank, loc in enumerate(locs):
            ew = w.event_writer_from_location(loc)
            for i in range(calls):
                t = 1_000_000 + i * 10_000 + rank * 7
                ew.enter(t, work)
                ew.leave(t + 6_000, work)
                ew.enter(t + 6_000, allreduce)
                ew.leave(t + 9_000 + rank, allreduce)


def _calls(store) -> dict[int, list]:
    opened = TraceStore.open(store)
    return {rank: list(zip(tl["name"], tl["start_ns"], tl["dur_ns"], strict=True))
            for rank, tl in opened.iter_timeline()}


@pytest.mark.parametrize("damage", ["missing", "cut", "short"])
def test_one_damaged_location_is_named_and_the_other_ranks_are_whole(tmp_path, capsys, damage):
    """missing: rank 1's event file deleted; cut: cut in the middle of a chunk (the library stops with an error,
    or, depending on what lies past the end of its buffer, without one: both are named); short: replaced by the
    whole file of a run half as long, which the library reads to its end without an error, so only the number of
    events rank 1's definition declares (4 x CALLS) tells that some are missing."""
    folder = tmp_path / "archive"
    _write_archive(folder)
    anchor = next(folder.glob("*.otf2"))
    assert main(["import", str(anchor), "--out", str(tmp_path / "clean")]) == 0
    clean = _calls(tmp_path / "clean")
    assert sorted(clean) == [0, 1, 2] and all(len(rows) == 2 * CALLS for rows in clean.values())
    evt = anchor.with_suffix("") / "1.evt"
    if damage == "missing":
        evt.unlink()
    elif damage == "cut":
        evt.write_bytes(evt.read_bytes()[:evt.stat().st_size // 2])
    else:
        _write_archive(tmp_path / "half", CALLS // 2)
        evt.write_bytes((tmp_path / "half" / evt.relative_to(folder)).read_bytes())
    capsys.readouterr()
    assert main(["import", str(anchor), "--out", str(tmp_path / "damaged")]) == 0
    out = capsys.readouterr().out
    named = f"problem: {anchor}: rank 1 (Master thread): "
    if damage == "short":
        assert (f"{named}OTF2 event data ends after {4 * (CALLS // 2)} of the {4 * CALLS} events its definition "
                "declares (its event file was cut short); the events before it are kept") in out, out
    elif damage == "missing":
        assert f"{named}OTF2 events unreadable after its event 0" in out, out
    else:
        assert f"{named}OTF2 events unreadable after its event" in out or f"{named}OTF2 event data ends after" in out
    assert out.count(named) == 1, out  # named once
    damaged = _calls(tmp_path / "damaged")
    assert damaged[0] == clean[0] and damaged[2] == clean[2]  # the other ranks whole, to the ns
    kept = damaged.get(1, [])
    assert kept == clean[1][:len(kept)] and len(kept) < len(clean[1])  # rank 1: a prefix of its calls at most


def test_an_anchor_not_named_otf2_is_told_to_be_renamed(tmp_path, capsys):
    """The anchor renamed to .txt: recognised by its bytes and refused in one line saying it must be named *.otf2
    (it was 'not a trace format ddltrace knows (starts with the bytes 03 42 4f 54 46 32 ...)', and with --format
    otf2 the library's 'INVALID (1): Unknown error code: This no valid file extension!'); a member file named with
    --format otf2 is not an anchor."""
    folder = tmp_path / "archive"
    _write_archive(folder, 10)
    anchor = next(folder.glob("*.otf2"))
    renamed = anchor.rename(anchor.with_suffix(".txt"))
    for extra in ([], ["--format", "otf2"]):
        assert main(["import", str(renamed), "--out", str(tmp_path / "store"), *extra]) == 2
        err = capsys.readouterr().err
        assert (f"{renamed}: an OTF2 anchor file, but the OTF2 library opens an archive only by an anchor named "
                f"*.otf2: rename it {anchor.name}") in err and "Traceback" not in err
    member = next(folder.glob("*.def"))
    assert main(["import", str(member), "--out", str(tmp_path / "store"), "--format", "otf2"]) == 2
    assert f"{member}: not an OTF2 anchor file (an archive is read from its *.otf2 anchor)" in capsys.readouterr().err


PAPI = SHARED / "wild_traces/pipit_otf2_papi"


def _damaged_papi(tmp_path, member: str, at: int, garbage: bytes):
    """A copy of pipit_otf2_papi with ``garbage`` written over ``member`` from byte ``at``; its anchor."""
    shutil.copytree(PAPI, tmp_path / "papi")
    target = tmp_path / "papi" / member
    data = bytearray(target.read_bytes())
    data[at:at + len(garbage)] = garbage
    target.write_bytes(bytes(data))
    return tmp_path / "papi" / "traces.otf2"


@pytest.mark.skipif(not PAPI.is_dir(), reason="pipit_otf2_papi absent")
def test_definitions_naming_an_undefined_id_are_said_damaged(tmp_path, capsys):
    """32 bytes of traces.def overwritten: a definition names id 242, which none defines. It read 'interrupted by
    reader callback: KeyError: 242' (the otf2 package's exception); now what is wrong, in words."""
    pytest.importorskip("otf2")
    anchor = _damaged_papi(tmp_path, "traces.def", 5111, b"\x00\xff" * 16)
    assert main(["import", str(anchor), "--out", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert (f"{anchor}: not a readable OTF2 archive (a record of its definitions refers to id 242, which no "
            "definition defines: its definitions are damaged)") in err and "KeyError" not in err


@pytest.mark.skipif(not PAPI.is_dir(), reason="pipit_otf2_papi absent")
def test_a_damaged_rank_kept_from_the_global_reader_is_said_so_once(tmp_path, capsys):
    """16 bytes of rank 0's event file overwritten: read on its own it gives no event, the global reader 48 before
    the damage, which are kept. It printed 'rank 0 ... none kept' and then 'the 48 events ... are kept'."""
    pytest.importorskip("otf2")
    anchor = _damaged_papi(tmp_path, "traces/0.evt", 859, b"\xff" * 16)
    assert main(["import", str(anchor), "--out", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "none kept" not in out and out.count(f"{anchor}: rank 0") == 1, out
    assert ("the 48 events of the rank read together with the other ranks before the damage are kept (more than its "
            "locations gave on their own)") in out
    assert len(_calls(tmp_path / "store")[0]) > 0
