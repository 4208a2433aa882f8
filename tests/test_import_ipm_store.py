"""`ddltrace import` of real IPM XML profiles (27 ranks on 27 hosts, 64 ranks on 4 hosts; shared third-party
files, skipped when absent): every rank's figures in the store are the file's, read here with ElementTree, and
the import reads no rank back for a clock alignment it has no messages for."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from shared_data import SHARED

from ddltrace.cli import main
from ddltrace.store import TraceStore

IPM_FILES = [SHARED / "mpi_traces/ipm-xml/hunold.1491561509.276565.ipm.xml",
             SHARED / "wild_traces/ipm_hunold_1494937738/hunold.1494937738.200810.ipm.xml"]
present = [pytest.param(p, id=f"{p.name}") for p in IPM_FILES if p.exists()]
pytestmark = pytest.mark.skipif(not present, reason="shared IPM profiles absent")


P2P = {"MPI_Send", "MPI_Isend", "MPI_Recv", "MPI_Irecv", "MPI_Ssend", "MPI_Issend", "MPI_Bsend", "MPI_Ibsend",
       "MPI_Rsend", "MPI_Irsend", "MPI_Mrecv", "MPI_Imrecv", "MPI_Sendrecv", "MPI_Sendrecv_replace"}


def _tasks(path: Path) -> dict[int, dict]:
    """Each task's figures straight from the XML: wall and MPI time (s), start stamp, host, per MPI call name the
    summed time (s), count and bytes of its <func> entries, and per point-to-point call name per partner
    (``orank``) of its <hent> hash entries their exact bytes (bytes per call times count)."""
    tasks = {}
    for task in ET.parse(path).getroot().iter("task"):
        perf = task.find("perf")
        calls: dict[str, list[float]] = {}
        for func in task.iter("func"):
            entry = calls.setdefault(func.get("name"), [0.0, 0, 0])
            entry[0] += float(func.text)
            entry[1] += int(float(func.get("count", 0)))
            entry[2] += int(float(func.get("bytes", 0)))
        partners: dict[str, dict[int, int]] = {}
        for hent in task.iter("hent"):
            if hent.get("call") in P2P:
                sent = partners.setdefault(hent.get("call"), {})
                orank = int(hent.get("orank"))
                sent[orank] = sent.get(orank, 0) + int(hent.get("bytes")) * int(hent.get("count"))
        tasks[int(task.get("mpi_rank"))] = {
            "wtime": float(perf.get("wtime")), "mtime": float(perf.get("mtime")),
            "stamp_init": Decimal(task.get("stamp_init")), "host": task.findtext("host").strip(), "calls": calls,
            "partners": partners}
    return tasks


@pytest.fixture(scope="module", params=present)
def imported(request, tmp_path_factory):
    """The file, its figures by ElementTree, and the store `ddltrace import` made of it, with the ranks whose
    timeline files were read back while importing."""
    path = request.param
    out = tmp_path_factory.mktemp("ipm") / "store"
    reads = []
    plain_read = TraceStore._read
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TraceStore, "_read", lambda self, folder, rank, dtypes: (
            reads.append((folder, rank)), plain_read(self, folder, rank, dtypes))[1])
        assert main(["import", str(path), "--out", str(out)]) == 0
        during_import = list(reads)
        TraceStore.open(out).timeline([0])
        assert reads[len(during_import):] == [("timeline", 0)]  # the probe sees a rank read back
    return path, _tasks(path), TraceStore.open(out), during_import


def test_every_rank_holds_the_files_times_per_mpi_call(imported):
    _, tasks, store, _ = imported
    assert store.ranks == sorted(tasks)
    timeline = store.timeline()
    for rank, task in tasks.items():
        rows = timeline[timeline["rank"] == rank]
        # "compute", one row per partner of a point-to-point call (its hash entries' orank), one per other call
        assert len(rows) == 1 + sum(len(task["partners"].get(name, ())) or 1 for name in task["calls"])
        durations = rows.groupby("name")["dur_ns"].sum().to_dict()
        assert durations.pop("compute") == round(max(task["wtime"] - task["mtime"], 0.0) * 1e9)
        assert durations == {name: round(time * 1e9) for name, (time, _, _) in task["calls"].items()}
        calls = rows[rows["name"] != "compute"]
        alone = calls[~calls["name"].isin(task["partners"])]
        assert alone.groupby("name")["bytes"].sum().astype(int).to_dict() == {
            name: nbytes for name, (_, _, nbytes) in task["calls"].items() if name not in task["partners"]}
        for name, partners in task["partners"].items():
            # each partner's bytes are its hash entries' exact figure, not a share of the <func> entry's five
            # significant digits (rank 0 -> 1, MPI_Send, in ipm_hunold_1494937738: 13,095,849 B, now 13,095,936 B)
            mine = calls[calls["name"] == name]
            assert dict(zip(mine["peer"].astype(int), mine["bytes"].astype(int), strict=True)) == partners
        assert calls.loc[~calls["name"].isin(task["partners"]), "peer"].isna().all()
        assert rows.loc[rows["name"] == "compute", "bytes"].isna().all()  # compute moves no payload
        info = store.rank_info(rank)
        assert info["wtime_s"] == task["wtime"] and info["mpi_time_s"] == task["mtime"]
        assert info["calls"] == {name: count for name, (_, count, _) in task["calls"].items()}
        assert info["host"] == task["host"] and info["aggregate"] is True and info["format"] == "ipm"
        start = int(task["stamp_init"] * 10**9)  # exact: through a float, rank 0's 1494937738.200810 was 16 ns off
        assert info["start_ns"] == int(rows["start_ns"].min()) == start
        assert info["end_ns"] == start + int(rows["dur_ns"].sum())
        assert info["events"] == len(rows)


def test_the_whole_jobs_mpi_time_per_call_is_the_files(imported):
    """Summed over all ranks, per MPI call name, in seconds (the figure the report's breakdown starts from)."""
    _, tasks, store, _ = imported
    timeline = store.timeline()
    mpi = timeline[timeline["name"] != "compute"].groupby("name")["dur_ns"].sum() / 1e9
    expected: dict[str, float] = {}
    for task in tasks.values():
        for name, (time, _, _) in task["calls"].items():
            expected[name] = expected.get(name, 0.0) + time
    assert sorted(mpi.index) == sorted(expected)
    for name, seconds in expected.items():
        assert mpi[name] == pytest.approx(seconds, abs=1e-9 * len(tasks))
    assert np.isclose(timeline["dur_ns"].sum() / 1e9,
                      sum(max(t["wtime"] - t["mtime"], 0.0) + sum(c[0] for c in t["calls"].values())
                          for t in tasks.values()))


def test_no_rank_is_read_back_for_an_alignment_without_messages(imported):
    """IPM profiles hold totals, no messages (their partners, but no send or receive time): the ranks are on
    several hosts (alignment is tried), the manifest says nothing bounds the clocks, and no rank's timeline was
    read back to look for messages."""
    _, tasks, store, reads = imported
    assert len({t["host"] for t in tasks.values()}) > 1
    assert reads == []
    notes = " ".join(store.manifest["notes"])
    assert "not attempted, the input holds no send/receive pairs" in notes and "times left as recorded" in notes
    assert "(per-call totals, with no send or receive times)" in notes
    assert store.manifest["clock"]["offsets_ns"] == {}
