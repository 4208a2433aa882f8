"""Gloo's collectives (analyses/host_collectives.py) and their bytes (the Kineto importer), on two real 2-rank gloo
DDP jobs of torch 2.13 (tests/data/README.md): ``torch_gloo_shapes`` profiled with ``record_shapes``, ``torch_gloo``
without. The model has 9,610 float32 parameters, one DDP bucket all-reduced once a step: each ``gloo:all_reduce``
span's input is that bucket, 38,440 bytes. Every figure is checked against one computed here from the files."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from ddltrace.analyses.run_analysis import analyze_store, not_made
from ddltrace.cli import main

DATA = Path(__file__).parent / "data"
SHAPES, PLAIN = DATA / "torch_gloo_shapes", DATA / "torch_gloo"
#: Linear(64, 128) + Linear(128, 10) of scripts/make_framework_traces.py: weights and biases
PARAMETERS = 64 * 128 + 128 + 128 * 10 + 10


def spans(folder: Path, rank: int) -> list[dict]:
    """The file's gloo:all_reduce spans of ``rank``, in time order."""
    events = json.loads(gzip.decompress((folder / f"rank{rank}.pt.trace.json.gz").read_bytes()))["traceEvents"]
    return sorted((e for e in events if e.get("name") == "gloo:all_reduce"), key=lambda e: e["ts"])


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    out = {}
    for name, folder in (("shapes", SHAPES), ("plain", PLAIN)):
        out[name] = tmp_path_factory.mktemp("gloo") / name
        assert main(["import", str(folder), "--out", str(out[name]), "--progress", "never", "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def runs(stores):
    return {name: analyze_store(path) for name, path in stores.items()}


def test_all_reduce_bytes_are_the_bucket_the_job_all_reduces(runs):
    """Each gloo:all_reduce span gets its input tensor's bytes (Input Dims x the size of Input type): the DDP
    bucket of all the model's float32 parameters. Without record_shapes the trace gives no size: none is made up."""
    timeline = runs["shapes"].store.timeline()
    for rank in (0, 1):
        mine = timeline[(timeline["rank"] == rank) & (timeline["name"] == "gloo:all_reduce")].sort_values("start_ns")
        written = spans(SHAPES, rank)
        assert len(mine) == len(written) == 3
        from_file = [math.prod(e["args"]["Input Dims"][0]) * 4 for e in written]
        assert [e["args"]["Input type"] for e in written] == [["float"]] * 3
        assert list(mine["bytes"]) == from_file == [PARAMETERS * 4] * 3
    barrier = timeline[timeline["name"] == "gloo:barrier"]
    assert len(barrier) == 6 and barrier["bytes"].isna().all()  # no input tensor: no payload
    plain = runs["plain"].store.timeline()
    assert (plain["name"] == "gloo:all_reduce").sum() == 6 and plain["bytes"].isna().all()


def test_bandwidth_of_the_all_reduces(stores, runs, capsys):
    """The collectives table matches each step's all-reduce on the two ranks; its duration is the shorter span
    (the late arriver's), its bus bandwidth bytes / duration x 2(n-1)/n (n = 2), as analyze prints them."""
    run = runs["shapes"]
    assert {"host_comm", "host_bytes"} <= run.capabilities
    assert not [s for s in not_made([run]) if s.analysis.startswith("host_")]
    instances = run.host_collectives()
    assert list(instances["collective"]) == ["allreduce"] * 3 and (instances["ranks"] == 2).all()
    for (_, got), e0, e1 in zip(instances.iterrows(), spans(SHAPES, 0), spans(SHAPES, 1), strict=True):
        duration = min(round(e0["dur"] * 1000), round(e1["dur"] * 1000))
        assert got["duration_ns"] == pytest.approx(duration, abs=1)
        assert got["bytes"] == PARAMETERS * 4
        assert got["busbw"] == pytest.approx(PARAMETERS * 4 / (got["duration_ns"] / 1e9) * 2 * (2 - 1) / 2, rel=1e-9)
        assert got["skew_ns"] == pytest.approx(abs(round((e0["ts"] - e1["ts"]) * 1000)), abs=2)
    capsys.readouterr()
    assert main(["analyze", str(stores["shapes"]), "--json"]) == 0
    host = json.loads(capsys.readouterr().out)["stores"][0]["host_collectives"]
    assert [c["busbw"] for c in host["collectives"]] == pytest.approx(list(instances["busbw"]))
    assert [c["bytes"] for c in host["collectives"]] == [PARAMETERS * 4] * 3
    assert main(["analyze", str(stores["shapes"])]) == 0
    text = capsys.readouterr().out
    assert "Collectives of the host backend (gloo)" in text
    row = next(line.split() for line in text.splitlines() if line.strip().startswith("allreduce"))
    assert row[1:4] == ["-", "3", "3"] and " ".join(row[6:8]) == "113 KiB"  # 3 x 38,440 bytes


def test_without_record_shapes_the_bandwidth_is_not_made_and_says_why(stores, runs, capsys):
    run = runs["plain"]
    assert "host_comm" in run.capabilities and "host_bytes" not in run.capabilities
    instances = run.host_collectives()
    assert len(instances) == 3 and instances["bytes"].isna().all() and instances["busbw"].isna().all()
    skipped = {s.analysis: s for s in not_made([run])}
    assert set(skipped) & {"host_collectives", "host_collective_bandwidth"} == {"host_collective_bandwidth"}
    reason = skipped["host_collective_bandwidth"].reason
    assert "--record-shapes" in reason and "gloo's collective spans on 2 ranks, none with their payload bytes" in reason
    capsys.readouterr()
    assert main(["analyze", str(stores["plain"])]) == 0
    assert "host backend's collectives' bus bandwidth (nccl-tests' definitions): needs" in capsys.readouterr().out


def test_a_store_without_gloo_says_nothing_of_it(tmp_path):
    """A store with no gloo collective has no host-collective line in the analyses not made."""
    run = analyze_store(_plain_cpu_store(tmp_path))
    assert "host_comm" not in run.capabilities
    assert not [s for s in not_made([run]) if s.analysis.startswith("host_")]
    assert not len(run.host_collectives())


def _plain_cpu_store(tmp_path: Path) -> Path:
    """A store of one CPU-only Kineto trace with no collective: the plain job's rank 0 without its gloo spans."""
    events = json.loads(gzip.decompress((PLAIN / "rank0.pt.trace.json.gz").read_bytes()))
    events["traceEvents"] = [e for e in events["traceEvents"] if not str(e.get("name", "")).startswith("gloo:")]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(events))
    assert main(["import", str(path), "--out", str(tmp_path / "store"), "--progress", "never", "--quiet"]) == 0
    return tmp_path / "store"


def test_input_bytes_sums_every_input_and_refuses_what_it_cannot_size():
    """An all-to-all's span lists its input tensors (their bytes summed); an unknown element type, a scalar
    argument or dims that are not counts give no size rather than a wrong one."""
    import msgspec

    from ddltrace.collectors.importers.kineto import DeviceArgsFields, input_bytes

    def args(dims, types):
        return msgspec.json.decode(json.dumps({"Input Dims": dims, "Input type": types}), type=DeviceArgsFields)

    assert input_bytes(args([[500], [500]], ["float", "float"])) == 4000
    assert input_bytes(args([[7]], ["long int"])) == 56
    assert input_bytes(args([[2, 3]], ["c10::BFloat16"])) == 12
    assert input_bytes(args([[4]], ["c10::qint4x2"])) is None
    assert input_bytes(args([[4], []], ["float", "Scalar"])) is None
    assert input_bytes(args([[-1]], ["float"])) is None
    assert input_bytes(args([[4]], ["float", "float"])) is None
    assert input_bytes(DeviceArgsFields()) is None
