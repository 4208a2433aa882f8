"""Real GPU traces with ground truth (sample_traces/h100-ddp: a ResNet-18 DDP job over gloo on an NVIDIA H100,
torch.profiler's own files, one rank sleeping 40 ms a step in the straggler runs): the straggler is the rank the
others wait for at the collectives, not the rank whose compute ops hold the wait; the truth is read from the
trace files and the job's options here.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddltrace.analyses.detect_stragglers import measures
from ddltrace.analyses.findings import detect
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.thresholds import Thresholds
from ddltrace.cli import main

RUNS = Path(__file__).resolve().parent.parent / "sample_traces" / "h100-ddp"


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """Each Kineto run imported with the CLI, as a user would."""
    base = tmp_path_factory.mktemp("h100")
    out = {}
    for name in ("healthy", "straggler1", "straggler0", "hostbound", "nccl1"):
        out[name] = base / name
        files = [str(p) for p in sorted((RUNS / name).glob("*.pt.trace.json.gz"))]
        assert main(["import", *files, "--out", str(out[name]), "--progress", "never"]) == 0
    return out


def job(name: str) -> dict:
    return json.loads((RUNS / name / "job.json").read_text())


def broadcast_skews(name: str) -> list[float]:
    """The start of each of gloo's broadcasts on the late rank minus the other's, in order (ns), from the files."""
    starts = {}
    for path in sorted((RUNS / name).glob("*.pt.trace.json.gz")):
        trace = json.load(gzip.open(path))
        starts[trace["distributedInfo"]["rank"]] = sorted(
            e["ts"] for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") == "gloo:broadcast")
    late = job(name)["straggle_rank"]
    return [(a - b) * 1e3 for a, b in zip(starts[late], starts[1 - late], strict=True)]


def findings(store: Path):
    found, skipped = detect([analyze_store(store)], Thresholds())
    return {f.id: f for f in found}, {s.analysis: s.reason for s in skipped}


@pytest.mark.parametrize("name", ["straggler1", "straggler0"])
def test_the_straggler_is_the_rank_the_others_wait_for(stores, name):
    found, skipped = findings(stores[name])
    finding = found["host_straggler"]
    assert finding.ranks == [job(name)["straggle_rank"]]
    # the truth: the late rank reaches DDP's broadcast of the buffers 40 ms after the other, every step (the two
    # broadcasts of a step run at once on gloo's two worker threads: a step's wait is once the largest skew)
    skews = broadcast_skews(name)
    per_step = np.median([s for s in skews if s > 20e6])
    assert per_step == pytest.approx(job(name)["straggle_ms"] * 1e6, rel=0.05)
    waited = finding.evidence["others_wait_wall_per_step"].value
    assert per_step <= waited <= 1.1 * per_step  # the all-reduces' small waits on top of the broadcast's
    assert finding.evidence["steps"].value == 2
    assert finding.cost_ns == pytest.approx(2 * waited)
    assert "stragglers" in skipped and "leaf op" in skipped["stragglers"]


@pytest.mark.parametrize("name", ["straggler1", "straggler0"])
def test_the_wait_inside_ddps_forward_is_wait_not_compute(stores, name):
    """The early rank waits for the buffers' broadcast inside DistributedDataParallel.forward, recording nothing
    while gloo's threads run it: that time is not compute (analyses/segments.py) but waiting for the late rank to
    enter the broadcast, wait (Scalasca's Wait at N x N, analyses/breakdown.py), and the two ranks, which run the same
    model on the same batch, show the same compute per step (before the rule: 74.7 ms against 33.9 ms)."""
    run = analyze_store(stores[name])
    workers, compute = measures(run)["compute per step"]
    by_rank = dict(zip(workers, compute, strict=True))
    late = job(name)["straggle_rank"]
    assert by_rank[1 - late] == pytest.approx(by_rank[late], rel=0.05)
    # the file's own DistributedDataParallel.forward spans on the early rank: 40 ms longer, their wait inside
    timeline = run.store.timeline([1 - late])
    forward = timeline[(timeline["name"] == "DistributedDataParallel.forward")
                       & timeline["lane"].str.startswith("cpu")]
    assert forward["dur_ns"].median() > 0.9 * job(name)["straggle_ms"] * 1e6
    skew = np.median([s for s in broadcast_skews(name) if s > 20e6])  # the early rank's wait a step (ns)
    table = run.table(run.main_phase)
    steps = len(run.phases[1 - late].steps)
    assert skew <= table.loc[1 - late, "wait"] / steps <= 1.2 * skew
    assert table.loc[late, "wait"] / steps < 0.2 * skew
    assert table.loc[1 - late, "comm"] / steps < 0.2 * skew  # moving the data: little


@pytest.mark.parametrize("name", ["healthy", "hostbound"])
def test_no_straggler_where_every_rank_is_alike(stores, name):
    found, skipped = findings(stores[name])
    assert "host_straggler" not in found and "straggler" not in found
    assert "stragglers" in skipped


def test_the_run_store_names_the_straggler_and_joins_real_nvml_counters(capsys):
    """The store `ddltrace run --framework pytorch` wrote on the H100: its 5 profiled steps, and the NVML sampler's
    utilisation in the device's window read back as the file holds it."""
    store = RUNS / "run-straggler" / "store"
    found, _ = findings(store)
    assert found["host_straggler"].ranks == [1]
    assert found["host_straggler"].evidence["steps"].value == 5
    capsys.readouterr()
    assert main(["analyze", str(store), "--json"]) == 0
    rows = {r["counter"]: r for r in json.loads(capsys.readouterr().out)["stores"][0]["gpu"]["nvml"]}
    machine = pd.read_parquet(store / "counters" / "machine.parquet")
    util = rows["util_percent"]
    window = machine[(machine["name"] == "gpu0_util_percent")
                     & machine["t_ns"].between(util["window_start_ns"], util["window_start_ns"] + util["window_ns"])]
    assert util["samples"] == len(window) >= 3
    assert util["mean"] == pytest.approx(window["value"].mean())
    assert 0 < util["mean"] < 100


def test_a_host_that_sleeps_is_not_called_launch_bound(stores):
    """hostbound sleeps 30 ms before each step: its devices wait for the host in long gaps, not between launches,
    though its median kernel is shorter than its launch call (the old test, which called it launch-bound)."""
    found, _ = findings(stores["hostbound"])
    finding = found["gpu_host_bound"]
    assert "launch-bound" not in finding.title and "input pipeline" in finding.advice
    assert finding.evidence["host_wait_in_short_gaps"].value < 0.1
    assert finding.evidence["kernel_gpu_duration_median"].value < finding.evidence["launch_cpu_duration_median"].value
    # one rank on NCCL, nothing slowing its host: ResNet-18's short kernels wait on the launches themselves
    found, _ = findings(stores["nccl1"])
    assert "(launch-bound)" in found["gpu_host_bound"].title
    assert found["gpu_host_bound"].evidence["host_wait_in_short_gaps"].value > 0.9


def test_nvml_utilisation_agrees_with_the_traces_busy_time_over_a_long_window(capsys):
    """Two instruments of one GPU: NVML's utilisation (the share of its sample period with a kernel running) and
    the union of the trace's device work over the same window, on the H100 run sleeping 60 ms a step (3.2 s)."""
    store = RUNS / "run-nvml-host60" / "store"
    capsys.readouterr()
    assert main(["analyze", str(store), "--json"]) == 0
    util = next(r for r in json.loads(capsys.readouterr().out)["stores"][0]["gpu"]["nvml"]
                if r["counter"] == "util_percent")
    assert util["window_ns"] > 3e9 and util["samples"] >= 50
    assert util["mean"] == pytest.approx(100 * util["trace_busy_share"], abs=2.0)
    # the device's busy share is the trace's: 40 steps of about 17 ms of work in steps of 79 ms (the truth's median)
    steps = [json.loads(line) for line in (RUNS / "run-nvml-host60" / "truth.rank0.jsonl").read_text().splitlines()]
    step = np.median([s["t1_ns"] - s["t0_ns"] for s in steps if 5 <= s["step"] <= 44])
    assert 0.1 < util["trace_busy_share"] < (step - job("run-nvml-host60")["host_ms"] * 1e6) / step
    # NVML's samples average over up to 1 s: over a shorter window (the straggler run's 0.4 s) the output says so
    assert "a window under 2 s" not in main_text(store)
    assert "a window under 2 s" in main_text(RUNS / "run-straggler" / "store")


def main_text(store: Path) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["analyze", str(store)]) == 0
    return out.getvalue()


def test_gloos_all_reduces_move_the_models_gradients_once_a_step(tmp_path, capsys):
    """With record_shapes, the bytes of gloo's all-reduces in a step are ResNet-18's parameters (job.json: counted
    from the model), and each collective is counted once: the device streams' annotation lanes (Kineto's
    gpu_user_annotation, which repeat gloo's span names) are not collectives (they were, doubling the instances
    and listing half as 'a profile without record_shapes')."""
    files = [str(p) for p in sorted((RUNS / "shapes").glob("*.pt.trace.json.gz"))]
    assert main(["import", *files, "--out", str(tmp_path / "s"), "--progress", "never"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "s"), "--json"]) == 0
    host = json.loads(capsys.readouterr().out)["stores"][0]["host_collectives"]
    instances = pd.DataFrame(host["collectives"])
    truth = job("shapes")
    steps = 2
    count = instances.groupby("collective").size()
    # DDP's buckets: three all-reduces a step; two broadcasts (the buffers, and a count) a step
    assert count["allreduce"] == 3 * steps and count["broadcast"] == 2 * steps
    assert (instances["ranks"] == 2).all()
    reduced = instances[instances["collective"] == "allreduce"]
    assert reduced.groupby("step")["bytes"].sum().tolist() == [truth["parameter_bytes"]] * steps
    assert [row["sized"] for row in host["sizes"]] == ["6 of 6", "4 of 4"]


def test_the_allocators_peak_is_torchs_own(tmp_path, capsys):
    """The peak, the end and the most reserved that ddltrace reads from the allocator's events of an H100 step are
    the figures torch.cuda gave inside the job over the same steps (truth.memory.rank0.json), to the byte."""
    files = [str(p) for p in sorted((RUNS / "memory").glob("*.pt.trace.json.gz"))]
    assert main(["import", *files, "--out", str(tmp_path / "m"), "--progress", "never"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "m"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["stores"][0]["memory"]["allocator"]
    gpu = next(r for r in rows if r["device"] == "gpu:0")
    truth = json.loads((RUNS / "memory" / "truth.memory.rank0.json").read_text())
    assert gpu["basis"] == "total"
    assert gpu["peak_bytes"] == truth["max_allocated"]
    assert gpu["end_bytes"] == truth["allocated_at_end"]
    assert gpu["reserved_peak_bytes"] == truth["max_reserved"]


@pytest.mark.parametrize("name", ["healthy", "straggler1", "hostbound"])
def test_the_steps_are_the_jobs_own(stores, name):
    """The steps ddltrace finds in the H100 traces (Kineto's ProfilerStep spans) start and last as the job's own
    clock said (truth.rankR.jsonl, time.time_ns() around each step), within 0.1 ms: the import keeps the trace's
    wall clock and its step numbering (torch.profiler counts from 0: the job's steps 5 and 6 are its 4 and 5)."""
    run = analyze_store(stores[name])
    for rank in run.worker_ranks:
        steps = run.phases[rank].steps
        truth = [json.loads(line) for line in (RUNS / name / f"truth.rank{rank}.jsonl").read_text().splitlines()]
        truth = [t for t in truth if t["step"] in (5, 6)]
        assert steps["step"].tolist() == [4, 5]
        assert np.allclose(steps["start_ns"], [t["t0_ns"] for t in truth], atol=1e5, rtol=0)
        assert np.allclose(steps["dur_ns"], [t["t1_ns"] - t["t0_ns"] for t in truth], atol=1e5, rtol=0)


def test_where_the_host_was_while_the_gpu_waited(stores):
    """The GPU's long waits for the host, split by what the host's lanes hold: on straggler1 the victim, rank 0, is
    in gloo's collectives for all of them, the sleeper, rank 1, mostly in no op at all (its time.sleep); on
    hostbound both ranks sleep."""
    found, _ = findings(stores["straggler1"])
    assert "(the host in its collectives)" in found["gpu_host_bound"].title
    idle = analyze_store(stores["straggler1"]).gpu.idle_table().set_index("rank")
    long = idle["host_wait_ns"] - idle["host_wait_short_ns"]
    assert idle.loc[0, "long_in_comm_ns"] / long[0] > 0.95
    assert idle.loc[1, "long_outside_ns"] / long[1] > 0.7
    parts = ["long_in_comm_ns", "long_in_sync_ns", "long_in_ops_ns", "long_outside_ns"]
    assert (idle[parts].sum(axis=1) == long).all()
    found, _ = findings(stores["hostbound"])
    assert "(the host outside the framework's ops)" in found["gpu_host_bound"].title
    # the sleeps: one 30 ms sleep a step in each rank's long waits (2 steps; the first begins before the window)
    idle = analyze_store(stores["hostbound"]).gpu.idle_table()
    assert (idle["long_outside_ns"] > job("hostbound")["host_ms"] * 1e6).all()


def test_each_ranks_own_wait_at_the_collectives(stores, capsys):
    """The host collectives' table of each rank's own wait (Wait at N x N): on straggler1 rank 0 waits the 40 ms
    of each step's broadcasts (skews read from the files) and a little more at the all-reduces; rank 1, late at
    every one, waits for nothing. With two ranks it is the straggler finding's caused wait."""
    capsys.readouterr()
    assert main(["analyze", str(stores["straggler1"]), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    waited = {r["rank"]: r["wait_ns"] for r in out["stores"][0]["host_collectives"]["waited"]}
    skews = [s for s in broadcast_skews("straggler1") if s > 20e6]
    assert 2 * np.median(skews) <= waited[0] <= 2.2 * np.median(skews)
    assert waited.get(1, 0) == 0
    finding = next(f for f in out["findings"] if f["id"] == "host_straggler")
    assert finding["cost_ns"] == pytest.approx(waited[0])


def test_the_reports_picture_of_the_straggler_at_the_host_collectives(stores, tmp_path):
    """The report shows the host straggler finding with gloo's collectives' start skew (rank 1 last, 40 ms skews),
    not the busiest-rank figure (its 'slowest' is the busiest rank, here the two all but tie)."""
    assert main(["report", str(stores["straggler1"]), "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    section = text[text.index("Straggler at the host collectives"):text.index("GPU idle waiting for the host")]
    assert "host_skew.png" in section and "avg_slowest.png" not in section
    assert (tmp_path / "r" / "host_skew.png").stat().st_size > 1000
    # the table by event name counts the host's calls, not the streams' copies of its region marks: one
    # ProfilerStep#4 a rank, as long as the file's host span (QA: 6 calls of 27 ms, four of them annotations)
    table = text[text.index("Where the time goes by event name"):]
    (row,) = [line for line in table.splitlines() if line.startswith("| ProfilerStep\\#4 |")]
    spans = [e["dur"] for p in sorted((RUNS / "straggler1").glob("*.pt.trace.json.gz"))
             for e in json.load(gzip.open(p))["traceEvents"]
             if e.get("cat") == "user_annotation" and e.get("name") == "ProfilerStep#4"]
    assert row.split("|")[3].strip() == "host" and row.split("|")[4].strip() == "2" == str(len(spans))


def test_ranks_of_two_runs_are_not_compared(tmp_path, capsys):
    """QA: rank 0 of the healthy run and rank 1 of straggler1, 12.9 s apart, read as one job had rank 0 'wait
    13.1 s' in a 163 ms trace (16,000 % of a step). The import says they are separate runs; the detectors that
    compare ranks are not made, and gloo's spans that do not overlap are matched into no collective (one
    collective's spans all wait for its last rank)."""
    for name, rank in (("healthy", 0), ("straggler1", 1)):
        source = next((RUNS / name).glob(f"rank{rank}.*.pt.trace.json.gz"))
        (tmp_path / "mix").mkdir(exist_ok=True)
        (tmp_path / "mix" / source.name).write_bytes(source.read_bytes())
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "mix"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not {f["id"] for f in out["findings"]} & {"host_straggler", "straggler", "gpu_straggler"}
    reasons = {row["analysis"]: row["reason"] for row in out["not_made"]}
    assert all("ranks of one run" in reasons[a] for a in ("stragglers", "host_straggler"))
    host = out["stores"][0]["host_collectives"]
    assert all(row["ranks"] == 1 for row in host["collectives"]) and host["late_arrivals"] == []
    assert all(row["wait_ns"] == 0 for row in host["waited"])


@pytest.mark.parametrize("damage", ["empty", "garbage"])
def test_a_profile_named_as_a_trace_that_is_none_is_an_import_problem(tmp_path, capsys, damage):
    """QA: rank 1's file emptied (or overwritten) beside rank 0's was only 'not a trace' among skipped files. A
    file named as a profiler names its traces is damaged: an import problem naming it; rank 0 is still used."""
    folder = tmp_path / "run"
    folder.mkdir()
    good = next((RUNS / "straggler1").glob("rank0.*.pt.trace.json.gz"))
    (folder / good.name).write_bytes(good.read_bytes())
    bad = folder / next((RUNS / "straggler1").glob("rank1.*.pt.trace.json.gz")).name
    bad.write_bytes(b"" if damage == "empty" else gzip.compress(b"garbage"))
    capsys.readouterr()
    assert main(["analyze", str(folder)]) == 0
    captured = capsys.readouterr()
    assert f"problem: {bad}: not a trace format" in captured.err
    assert "imported 1 file(s)" in captured.err and "not traces and were skipped" not in captured.err
    assert f"Import problems in {folder}: {bad}" in captured.out


def test_findings_about_a_rank_read_from_a_cut_file_say_so(tmp_path, capsys):
    """Rank 1's file cut short (its last 3 %): the import names the problem, and every finding about rank 1 says
    that its figures are of what could be read; rank 0's file is whole."""
    folder = tmp_path / "run"
    folder.mkdir()
    for path in sorted((RUNS / "straggler1").glob("*.pt.trace.json.gz")):
        data = gzip.decompress(path.read_bytes())
        if path.name.startswith("rank1."):
            data = data[:int(len(data) * 0.97)]
        (folder / path.name).write_bytes(gzip.compress(data))
    capsys.readouterr()
    assert main(["analyze", str(folder), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("truncated" in p for p in out["stores"][0]["import_problems"])
    about_1 = [f for f in out["findings"] if 1 in f["ranks"]]
    assert about_1 and all("rank 1 read from a damaged file" in f["title"] for f in about_1)
    assert all("damaged file" not in f["title"] for f in out["findings"] if 1 not in f["ranks"])
