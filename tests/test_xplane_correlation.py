"""XPlane correlation ids (issue 15, item 1): the ``correlation_id`` stat of a device plane's stream events and of
the host events of the calls that launched them fills the timeline's ``correlation`` column, and the GPU launch
analyses (launch delay, queue length per stream) then run on TensorFlow and JAX profiles. Checked on the real TF 2
multi-worker GPU XPlane and the JAX ones of the corpus against figures computed here from the file's own fields
(a bare protobuf wire walk): each host event with a ``correlation_id`` paired with the stream event of the same id
when it is named as a runtime launch call or after the kernel it launched (xprof names it so); launch delay = the
stream event's start minus the host event's end, 0 where negative. The file's times are ps; the store's are ns
(each start and duration truncated), so a figure may differ by up to 3 ns."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import mean, median

import pytest
from shared_data import SHARED, corpus
from xplane_wire import map_entries, metadata_name, xplane_lines

from ddltrace.analyses.gpu_launch import LAUNCH_NAMES
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.collectors.importers import protowire as pw
from ddltrace.store import TraceStore

TRACES = {
    "tf2_gpu_multiworker": SHARED / "gpu_traces/tf2_gpu_multiworker.xplane.pb",
    "jax_mi300": corpus("tracelens_jax_mi300_xplane", "tw003.xplane.pb"),
    "jax_mi300_legacy": corpus("tracelens_jax_mi300_legacy_xplane",
                               "chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb"),
    "jax_te_fused_attn": corpus("tracelens_jax_te_fused_attn_xplane", "934987a2fc2f.xplane.pb"),
}
#: Lines of a device plane that annotate its streams (not device work).
DERIVED = {"Steps", "TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops", "XLA Modules", "Framework Ops",
           "Framework Name Scope", "Source code", "Async XLA Ops", "Launch Stats"}




def events_with_correlation(path: Path) -> tuple[dict, dict]:
    """(host {correlation: [(name, start ps, duration ps)]}, device {correlation: [(plane, line, name, start ps,
    duration ps)]}): the events of the file that carry a ``correlation_id`` stat (XStat.metadata_id = 1, uint64 = 3,
    int64 = 4; the stat's name from the plane's stat_metadata, field 5)."""
    host, device = defaultdict(list), defaultdict(list)
    for number, _kind, plane in pw.fields(path.read_bytes()):
        if number != 1:
            continue
        fields = list(pw.fields(pw.message(plane)))
        plane_name = next((pw.text(v) for n, _k, v in fields if n == 2), "")
        names = {k: metadata_name(m) for k, m in map_entries(fields, 4).items()}
        corr_ids = {k for k, m in map_entries(fields, 5).items() if metadata_name(m) == "correlation_id"}
        for line_name, base_ns, events in xplane_lines(fields):
            if plane_name.startswith("/device:") and line_name in DERIVED:
                continue
            for event in events:
                e = {n: v for n, _k, v in event if n != 4}
                corr = None
                for n, _k, v in event:
                    if n == 4:
                        stat = {sn: sv for sn, _sk, sv in pw.fields(pw.message(v))}
                        if pw.number(stat.get(1, 0)) in corr_ids:
                            corr = pw.number(stat[3]) if 3 in stat else pw.signed(stat[4])
                if corr is None:
                    continue
                start = base_ns * 1000 + pw.signed(e.get(2, 0))
                row = (names.get(pw.signed(e.get(1, 0)), ""), start, pw.signed(e.get(3, 0)))
                if plane_name.startswith("/host:"):
                    host[corr].append(row)
                elif plane_name.startswith("/device:"):
                    device[corr].append((plane_name, line_name, *row))
    return host, device


def launch_truth(path: Path) -> list[tuple[int, int, int]]:
    """(cpu ps, gpu ps, launch delay ps) of each launch of the file."""
    host, device = events_with_correlation(path)
    pairs = []
    for corr, launches in host.items():
        for name, start, dur in launches:
            for _plane, _line, kernel, gpu_start, gpu_dur in device.get(corr, []):
                if name in LAUNCH_NAMES or name == kernel:
                    pairs.append((dur, gpu_dur, max(0, gpu_start - (start + dur))))
    return pairs


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    done = {}

    def run(key: str):
        path = TRACES[key]
        if not path.is_file():
            pytest.skip(f"{path.name} absent (see tests/data/wild/PROVENANCE.md, ../shared/gpu_traces)")
        if key not in done:
            out = tmp_path_factory.mktemp(key) / "store"
            assert main(["import", str(path), "--out", str(out), "--progress", "never"]) == 0
            done[key] = out
        return done[key]

    return run


@pytest.mark.parametrize("key", sorted(TRACES))
def test_correlation_ids_are_the_files(key, imported):
    """Every stream event and host event with a ``correlation_id`` has it in the store (on its lane, at its start);
    no other row has one."""
    store = imported(key)
    host, device = events_with_correlation(TRACES[key])
    assert device, "no correlated device events in the file"
    timeline = TraceStore.open(store).timeline()
    with_id = timeline[timeline["correlation"].notna()]
    on_device = with_id[with_id["lane"].str.startswith("gpu:")]
    assert sorted(on_device["correlation"]) == sorted(c for c, rows in device.items() for _ in rows)
    assert sorted(with_id.loc[~with_id["lane"].str.startswith("gpu:"), "correlation"]) == \
        sorted(c for c, rows in host.items() for _ in rows)
    for row in on_device.itertuples():
        assert any(row.name == name and row.lane.endswith("/" + line)
                   for _plane, line, name, _start, _dur in device[row.correlation])


@pytest.mark.parametrize("key", sorted(TRACES))
def test_launch_delays_are_the_files(key, imported):
    """analyze's launch statistics (count, CPU and GPU durations, launch delay: mean, median, maximum) are
    the file's pairs, to the ns the ps truncation allows."""
    store = imported(key)
    pairs = launch_truth(TRACES[key])
    run = analyze_store(store)
    table = run.gpu.launch_table()
    if not pairs:
        assert table.empty
        pytest.skip("no host launch events with correlation ids in this file")
    (got,) = table.to_dict("records")
    cpu, gpu, delay = zip(*pairs, strict=True)
    assert got["launches"] == len(pairs)
    for column, values in (("cpu_duration", cpu), ("gpu_duration", gpu), ("launch_delay", delay)):
        assert abs(got[f"{column}_mean_ns"] - mean(values) / 1000) <= 3, column
        assert abs(got[f"{column}_median_ns"] - median(values) / 1000) <= 3, column
        assert abs(got[f"{column}_max_ns"] - max(values) / 1000) <= 3, column
    assert run.gpu.queue_table()["changes"].sum() == 2 * len(pairs)


def test_tf_multiworker_launch_figures(imported):
    """The TF 2 BERT profile (8 V100 planes, kernels on GPUs 4 and 6): 1,556 launches, xprof's host events named
    after their kernels and copies; the median launch delay is well above HTA's 100 us outlier cut-off."""
    key = "tf2_gpu_multiworker"
    pairs = launch_truth(TRACES[key])
    assert len(pairs) == 1556
    (got,) = analyze_store(imported(key)).gpu.launch_table().to_dict("records")
    assert got["launch_delay_outliers"] == sum(d > 100_000_000 for *_, d in pairs) > 0
    assert got["launch_delay_median_ns"] > 100_000



def copy_bytes(path: Path) -> dict[str, int]:
    """{device plane: bytes} of the stream events' ``memcpy_details`` stats (``... size:N ...``: XStat.str_value = 5,
    or ref_value = 7 naming a stat_metadata entry), summed per device plane."""
    import re

    out: dict[str, int] = defaultdict(int)
    for number, _kind, plane in pw.fields(path.read_bytes()):
        if number != 1:
            continue
        fields = list(pw.fields(pw.message(plane)))
        plane_name = next((pw.text(v) for n, _k, v in fields if n == 2), "")
        if not plane_name.startswith("/device:"):
            continue
        stat_names = {k: metadata_name(m) for k, m in map_entries(fields, 5).items()}
        details = {k for k, name in stat_names.items() if name == "memcpy_details"}
        for line_name, _base, events in xplane_lines(fields):
            if line_name in DERIVED:
                continue
            for event in events:
                for n, _k, v in event:
                    if n != 4:
                        continue
                    stat = {sn: sv for sn, _sk, sv in pw.fields(pw.message(v))}
                    if pw.number(stat.get(1, 0)) not in details:
                        continue
                    text = pw.text(stat[5]) if 5 in stat else stat_names.get(pw.number(stat.get(7, 0)), "")
                    if found := re.search(r"\bsize:(\d+)", text):
                        out[plane_name] += int(found.group(1))
    return out


def test_copies_carry_their_bytes_from_memcpy_details(imported):
    """Each copy's bytes are its ``memcpy_details`` stat's size (QA: the TF 2 profile's copies had none, and the
    copy bandwidth table was not made)."""
    path = TRACES["tf2_gpu_multiworker"]
    want = copy_bytes(path)
    assert want and sum(want.values()) == 3112 + 37447 + 36944 + 40559 + 36944
    tl = TraceStore.open(imported("tf2_gpu_multiworker")).timeline()
    device = tl[tl["lane"].str.startswith("gpu:") & (tl["category"] == "memcpy")]
    got = device.groupby(device["lane"].str.split("/").str[0])["bytes"].sum().to_dict()
    assert sorted(got.values()) == sorted(want.values())
