"""rocprofv3 (rocprofiler-sdk): the JSON layout's host calls joined to their kernels by correlation id, its CSV
trace files, and bad input. The real 8-GPU training file (kernel dispatches only) is checked against its own
records in tests/test_wild_traces.py (test_rocprofv3_kernels_per_lane); no real rocprofv3 file with HIP API
records or a real CSV was found in a public repository, so those layouts are written here, as rocprofiler-sdk's
documentation describes them (the JSON's record fields as the real file has them)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from shared_data import corpus, needs

from ddltrace.analyses.gpu_lanes import device_work
from ddltrace.analyses.gpu_launch import launch_pairs
from ddltrace.cli import main
from ddltrace.collectors.importers.base import ImportContext
from ddltrace.collectors.importers.rocprof import csv_rank
from ddltrace.store import TraceStore

REAL = corpus("tracelens_rocprofv3_mi350x", "908_results.json.gz")
HIP_OPS = ["hipApiName", "hipLaunchKernel", "hipMemcpyAsync"]
COPY_OPS = ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE"]


def _record(kind, op, corr, start, end, **more):
    return {"size": 64, "kind": kind, "operation": op, "thread_id": 77, "correlation_id": {"internal": corr,
            "external": 0}, "start_timestamp": start, "end_timestamp": end, **more}


def _process():
    """One process: a CPU and two GPU agents (the second is GPU 1), two launches, their kernels, one copy."""
    kinds = [{"kind": "NONE", "operations": []}] * 5 + [{"kind": "HIP_RUNTIME_API", "operations": HIP_OPS}] + \
        [{"kind": "NONE", "operations": []}] * 4 + [{"kind": "MEMORY_COPY", "operations": COPY_OPS},
                                                    {"kind": "KERNEL_DISPATCH", "operations": []}]
    agents = [{"id": {"handle": 10}, "type": 1, "gpu_index": -1, "logical_node_type_id": 0},
              {"id": {"handle": 11}, "type": 2, "gpu_index": 0, "logical_node_type_id": 0},
              {"id": {"handle": 12}, "type": 2, "gpu_index": 1, "logical_node_type_id": 1}]

    def dispatch(corr, start, end, kernel, agent=12):
        return _record(11, 2, corr, start, end, dispatch_info={"agent_id": {"handle": agent}, "queue_id": {
            "handle": 3}, "kernel_id": kernel, "dispatch_id": corr}, stream_id={"handle": 5})

    return {"metadata": {"pid": 4242, "node": {"hostname": "mi-node-1"}}, "agents": agents,
            "strings": {"buffer_records": kinds},
            "kernel_symbols": [{"kernel_id": 1, "formatted_kernel_name": "gemm_kernel"},
                               {"kernel_id": 2, "formatted_kernel_name": "ncclDevKernel_Generic_1(x)"}],
            "buffer_records": {
                "hip_api": [_record(5, 1, 1, 1_000, 6_000), _record(5, 1, 2, 7_000, 9_000),
                            _record(5, 2, 3, 10_000, 11_000)],
                "kernel_dispatch": [dispatch(1, 20_000, 50_000, 1), dispatch(2, 50_500, 90_500, 2)],
                "memory_copy": [_record(10, 2, 3, 12_000, 15_000, dst_agent_id={"handle": 12},
                                        src_agent_id={"handle": 10}, bytes=4096)],
                "memory_allocation": [_record(16, 1, 0, 500, 600)]}}


def test_host_launches_joined_to_their_kernels(tmp_path, capsys):
    """HIP calls on the host thread, kernels and the copy on the GPU's stream lane, each with the record's
    correlation id; the launch analysis pairs hipLaunchKernel with its kernel: delay = kernel start - call end."""
    path = tmp_path / "4242_results.json"
    path.write_text(json.dumps({"rocprofiler-sdk-tool": [_process()]}))
    assert main(["import", str(path), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    out = capsys.readouterr().out
    assert "7 events, 6 intervals" in out and "skipped 1 event(s): memory_allocation records (not read)" in out
    tl = TraceStore.open(tmp_path / "store").timeline()
    rows = {r.name: r for r in tl.itertuples()}
    assert rows["gemm_kernel"].lane == "gpu:1/stream 5" and rows["gemm_kernel"].category == "compute"
    assert rows["ncclDevKernel_Generic_1(x)"].category == "comm"
    copy = rows["MEMORY_COPY_HOST_TO_DEVICE"]
    assert (copy.lane, copy.category, copy.bytes, copy.correlation) == ("gpu:1/memory copy", "memcpy", 4096, 3)
    assert set(tl.loc[tl["name"].isin(HIP_OPS), "lane"]) == {"cpu/thread 77"}
    pairs = launch_pairs(tl, device_work(tl)).sort_values("correlation")
    assert pairs["kernel"].tolist() == ["gemm_kernel", "ncclDevKernel_Generic_1(x)", "MEMORY_COPY_HOST_TO_DEVICE"]
    assert pairs["launch_delay_ns"].tolist() == [20_000 - 6_000, 50_500 - 9_000, 12_000 - 11_000]


KERNEL_CSV_OLD = ('"Kind","Agent_Id","Queue_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name","Correlation_Id",'
                  '"Start_Timestamp","End_Timestamp"\n'
                  '"KERNEL_DISPATCH",4,1,900,1,2,"scale(float*, int)",14,5000,9000\n'
                  '"KERNEL_DISPATCH",4,2,900,2,3,"rcclKernel",15,9500,19500\n')
KERNEL_CSV_NEW = ('"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
                  '"Correlation_Id","Start_Timestamp","End_Timestamp"\n'
                  '"KERNEL_DISPATCH","Agent 2",1,7,900,1,2,"scale(float*, int)",14,5000,9000\n')
COPY_CSV = ('"Kind","Direction","Stream_Id","Source_Agent_Id","Destination_Agent_Id","Correlation_Id",'
            '"Start_Timestamp","End_Timestamp"\n'
            '"MEMORY_COPY","MEMORY_COPY_DEVICE_TO_HOST",0,"Agent 2","Agent 0",3,100,400\n')
API_CSV = ('"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
           '"HIP_RUNTIME_API","hipLaunchKernel",900,901,14,1000,1800\n')


@pytest.mark.parametrize(("name", "text", "want"), [
    ("kernel_trace.csv", KERNEL_CSV_OLD, [("gpu:agent4/queue 1", "scale(float*, int)", "compute", 4000, 14),
                                          ("gpu:agent4/queue 2", "rcclKernel", "comm", 10000, 15)]),
    ("kernel_trace.csv", KERNEL_CSV_NEW, [("gpu:agent2/stream 7", "scale(float*, int)", "compute", 4000, 14)]),
    ("memory_copy_trace.csv", COPY_CSV, [("gpu:agent2/stream 0", "MEMORY_COPY_DEVICE_TO_HOST", "memcpy", 300, 3)]),
    ("hip_api_trace.csv", API_CSV, [("cpu/thread 901", "hipLaunchKernel", "other", 800, 14)]),
], ids=["kernels-queue", "kernels-stream", "copies", "hip-api"])
def test_csv_trace_files(tmp_path, name, text, want):
    """Each CSV trace file of rocprofv3's documented layouts: lane, name, category, duration, correlation."""
    path = tmp_path / f"900_{name}"
    path.write_text(text)
    assert main(["import", str(path), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    tl = TraceStore.open(tmp_path / "store").timeline().sort_values("start_ns")
    got = [(r.lane, r.name, r.category, r.dur_ns, r.correlation) for r in tl.itertuples()]
    assert got == want


def test_a_damaged_csv_row_is_named_by_its_line_and_the_rest_kept(tmp_path, capsys):
    """A row run into the next by garbage (too many fields), a row of bytes that are not text and a last row the
    file ends inside: each named by its line and skipped, the whole rows kept (QA on nsys' CSV, whose reader this
    one was like: a damaged row was kept from its first fields or dropped, and nothing said)."""
    lines = KERNEL_CSV_OLD.splitlines()
    text = "\n".join([lines[0], lines[1], lines[2] + ',"KERNEL_DISPATCH",4,1', lines[1].replace("scale", "sc\x00le"),
                      lines[2], lines[1][:30]])  # (no final newline: the file ends inside the last row)
    path = tmp_path / "900_kernel_trace.csv"
    path.write_text(text)
    assert main(["import", str(path), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    out = capsys.readouterr().out
    assert (f"{path}: 3 damaged row(s) skipped, the rest kept: line 3 (13 fields where the header has 10), line 4 "
            "(bytes that are not text), line 6 (the file ends inside it)") in out, out
    tl = TraceStore.open(tmp_path / "store").timeline().sort_values("start_ns")
    assert tl["name"].tolist() == ["scale(float*, int)", "rcclKernel"]
    cut = tmp_path / "cut" / "900_kernel_trace.csv"
    cut.parent.mkdir()
    cut.write_text(lines[0] + "\n" + lines[1][:30])
    assert main(["import", str(cut), "--out", str(tmp_path / "s2"), "--progress", "never"]) == 2
    assert "every row of the rocprofv3 trace CSV is damaged: line 2 (the file ends inside it)" in \
        capsys.readouterr().err


def _process_csvs(folder, pid: int, kernel: str) -> None:
    """One process's three CSV trace files as rocprofv3 names them (``<pid>_<domain>_trace.csv``): two HIP calls,
    the kernel the first launched (correlation id 1) and the copy the second made (2)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{pid}_hip_api_trace.csv").write_text(
        '"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"\n'
        f'"HIP_RUNTIME_API","hipLaunchKernel",{pid},{pid},1,1000,2000\n'
        f'"HIP_RUNTIME_API","hipMemcpyAsync",{pid},{pid},2,3000,3500\n')
    (folder / f"{pid}_kernel_trace.csv").write_text(
        '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
        '"Correlation_Id","Start_Timestamp","End_Timestamp"\n'
        f'"KERNEL_DISPATCH","Agent 1",1,0,{pid},1,7,"{kernel}",1,5000,9000\n')
    (folder / f"{pid}_memory_copy_trace.csv").write_text(
        '"Kind","Direction","Stream_Id","Source_Agent_Id","Destination_Agent_Id","Correlation_Id",'
        '"Start_Timestamp","End_Timestamp"\n'
        '"MEMORY_COPY","MEMORY_COPY_HOST_TO_DEVICE",0,"Agent 0","Agent 1",2,9500,9900\n')


def test_csv_files_of_one_process_are_one_rank(tmp_path, capsys):
    """Two processes' CSV files in one folder: one rank per process (by pid: 98 before 1234, though its files sort
    after), each with its API calls, kernel and copy; each launch is paired with its kernel by correlation id, and
    analyze makes the launch analyses (none of them "not made" for want of correlation ids)."""
    _process_csvs(tmp_path / "csv", 1234, "gemm_kernel")
    _process_csvs(tmp_path / "csv", 98, "scale_kernel")
    assert main(["import", str(tmp_path / "csv"), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    assert "ranks 0, 1, in" in capsys.readouterr().out
    tl = TraceStore.open(tmp_path / "store").timeline()
    for rank, kernel in [(0, "scale_kernel"), (1, "gemm_kernel")]:
        own = tl[tl["rank"] == rank]
        assert sorted(own["name"]) == sorted(["hipLaunchKernel", "hipMemcpyAsync", kernel,
                                              "MEMORY_COPY_HOST_TO_DEVICE"])
        pairs = launch_pairs(own, device_work(own)).sort_values("correlation")
        assert pairs["kernel"].tolist() == [kernel, "MEMORY_COPY_HOST_TO_DEVICE"]
        assert pairs["launch_delay_ns"].tolist() == [5000 - 2000, 9500 - 3500]
    assert main(["analyze", str(tmp_path / "store"), "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not [n["analysis"] for n in doc["not_made"] if "correlation ids" in n["needs"]]
    assert len(doc["stores"][0]["gpu"]["launches"]) == 2


def test_csv_processes_of_one_pid_on_two_hosts_are_two_ranks(tmp_path, capsys):
    """rocprofv3's default output folder is the host's name: one pid in two folders is two processes."""
    _process_csvs(tmp_path / "node-b", 500, "gemm_kernel")
    _process_csvs(tmp_path / "node-a", 500, "scale_kernel")
    assert main(["import", str(tmp_path), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    assert "ranks 0, 1, in" in capsys.readouterr().out
    tl = TraceStore.open(tmp_path / "store").timeline()
    assert set(tl.loc[tl["name"].str.endswith("_kernel"), ["rank", "name"]].itertuples(index=False)) == {
        (0, "scale_kernel"), (1, "gemm_kernel")}


@pytest.mark.parametrize(("name", "want"), [
    ("77_rccl_api_trace.csv", ("rocprofv3 process", "h", 77, "77")),
    ("run_memory_copy_trace.csv", ("rocprofv3 process", "h", -1, "run")),
    ("kernel_trace.csv.gz", ("rocprofv3 process", "h", -1, "")),
    ("rank3_kernel_trace.csv", 3),
])
def test_csv_rank_of_a_file_name(name, want):
    """--rank-from auto: the process (folder, pid, prefix) of rocprofv3's file name, or the number after 'rank'."""
    ctx = ImportContext(categorizer=None)
    assert csv_rank(Path("h") / name, ctx) == want


@pytest.mark.parametrize(("text", "what"), [
    ('{"rocprofiler-sdk-tool": []}', "without a process"),
    ('{"rocprofiler-sdk-tool": [{"metadata": {}, "buffer_records": [1, 2]}]}', "'buffer_records' is not an object"),
    ('{"rocprofiler-sdk-tool": [{"metadata": {"pid": 1}, "buffer_records": {"kernel_dispatch": [',
     "not a readable rocprofv3 JSON"),
])
def test_bad_json_is_one_line_naming_the_file(tmp_path, capsys, text, what):
    path = tmp_path / "7_results.json"
    path.write_text(text)
    assert main(["import", str(path), "--out", str(tmp_path / "store"), "--progress", "never"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and what in err[0], err
    assert not (tmp_path / "store").exists()


@needs(REAL)
def test_a_truncated_real_file_is_refused_in_one_line(tmp_path, capsys):
    """The real file cut in the middle of its records (the gzip stream itself intact): exit 2, one line."""
    path = tmp_path / "908_results.json.gz"
    path.write_bytes(gzip.compress(gzip.decompress(REAL.read_bytes())[:3_000_000]))
    assert main(["import", str(path), "--out", str(tmp_path / "store"), "--progress", "never"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "not a readable rocprofv3 JSON" in err[0], err


def test_a_cut_gzip_stream_is_one_clear_line(tmp_path, capsys):
    """A .json.gz cut inside its gzip stream: exit 2, one line naming the file once and where the stream ends,
    not "kept what was decoded" (nothing is: the document is read whole). It was `PATH: PATH: gzip stream
    truncated at compressed byte N (kept what was decoded)`. A document whole before trailing garbage is kept,
    the garbage named."""
    whole = gzip.compress(json.dumps({"rocprofiler-sdk-tool": [_process()]}).encode())
    cut = tmp_path / "4242_results.json.gz"
    cut.write_bytes(whole[:len(whole) // 2])
    assert main(["import", str(cut), "--out", str(tmp_path / "store"), "--progress", "never"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].count(str(cut)) == 1 and "kept" not in err[0], err
    assert (f"{cut}: gzip stream truncated at compressed byte {len(whole) // 2}, inside its JSON document "
            "(a rocprofv3 JSON is read whole)") in err[0]
    tail = tmp_path / "7_results.json.gz"
    tail.write_bytes(whole + b"garbage")
    assert main(["import", str(tail), "--out", str(tmp_path / "store2"), "--progress", "never"]) == 0
    out = capsys.readouterr().out
    assert "7 events, 6 intervals" in out and f"{tail}: 7 bytes of trailing garbage after the gzip stream" in out
