"""The GPU section of ``ddltrace analyze`` (text and ``--json``) and of the report: the figures of
:mod:`ddltrace.analyses.gpu_analysis` for one store, each with its unit, window and definition."""

from __future__ import annotations

import pandas as pd

from ddltrace.analyses.gpu_launch import LAUNCH_DELAY_CUTOFF_NS, RUNTIME_CUTOFF_NS
from ddltrace.analyses.gpu_queue import MAX_QUEUE_LENGTH
from ddltrace.units import format_ns, format_percent

MAX_ROWS = 32
TOP_SHOWN = 5

TEMPORAL = ("Temporal breakdown per device (HTA's definition; window: the device's first work to its last; idle: "
            "no kernel, copy or collective on any stream; compute: compute kernels run; non-compute: only "
            "communication or memory kernels run)")
STREAMS = "Per stream (each stream's own work, against its device's window)"
CLASSES = ("Kernel time by class (sum of kernel durations, concurrent kernels each counted; share of the device's "
           "summed kernel time)")
KERNELS = f"Top {TOP_SHOWN} kernels per rank and device (by summed duration; --json lists the top 10)"
ACROSS = "Kernel time across ranks (summed duration per rank of the kernels with the most time over all ranks)"
OVERLAP = ("Communication-computation overlap (HTA's definition: the share of communication-kernel time during "
           "which a compute kernel also runs on the device)")

LAUNCHES = ("CUDA launch statistics (HTA's definitions; each runtime launch call (cudaLaunchKernel, "
            "cudaMemcpyAsync, cudaMemsetAsync, ...) paired with the kernel, copy or fill of the same correlation id; "
            "CPU: the call's duration; GPU: the activity's; delay: the activity's start minus the call's end, 0 "
            "where negative; "
            f"outliers: CPU above {format_ns(RUNTIME_CUTOFF_NS)}, delay above {format_ns(LAUNCH_DELAY_CUTOFF_NS)}; "
            f"short: CPU at most {format_ns(RUNTIME_CUTOFF_NS)} and GPU below CPU)")
QUEUES = ("Queue length per stream (HTA's definition: operations launched and not yet started, +1 at a launch "
          "call's start, -1 at its activity's start; mean over the changes as HTA, and weighted by time over the "
          f"stream's first to last change; full: time at {MAX_QUEUE_LENGTH} or more, the host blocked in the "
          "launch call; share of the rank's window)")


def _columns(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in column) for column in zip(header, *rows, strict=True)]
    return ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip() for line in [header, *rows]]


def _temporal(table: pd.DataFrame, with_stream: bool) -> pd.DataFrame:
    rows = []
    for _, t in table.iterrows():
        rows.append([t["rank"], t["device"], *([t["stream"]] if with_stream else []), format_ns(t["window_ns"]),
                     *[f"{format_percent(t[f'share_{k}'])} ({format_ns(t[f'{k}_ns'])})"
                       for k in ("idle", "compute", "non_compute")]])
    return pd.DataFrame(rows, columns=["rank", "device", *(["stream"] if with_stream else []), "window", "idle",
                                       "compute", "non-compute"])


def gpu_tables(run, top: int = TOP_SHOWN) -> list[tuple[str, pd.DataFrame]]:
    """The GPU section of one store as (title, table of formatted cells, units in each cell): empty when the
    store has no device work. ``top``: kernels shown per rank and device."""
    gpu = run.gpu
    if not gpu.device_ranks:
        return []
    tables = [(TEMPORAL, _temporal(gpu.temporal_table(), False))]
    if "streams" in run.capabilities:
        tables.append((STREAMS, _temporal(gpu.temporal_table(streams=True), True)))
    classes = gpu.class_table()
    tables.append((CLASSES, pd.DataFrame(
        [[c["rank"], c["device"], c["class"], c["kernels"], format_ns(c["sum_ns"]), format_percent(c["share"])]
         for _, c in classes.iterrows()], columns=["rank", "device", "class", "kernels", "time", "share"])))
    kernels = gpu.kernel_table().groupby(["rank", "device"], sort=False).head(top)
    tables.append((KERNELS.replace(str(TOP_SHOWN), str(top), 1), pd.DataFrame(
        [[k["rank"], k["device"], k["class"] or "-", _cut(k["name"]), k["count"], format_ns(k["sum_ns"]),
          format_ns(k["mean_ns"]), format_percent(k["share"])] for _, k in kernels.iterrows()],
        columns=["rank", "device", "class", "kernel", "count", "time", "mean", "share"])))
    if "device_ranks" in run.capabilities:
        across = gpu.across_ranks(top)
        tables.append((ACROSS, pd.DataFrame(
            [[a["class"], _cut(a["name"]), a["ranks"], format_ns(a["min_ns"]), format_ns(a["median_ns"]),
              format_ns(a["max_ns"]), f"{a['min_rank']} / {a['max_rank']}"] for _, a in across.iterrows()],
            columns=["class", "kernel", "ranks", "min", "median", "max", "rank of min / max"])))
    launches = gpu.launch_table()
    if len(launches):
        tables.append((LAUNCHES, pd.DataFrame(
            [[x["rank"], x["launches"], *[f"{format_ns(x[f'{k}_mean_ns'])} / {format_ns(x[f'{k}_median_ns'])} / "
                                          f"{format_ns(x[f'{k}_max_ns'])}"
                                          for k in ("cpu_duration", "gpu_duration", "launch_delay")],
              format_ns(x["launch_delay_p95_ns"]), x["runtime_outliers"], x["launch_delay_outliers"],
              x["short_kernels"]] for x in launches.to_dict("records")],
            columns=["rank", "launches", "CPU mean / median / max", "GPU mean / median / max",
                     "delay mean / median / max", "delay p95", "CPU outliers", "delay outliers", "short"])))
        queues = gpu.queue_table()
        tables.append((QUEUES, pd.DataFrame(
            [[q["rank"], q["device"], q["stream"], q["changes"], f"{q['mean_hta']:.1f}",
              f"{q['mean_time_weighted']:.1f}", q["max"], q["min"],
              f"{format_ns(q['time_at_max_queue_ns'])} ({format_percent(q['share_at_max_queue'])})"]
             for q in queues.to_dict("records")],
            columns=["rank", "device", "stream", "changes", "mean (HTA)", "mean (time)", "max", "min", "full"])))
    overlap = gpu.overlap_table()
    if len(overlap):
        tables.append((OVERLAP, pd.DataFrame(
            [[o["rank"], o["device"], format_ns(o["comm_ns"]), format_ns(o["overlap_ns"]),
              format_percent(o["overlap"])] for _, o in overlap.iterrows()],
            columns=["rank", "device", "communication", "overlapped", "overlap"])))
    return tables


def render_gpu(run) -> list[str]:
    """The GPU section of one store as text lines (empty when the store has no device work); at most
    :data:`MAX_ROWS` rows per table."""
    tables = gpu_tables(run)
    if not tables:
        return []
    out = ["", f"  GPU of {run.name}: device work on {len(run.gpu.device_ranks)} rank(s)"]
    for title, table in tables:
        rows = [[str(v) for v in row] for row in table.head(MAX_ROWS).itertuples(index=False)]
        out += ["  " + title] + ["    " + line for line in _columns(list(table.columns), rows)]
        if len(table) > MAX_ROWS:
            out.append(f"    ({len(table) - MAX_ROWS} more rows; --json lists them all)")
    return out


def _cut(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def gpu_json(run) -> dict:
    """The GPU figures of one store for ``--json`` (times in ns, shares as fractions); empty when no device."""
    gpu = run.gpu
    if not gpu.device_ranks:
        return {}

    def records(frame: pd.DataFrame) -> list[dict]:
        return frame.to_dict(orient="records")

    return {
        "definitions": {"temporal": TEMPORAL, "streams": STREAMS, "classes": CLASSES,
                        "kernels": "top 10 kernels per rank and device by summed duration, the rest as (others)",
                        "across_ranks": ACROSS, "overlap": OVERLAP, "launches": LAUNCHES, "queues": QUEUES,
                        "worst_launches": "per rank, the 10 launches with the longest launch delay (by: launch_delay) "
                                          "and the 10 with the longest CPU duration (by: cpu_duration), in ns"},
        "device_ranks": gpu.device_ranks,
        "temporal": records(gpu.temporal_table()),
        "temporal_streams": records(gpu.temporal_table(streams=True)) if "streams" in run.capabilities else [],
        "kernel_classes": records(gpu.class_table()),
        "kernels": records(gpu.kernel_table()),
        "kernels_across_ranks": records(gpu.across_ranks()) if "device_ranks" in run.capabilities else [],
        "overlap": records(gpu.overlap_table()),
        "launches": records(gpu.launch_table()),
        "worst_launches": records(gpu.worst_launch_table()),
        "queues": records(gpu.queue_table()),
    }
