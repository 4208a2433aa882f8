"""GPU analyses: ddltrace against Holistic Trace Analysis (HTA) on HTA's own traces, figures and end-to-end time.

    .venv/bin/python benchmarks/gpu_vs_hta.py [--hta-python PY] [TRACE_DIR ...]

Default traces: every folder of ../shared/hta_traces with GPU work (one job per folder; HTA reads every file
of a folder, so each trace is copied alone into a folder of its own, or with its ranks for trace_filter). Each
tool runs in a fresh process (module imports included; HTA in its own venv ``.venvs/hta``, made by
``make hta``):

* HTA: ``TraceAnalysis(trace_dir)``, ``get_temporal_breakdown``, ``get_comm_comp_overlap`` and
  ``get_gpu_kernel_breakdown``;
* ddltrace: the command a user runs, ``ddltrace analyze FOLDER --json --quiet`` (the folder imported into a
  temporary store, then every analysis of ``analyze``, the GPU ones included, the findings and the JSON); the
  figures printed are the ones in its JSON.

ddltrace's modules are compiled to their bytecode cache before any timing (an editable install has none, and
with ``PYTHONDONTWRITEBYTECODE`` set each process would compile them again; pip compiled HTA's when it installed
it). HTA's process times its own steps (module imports, reading the trace, each analysis; "interpreter" is the
rest of the wall time: start and exit); for ddltrace, two more processes not counted in the end-to-end time say
where its time goes: one times the module imports, the import into a store and ``analyze_store`` of it (without
the findings and the JSON), one times each GPU analysis alone on that store, so that the two tools' analyses can
be compared without the reading and the imports. The load average before and after is printed: the wall times
vary with the other jobs of the machine, the figures do not.

HTA also runs ``get_cuda_kernel_launch_stats`` and ``get_queue_length_summary``; under each trace, per rank:
launch count, mean CPU / GPU duration and launch delay (µs), runtime and launch-delay outliers (ddltrace / HTA),
and per stream the queue length's change count, mean over the changes and maximum; and
``get_memory_bw_summary``: per rank and kind of copy (HTA's names), the count and mean bandwidth (GB/s) of both
(ddltrace's mean only where the store holds the copies' bytes). HTA's count is of the points of its bandwidth time
series above 0, not of copies: where copies overlap, and where its running sum leaves a floating-point residue
after a copy ends (trace_diff/test: 3,819 of its 8,448 DtoD points), it counts more, and its mean is lower
(docs/ANALYSES.md).

Last, the floor the 10x target meets: the fastest of three fresh interpreters that only import pandas (what every
analysis of ``analyze`` reads the store with), and that only import what ``ddltrace import`` needs, times the number
of traces, against HTA's total / 10.

Printed per trace and rank: idle / compute / non-compute share of the GPU window and the comm-comp overlap of
both tools, with the difference in percentage points (ddltrace minus HTA), then each tool's wall time (s) and
their ratio, and the device events each counted (HTA keeps only those it can join to a CPU launch by correlation
id). The window: all device work. HTA runs with ``include_last_profiler_step=True`` (it then keeps every
kernel launched by a CPU event that started before the last ProfilerStep ended); by default it drops the kernels
launched in the last ProfilerStep, a window ddltrace's temporal breakdown does not take. Where some device work
has no launch in the trace, a second line compares HTA's figures with ddltrace's over the work launched in the
trace (HTA's set, :mod:`ddltrace.analyses.gpu_launched`), with the events and time left out. Where the figures
differ on the same device events, HTA runs again, untimed, with its rounding of nanosecond times to whole
microseconds switched off (``HTA_DISABLE_NS_ROUNDING=1``; it rounds starts up and ends down, "due to issue with
events overlapping", PyTorch PR 122425), and a line compares ddltrace with that.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_traces import SHARED as SHARED_ROOT  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = SHARED_ROOT / "hta_traces"
DEFAULT_HTA_PYTHON = ROOT / ".venvs" / "hta" / "bin" / "python"
DDLTRACE = Path(sys.executable).parent / "ddltrace"
#: HTA rounds a trace's nanosecond times to whole microseconds as it reads them (start up, end down:
#: ``hta/common/trace_parser.py``, ``round_down_time_stamps``) unless this is set.
HTA_NO_ROUNDING = "HTA_DISABLE_NS_ROUNDING"
DEFAULT_TRACES = ["trace_filter", "trace_diff/control", "trace_diff/test", "nccl_parser_config",
                  "negative_queue_length_values_check", "df_index_resolver", "amd_trace"]

#: The start of each timed child: ``lap(name)`` records the seconds since the last lap under ``name``.
_LAP = r"""
import time
steps, t0 = {}, time.perf_counter()
def lap(name):  # seconds of each step, in this process
    global t0
    now = time.perf_counter()
    steps[name], t0 = now - t0, now
"""

_HTA_CHILD = _LAP + r"""
import json, logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
lap("imports")
analyzer = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=sys.argv[2] == "all")
lap("read")
b = analyzer.get_temporal_breakdown(visualize=False)
lap("temporal")
o = analyzer.get_comm_comp_overlap(visualize=False)
lap("overlap")
k = analyzer.get_gpu_kernel_breakdown(visualize=False)
lap("kernels")
rows = {int(r["rank"]): {"idle": float(r["idle_time_pctg"]), "compute": float(r["compute_time_pctg"]),
                         "non_compute": float(r["non_compute_time_pctg"])} for _, r in b.iterrows()}
for _, r in o.iterrows():
    rows[int(r["rank"])]["overlap"] = float(r["comp_comm_overlap_pctg"])
cats = analyzer.t.symbol_table.get_sym_table()
for rank, df in analyzer.t.traces.items():  # the device events HTA kept (it drops those with no CPU launch)
    on_device = df[df["stream"].ne(-1)]
    rows[int(rank)]["events"] = int(on_device["cat"].map(lambda c: cats[c] in ("kernel", "gpu_memcpy",
                                                                                "gpu_memset")).sum())
ranks = sorted(analyzer.t.traces)
lap("(benchmark's own)")
launch_stats = analyzer.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
lap("launch")
for rank, df in launch_stats.items():  # times in us
    rows[int(rank)]["launches"] = {"count": len(df), "cpu_mean_us": float(df["cpu_duration"].mean()),
                                   "gpu_mean_us": float(df["gpu_duration"].mean()),
                                   "delay_mean_us": float(df["launch_delay"].mean()),
                                   "runtime_outliers": int((df["cpu_duration"] > 50).sum()),
                                   "delay_outliers": int((df["launch_delay"] > 100).sum())} if len(df) else None
lap("(benchmark's own)")
queues = analyzer.get_queue_length_summary(ranks=ranks)
lap("queue")
for (rank, stream), q in (queues.iterrows() if queues is not None else []):
    rows[int(rank)].setdefault("queues", {})[f"stream {stream}"] = {
        "changes": int(q[("queue_length", "count")]), "mean": float(q[("queue_length", "mean")]),
        "max": int(q[("queue_length", "max")])}
try:
    memory = analyzer.get_memory_bw_summary(ranks=ranks)
except Exception:  # a trace with no copy
    memory = None
lap("memcpy")
for (rank, name), m in (memory.iterrows() if memory is not None else []):
    rows[int(rank)].setdefault("memory", {})[name] = {"count": int(m[("memory_bw_gbps", "count")]),
                                                       "mean_gbps": float(m[("memory_bw_gbps", "mean")])}
lap("(benchmark's own)")
idle, _ = analyzer.get_idle_time_breakdown(ranks=ranks, visualize=False)
lap("idle per stream")
for _, i in idle.iterrows():  # times in us
    rows[int(i["rank"])].setdefault("idle_streams", {}).setdefault(f"stream {i['stream']}", {})[
        i["idle_category"]] = float(i["idle_time"])
print(json.dumps(steps))
print(json.dumps(rows))
"""

#: Where ddltrace's time goes, in a second process not counted in the end-to-end time: the module imports, the
#: import into a store (kept for the per-analysis process below) and ``analyze_store`` of it.
_DDLTRACE_STEPS = _LAP + r"""
import json, sys
from ddltrace import quiet_gc
with quiet_gc.loading():  # as `ddltrace analyze` loads them
    from ddltrace.cli import main
    from ddltrace.analyses.run_analysis import analyze_store
import contextlib, io
lap("imports")
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["import", sys.argv[1], "--out", sys.argv[2], "--progress", "never"]) == 0
lap("read")
assert analyze_store(sys.argv[2]).gpu.device_ranks
lap("analyze")
print(json.dumps(steps))
print("{}")
from ddltrace.cli import end
end(0)  # as the ddltrace command exits
"""

_HTA_NAMES = {"H2D": "Memcpy HtoD", "D2H": "Memcpy DtoH", "D2D": "Memcpy DtoD", "fill": "Memset"}


def _percent(x) -> float | None:
    return None if x is None else 100 * x


def ours_figures(gpu: dict) -> dict:
    """Per rank, the figures compared with HTA's, from the ``gpu`` table of ``ddltrace analyze --json`` (one device
    per rank in these traces): shares of the window and the overlap in percent, device events, launch statistics
    (µs), queues per stream and copies per HTA kind (GB/s)."""
    rows: dict = {}
    events: dict = {}
    for c in gpu["kernel_classes"]:
        events[c["rank"]] = events.get(c["rank"], 0) + c["kernels"]
    overlap = {r["rank"]: _percent(r["overlap"]) for r in gpu["overlap"]}
    for r in gpu["temporal"]:
        rank = str(r["rank"])
        rows[rank] = {k: 100 * r[f"share_{k}"] for k in ("idle", "compute", "non_compute")}
        rows[rank].update(overlap=overlap.get(r["rank"]), events=events[r["rank"]])
    for r in gpu["temporal_launched"]:  # only where some device work has no launch in the trace
        rows[str(r["rank"])]["launched"] = {
            **{k: 100 * r[f"share_{k}"] for k in ("idle", "compute", "non_compute")},
            "overlap": _percent(r["overlap"]), "events": r["events"] - r["unlaunched_events"],
            "unlaunched_events": r["unlaunched_events"], "unlaunched_ms": r["unlaunched_ns"] / 1e6,
            "work_ms": r["work_ns"] / 1e6}
    for x in gpu["launches"]:
        rows[str(x["rank"])]["launches"] = {
            "count": x["launches"], "cpu_mean_us": x["cpu_duration_mean_ns"] / 1e3,
            "gpu_mean_us": x["gpu_duration_mean_ns"] / 1e3, "delay_mean_us": x["launch_delay_mean_ns"] / 1e3,
            "runtime_outliers": x["runtime_outliers"], "delay_outliers": x["launch_delay_outliers"]}
    for q in gpu["queues"]:
        rows[str(q["rank"])].setdefault("queues", {})[q["stream"]] = {
            "changes": q["changes"], "mean": q["mean_hta"], "max": q["max"]}
    for key, where in (("idle_streams", lambda rank: rows[rank]),
                       ("idle_streams_launched", lambda rank: rows[rank].setdefault("launched", {}))):
        for i in gpu[key]:
            where(str(i["rank"])).setdefault("idle_streams", {}).setdefault(i["stream"], {})[i["idle_category"]] = (
                i["idle_ns"] / 1e3)
    for c in gpu["copies"]:
        mean = c["mean_bandwidth"]
        rows[str(c["rank"])].setdefault("memory", {})[_HTA_NAMES.get(c["direction"], c["direction"])] = {
            "count": c["copies"], "mean_gbps": None if mean is None else mean / 1e9}
    return rows


#: ddltrace's GPU analyses one by one on a store already written (what ``analyze`` runs for each rank, in
#: :meth:`~ddltrace.analyses.gpu_analysis.GpuAnalysis.add_rank`), seconds each summed over the ranks: not part of
#: the end-to-end time, a second process after it, to say where analyze's time goes.
_DDLTRACE_PER_ANALYSIS = r"""
import json, sys, time
from ddltrace.store import TraceStore
from ddltrace.analyses import (gpu_collectives, gpu_idle, gpu_kernels, gpu_launch, gpu_launched, gpu_memcpy,
                               gpu_overlap, gpu_queue, gpu_stream_idle, gpu_temporal)
from ddltrace.analyses.gpu_lanes import device_work, has_streams
steps = {}
def timed(name, f, *args):
    t0 = time.perf_counter()
    out = f(*args)
    steps[name] = steps.get(name, 0.0) + time.perf_counter() - t0
    return out
for rank, timeline in TraceStore.open(sys.argv[1]).iter_timeline():
    work = timed("device work", device_work, timeline)
    timed("temporal", gpu_temporal.temporal_breakdown, rank, work, has_streams(work))
    timed("overlap", gpu_overlap.comm_comp_overlap, rank, work)
    timed("launched", lambda: gpu_launched.launched_breakdown(rank, work, gpu_launched.launched(timeline, work)))
    timed("kernels", lambda: (gpu_kernels.by_class(rank, work), gpu_kernels.top_kernels(rank, work),
                              work.groupby(["category", "name"])["dur_ns"].sum()))
    pairs = timed("launch", gpu_launch.launch_pairs, timeline, work)
    timed("launch", lambda: (gpu_launch.launch_stats(rank, pairs), gpu_launch.worst_launches(rank, pairs)))
    window = int((timeline["start_ns"] + timeline["dur_ns"]).max() - timeline["start_ns"].min())
    timed("queue", lambda: gpu_queue.queue_summary(rank, gpu_queue.queue_length_series(pairs), window))
    timed("idle", gpu_idle.idle_breakdown, rank, work, pairs)
    timed("idle per stream", gpu_stream_idle.stream_idle, rank, work, timeline)
    timed("memcpy", lambda: (lambda c: gpu_memcpy.copy_summary(c, series=gpu_memcpy.bandwidth_series(c)))(
        gpu_memcpy.rank_copies(rank, work)))
    timed("collectives", gpu_collectives.rank_collectives, rank, work, timeline)
print(json.dumps(steps))
print("{}")
"""


def _timed(argv: list[str]) -> tuple[float, dict | None, dict, str]:
    """Wall time (s) of a fresh process running ``argv``, its result (its last line), its steps' seconds (the line
    before) and its error (its last line of stderr, or "")."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        return wall, None, {}, (done.stderr.strip().splitlines() or ["(no message)"])[-1]
    lines = done.stdout.strip().splitlines()
    return wall, json.loads(lines[-1]), json.loads(lines[-2]), ""


def compare(folder: Path, hta_python: Path, tmp: Path) -> dict:
    job = tmp / folder.name
    job.mkdir()
    for f in folder.glob("*.json*"):  # the traces: not the ground truth beside sample_traces/h100-ddp's
        if f.name.endswith((".json", ".json.gz")) and f.name != "job.json":
            shutil.copy(f, job / f.name)
    hta_s, hta, hta_steps, hta_err = _timed([str(hta_python), "-c", _HTA_CHILD, str(job), "all"])
    t0 = time.perf_counter()  # ddltrace end to end: the command a user runs on the trace folder
    done = subprocess.run([str(DDLTRACE), "analyze", str(job), "--json", "--quiet"], capture_output=True, text=True,
                          cwd=tempfile.gettempdir())
    ours_s = time.perf_counter() - t0
    ours, ours_err = None, (done.stderr.strip().splitlines() or ["(no message)"])[-1] if done.returncode else ""
    if not done.returncode:
        ours = ours_figures(json.loads(done.stdout)["stores"][0]["gpu"])
    store = tmp / (folder.name + "-store")
    steps_s, _, ours_steps, _ = _timed([sys.executable, "-c", _DDLTRACE_STEPS, str(job), str(store)]) if ours else \
        (0.0, None, {}, "")
    per_analysis = _timed([sys.executable, "-c", _DDLTRACE_PER_ANALYSIS, str(store)])[2] if ours_steps else {}
    hta_exact = None  # where the figures differ on the same events: HTA again, on the file's own times (untimed)
    apart = [_rounded_apart(o, h) or _rounded_apart(o.get("launched") or {}, h)  # (all work, or HTA's set)
             for rank, h in (hta or {}).items() for o in [(ours or {}).get(rank, {})]]
    if hta and ours and any(apart):
        done = subprocess.run([str(hta_python), "-c", _HTA_CHILD, str(job), "all"], capture_output=True, text=True,
                              cwd=tempfile.gettempdir(), env={**os.environ, HTA_NO_ROUNDING: "1"})
        hta_exact = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    for steps, wall in ((hta_steps, hta_s), (ours_steps, steps_s)):
        if steps:  # the interpreter's start and exit: the wall time the process's own clock did not see
            steps["interpreter"] = wall - sum(steps.values())
    name = folder.relative_to(SHARED) if folder.is_relative_to(SHARED) else folder.name
    return {"trace": str(name), "hta_s": hta_s, "ours_s": ours_s, "hta": hta, "ours": ours,
            "hta_exact": hta_exact,
            "hta_steps": hta_steps, "ours_steps": ours_steps, "ours_per_analysis": per_analysis,
            "hta_error": hta_err, "ours_error": ours_err}


def _rounded_apart(ours: dict, hta: dict) -> bool:
    """Whether a rank's figures differ (over 0.005 points) on the same device events: HTA's whole microseconds."""
    return ours.get("events") == hta.get("events") and any(
        ours.get(k) is not None and hta.get(k) is not None and abs(ours[k] - hta[k]) > 0.005
        for k in ("idle", "compute", "non_compute", "overlap"))


def _pp(ours, hta) -> str:
    if ours is None or hta is None:
        return "-"
    return f"{ours:6.2f} {hta:6.2f} {ours - hta:+6.2f}"


def _print_launches(r: dict, key: str = "hta", said: str = "") -> None:
    """CUDA launch statistics and queue length per stream of both tools (ddltrace / HTA; ``key``: HTA's run,
    ``said`` what is different about it)."""
    for rank, h in sorted((r[key] or {}).items(), key=lambda kv: int(kv[0])):
        o = r["ours"].get(rank, {})
        mine, theirs = o.get("launches") or {}, h.get("launches") or {}
        if mine or theirs:
            print(f"{said:<36} {rank:>4}  launches " + ", ".join(
                f"{k} {mine.get(k, 0):.6g} / {theirs.get(k, 0):.6g}" for k in (
                    "count", "cpu_mean_us", "gpu_mean_us", "delay_mean_us", "runtime_outliers", "delay_outliers")))
        for stream in sorted(set(o.get("queues", {})) | set(h.get("queues", {}))):
            a, b = o.get("queues", {}).get(stream, {}), h.get("queues", {}).get(stream, {})
            print(f"{said:<36} {rank:>4}  queue {stream}: " + ", ".join(
                f"{k} {a.get(k, '-'):.6g} / {b.get(k, '-'):.6g}" if k in a and k in b else f"{k} {a.get(k, '-')} / "
                f"{b.get(k, '-')}" for k in ("changes", "mean", "max")))


def _print_stream_idle(r: dict, key: str = "hta", said: str = "") -> None:
    """Idle time per stream of both tools by HTA's categories (µs, ddltrace / HTA; ``key``: HTA's run, ``said``
    what is different about it); ddltrace's over the work launched in the trace (HTA's set) where that is not all."""
    for rank, h in sorted((r[key] or {}).items(), key=lambda kv: int(kv[0])):
        ours = r["ours"].get(rank, {})
        mine, theirs = (ours.get("launched") or ours).get("idle_streams", {}), h.get("idle_streams", {})
        said_here = said or ("  launched in the trace (HTA set)" if "idle_streams" in (ours.get("launched") or {})
                             else "")
        for stream in sorted(set(mine) | set(theirs)):
            a, b = mine.get(stream, {}), theirs.get(stream, {})
            print(f"{said_here:<36} {rank:>4}  idle {stream} (us): " + ", ".join(
                f"{c} {a.get(c, 0):.6g} / {b.get(c, 0):.6g}" for c in ("host_wait", "kernel_wait", "other")))


def _print_copies(r: dict) -> None:
    """Copies per kind (HTA's names) of both tools: count and mean bandwidth (GB/s; ddltrace's only where the
    store holds the copies' bytes)."""
    for rank, h in sorted(r["hta"].items(), key=lambda kv: int(kv[0])):
        mine, theirs = r["ours"].get(rank, {}).get("memory", {}), h.get("memory", {})
        for kind in sorted(set(mine) | set(theirs)):
            a, b = mine.get(kind, {}), theirs.get(kind, {})
            mean = a.get("mean_gbps")
            print(f"{'':<36} {rank:>4}  copies {kind}: count {a.get('count', 0)} / {b.get('count', 0)}, mean GB/s "
                  f"{'-' if mean is None else f'{mean:.6g}'} / {b.get('mean_gbps', float('nan')):.6g}")


def _sums(results: list[dict], key: str) -> dict[str, float]:
    total: dict[str, float] = {}
    for r in results:
        for step, seconds in r[key].items():
            total[step] = total.get(step, 0.0) + seconds
    return total


def _print_steps(results: list[dict]) -> None:
    """Where each tool's time goes, summed over the traces (s): HTA's steps in its end-to-end process, ddltrace's in
    a process of its own (import, then analyze_store: what ``analyze`` does before its findings and output), then
    each GPU analysis that both have (HTA: its call after TraceAnalysis read the trace; ddltrace: the analysis
    alone, in a third process on the store, summed over the ranks)."""
    ours, hta = _sums(results, "ours_steps"), _sums(results, "hta_steps")
    print("where the time goes, all traces (s): ddltrace " + ", ".join(f"{k} {v:.2f}" for k, v in ours.items())
          + "; HTA " + ", ".join(f"{k} {v:.2f}" for k, v in hta.items()))
    print("  (ddltrace's, in a process apart: read: the Kineto import into a store on disk; analyze: the store read "
          "back and every analysis of `analyze`, without the findings and the JSON; HTA's read: "
          "TraceAnalysis(trace_dir); interpreter: start and exit)")
    alone = _sums(results, "ours_per_analysis")
    both = [k for k in ("temporal", "overlap", "kernels", "launch", "queue", "memcpy", "idle per stream")
            if k in alone and k in hta]
    print("per GPU analysis, all traces (s, module imports and trace reading left out): "
          + ", ".join(f"{k} {alone[k]:.3f} / {hta[k]:.3f} ({hta[k] / alone[k]:.0f}x)" for k in both)
          + " (ddltrace / HTA (HTA / ddltrace)); ddltrace's alone: " + ", ".join(
              f"{k} {alone[k]:.3f}" for k in ("device work", "launched", "idle", "collectives") if k in alone))


def _fresh_import_s(modules: str, repeat: int = 3) -> float:
    """Seconds of the fastest of ``repeat`` fresh interpreters that only import ``modules`` and exit (without the
    interpreter's teardown, as the ddltrace command exits)."""
    code = f"import os, sys, {modules}; print('{{}}'); print('{{}}'); sys.stdout.flush(); os._exit(0)"
    return min(_timed([sys.executable, "-c", code])[0] for _ in range(repeat))


def _print_floor(both: list[dict], hta_s: float) -> None:
    """What the 10x target leaves a fresh process: HTA's time / 10 per trace, against a fresh interpreter that
    only imports pandas (every analysis of ``analyze`` reads the store as a DataFrame) and one that only imports
    what ``ddltrace import`` needs (numpy, pyarrow.parquet, msgspec)."""
    pandas_s, import_s = _fresh_import_s("pandas"), _fresh_import_s("numpy, pyarrow.parquet, msgspec")
    n, budget = len(both), hta_s / 10
    print(f"floor (fastest of 3 fresh interpreters, start to exit): importing pandas {pandas_s:.3f} s, importing "
          f"numpy + pyarrow.parquet + msgspec {import_s:.3f} s; for {n} traces, one process each: {n * pandas_s:.2f} s "
          f"and {n * import_s:.2f} s, against HTA / 10 = {budget:.2f} s for all "
          + ("(a path that imports pandas cannot be 10x faster than HTA on these traces)" if n * pandas_s > budget
             else "(the imports alone leave room for the 10x target)"))


def compile_ddltrace() -> str:
    """Compile ddltrace's modules to their bytecode cache once, before any timing, as pip does for HTA's when it
    installs it: an editable install has none, and with ``PYTHONDONTWRITEBYTECODE`` set every fresh process would
    compile them again (0.5 s a process here). Returns what was done, in words."""
    import compileall

    import ddltrace.analyses
    import ddltrace.collectors

    folders = [*ddltrace.__path__, *ddltrace.analyses.__path__, *ddltrace.collectors.__path__]
    ok = all(compileall.compile_dir(f, quiet=1) for f in dict.fromkeys(folders))
    return "ddltrace's modules compiled to bytecode beforehand (HTA's were by pip)" if ok else \
        "compiling ddltrace's modules failed: its processes compile them"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="*", help="folders of ../shared/hta_traces (default: all with GPU work), or "
                                                  "paths of other folders of Kineto traces")
    parser.add_argument("--hta-python", type=Path, default=DEFAULT_HTA_PYTHON)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    args.hta_python = args.hta_python.absolute()  # the children run elsewhere; absolute() keeps the venv's link
    if not args.hta_python.exists():
        raise SystemExit(f"HTA not found at {args.hta_python}: make it with 'make hta'")
    results = []
    print(compile_ddltrace())
    load_before = os.getloadavg()
    print("per rank: ddltrace, HTA, difference (percentage points); shares of the GPU window (all device work); "
          "overlap: share of communication-kernel time under compute kernels")
    print(f"{'trace':<36} {'rank':>4}  {'idle % (ours HTA diff)':<22}  {'compute %':<22}  {'non-compute %':<22}  "
          f"{'overlap %':<22}  device events (ours / HTA's)")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.traces or DEFAULT_TRACES:
            r = compare(SHARED / name, args.hta_python, Path(tmp))
            results.append(r)
            if r["hta"] is None or r["ours"] is None:
                print(f"{r['trace']:<36} HTA: {r['hta_error'] or 'ok'}; ddltrace: {r['ours_error'] or 'ok'}")
            else:
                for rank, h in sorted(r["hta"].items(), key=lambda kv: int(kv[0])):
                    o = r["ours"].get(rank, {})
                    print(f"{r['trace']:<36} {rank:>4}  " + "  ".join(
                        f"{_pp(o.get(k), h.get(k)):<22}" for k in ("idle", "compute", "non_compute", "overlap"))
                        + f"  {o.get('events')} / {h.get('events')}")
                    exact = (r["hta_exact"] or {}).get(rank)
                    if exact and o.get("events") == exact.get("events"):  # HTA on the file's nanoseconds (its
                        # rounding to whole microseconds switched off), on the same events
                        print(f"{'  HTA, ' + HTA_NO_ROUNDING + '=1':<36} {rank:>4}  " + "  ".join(
                            f"{_pp(o.get(k), exact.get(k)):<22}" for k in ("idle", "compute", "non_compute", "overlap"))
                            + f"  {o.get('events')} / {exact.get('events')}")
                    if o.get("launched"):  # the same over HTA's set, the work launched in the trace
                        la = o["launched"]
                        print(f"{'  launched in the trace (HTA set)':<36} {rank:>4}  " + "  ".join(
                            f"{_pp(la.get(k), h.get(k)):<22}" for k in ("idle", "compute", "non_compute", "overlap"))
                            + f"  {la['events']} / {h.get('events')} ({la['unlaunched_events']} events, "
                              f"{la['unlaunched_ms']:.1f} of {la['work_ms']:.1f} ms without launch)")
                        if exact and la["events"] == exact.get("events"):
                            print(f"{'  launched, ' + HTA_NO_ROUNDING + '=1':<36} {rank:>4}  " + "  ".join(
                                f"{_pp(la.get(k), exact.get(k)):<22}" for k in ("idle", "compute", "non_compute",
                                                                                "overlap"))
                                + f"  {la['events']} / {exact.get('events')}")
            if r["hta"] is not None and r["ours"] is not None:
                _print_launches(r)
                _print_launches(r, "hta_exact", f"  HTA, {HTA_NO_ROUNDING}=1")
                _print_copies(r)
                _print_stream_idle(r)
                _print_stream_idle(r, "hta_exact", f"  HTA, {HTA_NO_ROUNDING}=1")
            print(f"{'':<36} wall s: ddltrace {r['ours_s']:.2f}, HTA {r['hta_s']:.2f}, HTA / ddltrace "
                  f"{r['hta_s'] / r['ours_s']:.2f}x")
            for tool, key in (("ddltrace", "ours_steps"), ("HTA", "hta_steps")):
                if r[key]:
                    print(f"{'':<36}   {tool} s: " + ", ".join(f"{k} {v:.2f}" for k, v in r[key].items()))
    both = [r for r in results if r["hta"] is not None and r["ours"] is not None]
    if both:
        hta_s, ours_s = sum(r["hta_s"] for r in both), sum(r["ours_s"] for r in both)
        print(f"all traces both tools read ({len(both)}): ddltrace {ours_s:.2f} s, HTA {hta_s:.2f} s, "
              f"HTA / ddltrace {hta_s / ours_s:.2f}x (fresh processes, module imports included; load average "
              f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} CPUs)")
        _print_steps(both)
        _print_floor(both, hta_s)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
