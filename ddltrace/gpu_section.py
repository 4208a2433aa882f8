"""The GPU section of ``ddltrace analyze`` (text and ``--json``) and of the report: the figures of
:mod:`ddltrace.analyses.gpu_analysis` for one store, each with its unit, window and definition."""

from __future__ import annotations

import pandas as pd

from ddltrace.analyses.gpu_launch import LAUNCH_DELAY_CUTOFF_NS, RUNTIME_CUTOFF_NS
from ddltrace.analyses.gpu_queue import MAX_QUEUE_LENGTH
from ddltrace.units import format_bytes, format_ns, format_percent, three_digits

MAX_ROWS = 32
TOP_SHOWN = 5

TEMPORAL = ("Temporal breakdown per device (HTA's definition; window: the device's first work to its last; idle: "
            "no kernel, copy or collective on any stream; compute: compute kernels run; non-compute: only "
            "communication or memory kernels run)")
LAUNCHED = ("Temporal breakdown and overlap over the device work launched in the trace (HTA's set: where the "
            "trace names two or more ProfilerSteps, HTA keeps only the kernels, copies and fills whose correlation "
            "id is on a host event), on the devices where some work has no launch in the trace (launched before it "
            "began or by a thread not recorded); window: the first launched work's start to the last's end; "
            "without launch: events and their summed durations, of the device's)")
STREAMS = "Per stream (each stream's own work, against its device's window)"
CLASSES = ("Kernel time by class (sum of kernel durations, concurrent kernels each counted; share of the device's "
           "summed kernel time)")
KERNELS = f"Top {TOP_SHOWN} kernels per rank and device (by summed duration; --json lists the top 10)"
ACROSS = "Kernel time across ranks (summed duration per rank of the kernels with the most time over all ranks)"
OVERLAP = ("Communication-computation overlap (HTA's definition: the share of communication-kernel time during "
           "which a compute kernel also runs on the device)")

#: Each runtime's launch calls, as the launch statistics' title names them.
_CALLS = {"CUDA": "cudaLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync", "HIP": "hipLaunchKernel, hipMemcpyAsync, "
          "hipMemsetAsync"}


def launches_title(runtime: str, none_in_set: bool = False) -> str:
    """The launch statistics' title and definition, named by the ``runtime`` the trace's launch calls are of
    (:func:`~ddltrace.analyses.gpu_launch.runtime_of`: "CUDA", "HIP", "CUDA and HIP"; "" for XPlane's launches,
    host events named after the work they launched); ``none_in_set``: some rank has no launch in HTA's set, only
    left-out ones (:data:`NONE_IN_SET` is added)."""
    calls = ", ".join(_CALLS[r] for r in runtime.split(" and ") if r in _CALLS)
    launch = (f"each runtime launch call ({calls}, ...)" if calls
              else "each launch (the host event named after the kernel or copy it launched)")
    return (f"{runtime or 'GPU'} launch statistics (HTA's definitions; {launch} paired with the kernel, copy or "
            "fill of the same correlation id; CPU: the call's duration; GPU: the activity's; delay: the activity's "
            "start minus the call's end, 0 where negative; "
            f"outliers: CPU above {format_ns(RUNTIME_CUTOFF_NS)}, delay above {format_ns(LAUNCH_DELAY_CUTOFF_NS)}; "
            f"short: CPU at most {format_ns(RUNTIME_CUTOFF_NS)} and GPU below CPU; left out, as HTA's list has "
            "none: graph launches and blocking copies, their calls and the device activities they launched"
            + (NONE_IN_SET if none_in_set else "") + ")")


#: Added to the launch statistics' definition where a rank has no launch in HTA's set.
NONE_IN_SET = ("; 0 launches: every launch of the rank is a graph launch or a blocking copy (JAX runs each jitted "
               "step as a CUDA graph), so there are no CPU, GPU or delay figures (none), only what is left out")


def _none_in_set(launches: pd.DataFrame) -> bool:
    """Whether some rank of the launch statistics has 0 launches of HTA's set (only left-out ones)."""
    return bool(len(launches)) and bool((launches["launches"] == 0).any())


def _launch_row(x: dict) -> list:
    """A rank's launch statistics as the table's cells; a rank of 0 launches (all left out) reads "none" where the
    figures of its launches would be, not the NaN of an empty set's mean."""
    if not x["launches"]:
        return [x["rank"], 0, "none", "none", "none", "-", "-", "-", "-", _left_out(x)]
    return [x["rank"], x["launches"], *[f"{format_ns(x[f'{k}_mean_ns'])} / {format_ns(x[f'{k}_median_ns'])} / "
                                        f"{format_ns(x[f'{k}_max_ns'])}"
                                        for k in ("cpu_duration", "gpu_duration", "launch_delay")],
            format_ns(x["launch_delay_p95_ns"]), x["runtime_outliers"], x["launch_delay_outliers"],
            x["short_kernels"], _left_out(x)]


def _left_out(row: dict) -> str:
    """A launch row's graph launches and blocking copies left out: "N calls, M activities", or "-"."""
    calls = row.get("left_out_calls")
    if not calls or calls != calls:  # none, or a table made before the columns (NaN)
        return "-"
    activities = int(row["left_out_activities"])
    return f"{int(calls)} call{'s' if calls != 1 else ''}, {activities} activit{'ies' if activities != 1 else 'y'}"


def _runtime(launches: pd.DataFrame) -> str:
    """The runtime of every rank's launches (:func:`~ddltrace.analyses.gpu_launch.runtime_of` over them all)."""
    named = {r for cell in launches["runtime"] for r in str(cell).split(" and ") if r}
    return " and ".join(sorted(named))


QUEUES = ("Queue length per stream (HTA's definition: operations launched and not yet started, +1 at a launch "
          "call's start, -1 at its activity's start, the launches the launch statistics count (graph launches and "
          "blocking copies left out); mean over the changes as HTA, and weighted by time over the "
          f"stream's first to last change; full: time at {MAX_QUEUE_LENGTH} or more, the host blocked in the "
          "launch call; share of the rank's window)")
IDLE = ("GPU idle time waiting for the host (each idle gap of the device, up to the end of the launch call of the "
        "work that ends it: the device had nothing queued; other: the rest of the idle time; unlinked: gaps ended by "
        "work with no correlated launch; share of the device's window; of the host wait, under 1 ms: in gaps whose "
        "host wait is under 1 ms, the host's overhead between launches; longer: where the host was in the rest, by "
        "its lanes: in a collective / synchronising / in a CPU op / in none, each instant to the first that holds "
        "it; top CPU op: the op overlapping them most)")
LONG_WAITS = ("long_in_comm_ns", "long_in_sync_ns", "long_in_ops_ns", "long_outside_ns")
STREAM_IDLE = ("Idle time per stream (HTA's idle-time breakdown: each gap between two items of work on the stream; "
               "host wait where the second's launch call started after the first ended, kernel wait where not and "
               "the gap is under 30 us, other the rest; share of the stream's idle time)")
STREAM_IDLE_LAUNCHED = ("The same over the work launched in the trace (HTA's set: the device work a host event's "
                        "correlation id names, on the ranks where some has no launch in the trace)")
COLLECTIVES = ("Collectives by kind (communication kernels, matched across ranks by process group, step and order; "
               "time: the instances' durations summed, each the shortest kernel of the instance, the late arriver's, "
               "but a broadcast's or reduce's whose kernels did not all overlap (NCCL's chain from or to the root): "
               "latest end minus latest start, when the data had reached every rank (duration from); "
               "bus bandwidth (nccl-tests): bytes / duration x 2(n-1)/n for all-reduce, (n-1)/n for all-gather, "
               "reduce-scatter and all-to-all, 1 for broadcast, reduce and point-to-point, n the world size; skew: "
               "latest minus earliest start of a matched instance; wait: the early arrivers' summed wait; skew and "
               "wait '-' where no instance was matched; bytes '-' where the trace gives no size nccl-tests' can take: "
               "c10d's nccl:_all_gather_base span gives one rank's share, not its group's size)")
LATE = ("Late arrivals at the collectives (per rank: the matched instances it started last at, and the wait of the "
        "other ranks' kernels for it, summed over the instances: collectives that wait at once count each, so it "
        "can exceed the wall time)")
COPIES = ("Memory copies per direction (name says the direction; time: summed durations; bytes: of the copies whose "
          "size the trace gives, '(n of N)' where some have none; bandwidth: those bytes / those copies' summed "
          "duration; mean: of each copy's bytes / duration; peak: of the summed bandwidth of concurrent "
          "copies over time; vs calibrated: against the profile's pinned host-device copy bandwidth)")
OPERATORS = (f"Device time by the host operator that launched it (the top {TOP_SHOWN} per rank by self time; self: the "
             "kernels, copies and fills whose launch call's innermost enclosing row is one of that name, time "
             "summed; total: those launched inside one at any depth; share: of the rank's device time with a "
             "launch in the trace)")
NVML = ("NVML counters in each device's window in the trace (the sampler's gpuI_ counters of the machine, GPU I = "
        "device gpu:I; samples taken from the device's first work to its last; trace busy: the union of its work "
        "over that window, what NVML's utilisation samples; on a device several ranks share, their busy times "
        "over their windows, summed, not the union across them)")
#: NVML averages its utilisation over a sample period of 1/6 s to 1 s (by product: nvmlDeviceGetUtilizationRates);
#: over a device window shorter than two of the longest the window's edges weigh in its mean (on an H100: 20 points
#: off over 0.83 s, 1.7 over 1.6 s, 0.9 over 3.2 s).
NVML_WINDOW_MIN_NS = 2_000_000_000
NVML_SHORT = ("; a window under 2 s: NVML averages utilisation over its own sample period (1/6 s to 1 s by "
              "product), so the samples near the window's edges also hold time outside it (on an H100: 53.8 % "
              "against 73.7 % busy over 0.83 s, 19.7 % against 18.8 % over 3.2 s)")


def copy_bandwidths(path: str) -> dict[str, float] | None:
    """The calibrated host-to-device and device-to-host copy bandwidths (bytes/s; ``gpu0_h2d`` and ``gpu0_d2h``
    of ``ddltrace calibrate``'s profile at ``path``) as {"H2D": ..., "D2H": ...}; None when it has neither."""
    from ddltrace.models.quantities import load_json, profile_constants

    constants = profile_constants(load_json(path, "hardware profile"), path)
    found = {d: float(constants[k]) for d, k in (("H2D", "gpu0_h2d"), ("D2H", "gpu0_d2h"))
             if isinstance(constants.get(k), float) and constants[k] > 0}
    return found or None


def _copy_bytes(row: dict) -> str:
    """A copy row's bytes, with how many of its copies they are of where the trace sizes only some."""
    if row["bytes"] is None or row["bytes"] != row["bytes"]:
        return "-"
    text = format_bytes(row["bytes"])
    return text if row["sized"] == row["copies"] else f"{text} ({row['sized']} of {row['copies']})"


def _rate(bytes_per_s: float) -> str:
    """'12.3 GB/s', '-' where unknown."""
    return "-" if bytes_per_s != bytes_per_s else f"{three_digits(bytes_per_s / 1e9)} GB/s"


def _duration_from(definitions: pd.Series) -> str:
    """The definition of a kind's instances' durations (``duration_from``), or where they have two, each with its
    count, the chain's last: 'shortest kernel (2), chain (6)'."""
    from ddltrace.analyses.gpu_collectives import CHAIN

    counts = definitions.value_counts()
    if len(counts) == 1:
        return str(counts.index[0])
    return ", ".join(f"{'chain' if name == CHAIN else name} ({n})"
                     for name, n in sorted(counts.items(), key=lambda item: item[0] == CHAIN))


def collective_tables(instances: pd.DataFrame, title: str = COLLECTIVES,
                      late_title: str = LATE) -> list[tuple[str, pd.DataFrame]]:
    """The collectives' summary by kind and the late arrivals of the ``instances`` (:func:`~ddltrace.analyses.
    gpu_collectives.match_instances`), as (title, table) pairs; none where there are no instances."""
    from ddltrace.analyses.gpu_collectives import late_arrivals, summary

    if not len(instances):
        return []
    rows = []
    definitions = instances.groupby(["collective", "algorithm"], sort=True)["duration_from"].agg(_duration_from)
    for _, c in summary(instances).iterrows():
        rows.append([c["collective"], c["algorithm"] or "-", c["instances"], c["matched"], format_ns(c["time_ns"]),
                     "-" if c["bytes"] is None or c["bytes"] != c["bytes"] else format_bytes(c["bytes"]),
                     f"{_rate(c['busbw_median'])} / {_rate(c['busbw_max'])}",
                     "-" if c["busbw_vs_link_median"] != c["busbw_vs_link_median"]
                     else format_percent(c["busbw_vs_link_median"]),
                     "-" if not c["matched"] else f"{format_ns(c['skew_median_ns'])} / {format_ns(c['skew_max_ns'])}",
                     format_ns(c["wait_ns"]) if c["matched"] else "-",  # no instance matched: no wait measured
                     definitions[(c["collective"], c["algorithm"])]])
    tables = [(title, pd.DataFrame(rows, columns=[
        "collective", "algorithm", "instances", "matched", "time", "bytes", "busbw median / max", "busbw vs link",
        "skew median / max", "wait", "duration from"]))]
    late = late_arrivals(instances)
    if len(late):
        tables.append((late_title, pd.DataFrame(
            [[x["rank"], f"{x['late']} of {x['instances']}", format_ns(x["caused_wait_ns"])]
             for x in late.to_dict("records")], columns=["rank", "arrived last", "others' wait (summed)"])))
    return tables


def _nvml(run) -> pd.DataFrame:
    from ddltrace.analyses.gpu_counters import COLUMNS, joined

    if "nvml" not in run.capabilities:
        return pd.DataFrame(columns=COLUMNS)
    return joined(run.nvml, run.gpu.temporal_table())


def _counter(value: float, unit: str) -> str:
    if value != value:
        return "-"
    if unit == "bytes":
        return format_bytes(value)
    if unit == "bytes/s":
        return _rate(value)
    return f"{value:.4g} {unit}"


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


def _launched(table: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for t in table.to_dict("records"):
        kept = t["window_ns"] == t["window_ns"]  # NaN where none of the device's work is kept
        shares = [f"{format_percent(t[f'share_{k}'])} ({format_ns(t[f'{k}_ns'])})"
                  for k in ("idle", "compute", "non_compute")] if kept else ["-"] * 3
        overlap = format_percent(t["overlap"]) if kept and t["overlap"] == t["overlap"] else "-"
        rows.append([t["rank"], t["device"], f"{t['unlaunched_events']} of {t['events']} ("
                     f"{format_ns(t['unlaunched_ns'])} of {format_ns(t['work_ns'])})",
                     format_ns(t["window_ns"]) if kept else "-", *shares, overlap])
    return pd.DataFrame(rows, columns=["rank", "device", "without launch", "window", "idle", "compute", "non-compute",
                                       "overlap"])


def gpu_tables(run, top: int = TOP_SHOWN) -> list[tuple[str, pd.DataFrame]]:
    """The GPU section of one store as (title, table of formatted cells, units in each cell): empty when the
    store has no device work. ``top``: kernels shown per rank and device."""
    gpu = run.gpu
    if not gpu.device_ranks:
        return []
    tables = [(TEMPORAL, _temporal(gpu.temporal_table(), False))]
    launched = gpu.launched_table()
    if len(launched):
        tables.append((LAUNCHED, _launched(launched)))
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
        tables.append((launches_title(_runtime(launches), _none_in_set(launches)), pd.DataFrame(
            [_launch_row(x) for x in launches.to_dict("records")],
            columns=["rank", "launches", "CPU mean / median / max", "GPU mean / median / max",
                     "delay mean / median / max", "delay p95", "CPU outliers", "delay outliers", "short",
                     "left out"])))
        operators = gpu.operator_table().groupby("rank", sort=False).head(top)
        tables.append((OPERATORS.replace(f"top {TOP_SHOWN}", f"top {top}", 1), pd.DataFrame(
            [[o["rank"], _cut(o["name"]), o["calls"], o["self_work"], format_ns(o["self_ns"]), format_ns(o["total_ns"]),
              format_percent(o["self_share"])] for o in operators.to_dict("records")],
            columns=["rank", "operator", "calls", "launched", "self", "total", "share"])))
        queues = gpu.queue_table()
        if len(queues):  # (none where every rank's launches are left out of HTA's set)
            tables.append((QUEUES, pd.DataFrame(
                [[q["rank"], q["device"], q["stream"], q["changes"], f"{q['mean_hta']:.1f}",
                  f"{q['mean_time_weighted']:.1f}", q["max"], q["min"],
                  f"{format_ns(q['time_at_max_queue_ns'])} ({format_percent(q['share_at_max_queue'])})"]
                 for q in queues.to_dict("records")],
                columns=["rank", "device", "stream", "changes", "mean (HTA)", "mean (time)", "max", "min", "full"])))
    if gpu.linked_ranks:
        idle = gpu.idle_table()
        tables.append((IDLE, pd.DataFrame(
            [[i["rank"], i["device"], format_ns(i["window_ns"]), format_ns(i["idle_ns"]),
              f"{format_ns(i['host_wait_ns'])} ({format_percent(i['share_host_wait'])})", format_ns(i["other_ns"]),
              format_ns(i["unlinked_ns"]), f"{i['host_wait_gaps']} of {i['gaps']}", format_ns(i["host_wait_short_ns"]),
              " / ".join(format_ns(i[k]) for k in LONG_WAITS),
              f"{i['long_top_op']} ({format_ns(i['long_top_op_ns'])})" if i["long_top_op_ns"] else "-"]
             for i in idle.to_dict("records")],
            columns=["rank", "device", "window", "idle", "host wait", "other", "unlinked", "gaps with host wait",
                     "under 1 ms", "longer: collective / sync / CPU op / none", "top CPU op"])))
    for title, stream_idle in ((STREAM_IDLE, gpu.stream_idle_table()),
                               (STREAM_IDLE_LAUNCHED, gpu.stream_idle_launched_table())):
        if len(stream_idle):
            tables.append((title, pd.DataFrame(
                [[i["rank"], i["device"], i["stream"], i["idle_category"].replace("_", " "), format_ns(i["idle_ns"]),
                  i["intervals"], format_percent(i["share"])] for i in stream_idle.to_dict("records")],
                columns=["rank", "device", "stream", "category", "idle", "gaps", "share"])))
    tables.extend(collective_tables(run.collectives()))
    copies = gpu.copy_table(run.copy_bytes_per_s)
    if len(copies):
        tables.append((COPIES, pd.DataFrame(
            [[c["rank"], c["device"], c["direction"], c["copies"], format_ns(c["time_ns"]),
              _copy_bytes(c),
              _rate(c["bandwidth"]), _rate(c["mean_bandwidth"]), _rate(c["peak_bandwidth"]),
              "-" if c["vs_pcie"] != c["vs_pcie"] else format_percent(c["vs_pcie"])]
             for c in copies.to_dict("records")],
            columns=["rank", "device", "direction", "copies", "time", "bytes", "bandwidth", "mean", "peak",
                     "vs calibrated"])))
    nvml = _nvml(run)
    if len(nvml):
        short = nvml["window_ns"] < NVML_WINDOW_MIN_NS
        tables.append((NVML + (NVML_SHORT if short.any() else ""), pd.DataFrame(
            [[n["device"], n["counter"], n["samples"], *[_counter(n[k], n["unit"]) for k in ("mean", "min", "max")],
              format_percent(n["trace_busy_share"])] for n in nvml.to_dict("records")],
            columns=["device", "counter", "samples", "mean", "min", "max", "trace busy"])))
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
    return render_tables(f"GPU of {run.name}: device work on {len(run.gpu.device_ranks)} rank(s)", tables)


def render_tables(heading: str, tables: list[tuple[str, pd.DataFrame]]) -> list[str]:
    """A section of (title, table) pairs as text lines under ``heading``; at most :data:`MAX_ROWS` rows per
    table."""
    out = ["", f"  {heading}"]
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
    from ddltrace.analyses.gpu_collectives import late_arrivals
    from ddltrace.json_output import records

    gpu = run.gpu
    if not gpu.device_ranks:
        return {}

    return {
        "definitions": {"temporal": TEMPORAL, "launched": LAUNCHED + "; times in ns, shares as fractions",
                        "streams": STREAMS, "classes": CLASSES,
                        "kernels": "top 10 kernels per rank and device by summed duration, the rest as (others)",
                        "across_ranks": ACROSS, "overlap": OVERLAP,
                        "launches": launches_title(_runtime(gpu.launch_table()), _none_in_set(gpu.launch_table())),
                        "queues": QUEUES,
                        "worst_launches": "per rank, the 10 launches with the longest launch delay (by: launch_delay) "
                                          "and the 10 with the longest CPU duration (by: cpu_duration), in ns",
                        "idle": IDLE, "idle_streams": STREAM_IDLE + "; times in ns, shares as fractions",
                        "idle_streams_launched": STREAM_IDLE_LAUNCHED,
                        "collectives": COLLECTIVES + "; one row per instance, times in ns, bandwidths "
                        "in bytes/s", "late_arrivals": LATE, "copies": COPIES + "; bandwidths in bytes/s",
                        "nvml": NVML + "; values in the unit column",
                        "operators": OPERATORS.replace(f"the top {TOP_SHOWN} per rank by self time", "every operator "
                                                       "with device time, the most self time first") + "; times in ns"},
        "device_ranks": gpu.device_ranks,
        "temporal": records(gpu.temporal_table()),
        "temporal_launched": records(gpu.launched_table()),
        "temporal_streams": records(gpu.temporal_table(streams=True)) if "streams" in run.capabilities else [],
        "kernel_classes": records(gpu.class_table()),
        "kernels": records(gpu.kernel_table()),
        "kernels_across_ranks": records(gpu.across_ranks()) if "device_ranks" in run.capabilities else [],
        "overlap": records(gpu.overlap_table()),
        "launches": records(gpu.launch_table()),
        "worst_launches": records(gpu.worst_launch_table()),
        "queues": records(gpu.queue_table()),
        "idle": records(gpu.idle_table()) if gpu.linked_ranks else [],
        "idle_streams": records(gpu.stream_idle_table()),
        "idle_streams_launched": records(gpu.stream_idle_launched_table()),
        "collectives": records(run.collectives()),
        "late_arrivals": records(late_arrivals(run.collectives())),
        "copies": records(gpu.copy_table(run.copy_bytes_per_s)),
        "nvml": records(_nvml(run)),
        "operators": records(gpu.operator_table()),
    }
