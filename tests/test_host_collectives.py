"""Gloo's collectives (analyses/host_collectives.py) and their bytes (the Kineto importer), on two real 2-rank gloo
DDP jobs of torch 2.13 (tests/data/README.md): ``torch_gloo_shapes`` profiled with ``record_shapes``, ``torch_gloo``
without. The model has 9,610 float32 parameters, one DDP bucket all-reduced once a step: each ``gloo:all_reduce``
span's input is that bucket, 38,440 bytes. And a real 2-rank gloo job of torch 2.13 that runs each collective of
torch.distributed once with record_shapes (``torch_gloo_collectives``: all-gather, gather, scatter, reduce-scatter,
all-to-all, ...; scripts/make_framework_traces.py's COLLECTIVE_CALLS). Every figure is checked against one computed
here from the files."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from ddltrace.analyses.run_analysis import analyze_store, not_made
from ddltrace.cli import main

DATA = Path(__file__).parent / "data"
SHAPES, PLAIN, EACH = DATA / "torch_gloo_shapes", DATA / "torch_gloo", DATA / "torch_gloo_collectives"
#: Linear(64, 128) + Linear(128, 10) of scripts/make_framework_traces.py: weights and biases
PARAMETERS = 64 * 128 + 128 + 128 * 10 + 10


def spans(folder: Path, rank: int) -> list[dict]:
    """The file's gloo:all_reduce spans of ``rank``, in time order."""
    events = json.loads(gzip.decompress((folder / f"rank{rank}.pt.trace.json.gz").read_bytes()))["traceEvents"]
    return sorted((e for e in events if e.get("name") == "gloo:all_reduce"), key=lambda e: e["ts"])


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    out = {}
    for name, folder in (("shapes", SHAPES), ("plain", PLAIN), ("each", EACH)):
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
    assert [c["duration_from"] for c in host["collectives"]] == ["shortest span"] * 3  # spans, not kernels
    assert main(["analyze", str(stores["shapes"])]) == 0
    text = capsys.readouterr().out
    assert "Collectives of the host backend (gloo)" in text
    row = next(line.split() for line in text.splitlines() if line.strip().startswith("allreduce"))
    assert row[1:4] == ["-", "3", "3"] and " ".join(row[6:8]) == "113 KiB"  # 3 x 38,440 bytes
    assert row[-2:] == ["shortest", "span"]


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


#: Bytes of the element types the collectives job's spans name (torch 2.13's C++ names in ``Input type``).
ELEMENT_BYTES = {"float": 4, "double": 8, "long int": 8}
#: The collective of each gloo span name the job writes.
KINDS = {"gloo:all_reduce": "allreduce", "gloo:broadcast": "broadcast", "gloo:reduce": "reduce",
         "gloo:all_to_all": "alltoall", "gloo:all_gather": "allgather", "gloo:gather": "gather",
         "gloo:scatter": "scatter"}


def _trace(folder: Path, rank: int) -> dict:
    return json.loads(gzip.decompress((folder / f"rank{rank}.pt.trace.json.gz").read_bytes()))


def _gloo_spans(trace: dict) -> list[dict]:
    """The file's gloo collective spans (barrier left out), in time order."""
    return sorted((e for e in trace["traceEvents"] if e.get("name") in KINDS), key=lambda e: e["ts"])


def _input_bytes(event: dict) -> int | None:
    """The span's input tensors' bytes from its Input Dims and Input type; None where it has none."""
    args = event["args"]
    if "Input Dims" not in args:
        return None
    return sum(math.prod(d) * ELEMENT_BYTES[t] for d, t in zip(args["Input Dims"], args["Input type"], strict=True))


def _from_the_files() -> dict[str, list[tuple[int, str, int]]]:
    """Per collective, each instance's (nccl-tests' bytes, where they come from, duration ns) as computed here from
    the two files: the i-th span of each rank is one instance (the job calls each collective synchronously)."""
    traces = [_trace(EACH, rank) for rank in (0, 1)]
    (n,) = {group["pg_size"] for t in traces for group in t["distributedInfo"]["pg_config"]}
    first, second = (_gloo_spans(t) for t in traces)
    assert [e["name"] for e in first] == [e["name"] for e in second]
    out: dict[str, list] = {}
    for e0, e1 in zip(first, second, strict=True):
        kind, (b0, b1) = KINDS[e0["name"]], (_input_bytes(e0), _input_bytes(e1))
        duration = min(round(e0["dur"] * 1000), round(e1["dur"] * 1000))
        if kind == "scatter":  # rank 0 is the root: its span alone holds the scatter list, all ranks' parts
            assert len(e0["args"]["Input Dims"]) == n and b1 is None
            out.setdefault(kind, []).append((b0, "input tensors", duration))
        else:
            assert b0 == b1 is not None
            sized = (b0 * n, "distributedInfo") if kind in ("allgather", "gather") else (b0, "input tensors")
            out.setdefault(kind, []).append((*sized, duration))
    return out


def _from_the_job() -> dict[str, list[int]]:
    """Per collective, nccl-tests' bytes of each instance from the job's own calls (COLLECTIVE_CALLS of
    scripts/make_framework_traces.py, 2 ranks): torch 2.13's gloo runs reduce_scatter as one all-reduce per input
    part and reduce_scatter_tensor as one all-reduce of the whole input."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("traces", Path(__file__).parents[1] / "scripts"
                                                  / "make_framework_traces.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    size = {"float32": 4, "float64": 8, "int64": 8}
    kind = {"all_gather": "allgather", "all_gather_into_tensor": "allgather", "all_gather_subgroup": "allgather",
            "gather": "gather", "scatter": "scatter", "reduce_scatter": "allreduce",
            "reduce_scatter_tensor": "allreduce", "all_to_all": "alltoall", "all_to_all_single": "alltoall",
            "all_reduce": "allreduce", "broadcast": "broadcast", "reduce": "reduce"}
    out: dict[str, list[int]] = {}
    for call, elements, dtype in module.COLLECTIVE_CALLS:
        part = elements * size[dtype]
        sizes = {"reduce_scatter": [part, part], "all_reduce": [part], "broadcast": [part], "reduce": [part]}
        out.setdefault(kind[call], []).extend(sizes.get(call, [2 * part]))
    return out


def test_every_collective_is_sized_as_nccl_tests_from_the_file_s_dims(runs):
    """Each collective of the job gets nccl-tests' size: an all-reduce's, broadcast's and reduce's buffer, an
    all-to-all's send buffer, the root's scatter list, and an all-gather's or gather's one-rank input x the size of
    the process groups the files list (2, both groups); busbw = bytes / duration x nccl-tests' factor."""
    found = runs["each"].host_collectives()
    expected = _from_the_files()
    assert sorted(expected) == sorted(set(found["collective"]))
    factor = {"allreduce": 1.0, "broadcast": 1.0, "reduce": 1.0}  # 2(n-1)/n, 1, 1; the others (n-1)/n, n = 2
    for kind, rows in expected.items():
        got = found[found["collective"] == kind].sort_values("first_start_ns")
        assert (got["ranks"] == 2).all()
        assert list(got["bytes"]) == [b for b, _, _ in rows] == _from_the_job()[kind]
        assert list(got["size_from"]) == [s for _, s, _ in rows]
        assert list(got["duration_ns"]) == pytest.approx([d for _, _, d in rows], abs=1)
        shared = kind in ("allgather", "gather")
        assert list(got["group_size"]) == ([2] * len(rows) if shared else [pd.NA] * len(rows))
        for _, row in got.iterrows():
            assert row["busbw"] == pytest.approx(row["bytes"] / (row["duration_ns"] / 1e9) * factor.get(kind, 0.5),
                                                 rel=1e-9)


def test_where_each_kind_s_bytes_come_from_is_printed(stores, capsys):
    """analyze's text and --json say, per collective, how many instances are sized and from what."""
    capsys.readouterr()
    assert main(["analyze", str(stores["each"])]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()
            if line.strip() and " of " in line and line.split()[0] in KINDS.values()}
    assert rows["allgather"] == ["3", "of", "3", "distributedInfo", "-"]
    assert rows["scatter"] == ["1", "of", "1", "input", "tensors", "-"]
    assert main(["analyze", str(stores["each"]), "--json"]) == 0
    host = json.loads(capsys.readouterr().out)["stores"][0]["host_collectives"]
    by_kind = {row["collective"]: row for row in host["sizes"]}
    assert by_kind["gather"]["bytes from"] == "distributedInfo" and by_kind["allreduce"]["sized"] == "4 of 4"
    gathers = [c for c in host["collectives"] if c["collective"] == "allgather"]
    assert [c["share_bytes"] for c in gathers] == [c["bytes"] // 2 for c in gathers]


def _variant(tmp_path: Path, name: str, ranks=(0, 1), pg_config=None) -> Path:
    """A store of the collectives job's files (``ranks`` of them) with ``distributedInfo.pg_config`` replaced by
    ``pg_config`` (None: removed; "keep": as written)."""
    folder = tmp_path / name
    folder.mkdir()
    for rank in ranks:
        trace = _trace(EACH, rank)
        if pg_config is None:
            del trace["distributedInfo"]["pg_config"]
        elif pg_config != "keep":
            trace["distributedInfo"]["pg_config"] = pg_config
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(trace))
    assert main(["import", str(folder), "--out", str(tmp_path / f"{name}.store"), "--progress", "never",
                 "--quiet"]) == 0
    return tmp_path / f"{name}.store"


def test_without_listed_groups_the_share_is_sized_by_the_ranks_matched_only_when_all_are_there(tmp_path, runs):
    """Files that list no process groups: an all-gather's or gather's share x the ranks its instance was matched
    on, when those are every rank of the world ("matched ranks"); with rank 1's file missing the instances ran on 1
    of 2 ranks and are not sized, and the sizes table says why. What the spans hold alone (the scatter list on
    the root, rank 0) is sized either way."""
    both = analyze_store(_variant(tmp_path, "both"))
    assert both.host_group_sizes is None
    found, listed = both.host_collectives(), runs["each"].host_collectives()
    shared = found["collective"].isin(["allgather", "gather"])
    assert list(found["bytes"]) == list(listed["bytes"])
    assert set(found.loc[shared, "size_from"]) == {"matched ranks"}
    alone = analyze_store(_variant(tmp_path, "alone", ranks=(0,)))
    assert alone.store.world_size == 2
    found = alone.host_collectives()
    shared = found["collective"].isin(["allgather", "gather"])
    assert found.loc[shared, "bytes"].isna().all() and (found.loc[shared, "size_from"] == "").all()
    assert found.loc[found["collective"] == "scatter", "bytes"].tolist() == [70 * 8 * 2]
    from ddltrace.host_section import sizes

    why = sizes(alone).set_index("collective")
    assert why.loc["allgather", "sized"] == "0 of 3" and why.loc["scatter", "sized"] == "1 of 1"
    assert "matched on fewer than the world's 2 ranks" in why.loc["allgather", "not sized: why"]


def test_groups_of_several_sizes_leave_the_share_unsized_and_a_bad_pg_config_is_named(tmp_path, capsys):
    """Files listing process groups of 2 and 1 ranks: gloo's span names none, so an all-gather's group size is not
    known and it is not sized (the reason names the sizes). A pg_config that is not a list of groups with their
    pg_size is a problem line naming the file, and ignored."""
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]},
              {"pg_name": "1", "pg_desc": "undefined", "pg_size": 1, "ranks": [0]}]
    run = analyze_store(_variant(tmp_path, "mixed", pg_config=groups))
    assert run.host_group_sizes == [1, 2]
    found = run.host_collectives()
    assert found.loc[found["collective"] == "gather", "bytes"].isna().all()
    from ddltrace.analyses.host_collectives import not_sized

    why = not_sized(found, 2, run.host_group_sizes).set_index("collective")["reason"]
    assert set(why.index) == {"allgather", "gather"} and "groups of 1, 2 rank(s)" in why["gather"]
    capsys.readouterr()
    store = _variant(tmp_path, "bad", ranks=(1,), pg_config=[{"pg_name": "0", "pg_size": "two"}])
    assert "rank1.pt.trace.json: distributedInfo.pg_config is not a list of process groups" in capsys.readouterr().out
    from ddltrace.store import TraceStore

    assert "group_sizes" not in TraceStore.open(store).rank_info(1)
    assert TraceStore.open(tmp_path / "mixed.store").rank_info(0)["group_sizes"] == [1, 2]
