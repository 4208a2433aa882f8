"""GPU analyses: ddltrace against AMD's TraceLens on the workplace's GPU traces, figures and end-to-end time.

    .venv/bin/python benchmarks/gpu_vs_tracelens.py [--tracelens-python PY] [--json FILE] [TRACE_DIR ...]

TraceLens (github.com/AMD-AGI/TraceLens, MIT; not on PyPI) runs in its own venv ``.venvs/tracelens``, made by
``make tracelens`` (from GitHub at the commit the Makefile names, else from ``TRACELENS_SRC``, a clone or mirror);
where it is absent the benchmark says so in one line and exits 2. Default traces: HTA's test traces
(``../shared/hta_traces``, as benchmarks/gpu_vs_hta.py) and four Kineto traces others wrote
(``../shared/wild_traces``: TraceLens' own B200 and MI300 traces, the TensorBoard plugin's ResNet-50 sample and
HTA's nanosecond-resolution trace). Each folder is one job, each of its files one rank; each is copied into a
folder of its own. Each tool runs in a fresh process, module imports included:

* TraceLens, as its README and its report script (``TraceLens_generate_perf_report_pytorch``) use it, per rank file:
  ``TreePerfAnalyzer.from_file`` (reading and the event tree), ``get_df_gpu_timeline`` (the GPU timeline:
  computation, exposed communication, exposed memcpy, busy, idle, total), ``get_df_kernels`` summed per kernel name
  (its kernel summary) and ``get_df_kernel_launchers`` with ``get_df_kernel_launchers_summary`` (its ops summary);
  then for the job ``NcclAnalyser`` on the rank files in rank order (``build_df_long``,
  ``build_df_nccl_implicit_sync_cat``: per collective across ranks, latency, start skew, algbw and busbw). Where no
  device work is linked to a launch (traces whose flow events are not ``ac2g``), ``get_df_gpu_timeline`` raises "No
  GPU events found"; the child then sets ``include_unlinked_kernels`` (the report script's
  ``--include_unlinked_kernels``) on the same analyzer and says so;
* ddltrace: the command a user runs, ``ddltrace analyze FOLDER --json --quiet``; the figures are its JSON's.

TraceLens' timeline (``TraceLens/TreePerf/gpu_event_analyser.py``, ``compute_metrics_dict``), on the device work
of its set, in the file's microseconds as floats: total = the last event's end - the first's start; computation =
the union of kernels whose name has no ``nccl`` / ``rccl`` / ``cross_device_reduce`` **and of memsets**; exposed
comm = the union of communication kernels less computation; exposed memcpy = copies less both; busy = the union of
all; idle = total - busy. Its set (``get_df_gpu_timeline``, ``include_unlinked_kernels=False``): the kernels, copies
and fills joined to a ``cuda_runtime`` / ``cuda_driver`` call by an ``ac2g`` flow (or carrying a graph launch's
correlation id); ddltrace's first row is over all device work. ddltrace's figures in TraceLens' terms: idle and busy
as its temporal breakdown; computation = its compute share (kernels only, fills are memory); exposed comm = its
overlap table's communication time less the part under compute; exposed memory = its non-compute time less that
(copies and fills under no kernel). Under each rank, a line of ddltrace's figures over the work launched in the
trace (HTA's set) where it has one, and, untimed, TraceLens' own interval code with fills as memory over every
device event (ddltrace's set and classes), over HTA's set (the device events whose correlation id a host event
carries) where ddltrace has that row, and over TraceLens' own set where that is not all device work and holds
fills: the differences left on the first two are each tool's names of communication kernels and its time
resolution (ns integers against the file's µs as floats).

Also per rank: kernels (count and summed time; ddltrace's compute and communication classes, TraceLens' ``kernel``
events) and the kernel with most time in each; the launching operator with most device time in TraceLens (its
direct kernels' busy time, NCCL left out) and ddltrace's self time of the same name. Per job and collective kind
that TraceLens' implicit-sync table holds: instances, bus bandwidth (ddltrace's bytes/s and TraceLens' "GB/s",
which are GiB/s: MB = 1024^2 B, GB = 1024 MB; both printed in GB/s = 1e9 B/s) and start skew (µs) side by side,
paired by start time. Then each tool's wall time (s), their ratio, TraceLens' steps (imports, read, timeline,
kernels, ops, collectives; "interpreter": start and exit) and ddltrace's, from a process apart as in
benchmarks/gpu_vs_hta.py. TraceLens' untimed check is timed and taken out of its wall time. The load average
before and after is printed: the wall times vary with the other jobs of the machine, the figures do not.
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
import gpu_vs_hta  # noqa: E402  (its ddltrace steps process, bytecode compilation and timed runs)
from shared_traces import SHARED  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACELENS_PYTHON = ROOT / ".venvs" / "tracelens" / "bin" / "python"
DDLTRACE = gpu_vs_hta.DDLTRACE
DEFAULT_TRACES = ["hta_traces/trace_filter", "hta_traces/trace_diff/control", "hta_traces/trace_diff/test",
                  "hta_traces/nccl_parser_config", "hta_traces/negative_queue_length_values_check",
                  "hta_traces/df_index_resolver", "hta_traces/amd_trace", "wild_traces/tracelens_b200_eager",
                  "wild_traces/tracelens_mi300_resnet_ckpt", "wild_traces/kineto_tb_resnet50_w0",
                  "wild_traces/hta_ns_resolution_rank0"]
#: TraceLens' GB/s are GiB/s (``nccl_analyser.py``: MB = bytes / 1024**2, GB = MB / 1024).
GIB = 2 ** 30
#: TraceLens' collective kinds (``NcclAnalyser.collective_type2name``) that ddltrace names alike.
KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")
UNTIMED = "check (untimed)"

_TRACELENS_CHILD = r"""
import contextlib, io, json, logging, os, sys, time, warnings
steps, t0 = {}, time.perf_counter()
def lap(name):  # seconds of each step, summed over the ranks, in this process
    global t0
    now = time.perf_counter()
    steps[name], t0 = steps.get(name, 0.0) + now - t0, now
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
from TraceLens import NcclAnalyser, TreePerfAnalyzer
from TraceLens.TreePerf.gpu_event_analyser import GPUEventAnalyser
from TraceLens.util import TraceEventUtils
lap("imports")
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset"}
def quiet():  # TraceLens prints its progress ("Building tree ...") on stdout
    return contextlib.redirect_stdout(io.StringIO())
def metrics(events, fills_memory):
    # TraceLens' own interval arithmetic (compute_metrics_dict) on `events`, classed as get_gpu_event_lists does,
    # but for fills where fills_memory: memory, as ddltrace and HTA class them, not computation
    lists = {"all_gpu": events, "computation": [], "communication": [], "memcpy": []}
    for e in events:
        name, cat = e.get("name") or "", e.get("cat")
        if cat == "gpu_memcpy" or (fills_memory and cat == "gpu_memset") or (
                cat == "kernel" and TraceEventUtils.is_rocm_legacy_memcpy(name)):
            lists["memcpy"].append(e)
        elif cat == "kernel" and TraceEventUtils.is_communication_string(name):
            lists["communication"].append(e)
        else:
            lists["computation"].append(e)
    for e in events:
        e.setdefault("t_end", e["ts"] + e["dur"])
    return {k: v / 1e3 for k, v in GPUEventAnalyser.compute_metrics_dict(lists).items()}  # ms
ranks, paths = {}, {}
for path in sorted(os.path.join(sys.argv[1], f) for f in os.listdir(sys.argv[1])):
    with quiet():
        a = TreePerfAnalyzer.from_file(path)
    lap("read")
    rank = str((a.trace_metadata.get("distributedInfo") or {}).get("rank", len(ranks)))
    row = ranks[rank] = {"file": os.path.basename(path)}
    paths[rank] = path
    try:
        with quiet():
            timeline = a.get_df_gpu_timeline()
    except ValueError as e:  # "No GPU events found in the trace": no device work linked to a launch
        row["unlinked"] = str(e)
        a.include_unlinked_kernels = True  # the report script's --include_unlinked_kernels
        try:
            with quiet():
                timeline = a.get_df_gpu_timeline()
        except ValueError as e:
            row["error"], timeline = str(e), None
    if timeline is not None:
        row["timeline"] = dict(zip(timeline["type"], map(float, timeline["time ms"])))
    lap("timeline")
    try:
        with quiet():
            k = a.get_df_kernels()
        if not len(k):
            raise ValueError("no event of category 'kernel'")
        with quiet():
            by_name = k.groupby("Kernel name")["Kernel duration (µs)"].agg(["sum", "count"]).sort_values(
                "sum", ascending=False)
        row["kernels"] = {"count": len(k), "sum_ms": float(k["Kernel duration (µs)"].sum()) / 1e3,
                          "top": [by_name.index[0], int(by_name["count"].iloc[0]), float(by_name["sum"].iloc[0]) / 1e3]}
    except Exception as e:
        row["kernels_error"] = f"{type(e).__name__}: {e}"
    lap("kernels")
    try:
        with quiet():
            launchers = a.get_df_kernel_launchers()
        if not len(launchers):
            raise ValueError("no launcher: no kernel linked to a launch")
        with quiet():
            ops = a.get_df_kernel_launchers_summary(launchers)
        row["top_op"] = [ops["name"].iloc[0], float(ops["total_direct_kernel_time_sum"].iloc[0]) / 1e3,
                         int(ops["Count"].iloc[0])]
    except Exception as e:
        row["ops_error"] = f"{type(e).__name__}: {e}"
    lap("ops")
    events = [e for e in a.tree.events if e.get("cat") in DEVICE]
    mine = [e for e in events if a.include_unlinked_kernels or e.get("tree")]
    row["events"], row["all_events"], row["fills"] = len(mine), len(events), sum(
        e["cat"] == "gpu_memset" for e in mine)
    if events:
        row["check_all"] = metrics(events, True)
    if mine and len(mine) != len(events) and row["fills"]:
        row["check_set"] = metrics(mine, True)
    # HTA's set (ddltrace's launched work): the device events whose correlation id a host event carries (or none)
    launched = {e["args"]["correlation"] for e in a.tree.events if e.get("cat") not in DEVICE
                and isinstance(e.get("args"), dict) and e["args"].get("correlation") is not None}
    launched.add(None)
    hta_set = [e for e in events if e.get("args", {}).get("correlation") in launched]
    if hta_set and len(hta_set) not in (len(events), len(mine)):
        row["check_launched"], row["launched_events"] = metrics(hta_set, True), len(hta_set)
    del a, events, mine
    lap("check (untimed)")
order = sorted(ranks, key=int)
try:
    with quiet():
        nccl = NcclAnalyser([paths[r] for r in order], len(order))
        long = nccl.build_df_long()
    try:
        with quiet():
            sync = nccl.build_df_nccl_implicit_sync_cat(detailed=True)
    except ValueError as e:  # metadata that differs across ranks
        collectives_note = f"strict_metadata_check failed ({e}); run again without it"
        with quiet():
            sync = nccl.build_df_nccl_implicit_sync_cat(detailed=True, strict_metadata_check=False)
    else:
        collectives_note = ""
    lap("collectives")
    out = []
    for _, c in sync.iterrows():
        starts = {order[int(col[5:-3])]: float(c[col]) for col in sync.columns
                  if col.startswith("rank_") and col.endswith("_ts") and c[col] == c[col]}
        out.append({"name": c["Collective name"], "kind": nccl.collective_name2type.get(c["Collective name"]),
                    "first_start_us": min(starts.values()), "ranks": len(starts),
                    "latency_us": float(c["comm_latency"]), "skew_us": float(c["skew in start time"]),
                    "busbw_gib": float(c["bus bw (GB/s)"]), "group_size": None if c["Group size"] is None
                    else float(c["Group size"])})
    nccl_kernels = {order[int(r)]: int(n) for r, n in long.groupby("rank").size().items()} if len(long) else {}
    collectives = {"instances": out, "kernels": nccl_kernels, "note": collectives_note}
except Exception as e:
    lap("collectives")
    collectives = {"error": f"{type(e).__name__}: {e}"}
print(json.dumps(steps))
print(json.dumps({"ranks": ranks, "collectives": collectives}))
"""


def ours_figures(gpu: dict, world_size: int | None) -> dict:
    """Per rank (str), from the ``gpu`` table of ``ddltrace analyze --json`` (one device per rank here), the
    figures in TraceLens' terms (ms, percent of the window) over all device work, and over the work launched in the
    trace where ddltrace has that row; kernels, operators and collective instances."""
    rows: dict = {}

    def terms(r: dict, comm_ns: int, overlap_ns: int) -> dict:
        window = r["window_ns"]
        exposed_comm = comm_ns - overlap_ns
        return {"window_ms": window / 1e6, "idle": 100 * r["idle_ns"] / window, "busy": 100 * r["busy_ns"] / window,
                "compute": 100 * r["compute_ns"] / window, "exposed_comm": 100 * exposed_comm / window,
                "exposed_memory": 100 * (r["non_compute_ns"] - exposed_comm) / window, "comm_ms": comm_ns / 1e6}

    overlap = {str(o["rank"]): o for o in gpu["overlap"]}
    for r in gpu["temporal"]:
        rank = str(r["rank"])
        if rank in rows:  # a second device of the rank: not in these traces
            rows[rank]["devices"] = rows[rank].get("devices", 1) + 1
            continue
        o = overlap.get(rank, {})
        rows[rank] = terms(r, o.get("comm_ns", 0), o.get("overlap_ns", 0))
    for c in gpu["kernel_classes"]:
        row = rows[str(c["rank"])]
        row["events"] = row.get("events", 0) + c["kernels"]
        if c["class"] in ("compute", "comm"):
            row["kernel_count"] = row.get("kernel_count", 0) + c["kernels"]
            row["kernel_ms"] = row.get("kernel_ms", 0.0) + c["sum_ns"] / 1e6
    for r in gpu["temporal_launched"]:
        rows[str(r["rank"])]["launched"] = {**terms(r, r["comm_ns"], r["overlap_ns"]),
                                            "events": r["events"] - r["unlaunched_events"]}
    for k in gpu["kernels"]:
        row = rows[str(k["rank"])]
        if k["class"] in ("compute", "comm") and "top_kernel" not in row:  # sorted by summed time
            row["top_kernel"] = [k["name"], k["count"], k["sum_ns"] / 1e6]
    for o in gpu["operators"]:
        rows[str(o["rank"])].setdefault("operators", {})[o["name"]] = [o["self_ns"] / 1e6, o["total_ns"] / 1e6]
    collectives = [{"kind": c["collective"], "first_start_us": c["first_start_ns"] / 1e3, "ranks": c["ranks"],
                    "latency_us": c["duration_ns"] / 1e3, "skew_us": c["skew_ns"] / 1e3,
                    "busbw_gb": None if c["busbw"] is None else c["busbw"] / 1e9} for c in gpu["collectives"]]
    return {"ranks": rows, "collectives": collectives, "world_size": world_size}


def compare(folder: Path, tracelens_python: Path, tmp: Path) -> dict:
    job = tmp / folder.name
    job.mkdir()
    for f in folder.glob("*.json*"):  # the traces
        if f.name.endswith((".json", ".json.gz")) and f.name != "job.json":
            shutil.copy(f, job / f.name)
    tl_s, tl, tl_steps, tl_err = gpu_vs_hta._timed([str(tracelens_python), "-c", _TRACELENS_CHILD, str(job)])
    if tl_steps:  # the check is the benchmark's, not TraceLens': out of its wall time
        tl_s -= tl_steps.get(UNTIMED, 0.0)
    t0 = time.perf_counter()  # ddltrace end to end: the command a user runs on the trace folder
    done = subprocess.run([str(DDLTRACE), "analyze", str(job), "--json", "--quiet"], capture_output=True, text=True,
                          cwd=tempfile.gettempdir())
    ours_s = time.perf_counter() - t0
    ours, ours_err = None, (done.stderr.strip().splitlines() or ["(no message)"])[-1] if done.returncode else ""
    if not done.returncode:
        store = json.loads(done.stdout)["stores"][0]
        ours = ours_figures(store["gpu"], store.get("world_size"))
    store_dir = tmp / (folder.name + "-store")
    steps_s, _, ours_steps, _ = gpu_vs_hta._timed([sys.executable, "-c", gpu_vs_hta._DDLTRACE_STEPS, str(job),
                                                    str(store_dir)]) if ours else (0.0, None, {}, "")
    for steps, wall in ((tl_steps, tl_s), (ours_steps, steps_s)):
        if steps:  # the interpreter's start and exit: the wall time the process's own clock did not see
            steps["interpreter"] = wall - sum(v for k, v in steps.items() if k != UNTIMED)
    name = folder.relative_to(SHARED) if folder.is_relative_to(SHARED) else folder.name
    return {"trace": str(name), "tracelens_s": tl_s, "ours_s": ours_s, "tracelens": tl, "ours": ours,
            "tracelens_steps": tl_steps, "ours_steps": ours_steps, "tracelens_error": tl_err, "ours_error": ours_err}


FIGURES = ("window_ms", "idle", "compute", "exposed_comm", "exposed_memory", "comm_ms")


def tracelens_terms(t: dict | None) -> dict:
    """TraceLens' timeline (ms per type) in the columns printed: the window in ms, shares in percent."""
    if not t:
        return {}
    total = t["total_time"]
    return {"window_ms": total, "idle": 100 * t["idle_time"] / total, "busy": 100 * t["busy_time"] / total,
            "compute": 100 * t["computation_time"] / total, "exposed_comm": 100 * t["exposed_comm_time"] / total,
            "exposed_memory": 100 * t["exposed_memcpy_time"] / total, "comm_ms": t["total_comm_time"]}


def _cell(ours, theirs, digits: int = 2) -> str:
    if ours is None or theirs is None:
        return "-"
    return f"{ours:.{digits}f} {theirs:.{digits}f} {ours - theirs:+.{digits}f}"


def _row(label: str, rank: str, ours: dict, theirs: dict, events: str) -> None:
    print(f"{label:<44} {rank:>4}  " + "  ".join(
        f"{_cell(ours.get(k), theirs.get(k), 3 if k.endswith('_ms') else 2):<26}" for k in FIGURES) + f"  {events}")


def print_trace(r: dict) -> None:
    tl, ours = r["tracelens"], r["ours"]
    if tl is None or ours is None:
        print(f"{r['trace']:<44} TraceLens: {r['tracelens_error'] or 'ok'}; ddltrace: {r['ours_error'] or 'ok'}")
        return
    for rank, t in sorted(tl["ranks"].items(), key=lambda kv: int(kv[0])):
        o = ours["ranks"].get(rank, {})
        said = f"TraceLens' set: {t.get('events')} of {t.get('all_events')}"
        if t.get("unlinked"):
            said += " (none linked: unlinked kernels included)"
        if t.get("error"):
            print(f"{r['trace']:<44} {rank:>4}  TraceLens' timeline: {t['error']}"
                  + (" (with unlinked kernels included)" if t.get("unlinked") else "")
                  + f"; ddltrace: idle {o.get('idle', float('nan')):.2f} %, {o.get('events')} device events")
        else:
            _row(r["trace"], rank, o, tracelens_terms(t.get("timeline")), f"{o.get('events')} / {said}")
        if o.get("launched") and not t.get("error"):
            la = o["launched"]
            _row("  ddltrace over the launched work (HTA's set)", rank, la, tracelens_terms(t.get("timeline")),
                 f"{la['events']} / {t.get('events')}")
        if t.get("check_set"):  # where its set is not all device work and holds fills: against ddltrace's nearest
            near = o.get("launched") or o
            _row("  TraceLens' set, fills as memory (check)", rank, near, tracelens_terms(t["check_set"]),
                 f"{near.get('events')} / {t.get('events')} (untimed)")
        if t.get("check_launched") and o.get("launched"):
            _row("  HTA's set, fills as memory (check)", rank, o["launched"], tracelens_terms(t["check_launched"]),
                 f"{o['launched']['events']} / {t['launched_events']} (untimed)")
        if t.get("check_all"):
            _row("  all device work, fills as memory (check)", rank, o, tracelens_terms(t["check_all"]),
                 f"{o.get('events')} / {t.get('all_events')} (untimed)")
        k, ok = t.get("kernels"), o.get("kernel_count") is not None
        if k and ok:
            mine, theirs = o.get("top_kernel") or ["-", 0, 0.0], k["top"]
            same = mine[0] == theirs[0]
            print(f"{'':<44} {rank:>4}  kernels: count {o['kernel_count']} / {k['count']}, summed ms "
                  f"{o['kernel_ms']:.3f} / {k['sum_ms']:.3f}; most time: "
                  + (f"{theirs[0][:60]!r} both, {mine[1]} / {theirs[1]} calls, {mine[2]:.3f} / {theirs[2]:.3f} ms"
                     if same else f"ddltrace {mine[0][:50]!r} {mine[2]:.3f} ms, TraceLens {theirs[0][:50]!r} "
                                  f"{theirs[2]:.3f} ms"))
        elif t.get("kernels_error"):
            print(f"{'':<44} {rank:>4}  kernels: TraceLens' get_df_kernels: {t['kernels_error'][:120]}")
        if t.get("top_op"):
            name, ms, calls = t["top_op"]
            mine = (o.get("operators") or {}).get(name) or [None, None]
            top = max((o.get("operators") or {"-": [0.0, 0.0]}).items(), key=lambda kv: kv[1][0])
            print(f"{'':<44} {rank:>4}  op with most device time in TraceLens: {name!r} ({calls} calls): "
                  f"ddltrace self {_fmt(mine[0])} (total {_fmt(mine[1])}) / TraceLens direct {ms:.4g} ms; "
                  f"ddltrace's most self time: {top[0][:60]!r} {top[1][0]:.4g} ms")
        elif t.get("ops_error"):
            print(f"{'':<44} {rank:>4}  ops: TraceLens' get_df_kernel_launchers: {t['ops_error'][:120]}")
    print_collectives(r)
    print(f"{'':<44} wall s: ddltrace {r['ours_s']:.2f}, TraceLens {r['tracelens_s']:.2f}, TraceLens / ddltrace "
          f"{r['tracelens_s'] / r['ours_s']:.2f}x")
    for tool, key in (("ddltrace", "ours_steps"), ("TraceLens", "tracelens_steps")):
        if r[key]:
            print(f"{'':<44}   {tool} s: " + ", ".join(f"{k} {v:.2f}" for k, v in r[key].items()))


def _median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None and v == v)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def print_collectives(r: dict) -> None:
    """Per collective kind of TraceLens' implicit-sync table: instances of both, paired by start time; bus
    bandwidth and start skew side by side."""
    c = r["tracelens"]["collectives"]
    if c.get("error"):
        print(f"{'':<44} collectives: TraceLens' NcclAnalyser: {c['error'][:160]}")
        return
    theirs_all, ours_all = c["instances"], r["ours"]["collectives"]
    if c.get("note"):
        print(f"{'':<44} collectives: {c['note'][:160]}")
    unnamed = [i for i in theirs_all if i["kind"] is None]
    kernels = ", ".join(f"rank {k} {n}" for k, n in sorted(c.get("kernels", {}).items(), key=lambda kv: int(kv[0])))
    if not theirs_all or unnamed:
        print(f"{'':<44} collectives: TraceLens' NCCL kernels ({kernels or 'none'}): "
              + (f"{len(unnamed)} instances without a collective name (no busbw), skew max "
                 f"{max(i['skew_us'] for i in unnamed):.3f} µs" if unnamed else "none in its implicit-sync table")
              + "; ddltrace's instances: " + (", ".join(
                  f"{k} {n}" for k, n in sorted(_count(ours_all).items())) or "none"))
    for kind in KINDS:
        theirs = sorted((i for i in theirs_all if i["kind"] == kind), key=lambda i: i["first_start_us"])
        if not theirs:
            continue
        ours = sorted((i for i in ours_all if i["kind"] == kind), key=lambda i: i["first_start_us"])
        most = max((i["ranks"] for i in ours), default=0)
        line = (f"{'':<44} {kind}: instances {len(ours)} / {len(theirs)} (ranks {most} / "
                f"{max(i['ranks'] for i in theirs)}); n: world size {r['ours']['world_size']} / group size "
                f"{sorted({i['group_size'] for i in theirs}, key=str)}")
        tl_bw = [None if i["busbw_gib"] != i["busbw_gib"] else i["busbw_gib"] * GIB / 1e9 for i in theirs]
        line += (f"; busbw GB/s median {_fmt(_median([i['busbw_gb'] for i in ours]))} / {_fmt(_median(tl_bw))}"
                 f", skew µs max {max((i['skew_us'] for i in ours), default=0):.3f} / "
                 f"{max(i['skew_us'] for i in theirs):.3f}")
        if len(ours) == len(theirs):  # each tool's starts from its first of the kind (ddltrace's clock is the
            # epoch's, Kineto's baseTimeNanoseconds added; TraceLens keeps the file's ts)
            starts = max(abs(a["first_start_us"] - ours[0]["first_start_us"] - b["first_start_us"]
                             + theirs[0]["first_start_us"]) for a, b in zip(ours, theirs, strict=True))
            rel = [abs(a["busbw_gb"] / b - 1) for a, b in zip(ours, tl_bw, strict=True)
                   if a is not None and b is not None and b > 0]
            line += (f"; paired by start (offsets at most {starts:.3f} µs apart): busbw max |difference| "
                     f"{_fmt(100 * max(rel) if rel else None)} %, latency max |difference| "
                     f"{max(abs(a['latency_us'] - b['latency_us']) for a, b in zip(ours, theirs, strict=True)):.3f} µs")
        print(line)


def _count(instances: list[dict]) -> dict:
    out: dict = {}
    for i in instances:
        out[i["kind"]] = out.get(i["kind"], 0) + 1
    return out


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _sums(results: list[dict], key: str) -> dict[str, float]:
    total: dict[str, float] = {}
    for r in results:
        for step, seconds in r[key].items():
            total[step] = total.get(step, 0.0) + seconds
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="*", help="folders under ../shared (default: hta_traces' GPU jobs and four "
                                                  "wild_traces), or paths of other folders of Kineto traces")
    parser.add_argument("--tracelens-python", type=Path, default=DEFAULT_TRACELENS_PYTHON)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    python = args.tracelens_python.absolute()  # the children run elsewhere; absolute() keeps the venv's link
    if not python.exists() or subprocess.run([str(python), "-c", "import TraceLens"], capture_output=True,
                                             cwd=tempfile.gettempdir()).returncode:
        print(f"TraceLens is absent ({python} cannot import it): make it with 'make tracelens' (GitHub, or "
              f"TRACELENS_SRC=a clone or mirror of AMD-AGI/TraceLens)", file=sys.stderr)
        sys.exit(2)
    commit = subprocess.run([str(python), "-m", "pip", "show", "TraceLens"], capture_output=True, text=True).stdout
    print(gpu_vs_hta.compile_ddltrace())
    print("TraceLens " + next((line.split(":", 1)[1].strip() for line in commit.splitlines()
                               if line.startswith("Version:")), "?") + f" in {python.parents[1]}")
    load_before = os.getloadavg()
    print("per rank: ddltrace, TraceLens, difference; window ms, then percent of the window: idle, computation, "
          "exposed communication, exposed memory (TraceLens: copies only, its fills are computation), then "
          "communication ms (union of communication kernels)")
    print(f"{'trace':<44} {'rank':>4}  " + "  ".join(f"{h:<26}" for h in (
        "window ms (ours TL diff)", "idle %", "computation %", "exposed comm %", "exposed memory %", "comm ms"))
          + "  device events (ours / TraceLens')")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.traces or DEFAULT_TRACES:
            folder = SHARED / name if (SHARED / name).is_dir() else Path(name)
            r = compare(folder.resolve(), python, Path(tmp))
            results.append(r)
            print_trace(r)
    both = [r for r in results if r["tracelens"] is not None and r["ours"] is not None
            and all("timeline" in t for t in r["tracelens"]["ranks"].values())]
    if both:
        left = [r["trace"] for r in results if r not in both]
        if left:
            print(f"left out of the totals (a tool gave no GPU timeline): {', '.join(left)}")
        tl_s, ours_s = sum(r["tracelens_s"] for r in both), sum(r["ours_s"] for r in both)
        print(f"the {len(both)} traces both tools gave a timeline of: ddltrace {ours_s:.2f} s, TraceLens {tl_s:.2f} s, "
              f"TraceLens / ddltrace {tl_s / ours_s:.2f}x (fresh processes, module imports included; load average "
              f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} CPUs)")
        ours, tl = _sums(both, "ours_steps"), _sums(both, "tracelens_steps")
        print("where the time goes, all traces (s): ddltrace " + ", ".join(f"{k} {v:.2f}" for k, v in ours.items())
              + "; TraceLens " + ", ".join(f"{k} {v:.2f}" for k, v in tl.items()))
        print("  (ddltrace's, in a process apart: read: the Kineto import into a store on disk; analyze: the store "
              "read back and every analysis of `analyze`, without the findings and the JSON; TraceLens' read: "
              "TreePerfAnalyzer.from_file of each rank; collectives: NcclAnalyser, which reads the files again; "
              f"'{UNTIMED}': the benchmark's check, not in TraceLens' wall time)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
