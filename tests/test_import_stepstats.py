"""TF1 ``RunMetadata.step_stats`` protobuf text: a real 1 ps + 2 worker job (tests/data/tf1_ps/step_stats_*),
made by ``scripts/make_framework_traces.py tf1 --step-stats``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ddltrace.cli import main
from ddltrace.collectors.importers import Categorizer, ImportContext, detect
from ddltrace.collectors.importers.base import FileReport
from ddltrace.collectors.importers.stepstats import parse_text
from ddltrace.errors import DdltraceError
from ddltrace.store import TraceStore

TF1 = Path(__file__).parent / "data" / "tf1_ps"
FILES = sorted(TF1.glob("step_stats_worker*.pbtxt.gz"))
PARAM_BYTES = {32768, 512, 5120, 40}  # w1 64x128, b1 128, w2 128x10, b2 10 (float32)


def test_step_stats_sniffed_and_read_per_task():
    importer = detect(FILES[0])
    assert importer.name == "tf1-stepstats"
    ctx = ImportContext(Categorizer(), report=FileReport(str(FILES[0])))
    parts = {p.rank: p for p in importer.read(FILES[0], ctx)}
    assert set(parts) == {0, ("ps", 0)}
    worker, ps = parts[0].timeline, parts[("ps", 0)].timeline
    cats = worker.groupby("name")["category"].first().astype(str)
    assert cats["RecvTensor"] == "comm" and cats["MatMul"] == "compute" and cats["ReluGrad"] == "compute"
    assert (ps["name"] == "ResourceApplyGradientDescent").sum() == 4
    recv = worker[worker["name"] == "RecvTensor"]
    assert set(recv["bytes"]) == PARAM_BYTES  # the variables, pulled from the ps
    assert (recv["peer"] < 0).all()  # the ps: a placeholder until the import command numbers it
    assert parts[0].info["peer_identities"] == {str(recv["peer"].iloc[0]): ["ps", 0]}
    ps_recv = ps[ps["name"] == "RecvTensor"]
    assert set(ps_recv["bytes"]) == PARAM_BYTES | {4} and (ps_recv["peer"] == 0).all()  # gradients + lr
    assert worker["lane"].str.startswith("cpu:0/").all() and ctx.report.intervals == len(worker) + len(ps)
    # a receive whose producer ran on the sender is a matched message (producer end on the sender's clock)
    msgs = parts[0].messages
    assert len(msgs) == 4 and set(msgs["src"]) == {("ps", 0)} and (msgs["dst"] == 0).all()


def test_step_stats_job_imports_with_peers_and_aligned_clocks(tmp_path, capsys):
    out = tmp_path / "store"
    assert main(["import", *map(str, FILES), "--out", str(out), "--align", "messages"]) == 0
    store = TraceStore.open(out)
    assert store.ranks == [0, 1, 2] and store.rank_info(2)["identity"] == "ps/0"
    for rank in (0, 1):
        recv = store.timeline([rank]).query("name == 'RecvTensor'")
        assert len(recv) == 4 and (recv["peer"] == 2).all() and (recv["bytes"] > 0).all()
        assert "peer_identities" not in store.rank_info(rank)
    ps_recv = store.timeline([2]).query("name == 'RecvTensor'")
    assert sorted(ps_recv["peer"].value_counts().items()) == [(0, 5), (1, 5)]
    clock = store.manifest["clock"]
    assert clock["method"].startswith("matched messages") and clock["matched_messages"] == 18
    # every task ran on this one host: the true offsets are 0, within the estimated uncertainty
    for rank in ("1", "2"):
        assert 0 < clock["uncertainty_ns"][rank] < 20_000_000
        assert abs(clock["offsets_ns"][rank]) <= clock["uncertainty_ns"][rank]
    # info shows them as the manifest has them, with how many messages bound them
    capsys.readouterr()
    assert main(["info", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["clock"]
    assert shown["matched_messages"] == 18 and shown["groups"][0]["reference"] == "rank 0's clock"
    assert {o["who"]: (o["offset_ns"], o["uncertainty_ns"]) for o in shown["groups"][0]["offsets"]} == {
        r: (clock["offsets_ns"][r], clock["uncertainty_ns"][r]) for r in clock["offsets_ns"]}
    # without host names the default does not shift anything
    assert main(["import", *map(str, FILES), "--out", str(tmp_path / "plain")]) == 0
    assert TraceStore.open(tmp_path / "plain").manifest["clock"]["offsets_ns"] == {}


def test_text_format_parser_and_damage(tmp_path):
    tree, truncated = parse_text('dev_stats { device: "/job:worker/replica:0/task:0/device:CPU:0"\n'
                                 '  node_stats { node_name: "a\\"b" all_start_micros: 5 } # comment\n'
                                 '  node_stats < node_name: "x" dims: [1, 2] > }')
    assert not truncated
    nodes = tree["dev_stats"][0]["node_stats"]
    assert nodes[0]["node_name"] == ['a"b'] and nodes[1]["dims"] == ["1", "2"]
    text = gzip.decompress(FILES[0].read_bytes())
    cut = tmp_path / "step_stats_worker0.pbtxt"
    cut.write_bytes(text[: len(text) // 2])
    ctx = ImportContext(Categorizer(), report=FileReport(str(cut)))
    parts = list(detect(cut).read(cut, ctx))
    assert sum(len(p.timeline) for p in parts) > 10
    assert any("truncated" in p for p in ctx.report.problems)
    empty = tmp_path / "empty.pbtxt"
    empty.write_text("dev_stats { device: \"/job:worker/replica:0/task:0/device:CPU:0\" }\n")
    with pytest.raises(DdltraceError, match="no node_stats"):
        list(detect(empty).read(empty, ImportContext(Categorizer())))


PB = Path(__file__).parent / "data" / "tf1_ps_pb"


@pytest.mark.parametrize("worker", [0, 1])
def test_binary_run_metadata_reads_as_its_own_text(worker):
    """The same real step as binary RunMetadata (``SerializeToString()``) and as ``str(step_stats)``: the binary
    reader (protobuf wire format, no protobuf package) gives exactly the text reader's ranks, rows, info and
    matched messages."""
    binary, text = PB / f"run_metadata_worker{worker}.pb.gz", PB / f"step_stats_worker{worker}.pbtxt.gz"
    assert detect(binary).name == "tf1-stepstats-pb" and detect(text).name == "tf1-stepstats"
    read = {}
    for path in (binary, text):
        ctx = ImportContext(Categorizer(), report=FileReport(str(path)))
        read[path] = ({p.rank: p for p in detect(path).read(path, ctx)}, ctx.report)
    (from_binary, binary_report), (from_text, text_report) = read[binary], read[text]
    assert set(from_binary) == set(from_text) == {worker, ("ps", 0)}
    for rank, part in from_text.items():
        other = from_binary[rank]
        assert len(part.timeline) > 10 and part.timeline.equals(other.timeline), rank
        assert {**part.info, "file": ""} == {**other.info, "file": ""} and part.clock == other.clock == "epoch"
        assert (part.messages is None) == (other.messages is None)
        if part.messages is not None:
            assert part.messages.equals(other.messages)
    receives = from_binary[worker].timeline.query("name == 'RecvTensor'")
    assert len(receives) and set(receives["bytes"]) <= PARAM_BYTES and set(receives["category"]) == {"comm"}
    assert binary_report.events == text_report.events and not binary_report.problems


def _rows(path) -> tuple[dict, FileReport]:
    ctx = ImportContext(Categorizer(), report=FileReport(str(path)))
    parts = {p.rank: p.timeline for p in detect(path).read(path, ctx)}
    return {rank: list(tl[["name", "start_ns", "dur_ns"]].itertuples(index=False)) for rank, tl in parts.items()}, \
        ctx.report


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_binary_run_metadata_cut_short_keeps_its_complete_nodes(tmp_path, keep):
    """The real RunMetadata cut short (as its text form is: 'complete nodes kept'): the nodes before the cut are
    read, exactly as in the whole file, the cut node is counted and the cut named (it was refused whole)."""
    real = gzip.decompress((PB / "run_metadata_worker0.pb.gz").read_bytes())
    whole = tmp_path / "whole" / "run_metadata_worker0.pb"
    whole.parent.mkdir()
    whole.write_bytes(real)
    cut = tmp_path / "run_metadata_worker0.pb"
    cut.write_bytes(real[:int(len(real) * keep)])
    clean, _ = _rows(whole)
    kept, report = _rows(cut)
    assert report.problems == [f"{cut}: the protobuf ends inside a message (truncated); complete nodes kept"]
    assert report.skipped["NodeExecStats cut short by the end of the file"] == 1
    assert 0 < sum(map(len, kept.values())) < sum(map(len, clean.values()))
    for rank, rows in kept.items():
        assert set(rows) <= set(clean[rank]), rank


def test_binary_run_metadata_damage(tmp_path):
    """Cut short before any node, or not protobuf: one line naming the file."""
    real = gzip.decompress((PB / "run_metadata_worker0.pb.gz").read_bytes())
    cut = tmp_path / "run_metadata_worker0.pb"
    cut.write_bytes(real[:len(real) // 100])
    with pytest.raises(DdltraceError, match="run_metadata_worker0.pb: not a readable RunMetadata / StepStats "
                                            r"protobuf \(cut short before its first complete node\)"):
        list(detect(cut).read(cut, ImportContext(Categorizer())))
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"\x0a\x05/job:" + b"\xff" * 20)
    with pytest.raises(DdltraceError, match="junk.pb"):
        list(detect(junk).read(junk, ImportContext(Categorizer())))


def test_gpu_executor_nodes_are_host_lanes(tmp_path):
    """A GPU's own dev_stats (``/device:GPU:0``) are the executor's node times, host work
    (``host/gpu:0 executor/thread N``); its ``/stream:N`` dev_stats the device's lanes (``gpu:0/stream:7/...``)."""
    from ddltrace.analyses.breakdown import device_lanes

    gpu = "/job:worker/replica:0/task:0/device:GPU:0"
    text = "".join(
        f'dev_stats {{ device: "{device}" node_stats {{ node_name: "MatMul" all_start_nanos: {start} '
        f'all_end_rel_nanos: {dur} thread_id: 3 timeline_label: "MatMul = MatMul(a, b)" }} }}\n'
        for device, start, dur in ((gpu, 1_700_000_000_000_000_000, 100_000),
                                   (f"{gpu}/stream:7", 1_700_000_000_000_040_000, 30_000)))
    path = tmp_path / "step_stats_worker0.pbtxt"
    path.write_text(text)
    ctx = ImportContext(Categorizer(), report=FileReport(str(path)))
    (part,) = detect(path).read(path, ctx)
    tl = part.timeline
    assert sorted(tl["lane"]) == ["gpu:0/stream:7/thread 3", "host/gpu:0 executor/thread 3"]
    assert tl.loc[device_lanes(tl["lane"]), "dur_ns"].tolist() == [30_000]
