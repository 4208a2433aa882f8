"""OTF2 regions nest (Score-P's ``main`` encloses MPI_Init, the MPI calls and MPI_Finalize): the store holds
exclusive time, checked against the archive's own Enter/Leave events read here with the ``otf2`` package."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from shared_data import SHARED

from ddltrace.analyses.phases import segment_rank
from ddltrace.cli import main
from ddltrace.store import TraceStore
from ddltrace.summary import summarize

PAPI = SHARED / "wild_traces/pipit_otf2_papi"
pytestmark = pytest.mark.skipif(not PAPI.exists(), reason="shared wild traces absent")


def _regions_from_the_archive(anchor: Path) -> dict:
    """Per (rank, region): exclusive and inclusive ns, and where MPI_Init ended, computed from the raw events
    (each timestamp converted to ns as ticks * 1e9 / resolution, rounded, as a reader of the file must)."""
    otf2 = pytest.importorskip("otf2")
    exclusive, inclusive, init_end = defaultdict(int), defaultdict(int), {}
    stacks = defaultdict(list)
    with otf2.reader.open(str(anchor)) as reader:
        clock = reader.definitions.clock_properties
        for location, event in reader.events:
            t_ns = round((event.time - clock.global_offset) * 1e9 / clock.timer_resolution)
            rank = int(location.group.name.split()[-1])
            stack = stacks[location]
            if isinstance(event, otf2.events.Enter):
                stack.append([event.region.name, t_ns, 0])
            elif isinstance(event, otf2.events.Leave):
                name, start, children = stack.pop()
                exclusive[rank, name] += t_ns - start - children
                inclusive[rank, name] += t_ns - start
                if stack:
                    stack[-1][2] += t_ns - start
                if name == "MPI_Init":
                    init_end[rank] = t_ns
    return {"exclusive": dict(exclusive), "inclusive": dict(inclusive), "init_end": init_end}


def test_score_p_main_does_not_hide_mpi_init(tmp_path, capsys):
    truth = _regions_from_the_archive(PAPI / "traces.otf2")
    assert main(["import", str(PAPI), "--out", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    store = TraceStore.open(tmp_path / "s")
    timeline = store.timeline()
    stored = timeline.groupby(["rank", "name"])["dur_ns"].sum().to_dict()
    # every region's stored time is its exclusive time, to the ns
    assert stored == {k: v for k, v in truth["exclusive"].items() if v}
    main_name = "int main(int, char**)"
    for rank in (0, 1):
        assert truth["inclusive"][rank, main_name] > 200e6 > truth["exclusive"][rank, main_name]
        # each instant belongs to one region: no two rows of a rank's thread overlap
        rows = timeline[timeline["rank"] == rank].sort_values("start_ns")
        ends = (rows["start_ns"] + rows["dur_ns"]).to_numpy()
        assert (rows["start_ns"].to_numpy()[1:] >= ends[:-1]).all()

    # `info`: MPI_Init (208.9 ms of a 215.5 ms run) is no longer compute under main
    summary = summarize(store)
    for rank_summary in summary.ranks:
        rank = rank_summary.rank
        assert rank_summary.time_ns["compute"] == truth["exclusive"][rank, main_name]
        assert rank_summary.time_ns["other"] >= truth["exclusive"][rank, "MPI_Init"]
        assert rank_summary.time_ns["compute"] < 0.05 * rank_summary.span_ns
    # MPI_Init/Finalize are initialisation and finalisation: the phases end and start there
    for rank in (0, 1):
        phases = segment_rank(timeline[timeline["rank"] == rank])
        assert phases.init_end_ns >= truth["init_end"][rank]
        init = timeline[(timeline["rank"] == rank) & (timeline["name"] == "MPI_Init")]
        assert set(init["category"].astype(str)) == {"other"}
