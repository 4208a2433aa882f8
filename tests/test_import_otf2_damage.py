"""An OTF2 archive with one location's event file missing or cut short (a 3-rank archive written here with the
otf2 package): the other ranks are imported whole and the damaged one is named. The global event reader stops
every location at the first damage in any, so the importer reads each location on its own once it meets one."""

from __future__ import annotations

import pytest

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
