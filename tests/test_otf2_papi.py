"""OTF2 Metric records (Score-P's PAPI counters) kept as counters, and the counts per region
(:mod:`ddltrace.analyses.region_counters`): checked against the archive itself, read here with the ``otf2`` package
and summed another way, and against an archive written here whose every figure is worked out by hand."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from shared_data import SHARED

from ddltrace.analyses import region_counters
from ddltrace.cli import main
from ddltrace.store import TraceStore

PAPI = SHARED / "wild_traces/pipit_otf2_papi"
METRICS = ("PAPI_TOT_CYC", "PAPI_L2_TCM", "PAPI_BR_MSP")


def _import(anchor: Path, out: Path, capsys) -> TraceStore:
    assert main(["import", str(anchor), "--out", str(out)]) == 0
    capsys.readouterr()
    return TraceStore.open(out)


def _from_the_archive(anchor: Path) -> dict:
    """The archive's metric samples and per-region counts, read with the otf2 package alone: per (rank, member) its
    (ns, value) samples; per (rank, region, member) the inclusive count (the sample at each Leave minus the one at its
    Enter) and the exclusive one, summed differently from the importer: each stretch between two samples of a
    location goes to the region innermost on its stack over that stretch."""
    otf2 = pytest.importorskip("otf2")
    samples, inclusive, exclusive, calls = defaultdict(list), defaultdict(int), defaultdict(int), defaultdict(int)
    stacks, last = defaultdict(list), {}
    with otf2.reader.open(str(anchor)) as reader:
        clock = reader.definitions.clock_properties
        for location, event in reader.events:
            rank = int(location.group.name.split()[-1])
            stack = stacks[location._ref]
            if isinstance(event, otf2.events.Metric):
                t_ns = round((event.time - clock.global_offset) * 1e9 / clock.timer_resolution)
                values = dict(zip((m.name for m in event.metric.members), event.values, strict=True))
                for name, value in values.items():
                    samples[rank, name].append((t_ns, value))
                    before = last.get((location._ref, name))
                    if before is not None and stack:
                        exclusive[rank, stack[-1][0], name] += value - before
                last.update({(location._ref, name): value for name, value in values.items()})
                pending = (event.time, values)
            elif isinstance(event, otf2.events.Enter):
                assert pending[0] == event.time  # Score-P writes the Metric record just before, same time
                stack.append((event.region.name, pending[1]))
            elif isinstance(event, otf2.events.Leave):
                assert pending[0] == event.time
                name, at_enter = stack.pop()
                calls[rank, name] += 1
                if not any(frame[0] == name for frame in stack):
                    for metric, value in pending[1].items():
                        inclusive[rank, name, metric] += value - at_enter[metric]
    return {"samples": samples, "inclusive": inclusive, "exclusive": exclusive, "calls": calls}


@pytest.mark.skipif(not PAPI.is_dir(), reason="pipit_otf2_papi absent")
def test_papi_counters_are_the_archive_s_samples(tmp_path, capsys):
    truth = _from_the_archive(PAPI / "traces.otf2")
    store = _import(PAPI / "traces.otf2", tmp_path / "s", capsys)
    counters = store.counters()
    for rank in (0, 1):
        info = store.rank_info(rank)
        assert sorted(info["counter_series"]) == sorted(METRICS)
        for name in METRICS:
            mine = counters[(counters["rank"] == rank) & (counters["name"] == name)].sort_values("t_ns")
            assert list(zip(mine["t_ns"], mine["value"], strict=True)) == truth["samples"][rank, name]
            assert len(mine) == 42  # one at each of the rank's 21 enters and 21 leaves
            meaning = info["counter_series"][name]
            assert (meaning["unit"], meaning["mode"], meaning["occurrence"], meaning["metric_type"]) == \
                ("#", "ACCUMULATED_START", "SYNCHRONOUS_STRICT", "PAPI")
            assert meaning["meaning"].startswith("cumulative: the count since the location's counters started")
    assert info["counter_series"]["PAPI_L2_TCM"]["description"] == "Level 2 cache misses. [ LLC_REFERENCES ]"


@pytest.mark.skipif(not PAPI.is_dir(), reason="pipit_otf2_papi absent")
def test_papi_counts_per_region_against_the_archive(tmp_path, capsys):
    truth = _from_the_archive(PAPI / "traces.otf2")
    store = _import(PAPI / "traces.otf2", tmp_path / "s", capsys)
    table = region_counters.region_table(store)
    assert len(table) == 2 * 7 * 3  # 2 ranks, 7 regions, 3 metrics
    for row in table.itertuples():
        assert row.inclusive == truth["inclusive"][row.rank, row.region, row.metric], row
        assert row.exclusive == truth["exclusive"][row.rank, row.region, row.metric], row
        assert row.calls == row.measured_calls == row.exclusive_calls == truth["calls"][row.rank, row.region]
    totals = region_counters.series_totals(store).set_index(["rank", "series"])
    for rank in (0, 1):
        for name in METRICS:
            values = [v for _, v in truth["samples"][rank, name]]
            assert totals.loc[(rank, name), "window_count"] == values[-1] - values[0]
            assert totals.loc[(rank, name), "final"] == values[-1]
            # the exclusive counts of a rank's regions add up to its window count (main holds every other region)
            assert table[(table["rank"] == rank) & (table["metric"] == name)]["exclusive"].sum() == \
                values[-1] - values[0]
    # the figures, as the file gives them: rank 0's cycles and MPI_Init's and MPI_Send's share of them
    assert totals.loc[(0, "PAPI_TOT_CYC"), "window_count"] == 95_986_038
    cycles = table[(table["rank"] == 0) & (table["metric"] == "PAPI_TOT_CYC")].set_index("region")
    assert cycles.loc["MPI_Init", "inclusive"] == 87_875_176
    assert cycles.loc["MPI_Send", ["calls", "inclusive"]].tolist() == [8, 6_383_893]
    assert cycles.loc["int main(int, char**)", ["inclusive", "exclusive"]].tolist() == [95_986_038, 1_198_202]


@pytest.mark.skipif(not PAPI.is_dir(), reason="pipit_otf2_papi absent")
def test_papi_text_states_units_window_and_definitions(tmp_path, capsys):
    store = _import(PAPI / "traces.otf2", tmp_path / "s", capsys)
    text = "\n".join(region_counters.render(store))
    assert "counts in each metric's unit, '#' = events" in text
    assert "incl: each call's count from its Enter to its Leave, callees included" in text
    assert "share: incl over the rank's count from its first sample to its last" in text
    assert ("rank 0 PAPI_TOT_CYC: 95,986,038 events in the 215 ms from its first sample to its last (42 samples, "
            "ACCUMULATED_START: cumulative; final value 96,084,888, the count since the counters started); Total "
            "cycles. [ CPU_CLK_THREAD_UNHALTED:THREAD_P ]") in text
    lines = text.splitlines()
    header = lines.index("  rank 0, regions by PAPI_TOT_CYC incl:") + 1
    assert lines[header].split()[:4] == ["region", "calls", "PAPI_TOT_CYC", "share"]
    assert lines[header + 1].split()[:3] == ["int", "main(int,", "char**)"]  # most cycles first: main, then MPI_Init
    assert lines[header + 2].split()[:5] == ["MPI_Init", "1", "91.5", "%", "87,875,176"]


def _write_archive(folder: Path) -> None:
    """Two ranks. Rank 0: 'Master thread' runs main > f > f (recursion), then main > g, sampling PAPI_TOT_CYC and
    PAPI_L2_TCM (cumulative, at every enter and leave) and io_bytes (per interval, ACCUMULATED_LAST, in KiB: base 2,
    exponent 10; at f's outer Enter and Leave only); 'OMP thread 1' runs h with the cumulative pair. Rank 1: main,
    a temperature sampled asynchronously, and a power metric instance recorded by rank 0 for rank 1's location group;
    one more instance, scoped to the system-tree node, is no rank's."""
    otf2 = pytest.importorskip("otf2")
    from otf2.enums import Base, MetricMode, MetricOccurrence, MetricType, RecorderKind, Type

    with otf2.writer.open(str(folder), timer_resolution=10**9) as w:
        d = w.definitions
        node = d.system_tree_node("node0")
        g0, g1 = (d.location_group(f"MPI Rank {r}", system_tree_parent=node) for r in (0, 1))
        master0, thread1, master1 = d.location("Master thread", group=g0), d.location("OMP thread 1", group=g0), \
            d.location("Master thread", group=g1)
        main_, f, g, h = (d.region(n) for n in ("main", "f", "g", "h"))

        def member(name, kind, mode, value_type, base, exponent, unit):
            return d.metric_member(name, f"{name} (test)", kind, mode, value_type, base, exponent, unit)

        cyc = member("PAPI_TOT_CYC", MetricType.PAPI, MetricMode.ACCUMULATED_START, Type.UINT64, Base.DECIMAL, 0, "#")
        l2 = member("PAPI_L2_TCM", MetricType.PAPI, MetricMode.ACCUMULATED_START, Type.UINT64, Base.DECIMAL, 0, "#")
        io = member("io_bytes", MetricType.USER, MetricMode.ACCUMULATED_LAST, Type.UINT64, Base.BINARY, 10, "B")
        temp = member("temp", MetricType.OTHER, MetricMode.ABSOLUTE_POINT, Type.DOUBLE, Base.DECIMAL, 0, "C")
        power = member("power", MetricType.OTHER, MetricMode.ABSOLUTE_POINT, Type.DOUBLE, Base.DECIMAL, 0, "W")
        papi = d.metric_class([cyc, l2], MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
        bytes_ = d.metric_class([io], MetricOccurrence.SYNCHRONOUS, RecorderKind.CPU)
        temps = d.metric_class([temp], MetricOccurrence.ASYNCHRONOUS, RecorderKind.CPU)
        powers = d.metric_class([power], MetricOccurrence.ASYNCHRONOUS, RecorderKind.ABSTRACT)
        for_rank1 = d.metric_instance(powers, master0, scope=g1)
        for_node = d.metric_instance(powers, master0, scope=node)

        ew = w.event_writer_from_location(master0)
        for t, counts, io_kib, enter, leave in [
                (100, [1000, 10], None, main_, None), (200, [2000, 20], 5, f, None), (300, [3500, 25], None, f, None),
                (400, [4000, 40], None, None, f), (500, [6000, 50], 3, None, f), (600, [6500, 55], None, g, None),
                (700, [9500, 95], None, None, g), (800, [10000, 100], None, None, main_)]:
            if t == 500:
                ew.metric(450, for_rank1, [230.0])
                ew.metric(460, for_node, [1000.0])
            ew.metric(t, papi, counts)
            if io_kib is not None:
                ew.metric(t, bytes_, [io_kib])
            if enter is not None:
                ew.enter(t, enter)
            else:
                ew.leave(t, leave)
        ew = w.event_writer_from_location(thread1)
        ew.metric(150, papi, [100, 1])
        ew.enter(150, h)
        ew.metric(250, papi, [600, 3])
        ew.leave(250, h)
        ew = w.event_writer_from_location(master1)
        ew.metric(100, papi, [0, 0])
        ew.enter(100, main_)
        ew.metric(150, temps, [41.5])
        ew.metric(300, papi, [7000, 70])
        ew.leave(300, main_)


def test_metric_modes_threads_recursion_and_instances(tmp_path, capsys):
    _write_archive(tmp_path / "archive")
    anchor = next((tmp_path / "archive").glob("*.otf2"))
    assert main(["import", str(anchor), "--out", str(tmp_path / "s")]) == 0
    said = capsys.readouterr().out
    assert "skipped 16 event(s): OTF2 Metric records, kept as counters" in said
    assert ("skipped 1 event(s): OTF2 Metric records of a metric instance scoped to a system-tree node or a group "
            "(no one rank's; not kept)") in said
    store = TraceStore.open(tmp_path / "s")
    with open(tmp_path / "s" / "manifest.json") as fh:
        json.load(fh)  # (the descriptions are plain JSON)
    r0, r1 = store.rank_info(0)["counter_series"], store.rank_info(1)["counter_series"]
    # the rank's two threads both count cycles: one series each, the thread named
    assert sorted(r0) == ["PAPI_L2_TCM [Master thread]", "PAPI_L2_TCM [OMP thread 1]", "PAPI_TOT_CYC [Master thread]",
                          "PAPI_TOT_CYC [OMP thread 1]", "io_bytes"]
    assert (r0["io_bytes"]["unit"], r0["io_bytes"]["mode"], r0["io_bytes"]["scale"]) == ("B", "ACCUMULATED_LAST", 1024)
    assert r0["io_bytes"]["meaning"] == "per interval: the count since the series' previous sample"
    assert sorted(r1) == ["PAPI_L2_TCM", "PAPI_TOT_CYC", "power", "temp"]
    assert r1["power"]["location"] == "MPI Rank 1" and r1["temp"]["mode"] == "ABSOLUTE_POINT"
    counters = store.counters()
    io = counters[counters["name"] == "io_bytes"]
    assert io["value"].tolist() == [5 * 1024, 3 * 1024] and io["rank"].tolist() == [0, 0]
    assert counters[counters["name"] == "power"][["rank", "value"]].values.tolist() == [[1, 230.0]]

    table = region_counters.region_table(store).set_index(["rank", "region", "metric"])
    got = {k: tuple(v) for k, v in table[["calls", "measured_calls", "inclusive", "exclusive",
                                          "exclusive_calls"]].iterrows()}
    assert got == {
        # main 1000 -> 10000; f's outer call 2000 -> 6000 holds the inner one 3500 -> 4000 (counted once in the
        # inclusive sum; exclusive 500 + 3500); g 6500 -> 9500; main's own: 9000 - 4000 - 3000
        (0, "main", "PAPI_TOT_CYC"): (1, 1, 9000, 2000, 1), (0, "f", "PAPI_TOT_CYC"): (2, 2, 4000, 4000, 2),
        (0, "g", "PAPI_TOT_CYC"): (1, 1, 3000, 3000, 1), (0, "h", "PAPI_TOT_CYC"): (1, 1, 500, 500, 1),
        (0, "main", "PAPI_L2_TCM"): (1, 1, 90, 20, 1), (0, "f", "PAPI_L2_TCM"): (2, 2, 30, 30, 2),
        (0, "g", "PAPI_L2_TCM"): (1, 1, 40, 40, 1), (0, "h", "PAPI_L2_TCM"): (1, 1, 2, 2, 1),
        # io_bytes sampled at f's outer Enter and Leave only: the 3 KiB read over (200, 500]; its inner call has no
        # sample, so the outer one's exclusive count is not known
        (0, "f", "io_bytes"): (2, 1, 3072, 0, 0),
        (1, "main", "PAPI_TOT_CYC"): (1, 1, 7000, 7000, 1), (1, "main", "PAPI_L2_TCM"): (1, 1, 70, 70, 1)}
    # the share: of the rank's cycles on both threads (9000 + 500)
    assert table.loc[(0, "main", "PAPI_TOT_CYC"), "share"] == pytest.approx(9000 / 9500)
    totals = region_counters.series_totals(store).set_index(["rank", "series"])
    assert totals.loc[(0, "io_bytes"), "window_count"] == 3072  # the samples after the first
    assert totals.loc[(1, "temp"), "final"] == 41.5
    assert totals["window_count"].isna().tolist() == [False] * 5 + [False, False, True, True]  # power, temp: none
    lines = region_counters.render(store)
    f_row = next(line for line in lines if line.startswith("    f "))
    assert f_row.split()[-2:] == ["3,072*", "-"]  # io_bytes: one call of two measured; no exclusive count known
    assert ("    * f, io_bytes: sampled at the Enter and Leave of 1 of its 2 calls, the sums are theirs; exclusive "
            "known for 0 (all its callees measured too)") in lines
    assert ("  rank 1 temp: ABSOLUTE_POINT, an absolute value (a rate, a temperature, ...) at its instant: no count "
            "over a window; 1 sample, the last 41.5 C; temp (test)") in lines


def test_no_metrics_no_counters(tmp_path, capsys):
    """An archive without Metric records: no counters, no region counts, no text (as before)."""
    otf2 = pytest.importorskip("otf2")
    with otf2.writer.open(str(tmp_path / "a"), timer_resolution=10**9) as w:
        d = w.definitions
        group = d.location_group("MPI Rank 0", system_tree_parent=d.system_tree_node("n"))
        loc = d.location("Master thread", group=group)
        ew = w.event_writer_from_location(loc)
        ew.enter(10, w.definitions.region("main"))
        ew.leave(20, w.definitions.region("main"))
    store = _import(next((tmp_path / "a").glob("*.otf2")), tmp_path / "s", capsys)
    assert "counter_series" not in store.rank_info(0) and not store.counter_ranks
    assert region_counters.render(store) == [] and not len(region_counters.region_table(store))


@pytest.mark.skipif(not PAPI.is_dir(), reason="pipit_otf2_papi absent")
def test_a_damaged_rank_leaves_the_other_s_counters_whole(tmp_path, capsys):
    """Rank 0's event file damaged 859 bytes in (tests/test_import_otf2_damage.py): the importer reads each location
    on its own, and rank 1's samples and region counts are those of the whole archive."""
    import shutil

    pytest.importorskip("otf2")
    whole = _import(PAPI / "traces.otf2", tmp_path / "whole", capsys)
    shutil.copytree(PAPI, tmp_path / "papi")
    evt = tmp_path / "papi" / "traces" / "0.evt"
    data = bytearray(evt.read_bytes())
    data[859:875] = b"\xff" * 16
    evt.write_bytes(bytes(data))
    damaged = _import(tmp_path / "papi" / "traces.otf2", tmp_path / "damaged", capsys)
    for key in ("counter_series", "region_counters"):
        assert damaged.rank_info(1)[key] == whole.rank_info(1)[key]
    assert damaged.counters([1]).equals(whole.counters([1]))


@pytest.mark.skipif(not PAPI.is_dir(), reason="pipit_otf2_papi absent")
def test_analyze_prints_and_writes_the_region_counts(tmp_path, capsys):
    """`analyze` shows the counters per region under the run, and its JSON holds the same tables: MPI_Send's cycles
    on rank 0 as the archive gives them (the sample at each of its 8 Leaves less the one at its Enter, summed)."""
    truth = _from_the_archive(PAPI / "traces.otf2")
    _import(PAPI / "traces.otf2", tmp_path / "s", capsys)
    assert main(["analyze", str(tmp_path / "s")]) == 0
    text = capsys.readouterr().out
    assert "  hardware counters per region (OTF2 Metric records;" in text
    assert "    rank 1, regions by PAPI_TOT_CYC incl:" in text
    assert main(["analyze", str(tmp_path / "s"), "--json"]) == 0
    counters = json.loads(capsys.readouterr().out)["stores"][0]["hardware_counters"]
    send = [r for r in counters["regions"] if (r["rank"], r["region"], r["metric"]) == (0, "MPI_Send", "PAPI_TOT_CYC")]
    assert [r["inclusive"] for r in send] == [truth["inclusive"][0, "MPI_Send", "PAPI_TOT_CYC"]] == [6_383_893]
    assert {(s["rank"], s["series"]) for s in counters["series"]} == {(r, m) for r in (0, 1) for m in METRICS}


def test_analyze_json_has_no_counters_where_the_store_has_none(tiny_store, capsys):
    assert main(["analyze", str(tiny_store.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stores"][0]["hardware_counters"] == {"series": [], "regions": []}
