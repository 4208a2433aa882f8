"""A Horovod timeline is rank 0's view of every rank: the world size comes from the negotiation ticks (named by
rank), and the import says whose view it is. On the real 2-rank Gloo timeline of tests/data, and on a 4-rank
timeline written here in the layout of the 2018 versions (no epoch header, array never closed: FORMATS.md §6)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from ddltrace.cli import main
from ddltrace.store import TraceStore

GLOO = Path(__file__).parent / "data" / "horovod_gloo" / "horovod_timeline.json.gz"


def _ticked_ranks(text: str) -> set[int]:
    """Ranks named by the X ticks of the file (Horovod writes them inside NEGOTIATE_<op> B/E, dur 0)."""
    return {int(m.group(1)) for m in re.finditer(r'\{"ph": "X", "name": "(\d+)"', text)}


def test_real_two_rank_timeline(tmp_path, capsys):
    ranks = _ticked_ranks(gzip.open(GLOO, "rt").read())
    assert ranks == {0, 1}
    assert main(["import", str(GLOO), "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    store = TraceStore.open(tmp_path / "s")
    assert store.ranks == [0] and store.world_size == len(ranks)
    assert "rank 0's view of a 2-rank job: the negotiation ticks name ranks 0-1" in out


def _old_four_rank_timeline(path: Path) -> str:
    """Two tensors negotiated by four ranks (ready in a different order each), then reduced; 2018 style."""
    lines = []
    prefix = "DistributedAdamOptimizer_Allreduce/HorovodAllreduce_dense_"
    for pid, order in ((1, [2, 0, 3, 1]), (2, [3, 1, 0, 2])):
        t = 1000 * pid
        lines += [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"{prefix}{pid}"}},
                  {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}},
                  {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": t, "pid": pid}]
        lines += [{"ph": "X", "name": str(r), "ts": t + 10 * i, "pid": pid, "dur": 0} for i, r in enumerate(order)]
        lines += [{"ph": "E", "ts": t + 50, "pid": pid}, {"ph": "B", "name": "ALLREDUCE", "ts": t + 60, "pid": pid},
                  {"ph": "B", "name": "MPI_ALLREDUCE", "ts": t + 70, "pid": pid},
                  {"ph": "E", "ts": t + 400, "pid": pid}, {"ph": "E", "ts": t + 410, "pid": pid}]
    text = "[\n" + "".join(json.dumps(e) + ",\n" for e in lines)  # never closed
    path.write_text(text)
    return text


def test_four_rank_timeline_world_size_from_the_ticks(tmp_path, capsys):
    path = tmp_path / "timeline.json"
    ranks = _ticked_ranks(_old_four_rank_timeline(path))
    assert ranks == {0, 1, 2, 3}
    assert main(["import", str(path), "--out", str(tmp_path / "s")]) == 0
    assert "rank 0: rank 0's view of a 4-rank job: the negotiation ticks name ranks 0-3; only rank 0's timeline " \
           "is recorded" in capsys.readouterr().out
    store = TraceStore.open(tmp_path / "s")
    assert store.world_size == 4 and store.ranks == [0]
    assert any("rank 0's view of a 4-rank job" in note for note in store.manifest["notes"])
    assert main(["info", str(tmp_path / "s")]) == 0
    assert "world size  4 ranks (1 recorded)" in capsys.readouterr().out
