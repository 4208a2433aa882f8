"""The bottleneck report: what holds a job back, the pictures that prove it, and what to try.

:func:`build_report` analyses one store (a run) or several (a scaling series), draws the figures and writes
``report.html`` (one self-contained file, figures embedded), ``report.md`` with the figures beside it as PNG
files, and ``findings.json`` (the findings of ``ddltrace analyze --json``, costliest first, and the analyses not
made from this input with the reason). The verdict names the costliest finding at warning level or above, with
its cost: the time the job loses to it. Everything that comes from a trace (event names, host names, paths) is
escaped when rendered: a trace is untrusted input.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace import __version__
from ddltrace.clock_alignment import clock_alignment
from ddltrace.errors import DdltraceError
from ddltrace.outputs import check_writable, output_folder, write_file
from ddltrace.report import figures
from ddltrace.store import TraceStore
from ddltrace.units import counted, format_ns, format_percent


@dataclass
class Figure:
    """A rendered figure: a file ``key``.png, its caption, and the PNG bytes."""

    key: str
    title: str
    caption: str
    png: bytes


@dataclass
class Report:
    """Everything the renderers need, in the order the report shows it."""

    title: str
    verdict: list[str]
    findings: list  # ddltrace.analyses.findings.Finding, costliest first
    finding_figures: dict[str, str]  # finding id -> figure key that shows it
    figures: list[Figure]
    tables: list[tuple[str, pd.DataFrame]]
    stores: list[str]
    notes: list[str] = field(default_factory=list)
    not_made: list = field(default_factory=list)  # ddltrace.analyses.requirements.Skipped
    #: What each store holds, in words (RunAnalysis.holding), said once beside the analyses not made.
    holdings: dict[str, str] = field(default_factory=dict)
    #: Workers w of each store's run, to say which run a finding is about.
    workers: dict[str, int] = field(default_factory=dict)
    #: The store exported beside the report as ``trace.json`` (Chrome trace JSON for Perfetto UI).
    trace_store: object | None = None
    #: Why no trace.json was written beside the report (None when it was, or when there is no run to export)
    trace_left_out: str | None = None
    #: The ranks each store holds no usable timeline for: (store, [(rank, why)], how many in all, world size).
    missing: list[tuple[str, list[tuple[int, str]], int, int]] = field(default_factory=list)
    #: What the import found wrong in each store's files (store, [problem naming its file]): the store holds what
    #: could be read of them.
    import_problems: list[tuple[str, list[str]]] = field(default_factory=list)
    #: The runs given that could not be read, left out of the report (input, why): the report is of the others.
    left_out: list[tuple[str, str]] = field(default_factory=list)
    #: How each store's ranks were put on one clock (store, :class:`~ddltrace.clock_alignment.ClockAlignment`).
    clocks: list = field(default_factory=list)
    #: The detectors' thresholds the findings were judged by (name -> value).
    thresholds: dict = field(default_factory=dict)
    #: The GPU section: (store, [(title, table of formatted cells)]) for each store with device work.
    gpu: list[tuple[str, list[tuple[str, pd.DataFrame]]]] = field(default_factory=list)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))


#: The Chrome trace JSON of the report's run (the one with the most workers), written beside the report.
TRACE_FILE = "trace.json"
#: A run of more events than this gets no trace.json (about 150 bytes of JSON an event: 10^8 events would be
#: 15 GB, which neither the disk nor Perfetto UI wants); ``ddltrace export --ranks`` writes a few ranks instead.
TRACE_MAX_EVENTS = 5_000_000


@dataclass
class ReportFiles:
    html: Path
    markdown: Path
    findings: Path
    figures: list[Path]
    trace: Path | None = None


def _analyses():
    """The analyses package, imported late so the core does not depend on it at import time."""
    from ddltrace.analyses import findings as findings_module
    from ddltrace.analyses import run_analysis, thresholds

    return findings_module, run_analysis, thresholds


def build_report(stores: list[str | os.PathLike], out: str | os.PathLike, *, profile: str | None = None,
                 model: str | None = None, thresholds=None,
                 progress: Callable[[str], None] | None = None, mapper=None,
                 labels: dict[str, str] | None = None, left: list[tuple[str, str]] | None = None) -> ReportFiles:
    """Analyse ``stores`` and write the report into the folder ``out`` (created if needed).

    ``profile`` is a hardware profile (``ddltrace calibrate``), ``model`` a fitted model (``ddltrace model fit``).
    ``mapper`` summarises the ranks (:mod:`ddltrace.executor`: local processes, a Dask cluster's tasks; None: as
    :func:`~ddltrace.commands.analyze.analyze_with_progress` chooses by the store's size). ``labels``: a store's
    path -> what the report calls its run (the trace a temporary store was imported from), else the path.
    ``left``: (input, why) of the runs given that could not be read (others could); those this function cannot
    read are added, and the report names them all.
    """
    from ddltrace.commands.analyze import analyze_with_progress
    from ddltrace.trace_inputs import usable

    say = progress or (lambda message: None)
    if not stores:
        raise DdltraceError("report: give at least one trace store")
    findings_module, run_analysis, thresholds_module = _analyses()
    left = [] if left is None else left
    shown = {str(s): (labels or {}).get(str(s)) or str(s) for s in stores}
    lost = len(left)
    opened, stores = map(list, zip(*usable(stores, "report", lambda s: (TraceStore.open(s), s), left),
                                   strict=True))
    _refuse_twice(stores, labels or {})
    if model:  # a model that cannot be read, or is no fitted model, is one line before the analysis, used or not
        from ddltrace.analyses.fit_hashemi import constants_from_model

        fitted = _read_model(model)
        constants_from_model(fitted, model)
        _refuse_other_job(fitted, model, opened, [shown.get(str(s), str(s)) for s in stores])
    out = Path(out)
    check_writable(out, "the report")  # before the analysis, not after it
    if thresholds is None:
        thresholds = thresholds_module.Thresholds()
    numbered = {id(store): i for i, store in enumerate(opened, 1)}

    def analysed(pair):
        store, given = pair
        store.label = (labels or {}).get(str(given))
        say(f"analysing {store.label or store.path} ({numbered[id(store)]}/{len(opened)})")
        run = analyze_with_progress(store, quiet=progress is None, verb="report", mapper=mapper)
        store.refuse_if_empty("nothing to report")
        return run

    runs = usable(list(zip(opened, stores, strict=True)), "report", analysed, left)
    left[lost:] = [(shown.get(str(given[1] if isinstance(given, tuple) else given), str(given)), why)
                   for given, why in left[lost:]]  # (named as the report names runs)
    runs.sort(key=lambda r: (r.workers, r.name))
    if profile:
        from ddltrace.gpu_section import copy_bandwidths
        from ddltrace.node_section import link_bandwidth

        link = link_bandwidth(profile, required=False)
        copies = copy_bandwidths(profile)
        for r in runs:
            r.link_bytes_per_s = link
            r.copy_bytes_per_s = copies
    say("running the detectors")
    found, skipped = findings_module.detect(runs, thresholds)  # costliest first: the verdict names the first
    say("drawing the figures")
    report = assemble(runs, found, profile, model, mapper)
    report.not_made = (run_analysis.not_made(runs) + skipped + _unrelated_runs(runs)
                       + _model_not_drawn(report, runs, model))
    report.holdings = {r.name: r.holding for r in runs}
    report.thresholds = dict(thresholds)
    report.clocks = [(r.name, clock_alignment(r.store.manifest)) for r in runs]
    report.missing = [(r.name, list(r.store.missing().items()), r.store.missing_count(), r.store.world_size)
                      for r in runs if r.store.missing_count()]
    report.import_problems = [(r.name, r.store.import_problems) for r in runs if r.store.import_problems]
    report.left_out = list(left)
    from ddltrace.gpu_section import gpu_tables

    report.gpu = [(r.name, tables) for r in runs if (tables := gpu_tables(r))]
    return write(report, out)


def _unrelated_runs(runs: list) -> list:
    """The scaling series not drawn because no two of the runs are at one batch size (a GPU trace beside a ps-sgd
    store: one line of phase times through both, an efficiency figure with no measured point), one entry per
    store; none where it is drawn or not made for another reason (one store, one worker count, no timeline)."""
    from ddltrace.analyses.requirements import ANALYSES, Skipped

    if len({r.workers for r in runs}) < 2 or not all(r.can("scaling") for r in runs):
        return []
    if len(scaling_table(runs)) >= 2:
        return []
    holds = "; ".join(f"w = {r.workers}, " + (f"batch {r.batch_size:g}" if r.batch_size else "batch not given")
                      for r in runs)
    return [Skipped("scaling", ANALYSES["scaling"].title, r.name, "two or more runs of one job at one batch size "
                    "(a run is compared with the one with the fewest workers at its batch size)", holds)
            for r in runs]


def _model_not_drawn(report, runs: list, model: str | None) -> list:
    """Where ``--model`` was given and no scaling series was drawn to put it beside (one store, one worker count,
    runs at different batch sizes), the entry that says so: before, the model was left out without a word."""
    from ddltrace.analyses.requirements import Skipped

    if not model or any(fig.key == "scaling" for fig in report.figures):
        return []
    return [Skipped("model", "the fitted model beside the scaling series (--model)", model,
                    "a scaling series to draw it beside: two or more runs of one job at one batch size and different "
                    "worker counts", f"{len(runs)} run(s): " + ", ".join(f"w = {r.workers}" for r in runs))]


def _refuse_twice(given: list, labels: dict[str, str]) -> None:
    """Refuse a store (or trace) given twice (:func:`~ddltrace.trace_inputs.refuse_twice`, by what the report calls
    each: a temporary store by its trace): the report would be of two runs that are one, each finding "found in 2
    runs", a scaling series of one worker count."""
    from ddltrace.trace_inputs import refuse_twice

    refuse_twice([labels.get(str(name)) or str(name) for name in given])


# -- assembling ---------------------------------------------------------------------------------------------


def verdict(findings: list, runs: list) -> list[str]:
    """Two sentences: the dominant bottleneck (the costliest finding at warning level or above) and its cost, the
    time the job loses to it (or that none was found)."""
    serious = [f for f in findings if f.severity in ("warning", "error")]  # findings come costliest first
    main = runs[-1]
    table = main.table("all")
    table = table.loc[[r for r in main.worker_ranks if r in table.index] or list(table.index)]  # the training ranks
    from ddltrace.timeline import CATEGORIES

    total = table["total_ns"].sum()
    shares = {c: float(table[c].sum() / total) if total else 0.0 for c in CATEGORIES if c in table}  # every one:
    top = max(shares, key=shares.get)  # idle or other may well be the largest (a device waiting, MPI_Init)
    same_w = sum(r.workers == main.workers for r in runs) > 1
    of_main = f"the {main.workers}-worker run" + (f" ({main.name})" if same_w else "")  # which, where w is not
    # the share's window and definition: the breakdown table's (on a device, every lane together)
    from ddltrace.commands.info import profiled_window

    window = profiled_window(main.store.run)
    defined = ("over " + (window.split(" (", 1)[0] if window else "their whole runs")
               ) + (", host and device lanes together (each side alone: the GPU section)"
                                         if main.device_breakdown is not None and len(main.device_breakdown) else "")
    if serious:
        first = serious[0]
        cost_text = f", costing about {format_ns(first.cost_ns)} ({first.cost_basis})" if first.cost_basis else ""
        run = next((r for r in runs if r.name == first.store), None)
        where = f", in the w = {run.workers} run ({run.name})" if len(runs) > 1 and run is not None else ""
        others = len(serious) - 1
        return [f"The dominant bottleneck{where}: {first.title}{cost_text}.",
                f"{others} more finding{'s' if others != 1 else ''} at warning level or above; across the workers "
                f"of {of_main}, {defined}, the largest share of time is {top} ({format_percent(shares[top])})."]
    runner_up = sorted(shares, key=shares.get)[-2]
    then = f", then {runner_up} ({format_percent(shares[runner_up])})" if shares[runner_up] >= 0.0005 else ""
    return ["No bottleneck was found at warning level or above.",
            f"Across the workers of {of_main}, {defined}, the largest share of time is {top} "
            f"({format_percent(shares[top])}){then}."]


def timeline_windows(run) -> dict[str, tuple[int, int]]:
    """The time windows (ns) the per-rank timeline figures show: the whole run, the initialisation zoomed (when
    there is one) and three steady-state steps (when steps were found); none when the input has no timeline."""
    if not run.phases or not run.can("timeline_figures"):
        return {}
    lo = min(p.start_ns for p in run.phases.values())
    hi = max(p.end_ns for p in run.phases.values())
    init_end = max(p.init_end_ns for p in run.phases.values())
    windows = {"whole": (lo, hi)}
    if any(p.init_end_ns > p.start_ns for p in run.phases.values()):  # some rank initialises before its first step
        windows["init"] = (lo, init_end + max((init_end - lo) // 20, 1))
    steps = _steady_window(run)
    if steps:
        windows["steps"] = steps
    return windows


def scan_rank(store_path: str, windows: dict[str, tuple[int, int]], span: tuple[int, int] | None,
              rank: int) -> tuple[int, dict[str, np.ndarray], pd.DataFrame] | None:
    """One rank of the report's second pass (picklable, for any mapper): its row of each timeline figure, the
    category of each of :data:`~ddltrace.report.figures.PIXEL_COLUMNS` columns of each window in ``windows``
    (computed over the rank's ``span``, its first to last event; none when None), and its calls and recorded time
    (ns) per event name and category. None for a rank that cannot be read (the analysis named it)."""
    from ddltrace.analyses.breakdown import annotation_lanes, classify, device_lanes
    from ddltrace.analyses.rank_summary import _open
    from ddltrace.analyses.segments import SAMPLED_STACKS
    from ddltrace.collectors.pmpi.table import SENDRECV_RECEIVED
    from ddltrace.errors import StoreError

    try:
        frame = _open(store_path)._read_timeline(rank)
    except StoreError:
        return None
    if (sampled := (frame["source"] == SAMPLED_STACKS).to_numpy(bool)).any():  # py-spy's samples of the stacks
        frame = frame[~sampled]  # the other rows cover (a copy only where there are some)
    rows = {}
    if span is not None and windows:
        segments = classify(frame, list(span))
        rows = {key: figures.category_columns(*segments, np.linspace(a, b, figures.PIXEL_COLUMNS + 1))
                .astype(np.int8) for key, (a, b) in windows.items()}
    # a stream's annotation spans are copies of the host's region marks, not calls of their own (docs/ANALYSES.md);
    # a Sendrecv's receive half is a record of the call's, not a call
    calls = frame[~annotation_lanes(frame["lane"]) & (frame["name"] != SENDRECV_RECEIVED).to_numpy(bool)]
    # a host's launch may bear its kernel's or copy's name (XPlane): a name's host rows and device rows apart
    on_device = pd.Series(device_lanes(calls["lane"]), index=calls.index, name="on_device")
    totals = calls.groupby([calls["name"], calls["category"], on_device], observed=True)["dur_ns"].agg(["count", "sum"])
    return rank, rows, totals


def scan(run, limit: int = 15, mapper=map) -> tuple[dict[str, dict[int, np.ndarray]], pd.DataFrame]:
    """The report's second pass over the store, rank by rank (``mapper`` as in
    :func:`~ddltrace.analyses.run_analysis.analyze_store`): each window's row of pixels per rank (for the
    timelines; see :func:`timeline_windows`) and the event names with the most recorded time (calls, total, mean
    per call), largest first. Memory: one rank's events and a few KB of pixels per rank and window."""
    from functools import partial

    from ddltrace.analyses import rank_summary

    windows = timeline_windows(run)
    rank_summary.keep_open(run.store)
    spans = {r: (p.start_ns, p.end_ns) for r, p in run.phases.items()}
    pixels: dict[str, dict[int, np.ndarray]] = {key: {} for key in windows}
    totals: dict[tuple[str, str, str], list] = {}
    ranks = run.store.ranks
    kinds = {r: rows_are(run.store.rank_info(r)) for r in ranks}
    for result in mapper(partial(scan_rank, str(run.store.path), windows), [spans.get(r) for r in ranks], ranks):
        if not isinstance(result, tuple):  # a rank that cannot be read, or whose task was given up
            continue
        rank, rows, grouped = result
        for key, row in rows.items():
            pixels[key][rank] = row
        for (name, category, on_device), count, total in zip(grouped.index, grouped["count"], grouped["sum"],
                                                             strict=True):
            entry = totals.setdefault((name, str(category), "device" if on_device else "host"), [0, 0, set()])
            entry[0] += int(count)
            entry[1] += int(total)
            entry[2].add(kinds[rank])
    rows = sorted(((n, c, w, k, t, how) for (n, c, w), (k, t, how) in totals.items()), key=lambda r: -r[4])[:limit]
    table = pd.DataFrame([(n, c, w, _calls_cell(k, how), format_ns(t), _mean_cell(k, t, how))
                          for n, c, w, k, t, how in rows],
                         columns=["name", "category", "on", "calls", "total", "mean per call"])
    table["name"] = table["name"].map(_cut_name)
    table = table.set_index("name")
    table.attrs["rows_are"] = set().union(*(how for *_, how in rows)) if rows else set()
    return pixels, table


#: What a rank's timeline rows of one name are (:func:`rows_are`): each a call; per-call totals (an IPM profile, a
#: CNTK summary: a row per call kind, and partner, the number of calls not kept); exclusive pieces (an OTF2
#: archive: a region's call cut around the calls inside it, its rows summing to its exclusive time).
CALLS, TOTALS, PIECES = "calls", "per-call totals", "exclusive pieces"


def rows_are(info: dict) -> str:
    """:data:`CALLS`, :data:`TOTALS` or :data:`PIECES`: what a rank's rows are, from its manifest entry."""
    if info.get("aggregate"):
        return TOTALS
    return PIECES if info.get("format") == "otf2" else CALLS


def _calls_cell(count: int, how: set[str]) -> str:
    """The calls of a name: its rows where each is a call; '-' where some are per-call totals (the count is not
    kept); 'N pieces' where some are a call's exclusive pieces (a call cut around those inside it is several)."""
    if TOTALS in how:
        return "-"
    return f"{count:,} pieces" if PIECES in how else f"{count:,}"


def _mean_cell(count: int, total_ns: int, how: set[str]) -> str:
    """The mean per call (ns, formatted), '-' where the rows are not each a call (:func:`_calls_cell`)."""
    return format_ns(total_ns / max(count, 1)) if how == {CALLS} else "-"


def _rows_said(how: set[str]) -> str:
    """What the by-name table's caption adds where its rows are not each a call (:func:`rows_are`)."""
    said = ""
    if TOTALS in how:
        said += ("; calls and mean '-': a rank's profile holds per-call totals (IPM, a CNTK summary: a row per call "
                 "kind and partner, the number of calls not kept), its total the calls' summed time")
    if PIECES in how:
        said += ("; 'N pieces': an OTF2 archive's rows are exclusive, a region's call cut around the calls inside "
                 "it, so a name's total is its exclusive time (less the regions inside it) and its rows are not "
                 "its calls")
    return said


#: An event name in the report's tables is cut to this many characters (a C++ kernel's is thousands long).
NAME_CHARS = 100


def _cut_name(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 3] + "..."


def _run_figures(run, pixels: dict[str, dict[int, np.ndarray]], label: str) -> list[Figure]:
    out: list[Figure] = []
    table = run.table("all")
    if len(table):
        title = f"Time per category, each rank's first event to its last, {run.workers} workers"
        out.append(Figure(f"shares{label}", "Where each rank's time goes",
                          "Share of each rank's time per category over the whole run, as IPM shows it "
                          "(Hashemi et al., figure 5): each rank's own window, from its first event to the end of "
                          "its last (initialisation, steady state and finalisation)."
                          + (f" The {run.workers} workers: {run.workers_inferred}." if run.workers_inferred else "")
                          + (" An instant is compute where any of the rank's lanes computes, its host's CPU "
                             "operators included: a device's own shares are the GPU section's temporal breakdown."
                             if "device_ranks" in run.capabilities else ""),
                          figures.png_bytes(figures.shares_figure(table, title))))
    windows = timeline_windows(run)
    if pixels.get("whole"):
        ends = {rank: p.init_end_ns for rank, p in run.phases.items()}
        out.append(Figure(f"timeline{label}", "Per-rank timeline, whole run",
                          "Every instant of every rank in one category (TAU / Vampir's view, Hashemi et al. "
                          "figures 6-8)" + ("; the dashed line is where the last rank's initialisation ends."
                                            if "init" in windows else "; no rank initialises before its first step."),
                          figures.png_bytes(figures.timeline_figure(
                              pixels["whole"], windows["whole"], "Whole run",
                              {"end of init, last rank": max(ends.values())} if "init" in windows else None))))
        if "init" in windows:
            out.append(Figure(f"timeline_init{label}", "Initialisation, zoomed",
                              "From the first rank's first event to the last rank's end of initialisation; each "
                              "rank's own end (its first step) is the black tick on its row, and what lies right "
                              "of it is that rank's steady state already.",
                              figures.png_bytes(figures.timeline_figure(pixels["init"], windows["init"],
                                                                        "Initialisation", row_marks=ends))))
        if "steps" in windows:
            rank, chosen = _steady_steps(run)
            where = "in the middle of the steady state" if len(chosen) == 3 else "the rank's only steps"
            out.append(Figure(f"timeline_steps{label}", "A few steady-state steps, zoomed",
                              f"{counted(len(chosen), 'step')} of rank {rank} ({where}), and every rank over "
                              "that time.",
                              figures.png_bytes(figures.timeline_figure(pixels["steps"], windows["steps"],
                                                                        "Steady-state steps"))))
    measured = run.table(run.main_phase).index
    pair = run.average_and_slowest(run.main_phase)  # one worker is its own average: no figure (nor straggler)
    if len(pair) == 2 and sum(r in measured for r in run.worker_ranks) >= 2:
        where = "the steady state" if run.main_phase == "steady" else "the whole run"
        out.append(Figure(f"avg_slowest{label}", "Average worker beside the slowest (the most busy time)",
                          f"Time per category in {where}: the average worker and the slowest one, the worker with "
                          "the most busy time (compute + io + memcpy) (Park et al., figure 2): the one whose work "
                          "the others wait for, unless a rank is late for other reasons (a sleep, an input wait: "
                          "the straggler findings name it). Busy time is stacked first and its end marked: the "
                          "slowest's whole bar may be shorter than the average's, since it waits least."
                          + (" On gloo a rank's wait at the collectives, run on gloo's threads, is comm where it "
                             "waits inside a span that holds others (DistributedDataParallel.forward waiting for the "
                             "buffers' broadcast), compute inside a leaf op; the straggler at the host collectives "
                             "reads the arrivals."
                             if "host_comm" in run.capabilities else ""),
                          figures.png_bytes(figures.average_slowest_figure(pair, where[4:].capitalize()))))
    staleness = _staleness(run)
    if staleness is not None and len(staleness):
        out.append(Figure(f"staleness{label}", "Staleness of the gradients",
                          "Staleness of each applied gradient in updates (Gupta et al., figure 4).",
                          figures.png_bytes(figures.histogram_figure(staleness, "staleness (updates)",
                                                                     "Gradient staleness, every applied gradient",
                                                                     counted="gradients"))))
    if run.gpu.queue_series is not None:
        from ddltrace.analyses.gpu_queue import MAX_QUEUE_LENGTH

        rank, series = run.gpu.queue_series
        out.append(Figure(f"gpu_queue{label}", "GPU launch queue length per stream",
                          f"Operations launched on {queue_streams(series)} and not yet started, over time, on rank "
                          f"{rank} (the rank with the longest queue): +1 at a launch call's start, -1 at its "
                          "kernel's start (HTA's queue length).",
                          figures.png_bytes(figures.queue_figure(series, MAX_QUEUE_LENGTH,
                                                                 f"Launch queue per stream, rank {rank}"))))
    out.extend(_gpu_figures(run, label))
    if "host_comm" in run.capabilities:
        instances = run.host_collectives()
        matched = instances[instances["ranks"] >= 2]
        if len(matched):
            out.append(Figure(f"host_skew{label}", "gloo's collectives: start skew across ranks",
                              "Each of gloo's collectives matched across ranks (collective, step, order): latest minus "
                              "earliest start of its spans, the time the early ranks waited, coloured by the rank "
                              "that arrived last.",
                              figures.png_bytes(figures.collective_skew_figure(matched))))
    if len(run.allocator):
        out.append(Figure(f"allocator{label}", "Memory the framework's allocator held",
                          "The bytes allocated after each of the allocator's events (PyTorch's [memory] events), per "
                          "rank and device, each peak marked: the allocator's own total where the trace writes it, "
                          "else the events' bytes summed from the trace's first (what it held beyond its start).",
                          figures.png_bytes(figures.allocator_figure(run.allocator_series(), run.allocator))))
    return out


def queue_streams(series: pd.DataFrame) -> str:
    """Which streams the queue figure draws: 'each of its 3 streams', or 'the 8 of its 9 streams with the longest
    queues' where it has more than :data:`~ddltrace.report.figures.QUEUE_STREAMS`."""
    n = len(series.groupby(["device", "stream"]).size())
    if n <= figures.QUEUE_STREAMS:
        return f"each of its {counted(n, 'stream')}" if n > 1 else "its stream"
    return f"the {figures.QUEUE_STREAMS} of its {n} streams with the longest queues"


def _gpu_figures(run, label: str) -> list[Figure]:
    """The GPU figures of one store: device time with idle waiting for the host, overlapped and exposed
    communication, collectives' skew and bus bandwidth, copy bandwidth over time (each where its data is)."""
    gpu = run.gpu
    out: list[Figure] = []
    if not gpu.device_ranks:
        return out
    temporal = gpu.temporal_table()
    if "launch_links" in run.capabilities:  # gpu_idle (HTA's) needs each launch linked to its kernel
        out.append(Figure(f"gpu_idle{label}", "GPU time per device, and idle waiting for the host",
                          "Each device's window (its first work to its last): compute kernels, other work only "
                          "(communication, copies), idle with nothing queued while the host had not yet launched "
                          "the work that ended the gap, and other idle.",
                          figures.png_bytes(figures.gpu_idle_figure(temporal, gpu.idle_table()))))
    else:  # no correlation ids: which idle gap waited for the host is not known (see "Not made")
        out.append(Figure(f"gpu_idle{label}", "GPU time per device, busy and idle",
                          "Each device's window (its first work to its last): compute kernels, other work only "
                          "(communication, copies), and idle; how much of the idle time waited for the host is not "
                          "measured: the trace links no launch to its kernel (no correlation ids).",
                          figures.png_bytes(figures.gpu_idle_figure(temporal, None))))
    overlap = gpu.overlap_table()
    if len(overlap):
        out.append(Figure(f"gpu_overlap{label}", "Communication kernels, overlapped and exposed",
                          "Per device, the union of its communication kernels split into the part a compute kernel "
                          "runs beside (HTA's overlap) and the exposed rest.",
                          figures.png_bytes(figures.gpu_overlap_figure(overlap))))
    instances = run.collectives()
    matched = instances[instances["ranks"] >= 2]
    if len(matched):
        out.append(Figure(f"gpu_skew{label}", "Collectives: start skew across ranks",
                          "Each collective matched across ranks (process group, collective, step, order): latest "
                          "minus earliest start of its kernels, coloured by the rank that started last.",
                          figures.png_bytes(figures.collective_skew_figure(matched))))
    sized = instances[instances["busbw"].notna()]
    if len(sized):
        out.append(Figure(f"gpu_busbw{label}", "Collectives: bus bandwidth against size",
                          "nccl-tests' bus bandwidth of each collective of known size (bytes / duration x its "
                          "collective's factor), against the calibrated link where a profile gives it.",
                          figures.png_bytes(figures.busbw_figure(sized, run.link_bytes_per_s))))
    operators = gpu.operator_table()
    if len(operators):
        out.append(Figure(f"gpu_operators{label}", "Device time by the operator that launched it",
                          "The host operators whose launches ran the most device time, summed over the ranks: self, "
                          "the kernels, copies and fills an operator launched itself (its launch call's innermost "
                          "enclosing row on its thread); total, those launched inside it at any depth.",
                          figures.png_bytes(figures.operator_figure(operators))))
    if "nvml" in run.capabilities:
        windows = {d: (int(p["window_start_ns"].min()), int((p["window_start_ns"] + p["window_ns"]).max()))
                   for d, p in temporal.groupby("device")}
        out.append(Figure(f"gpu_nvml{label}", "GPU utilisation sampled by NVML",
                          "The NVML sampler's utilisation of each GPU (kernels: share of the sample period a kernel "
                          "ran; memory: share the memory was busy), with each device's window in the trace shaded.",
                          figures.png_bytes(figures.nvml_figure(run.nvml, windows))))
    if gpu.copy_series is not None:
        rank, series = gpu.copy_series
        out.append(Figure(f"gpu_copies{label}", "Memory-copy bandwidth over time",
                          f"The summed bandwidth of the copies running at each instant on rank {rank} (the rank "
                          "with the highest peak), per device and direction (HTA's memory bandwidth time series, "
                          "less its memsets: a fill moves nothing, and has no bandwidth in the copies' table "
                          "either).",
                          figures.png_bytes(figures.copy_bandwidth_figure(series, f"Copy bandwidth, rank {rank}"))))
    return out


def _staleness(run) -> np.ndarray | None:
    """Staleness of each applied gradient (updates): the job's staleness log (as the staleness detector reads
    it), else the store's counters named 'staleness'."""
    from ddltrace.analyses.detect_staleness import staleness_log

    values = staleness_log(run)
    if values is not None and len(values):
        return np.asarray(values)
    counters = run.store.counters()
    values = counters.loc[counters["name"] == "staleness", "value"].to_numpy()
    return values if len(values) else None


def _steady_steps(run) -> tuple[int, pd.DataFrame] | None:
    """The steps the steady-state zoom shows: three in the middle of the first worker's steps (all of them where
    it has fewer), and that worker's rank; None where no step was found."""
    steps = run.steps
    if not len(steps):
        return None
    with_steps = set(steps["rank"].tolist())
    workers = [r for r in run.worker_ranks if r in with_steps] or sorted(with_steps)
    mine = steps[steps["rank"] == workers[0]].sort_values("start_ns")
    middle = max(len(mine) // 2 - 1, 0)
    return workers[0], mine.iloc[middle:middle + 3]


def _steady_window(run) -> tuple[int, int] | None:
    """The steady-state zoom's window (ns): the first to the last of :func:`_steady_steps`."""
    found = _steady_steps(run)
    if found is None:
        return None
    chosen = found[1]
    return int(chosen["start_ns"].min()), int(chosen["end_ns"].max())


def scaling_table(runs: list) -> pd.DataFrame:
    """The series the report draws: of :func:`ddltrace.analyses.scaling.scaling_table`'s series (one job at one batch
    size), the one with the most runs; one row per worker count (the median of its runs there), indexed from 0:
    workers, startup_s (MPI's start-up: first event to the end of MPI_Init; NaN, shown '-' and not drawn, where no
    worker traced an MPI_Init), job_init_s (the job's own initialisation: from there to the first step), steady_s,
    total_s (seconds, medians over the workers) and the steady state's efficiency against the series' smallest run
    with Chang's Lemma 3.1 from its R_O. ``attrs``: ``series`` (its label, None where no series of two runs) and
    ``notes`` (:func:`~ddltrace.analyses.scaling.scaling_notes`: the runs left out, and why; E above 100 %)."""
    from ddltrace.analyses.scaling import scaling_notes
    from ddltrace.analyses.scaling import scaling_table as analyses_scaling

    table = analyses_scaling(runs)
    kept = table[table["left_out"].isna()]
    sizes = kept.groupby("series", sort=True).size().sort_values(ascending=False, kind="stable")
    chosen = kept[kept["series"] == sizes.index[0]] if len(sizes) else kept
    frame = pd.DataFrame({"workers": chosen["workers"].astype(int),
                          "startup_s": chosen["startup_ns"].where(chosen["startup_traced"]) / 1e9,
                          "job_init_s": chosen["job_init_ns"] / 1e9,
                          "steady_s": chosen["steady_ns"] / 1e9, "total_s": chosen["total_ns"] / 1e9,
                          "efficiency_steady": chosen["efficiency_steady"],
                          "efficiency_lemma_base": chosen["efficiency_lemma_base"],
                          "overhead_ratio": chosen["overhead_ratio"]})
    frame = frame.groupby("workers", as_index=False, sort=True).median()
    others = [label for label in sizes.index[1:]]
    frame.attrs = {"series": sizes.index[0] if len(sizes) else None,
                   "notes": scaling_notes(table) + [f"series not drawn (fewer runs than the one drawn): {label}"
                                                    for label in others]}
    return frame


def _read_model(model_path: str) -> dict:
    """The fitted model at ``model_path`` (``ddltrace model fit --out``), or one line saying why it cannot be."""
    try:
        model = json.loads(Path(model_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        raise DdltraceError(f"{model_path}: cannot read the model ({exc})") from exc
    if not isinstance(model, dict):
        raise DdltraceError(f"{model_path}: not a model written by 'ddltrace model fit'")
    return model


def _refuse_other_job(model: dict, model_path: str, opened: list, names: list[str]) -> None:
    """Refuse (one line) a fitted model whose job is not that of every store given: the report draws it beside the
    scaling series, at its own batch, samples and epochs, as that job's; ``model fit`` refuses stores of different
    jobs alike (:func:`ddltrace.analyses.fit_hashemi.model_job_differences` says what differs)."""
    from ddltrace.analyses.fit_hashemi import model_job_differences, store_job

    other = [(name, found) for store, name in zip(opened, names, strict=True)
             if (found := model_job_differences(model, store_job(store)))]
    if other:
        name, found = other[0]
        more = f" (and {len(other) - 1} other store(s) given)" if len(other) > 1 else ""
        raise DdltraceError(f"{model_path}: fitted to another job than {name}'s{more}: {'; '.join(found)}; --model "
                            "is drawn beside the scaling series as its job's: give a model fitted to runs of the "
                            "stores' job ('ddltrace model fit')")


def _model_curve(model_path: str, series: pd.DataFrame) -> tuple[pd.DataFrame, float | None]:
    """The fitted model's computation-phase time (s) over the series' worker range, and its knee w*."""
    from ddltrace.commands.model import _predict_table

    model = _read_model(model_path)
    lo, hi = int(series["workers"].min()), int(series["workers"].max())
    workers = sorted({*range(lo, hi + 1)})
    table = _predict_table(model, model_path, workers, None, {})
    knee = (model.get("knee") or {}).get("w")
    return pd.DataFrame({"workers": table["w"], "steady_s": table["predicted_s"]}), knee


def _series_figures(runs: list, findings: list, model: str | None = None) -> tuple[list[Figure], pd.DataFrame | None]:
    if len({r.workers for r in runs}) < 2 or not all(r.can("scaling") for r in runs):
        return [], None  # the phases a scaling series compares need a timeline (see report.not_made)
    series = scaling_table(runs)
    if len(series) < 2:
        return [], None  # no two runs of one job at one batch size: no series to draw (see _unrelated_runs)
    knee = None
    for f in findings:
        for key, q in f.evidence.items():
            if "knee" in key and q.unit == "workers" and q.value == q.value:
                knee = float(q.value)
    curve = None
    if model:
        curve, model_knee = _model_curve(model, series)
        knee = model_knee if model_knee is not None else knee
    under_one = knee is not None and knee < 1  # (model.json's w* may be the formula's 0 or less: no line to draw)
    out = [Figure("scaling", "Phase times against workers",
                  "MPI start-up (first event to the end of MPI_Init), the job's own initialisation (from there to "
                  "the first step), steady state and the whole run against workers, medians over the workers "
                  "(Hashemi et al., figure 9)"
                  + (", the steady state beside the fitted model (dashed)" if curve is not None else "")
                  + (", with the knee w* where the server saturates" if knee and not under_one else "")
                  + ("; the knee w* is under 1 worker (the server or network term the larger from the first worker "
                     "on), so no knee line" if under_one else "") + ".",
                  figures.png_bytes(figures.scaling_figure(series, None if under_one else knee, curve)))]
    r_o = float(series["overhead_ratio"].iloc[0])
    if r_o == r_o:
        out.append(Figure("efficiency", "Parallel efficiency",
                          "Measured efficiency of the steady state beside Chang et al.'s Lemma 3.1 with the overhead "
                          f"ratio R_O = {format_percent(r_o)} measured on the smallest run (the median worker's share "
                          "of its steady state outside compute).",
                          figures.png_bytes(figures.efficiency_figure(series, r_o))))
    shown = series.set_index("workers")[["startup_s", "job_init_s", "steady_s", "total_s", "efficiency_steady"]]
    shown.attrs = series.attrs
    return out, shown


def profile_curves(profile: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The C_muladd curves of a hardware profile as ``ddltrace calibrate`` writes them (``curves``: name ->
    ``{"points": [{"x": segment bytes, "y": s per multiply-add}, ...]}``), each as (x, y) arrays sorted by x."""
    curves = {}
    for name, curve in (profile.get("curves") or {}).items():
        points = curve.get("points") if isinstance(curve, dict) and "muladd" in name.lower() else None
        xy = sorted((float(p["x"]), float(p["y"])) for p in points or [] if isinstance(p, dict)
                    and isinstance(p.get("x"), int | float) and isinstance(p.get("y"), int | float))
        if xy:
            curves[name] = (np.array([x for x, _ in xy]), np.array([y for _, y in xy]))
    return curves


def _profile_figure(profile_path: str) -> Figure | None:
    """C_muladd against segment size from a hardware profile's curves, the machine's caches marked, when it has
    them."""
    try:
        profile = json.loads(Path(profile_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        raise DdltraceError(f"{profile_path}: cannot read the hardware profile ({exc})") from exc
    curves = profile_curves(profile) if isinstance(profile, dict) else {}
    if not curves:
        return None
    caches = {k: float(v) for k, v in ((profile.get("machine") or {}).get("cache_bytes") or {}).items()
              if isinstance(v, int | float)}
    fig = figures.curve_figure(curves, "segment size (bytes)", "time per multiply-add (s)",
                               "C_muladd against segment size", caches)
    return Figure("profile_muladd", "The hardware profile: C_muladd across the caches",
                  f"Measured by `ddltrace calibrate` ({Path(profile_path).name}): seconds per multiply-add against "
                  "the segment's size in bytes, each curve a kernel and precision; dotted: the machine's caches.",
                  figures.png_bytes(fig))


_FIGURE_FOR = (  # finding id fragment -> figure key prefix that shows it (the first fragment found wins)
    ("gpu_host", "gpu_idle"),
    ("gpu_exposed", "gpu_overlap"),
    ("gpu_straggler", "gpu_skew"),
    ("host_straggler", "host_skew"),
    ("gpu_slow_coll", "gpu_busbw"),
    ("gpu_memory", "allocator"),
    ("sequential", "timeline_init"),
    ("init", "timeline_init"),
    ("saturat", "scaling"),
    ("straggler", "avg_slowest"),
    ("imbalance", "avg_slowest"),
    ("stale", "staleness"),
    ("overlap", "shares"),
    ("late", "timeline_steps"),
    ("wait", "shares"),
    ("io", "shares"),
)


def assemble(runs: list, findings: list, profile: str | None = None, model: str | None = None,
             mapper=None) -> Report:
    """Build the :class:`Report` of ``runs`` (sorted by workers) and their findings; ``mapper`` reads the ranks
    for the figures (as in :func:`~ddltrace.analyses.run_analysis.analyze_store`; None: in this process)."""
    mapper = mapper or map
    main = runs[-1]
    figs: list[Figure] = []
    series_figs, series = _series_figures(runs, findings, model)
    figs.extend(series_figs)
    pixels, top = scan(main, mapper=mapper)
    figs.extend(_run_figures(main, pixels, ""))
    if profile:
        fig = _profile_figure(profile)
        if fig:
            figs.append(fig)
    keys = [f.key for f in figs]
    finding_figures = {}
    for finding in findings:
        for fragment, prefix in _FIGURE_FOR:
            if fragment in finding.id.lower():
                match = next((k for k in keys if k.startswith(prefix)), None)
                if match:
                    finding_figures[finding.id] = match
                    break
    steady = main.table(main.main_phase)["overlap"]  # the low-overlap finding's phase, beside the whole run's
    table = main.table("all").rename(columns={"overlap": "overlap(run)"})
    if main.main_phase != "all":
        table[f"overlap({main.main_phase})"] = steady.reindex(table.index)
    from ddltrace.timeline import CATEGORIES

    empty = [c for c in CATEGORIES if c in table and not table[c].any()]  # no rank has any: not a measured 0
    table = table.drop(columns=[*empty, *(f"share_{c}" for c in empty)], errors="ignore")
    phase_name = "steady state" if main.main_phase == "steady" else main.main_phase
    steady_text = (f", overlap({main.main_phase}) over its {phase_name}, the low-overlap finding's measure"
                   if main.main_phase != "all" else "")
    if empty:
        steady_text += f"; no rank has time in {', '.join(empty)}: left out"
    device = side_by_side(main)
    lanes = ("every lane of the rank at once, its CPU threads and its device's streams: an instant counts once, as "
             "compute where any lane computes (each side alone: the next table); " if len(device) else "")
    tables = [(f"Time per category and rank, whole run ({lanes}shares of the rank's time and Rudra's overlap, "
               "compute / (compute + exposed comm + wait + barrier), in per cent: overlap(run) over the rank's whole "
               "run"
               f"{steady_text})", table)]
    if len(device):
        tables.append(("Host and device side by side, whole run (ranks with a device: host = its CPU threads, "
                       "device = its gpu: streams, idle where none runs; streams' annotation spans in neither)",
                       device))
    from ddltrace.node_section import node_display, title

    nodes = node_display(main)  # (the cells as analyze shows them: one heading per column, each cell with its unit)
    if len(nodes):
        tables.append((title(), nodes))
    from ddltrace.host_section import host_tables

    tables.extend((name, frame.set_index(frame.columns[0])) for name, frame in host_tables(main))
    if len(main.allocator):
        from ddltrace.memory_section import ALLOCATOR, allocator_table

        tables.append((ALLOCATOR, allocator_table(main).set_index("rank")))
    tables.append((f"Where the time goes by event name, largest first (the {main.workers}-worker run, all its ranks, "
                   f"whole run; on: the host's lanes or a device's, apart, as a host's launch may bear its kernel's "
                   f"or copy's name; total: the calls' summed durations, a device stream's copies of the host's "
                   f"region marks left out; a name longer than {NAME_CHARS} characters cut"
                   f"{_rows_said(top.attrs.get('rows_are', set()))})", top))
    if series is not None:
        notes = "".join(f"; {note}" for note in series.attrs.get("notes", []))
        tables.insert(0, (f"Scaling series {series.attrs.get('series')} (one job at one batch size; phase times: "
                          "medians over the workers, and over the series' runs at a worker count; startup: MPI's "
                          "start-up, first event to the end of MPI_Init; job_init: the job's own initialisation, from "
                          "there to the first step; the whole run: first to last event; efficiency of the steady "
                          "state against the series' run with the fewest workers; '-': no worker traced an MPI_Init "
                          f"(startup){notes})", series))
    name = Path(main.name)  # a run folder's store (ddltrace workload's RUN/store) is named by its run: seq-w8/store
    title = "ddltrace report: " + ((f"{name.parent.name}/{name.name}" if name.name == "store" else name.name)
                                   if len(runs) == 1
                                   else f"{len(runs)} runs, w = {', '.join(str(r.workers) for r in runs)}")
    events = sum(int(main.store.rank_info(r).get("events", 0) or 0) for r in main.store.ranks)
    left_out = None
    if not main.can("timeline_figures"):  # per-call totals: the importer's end-to-end layout is no timeline
        left_out = (f"No {TRACE_FILE} beside this report: {main.name} holds per-call totals, not a timeline (the "
                    "importer lays them end to end: their sums are the file's, their order and start times are "
                    "not), so there are no events in time to zoom into.")
    elif events > TRACE_MAX_EVENTS:
        left_out = (f"No {TRACE_FILE} beside this report: the run holds {events:,} events, more than the "
                    f"{TRACE_MAX_EVENTS:,} a Chrome trace for Perfetto UI is written for; 'ddltrace export STORE "
                    "--chrome OUT --ranks 0-3' writes a few ranks.")
    from ddltrace.commands.analyze import render_job_end
    from ddltrace.commands.info import profiled_window

    # the verdict, the profiled window, and how each job ended where not well (an exit code, an interrupt, ranks
    # that ended abruptly; the time after a stop left out of the shares): as analyze says it
    said = (verdict(findings, runs) + [f"{r.name} holds {window}." for r in runs
                                       if (window := profiled_window(r.store.run))]
            + [line for r in runs if (line := render_job_end(r))])
    return Report(title=title, verdict=said, findings=findings, finding_figures=finding_figures,
                  figures=figs, tables=tables, stores=[r.name for r in runs],
                  workers={r.name: r.workers for r in runs}, trace_store=None if left_out else main.store,
                  trace_left_out=left_out)


def side_by_side(run) -> pd.DataFrame:
    """Per rank with a device, two rows, host and device: time per category (ns) and the span, whole run."""
    from ddltrace.timeline import CATEGORIES

    device = run.lanes_table("device")
    if not len(device):
        return pd.DataFrame()
    host = run.lanes_table("host")
    columns = [c for c in CATEGORIES if host[c].sum() + device[c].sum() > 0] + ["total_ns"]
    rows = []
    for rank in device.index:
        rows.append(host.loc[rank, columns].rename(f"{rank} host"))
        rows.append(device.loc[rank, columns].rename(f"{rank} device"))
    return pd.DataFrame(rows).astype("int64").rename_axis("rank")


def findings_document(report: Report) -> dict:
    """The machine-readable findings (the schema of ``ddltrace analyze --json``): costliest first, each with its
    ``cost_ns``, the analyses not made from this input with the reason, and per store the ranks it holds no
    usable timeline for (``missing_ranks``: rank and reason; the findings are of the other ranks), per store
    what the import found wrong in its files (``import_problems``: the findings are of what could be read), the runs
    given that could not be read (``left_out``: input and reason; the findings are of the others), per store
    how its clocks were aligned (``clocks``: ``ddltrace info --json``'s ``clock``), and the thresholds the
    findings were judged by (``thresholds``, as ``analyze --json`` gives them)."""
    from ddltrace.analyses.requirements import not_made_json

    return {"ddltrace_version": __version__, "stores": report.stores,
            "findings": [f.to_dict() for f in report.findings],
            "not_made": not_made_json(report.not_made),
            "missing_ranks": {store: [{"rank": rank, "reason": why} for rank, why in named]
                              for store, named, _, _ in report.missing},
            "import_problems": dict(report.import_problems),
            "left_out": [{"input": given, "reason": why} for given, why in report.left_out],
            "clocks": {store: clock.to_dict() for store, clock in report.clocks},
            "thresholds": report.thresholds}


def _earlier_report(out: Path) -> set[str]:
    """The files of an earlier report in ``out``: those its report.md links (figures, trace.json) and itself."""
    import re

    try:
        text = (out / "report.md").read_text(errors="replace")
    except OSError:
        return set()
    return {"report.md", "report.html", "findings.json", *re.findall(r"\]\(([\w.-]+\.(?:png|json))\)", text)}


def write(report: Report, out: Path) -> ReportFiles:
    """Write report.html, report.md, findings.json and the figure PNGs into ``out``: all of them, or (a full
    disk, a folder that refuses) none and one line (:func:`ddltrace.outputs.output_folder`)."""
    from ddltrace.report import render

    files = {f"{fig.key}.png": fig.png for fig in report.figures}
    files["report.html"] = render.html(report).encode()
    files["report.md"] = render.markdown(report).encode()
    files["findings.json"] = json.dumps(findings_document(report), indent=2, default=str).encode()
    stale = _earlier_report(out) - files.keys() - ({TRACE_FILE} if report.trace_store is not None else set())
    with output_folder(out, "the report") as folder:
        for name, data in files.items():
            write_file(folder / name, data)
        if report.trace_store is not None:
            from ddltrace.chrome import export_chrome

            export_chrome(report.trace_store, folder / TRACE_FILE)
    for name in stale:  # an earlier report's figures (and trace) this one has not: they would read as its own
        (out / name).unlink(missing_ok=True)
    return ReportFiles(out / "report.html", out / "report.md", out / "findings.json",
                       [out / f"{fig.key}.png" for fig in report.figures],
                       out / TRACE_FILE if report.trace_store is not None else None)
