"""``ddltrace merge STORE PART`` of a node's part (collectors/node_merge.py) says what is true of the merged store, in
the user's words: ``merged_from`` and every note name the part's folder as given, not merge's temporary copy of it,
and a rank whose record file the part holds unreadable is named so, not also as having written none (QA8 #2). The
part here holds rank 1's record file damaged (no MPI job needed: the run's store is written directly); a part whose
ranks are read is merged on a simulated cluster (tests/test_run_cluster_local.py)."""

from __future__ import annotations

import json

from ddltrace.cli import main
from ddltrace.store import TraceStore, write_store
from ddltrace.timeline import make_timeline

START = 1_795_692_666_108_024_769
CLOCK = {"method": "PMPI ping-pong to rank 0 at MPI_Init and MPI_Finalize (min round trip of 10), linear drift in "
                   "between", "offsets_ns": {"0": 0}, "uncertainty_ns": {"0": 0}, "reference_rank": 0}


def _run_store(path, notes=("ranks [1] wrote no record file (died before MPI_Init, or never started)",), world=2,
               clock=CLOCK):
    """The store of a ``world``-rank MPI run whose node ``nodeB`` (rank 1) was lost: rank 0 only, the node named
    missing, with the run's ``notes`` (and ``clock``, where not None)."""
    rows = [{"rank": 0, "lane": "main", "name": "MPI_Barrier", "category": "barrier", "start_ns": START + i * 10**6,
             "dur_ns": 5 * 10**5, "source": "pmpi"} for i in range(3)]
    store = write_store(path, make_timeline(rows), None,
                        run={"command": "python job3.py", "launch": f"mpiexec -n {world} python job3.py",
                             "framework": "mpi", "mpi_flavour": "mpich", "world_size": world, "hosts": ["vm"],
                             "start_ns": START, "end_ns": START + 10**8,
                             "missing_nodes": {"nodeB": "/local/run/records"}},
                        rank_info={0: {"host": "vm", "ended": "normal", "role": "rank"}})
    store.manifest["notes"] = list(notes)
    if clock is not None:
        store.manifest["clock"] = clock
    store.save_manifest()
    return path


def test_a_part_with_an_unreadable_record_file_names_the_users_folder_and_only_true_notes(tmp_path, capsys):
    store = _run_store(tmp_path / "storeA")
    part = tmp_path / "partD"
    (part / "records" / "nodes" / "nodeB").mkdir(parents=True)
    (part / "records" / "rank-00001.pmpi").write_bytes(b"not a record file" * 6)
    out = tmp_path / "mAD"
    capsys.readouterr()
    assert main(["merge", str(store), str(part), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert ".join." not in err and "warning" not in err  # (was: run.world_size 0 ... of a temporary store)
    merged = TraceStore.open(out)
    assert merged.manifest["merged_from"] == [str(store), str(part)]  # (was: .mAD.join.XXXX/part)
    notes = merged.manifest["notes"]
    assert not [n for n in json.dumps(merged.manifest).split('"') if ".join." in n]
    assert [n for n in notes if n.startswith(f"unreadable record file: {part}/records/rank-00001.pmpi: ")
            and n.endswith("; rank 1 left out")]
    # (was also: 'ranks [1] wrote no record file', 'no rank wrote a PMPI record file', and a note on clocks aligned
    # differently naming the temporary copy, whose ranks were none)
    assert not [n for n in notes if "wrote no record file" in n or n.startswith("no rank wrote")
                or n.startswith("clocks not aligned")]
    assert notes[-1] == f"node nodeB: its part joined by `ddltrace merge` from {part}"
    assert merged.manifest["clock"] == CLOCK and merged.ranks == [0] and merged.world_size == 2
    assert "missing_nodes" not in merged.run
