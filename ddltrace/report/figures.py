"""The report's figures, drawn with matplotlib (Agg, no display needed).

Every figure uses :data:`CATEGORY_COLORS`, so a category has the same colour everywhere, and labels its axes
with units. Functions return a :class:`matplotlib.figure.Figure`; :func:`png_bytes` turns one into PNG bytes.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ddltrace.analyses.breakdown import BUSY  # noqa: E402  (compute, io, memcpy: what ranks the slowest)
from ddltrace.timeline import CATEGORIES  # noqa: E402
from ddltrace.units import format_ns  # noqa: E402

#: One colour per category, the same in every figure (colour-blind friendly where it matters:
#: compute, wait and barrier are told apart by hue and lightness).
CATEGORY_COLORS: dict[str, str] = {
    "compute": "#4C72B0",
    "comm": "#55A868",
    "wait": "#DD8452",
    "barrier": "#C44E52",
    "io": "#8172B3",
    "memcpy": "#937860",
    "idle": "#E5E5E5",
    "other": "#8C8C8C",
}
#: Categories in the order they are stacked (IPM's view first).
STACK_ORDER = ("compute", "barrier", "wait", "io", "comm", "memcpy", "other", "idle")
#: Columns of a timeline row: each shows the category that filled most of its time.
PIXEL_COLUMNS = 1600

plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "figure.dpi": 100})


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (and the figure closed)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _legend(ax, categories) -> None:
    handles = [Patch(color=CATEGORY_COLORS[c], label=c) for c in categories]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def shares_figure(table: pd.DataFrame, title: str) -> Figure:
    """Per-rank stacked shares of time per category (IPM's view, paper 002 figure 5).

    ``table`` is a breakdown table (one row per rank, ``share_<category>`` columns as fractions).
    """
    ranks = [int(r) for r in table.index]
    used = [c for c in STACK_ORDER if f"share_{c}" in table and table[f"share_{c}"].sum() > 0]
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.02 * len(ranks) + 2.6))
    x = np.arange(len(ranks))
    bottom = np.zeros(len(ranks))
    for c in used:
        values = table[f"share_{c}"].to_numpy(dtype=float) * 100
        ax.bar(x, values, bottom=bottom, color=CATEGORY_COLORS[c], width=0.85 if len(ranks) < 64 else 1.0)
        bottom += values
    ax.set_xlabel("rank")
    ax.set_ylabel("share of the rank's time (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    step = max(1, len(ranks) // 16)
    ax.set_xticks(x[::step], [str(r) for r in ranks[::step]])
    _legend(ax, used)
    return fig


def category_columns(edges: np.ndarray, codes: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The category (index into CATEGORIES) holding the most time in each column between ``grid`` points (ns).

    ``edges``/``codes`` give one category per segment (from ``classify``); a column with no recorded time gets -1.
    Exact in time, whatever the density: a column shows what filled most of it.
    """
    if not len(codes):
        return np.full(len(grid) - 1, -1)
    widths = np.diff(edges).astype(float)
    share = np.zeros((len(CATEGORIES), len(grid) - 1))
    for code in np.unique(codes):
        covered = np.concatenate([[0.0], np.cumsum(np.where(codes == code, widths, 0.0))])
        at_grid = np.interp(grid, edges.astype(float), covered)
        share[int(code)] = np.diff(at_grid)
    best = share.argmax(axis=0)
    return np.where(share.max(axis=0) > 0, best, -1)


def timeline_figure(rank_rows: dict[int, np.ndarray], window: tuple[int, int], title: str,
                    marks: dict[str, float] | None = None, row_marks: dict[int, float] | None = None) -> Figure:
    """Per-rank timeline (TAU / Vampir's view, paper 002 figures 6-8) over ``window`` (ns).

    ``rank_rows`` maps a rank to its row of :data:`PIXEL_COLUMNS` columns over ``window``, each the category
    (index into CATEGORIES; -1: nothing recorded) that filled most of its time (:func:`category_columns` of the
    rank's segments from :func:`ddltrace.analyses.breakdown.classify`), so 64+ ranks of dense traces stay readable
    and cheap to draw, and a rank's events need not be held to draw it. ``marks`` draws labelled vertical lines (ns),
    ``row_marks`` a black tick on each rank's own row (ns, by rank).
    """
    lo, hi = window
    ranks = sorted(rank_rows)
    palette = np.array([matplotlib.colors.to_rgba(CATEGORY_COLORS[c]) for c in CATEGORIES] + [(1, 1, 1, 0)])
    image = np.empty((len(ranks), PIXEL_COLUMNS), dtype=int)
    for row, rank in enumerate(ranks):
        image[row] = rank_rows[rank]
    height = min(9.0, 1.4 + 0.22 * len(ranks))
    fig, ax = plt.subplots(figsize=(9, height))
    span_ms = (hi - lo) / 1e6
    if len(ranks):
        ax.imshow(palette[image], aspect="auto", interpolation="nearest", extent=(0, span_ms, len(ranks) - 0.5, -0.5))
    if 1 < len(ranks) <= 32:  # thin gaps between the rows while they are tall enough to show them
        ax.hlines(np.arange(len(ranks) - 1) + 0.5, 0, span_ms, colors="white", linewidth=1.5)
    for label, t in (marks or {}).items():
        ax.axvline((t - lo) / 1e6, color="black", linestyle="--", linewidth=0.8)
        ax.text((t - lo) / 1e6, -0.5, f" {label}", fontsize=8, va="top",  # inside the axes, clear of the title
                bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0, "pad": 1})
    for row, rank in enumerate(ranks):
        if rank in (row_marks or {}):
            ax.vlines((row_marks[rank] - lo) / 1e6, row - 0.45, row + 0.45, colors="black", linewidth=2)
    ax.set_xlim(0, span_ms)
    ax.set_ylim(len(ranks) - 0.5, -0.5)
    step = max(1, len(ranks) // 24)
    ax.set_yticks(range(0, len(ranks), step), [str(r) for r in ranks[::step]])
    ax.set_xlabel(f"time since {lo / 1e9:.3f} s on the run's clock (ms)")
    ax.set_ylabel("rank")
    ax.set_title(title)
    seen = set(np.unique(image[image >= 0]).tolist()) if len(ranks) else set()
    _legend(ax, [c for c in STACK_ORDER if CATEGORIES.index(c) in seen])
    return fig


def scaling_figure(series: pd.DataFrame, knee: float | None = None, model: pd.DataFrame | None = None) -> Figure:
    """Phase times against workers (paper 002 figure 9), measured beside the model when given.

    ``series`` has columns workers, startup_s (MPI's start-up), job_init_s (the job's own initialisation), steady_s,
    total_s (seconds, one row per run); ``model`` some of them predicted; ``knee`` the predicted w* (workers).
    """
    fig, ax = plt.subplots(figsize=(7, 3.6))
    styles = {"startup_s": ("MPI start-up", "#DD8452"), "job_init_s": ("initialisation (the job's)", "#C44E52"),
              "steady_s": ("steady state", "#4C72B0"), "total_s": ("whole run", "#333333")}
    for column, (label, colour) in styles.items():
        ax.plot(series["workers"], series[column], "o-", color=colour, label=f"{label} (measured)")
        if model is not None and column in model:
            ax.plot(model["workers"], model[column], "--", color=colour, label=f"{label} (model)")
    if knee:
        ax.axvline(knee, color="black", linestyle=":", linewidth=1)
        ax.text(knee, ax.get_ylim()[1], f" knee w* = {knee:.3g}", va="top", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(series["workers"], [str(int(w)) for w in series["workers"]])
    ax.set_xlabel("workers w")
    ax.set_ylabel("time (s)")
    ax.set_title("Phase times against workers")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def efficiency_figure(series: pd.DataFrame, r_o: float) -> Figure:
    """Measured parallel efficiency of the steady state against workers (``series``' ``efficiency_steady``, a
    fraction, against its first row's run) beside Chang's Lemma 3.1 from the overhead ratio ``r_o`` (a fraction)
    of that run, E(w) / E(w0) with E(N) = 1 / (1 + (N - 1) R_O), as ``ddltrace analyze`` computes both."""
    from ddltrace.analyses.scaling import lemma_efficiency

    fig, ax = plt.subplots(figsize=(7, 3.2))
    w0 = max(float(series["workers"].iloc[0]), 1.0)
    measured = series["efficiency_steady"].to_numpy(dtype=float) * 100
    w = np.geomspace(series["workers"].min(), series["workers"].max(), 50)
    ax.plot(series["workers"], measured, "o-", color="#4C72B0", label="measured (steady state)")
    ax.plot(w, 100 * lemma_efficiency(r_o, w) / lemma_efficiency(r_o, w0), "--", color="#555555",
            label=f"Lemma 3.1, R_O = {100 * r_o:.1f} %")
    ax.set_xscale("log", base=2)
    ax.set_xticks(series["workers"], [str(int(w)) for w in series["workers"]])
    ax.set_xlabel("workers w")
    ax.set_ylabel("parallel efficiency (%)")
    ax.set_ylim(0, max(110.0, 1.08 * float(np.nanmax(measured))))  # superlinear runs stay in the picture
    ax.set_title(f"Steady-state efficiency relative to w = {int(w0)}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


#: Categories in the order the average-and-slowest bars stack them: busy time (what ranks "slowest") first.
BUSY_FIRST = (*BUSY, "comm", "wait", "barrier", "other", "idle")


def average_slowest_figure(table: pd.DataFrame, title: str) -> Figure:
    """The average worker beside the slowest, time per category (RALP, paper 003 figure 2).

    ``table`` has two rows (average, slowest) and one column per category in ns. The slowest is the worker with
    the most busy time (compute + io + memcpy) in the phase, the one whose work the others wait for: its whole bar
    may well be shorter than the average's (it waits less), so the busy categories are stacked first and a black tick
    marks where each bar's busy time ends, labelled with it.
    """
    used = [c for c in BUSY_FIRST if c in table and table[c].sum() > 0]
    fig, ax = plt.subplots(figsize=(7, 2.6))
    y = np.arange(len(table))
    left = np.zeros(len(table))
    for c in used:
        values = table[c].to_numpy(dtype=float) / 1e6
        ax.barh(y, values, left=left, color=CATEGORY_COLORS[c], height=0.6)
        left += values
    busy = table[[c for c in BUSY if c in table]].sum(axis=1).to_numpy(dtype=float) / 1e6
    for row, value in zip(y, busy, strict=True):
        ax.plot([value, value], [row - 0.38, row + 0.38], color="black", linewidth=2)
        ax.text(value, row - 0.4, f"busy {format_ns(value * 1e6)}", fontsize=8, va="bottom", ha="center")
    labels = [str(label) + ("\n(most busy time)" if str(label).startswith("slowest") else "\n(mean of the workers)")
              for label in table.index]
    ax.set_yticks(y, labels)
    ax.set_ylim(len(table) - 0.5, -0.75)
    ax.set_xlabel("time in the phase (ms); busy = compute + io + memcpy, stacked first")
    ax.set_title(title)
    _legend(ax, used)
    return fig


def histogram_figure(values: np.ndarray, xlabel: str, title: str, bound: float | None = None,
                     bound_label: str = "", counted: str = "count") -> Figure:
    """A histogram of integer values (e.g. staleness in updates, Rudra figure 4), with an optional bound;
    ``counted``: what the bars count (the y axis' unit, e.g. "gradients")."""
    fig, ax = plt.subplots(figsize=(7, 3.0))
    values = np.asarray(values)
    if len(values):
        bins = np.arange(values.min(), values.max() + 2) - 0.5
        ax.hist(values, bins=bins, color="#4C72B0")
    if bound is not None:
        ax.axvline(bound, color="#C44E52", linestyle="--")
        ax.text(bound, ax.get_ylim()[1], f" {bound_label}", va="top", fontsize=8, color="#C44E52")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(counted)
    ax.set_title(title)
    return fig


def curve_figure(curves: dict[str, tuple[np.ndarray, np.ndarray]], xlabel: str, ylabel: str, title: str,
                 vlines: dict[str, float] | None = None) -> Figure:
    """Curves on log-log axes (e.g. C_muladd against segment size, with the cache sizes marked)."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for label, (x, y) in curves.items():
        ax.plot(x, y, "o-", markersize=3, label=label)
    for label, x in (vlines or {}).items():
        ax.axvline(x, color="#999999", linestyle=":", linewidth=1)
        ax.text(x, ax.get_ylim()[1] if ax.lines else 1, f" {label}", va="top", fontsize=8, color="#555555")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if curves:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


#: The queue figure draws at most this many streams, those with the longest queues.
QUEUE_STREAMS = 8


def queue_figure(series: pd.DataFrame, cap: int, title: str, streams: int = QUEUE_STREAMS) -> Figure:
    """Queue length per stream over time (a step function; ``series`` as
    :func:`~ddltrace.analyses.gpu_queue.queue_length_series` gives it), the ``streams`` with the longest queues;
    the launch queue's capacity ``cap`` is drawn where a stream comes within half of it."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    t0 = int(series["t_ns"].min())
    longest = series.groupby(["device", "stream"])["queue_length"].max().sort_values(ascending=False)
    for device, stream in longest.index[:streams]:
        part = series[(series["device"] == device) & (series["stream"] == stream)]
        ax.step((part["t_ns"].to_numpy() - t0) / 1e9, part["queue_length"].to_numpy(), where="post", linewidth=0.8,
                label=f"{device}/{stream}")
    if len(longest) and longest.iloc[0] >= cap / 2:
        ax.axhline(cap, color="#999999", linestyle=":", linewidth=1)
        ax.text(0, cap, f" full ({cap})", va="bottom", fontsize=8, color="#555555")
    ax.set_xlabel("time since the first launch (s)")
    ax.set_ylabel("operations queued")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return fig


def _label_device_rows(ax, table: pd.DataFrame, xlabel: str, title: str) -> None:
    """Name the bars of ``ax``, one row per device of ``table`` at y = 0, 1, ... (its rank and device), the first
    at the top; set the x label and title, and put the legend outside, on the right."""
    ax.set_yticks(np.arange(len(table)), [f"{r} {d}" for r, d in zip(table["rank"], table["device"], strict=True)])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def gpu_idle_figure(temporal: pd.DataFrame, idle: pd.DataFrame | None) -> Figure:
    """Per device (rank and device), its window split into compute, non-compute, idle waiting for the host and
    other idle (ms); ``temporal`` and ``idle`` as :mod:`~ddltrace.analyses.gpu_temporal` and
    :mod:`~ddltrace.analyses.gpu_idle` give them, one row per device in the same order. ``idle`` None: the host
    wait was not measured (no correlation ids), the idle time is drawn as one, not as a host wait of 0."""
    measured = idle is not None
    merged = (temporal.merge(idle[["rank", "device", "host_wait_ns"]], on=["rank", "device"], how="left").fillna(0)
              if measured else temporal.assign(host_wait_ns=0))
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.35 * len(merged)))
    y = np.arange(len(merged))
    left = np.zeros(len(merged))
    parts = (("compute", merged["compute_ns"], CATEGORY_COLORS["compute"]),
             ("non-compute (comm, copies)", merged["non_compute_ns"], CATEGORY_COLORS["comm"]),
             *((("idle: waiting for the host", merged["host_wait_ns"], "#C44E52"),) if measured else ()),
             ("idle: other" if measured else "idle", merged["idle_ns"] - merged["host_wait_ns"],
              CATEGORY_COLORS["idle"]))
    for label, values, color in parts:
        width = values.to_numpy(float) / 1e6
        ax.barh(y, width, left=left, color=color, label=label)
        left += width
    _label_device_rows(ax, merged, "time in the device's window (ms)",
                       "GPU time per device: busy, and idle waiting for the host" if measured
                       else "GPU time per device: busy and idle")
    return fig


def gpu_overlap_figure(overlap: pd.DataFrame) -> Figure:
    """Per device, its communication-kernel time overlapped by compute kernels and exposed (ms)."""
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.35 * len(overlap)))
    y = np.arange(len(overlap))
    hidden = overlap["overlap_ns"].to_numpy(float) / 1e6
    exposed = (overlap["comm_ns"] - overlap["overlap_ns"]).to_numpy(float) / 1e6
    ax.barh(y, hidden, color=CATEGORY_COLORS["compute"], label="overlapped by compute kernels")
    ax.barh(y, exposed, left=hidden, color=CATEGORY_COLORS["comm"], label="exposed")
    _label_device_rows(ax, overlap, "communication-kernel time (ms)", "Communication kernels: overlapped and exposed")
    return fig


def operator_figure(operators: pd.DataFrame, most: int = 12) -> Figure:
    """The ``most`` operators with the most device time launched by themselves, summed over the ranks (ms; ``operators``
    as :func:`~ddltrace.analyses.gpu_operators.by_operator` gives them, every rank's), the time launched inside them
    at any depth beside it."""
    sums = operators.groupby("name", sort=False)[["self_ns", "total_ns"]].sum()
    top = sums.sort_values(["self_ns", "total_ns"], ascending=False, kind="stable").head(most).iloc[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.3 * len(top)))
    y = np.arange(len(top))
    ax.barh(y, top["total_ns"].to_numpy(float) / 1e6, color="#D9D9D9", label="total: launched inside it, any depth")
    ax.barh(y, top["self_ns"].to_numpy(float) / 1e6, color=CATEGORY_COLORS["compute"], label="self: launched by it")
    ax.set_yticks(y, [name if len(name) <= 48 else name[:45] + "..." for name in top.index], fontsize=7)
    ax.set_xlabel("device time (ms, kernels' durations summed, all ranks)")
    ax.set_title("Device time by the operator that launched it")
    ax.legend(loc="lower right", frameon=False, fontsize=8)
    return fig


def collective_skew_figure(instances: pd.DataFrame) -> Figure:
    """Each collective matched across ranks: its start skew (ms) against when it started (s since the first),
    coloured by the rank that started last."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    t0 = int(instances["first_start_ns"].min())
    for rank, part in instances.groupby("late_rank", sort=True):
        ax.scatter((part["first_start_ns"].to_numpy(float) - t0) / 1e9, part["skew_ns"].to_numpy(float) / 1e6, s=12,
                   label=f"rank {int(rank)} last")
    ax.set_xlabel("time since the first collective (s)")
    ax.set_ylabel("start skew across ranks (ms)")
    ax.set_title("Collectives: start skew, coloured by the late rank")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return fig


def busbw_figure(instances: pd.DataFrame, link_bytes_per_s: float | None) -> Figure:
    """Each collective of known size: its bus bandwidth (GB/s) against its size (bytes, log), per collective, and
    the calibrated link's bandwidth where one is given."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for kind, part in instances.groupby("collective", sort=True):
        ax.scatter(part["bytes"].to_numpy(float), part["busbw"].to_numpy(float) / 1e9, s=12, label=kind)
    if link_bytes_per_s:
        ax.axhline(link_bytes_per_s / 1e9, color="#999999", linestyle=":", linewidth=1)
        ax.text(ax.get_xlim()[0], link_bytes_per_s / 1e9, " calibrated link (1 / r_net)", va="bottom", fontsize=8,
                color="#555555")
    ax.set_xscale("log")
    ax.set_xlabel("size (bytes, nccl-tests' definition)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("Collectives: bus bandwidth against size")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return fig


def copy_bandwidth_figure(series: pd.DataFrame, title: str) -> Figure:
    """The summed bandwidth of concurrent copies over time (GB/s, a step function per direction; ``series`` as
    :func:`~ddltrace.analyses.gpu_memcpy.bandwidth_series` gives it for one rank)."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    t0 = int(series["t_ns"].min())
    for (device, kind), part in series.groupby(["device", "direction"], sort=True):
        ax.step((part["t_ns"].to_numpy(float) - t0) / 1e9, part["bytes_per_s"].to_numpy(float) / 1e9, where="post",
                linewidth=0.8, label=f"{device} {kind}")
    ax.set_xlabel("time since the first copy (s)")
    ax.set_ylabel("copy bandwidth (GB/s)")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return fig


def allocator_figure(series: pd.DataFrame, peaks: pd.DataFrame, most: int = 8) -> Figure:
    """The bytes the framework's allocator held over time (GiB; ``series`` as :func:`~ddltrace.analyses.
    allocator_memory.held_series` gives it), per rank and device, the ``most`` with the highest peak, each peak
    marked (``peaks``: :func:`~ddltrace.analyses.allocator_memory.allocator_memory`'s rows)."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    t0 = int(series["t_ns"].min())
    for p in peaks.sort_values("peak_bytes", ascending=False).head(most).to_dict("records"):
        part = series[(series["rank"] == p["rank"]) & (series["device"] == p["device"])]
        line = ax.step((part["t_ns"].to_numpy(float) - t0) / 1e9, part["held_bytes"].to_numpy(float) / 2**30,
                       where="post", linewidth=0.9, label=f"rank {p['rank']} {p['device']}"
                       + ("" if p["basis"] == "total" else " (since the trace began)"))[0]
        ax.plot([(p["peak_ns"] - t0) / 1e9], [p["peak_bytes"] / 2**30], "v", color=line.get_color(), markersize=5)
    ax.set_xlabel("time (s, from the first allocator event)")
    ax.set_ylabel("allocated (GiB)")
    ax.set_title("Memory the framework's allocator held (peaks marked)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return fig


def nvml_figure(series: pd.DataFrame, windows: dict[str, tuple[int, int]]) -> Figure:
    """NVML's utilisation of each GPU over time (%, ``series`` as :func:`~ddltrace.analyses.gpu_counters.
    nvml_series` gives it), with each device's window in the trace shaded."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    util = series[series["counter"].isin(["util_percent", "mem_util_percent"])]
    t0 = int(min([int(util["t_ns"].min())] + [lo for lo, _ in windows.values()]))
    for (device, counter), part in util.groupby(["device", "counter"], sort=True):
        ax.step((part["t_ns"].to_numpy(float) - t0) / 1e9, part["value"].to_numpy(float), where="post",
                linewidth=0.9, label=f"{device} {'kernels' if counter == 'util_percent' else 'memory'}")
    for lo, hi in windows.values():
        ax.axvspan((lo - t0) / 1e9, (hi - t0) / 1e9, color="#E5E5E5", alpha=0.5, linewidth=0)
    ax.set_ylim(0, 105)
    ax.set_xlabel("time (s; shaded: the devices' windows in the trace)")
    ax.set_ylabel("NVML utilisation (%)")
    ax.set_title("GPU utilisation sampled by NVML")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return fig
