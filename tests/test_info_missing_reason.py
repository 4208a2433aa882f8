"""info's "not listed" line gives TraceStore.missing's reason for each rank the store holds no timeline of: a rank
whose entry holds no events (a file cut short, a cut export) was "not in the files imported", which its import's
own problem contradicted; now "no events   rank 1 ...: FILE: ...; rank 1 holds no events"."""

from __future__ import annotations

import pandas as pd

from ddltrace.cli import main
from ddltrace.store import write_store


def test_info_gives_the_reason_a_rank_holds_no_timeline(tmp_path, capsys):
    """A rank whose entry holds no events (a file cut short, an export cut): TraceStore.missing's reason, not 'not
    in the files imported'."""
    rows = pd.DataFrame({"rank": 0, "lane": "mpi", "name": ["MPI_Init", "MPI_Allreduce"], "category": ["other", "comm"],
                         "start_ns": [0, 50_000_000], "dur_ns": [10_000_000, 10_000_000]})
    store = write_store(tmp_path / "s", rows, run={"command": "job", "world_size": 3, "imported_files": ["a", "b"]},
                        rank_info={1: {"file": "b.json"}})
    assert store.rank_info(1)["events"] == 0 and store.missing()[1] == "b.json: rank 1 holds no events"
    assert main(["info", str(store.path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "no events   rank 1 of the world of 3: b.json: rank 1 holds no events, so no timeline here" in out
    # the rank with no entry and no note on it: as before
    assert ("not listed  rank 2 of the world of 3: not in the files imported, whose run names that world, so no "
            "timeline here") in out
