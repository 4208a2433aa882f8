"""``ddltrace info STORE``: what a trace store holds, per rank, as a table (or JSON)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from ddltrace.errors import one_line
from ddltrace.units import format_bytes, format_ns, format_percent

if TYPE_CHECKING:  # the store and pandas are imported where used: the CLI starts without them
    from ddltrace.clock_alignment import ClockAlignment
    from ddltrace.store import TraceStore
    from ddltrace.summary import StoreSummary


#: How many of the store's notes the table shows, the first ones (``--json`` gives all).
NOTES_SHOWN = 10


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "info", help="show what a trace store holds",
        description="Show a trace store's run, world size, time span, and per rank the number of events and "
                    "the time spent per category (compute, comm, wait, barrier, io, memcpy, idle, other).")
    p.add_argument("store", help="trace store folder")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON (times in ns)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ddltrace.clock_alignment import clock_alignment
    from ddltrace.store import TraceStore
    from ddltrace.summary import summarize

    store = TraceStore.open(args.store)
    summary = summarize(store)
    clock = clock_alignment(store.manifest)
    uncategorised = store.manifest.get("uncategorised")
    nodes = _nodes(store)
    if args.json:
        missing = store.run.get("missing_nodes")
        json.dump({**summary.to_dict(), **({"uncategorised": uncategorised} if uncategorised else {}),
                   **({"missing_nodes": missing} if missing else {}),
                   **({"import_problems": store.import_problems} if store.import_problems else {}),
                   **({"notes": store.notes} if store.notes else {}),
                   "nodes": [n.to_dict() for n in nodes], "clock": clock.to_dict()}, sys.stdout, indent=2,
                  default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(summary, nodes, clock, store.import_problems, store.notes))
        if uncategorised:
            from ddltrace.collectors.importers.categories import uncategorised_text

            sys.stdout.write(uncategorised_text(uncategorised) + "\n")
    return 0


def _nodes(store: TraceStore) -> list:
    """One row per node from the store's machine counters (ddltrace.node_summary)."""
    from ddltrace.node_summary import per_node

    hosts = store.run.get("hosts") if isinstance(store.run.get("hosts"), list) else []
    machine = store.counter_tables([-1]).get(-1)
    return per_node(machine, [str(h) for h in hosts]) if machine is not None else []


def _node_lines(nodes: list) -> list[str]:
    """The per-node table: CPU (mean of all cores, %), peak memory used, bytes sent and received on the
    node's interfaces but loopback, and the job's own CPU (mean, 100 % = one core) and resident memory (peak), over
    the samples of the node's sampler."""
    header = ["node", "samples", "CPU mean", "memory peak", "sent", "received", "job CPU mean", "job memory peak"]
    rows = [[one_line(n.host), str(n.samples),
             "-" if n.cpu_percent is None else format_percent(n.cpu_percent / 100),
             "-" if n.mem_peak_bytes is None else format_bytes(n.mem_peak_bytes),
             "-" if n.sent_bytes is None else format_bytes(n.sent_bytes),
             "-" if n.recv_bytes is None else format_bytes(n.recv_bytes),
             "-" if n.job_cpu_percent is None else format_percent(n.job_cpu_percent / 100),
             "-" if n.job_rss_peak_bytes is None else format_bytes(n.job_rss_peak_bytes)] for n in nodes]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = ["", "per node (machine counters over each node's samples; CPU: all cores, every user; sent/received: all "
                 "interfaces but loopback; job: the job's processes on the node, CPU 100 % = one core, memory their "
                 "summed resident peak)"]
    for row in [header, *rows]:
        lines.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(row, widths, strict=True))))
    return lines


def _job_line(workload: dict) -> str | None:
    """The shipped job's workers and server as its configuration says them (None without one)."""
    config = workload.get("config")
    if not isinstance(config, dict) or type(config.get("workers")) is not int:
        return None
    w, server = config["workers"], config.get("server_rank")
    return (f"{one_line(str(workload.get('job', 'workload')))}: w = {w} worker{'s' if w != 1 else ''}, "
            + (f"server rank {server}" if type(server) is int else "no server")
            + f" (the job's configuration), {one_line(str(config.get('sync')))}, "
            f"{one_line(str(config.get('compute')))} compute")


def job_run_end(run) -> dict:
    """How the job ended as a store's run entry records it: ``exit_code`` (an int) and ``interrupted`` (True), each
    where recorded (a damaged manifest's entry may say anything)."""
    run = run if isinstance(run, dict) else {}
    code = run.get("exit_code")
    return {**({"exit_code": code} if isinstance(code, int) and not isinstance(code, bool) else {}),
            **({"interrupted": True} if run.get("interrupted") is True else {})}


def profiled_window(run) -> str | None:
    """Where a framework's profiler recorded only some steps of the job (``run.profiled_steps``, ``ddltrace run
    --framework``'s window): the words saying the store's time is that window's; None elsewhere."""
    steps = run.get("profiled_steps") if isinstance(run, dict) else None
    if not (isinstance(steps, list) and len(steps) == 2 and all(type(x) is int for x in steps)):
        return None
    return (f"the profiled steps {steps[0]}-{steps[1]} (the framework profiler's window: the time and shares are of "
            "it, not of the whole job)")


def job_end(run) -> str | None:
    """How the job ended, where ``ddltrace run`` recorded it (:func:`job_run_end`): its exit code (a negative one:
    the signal that ended it), and whether ddltrace stopped it (an interrupt: Ctrl-C, SIGTERM, SIGHUP); None where
    nothing is recorded."""
    ended = job_run_end(run)
    code, interrupted = ended.get("exit_code"), ended.get("interrupted", False)
    if code is None:
        return "stopped by an interrupt (Ctrl-C / SIGTERM / SIGHUP)" if interrupted else None
    said = f"exit code {code}" + (f" (ended by signal {-code})" if code < 0 else "")
    return said + ("; stopped by an interrupt (Ctrl-C / SIGTERM / SIGHUP)" if interrupted else "")


def render(summary: StoreSummary, nodes: list | None = None, clock: ClockAlignment | None = None,
           import_problems: list[str] = (), notes: list[str] = ()) -> str:
    """The human table of ``ddltrace info`` (the manifest's strings with their control characters escaped);
    ``clock``: how the ranks' clocks were aligned (:mod:`ddltrace.clock_alignment`), after the counters;
    ``import_problems``: what the import found wrong in the files it read (:attr:`TraceStore.import_problems`);
    ``notes``: what the run or import said of the store (:attr:`TraceStore.notes`), after how the job ended."""
    run = summary.run
    lines = [f"store       {one_line(summary.path)}"]
    if run.get("command"):
        command = run["command"] if isinstance(run["command"], str) else " ".join(map(str, run["command"]))
        lines.append(f"command     {one_line(command)}")
    for key in ("framework", "workload"):
        if run.get(key):
            lines.append(f"{key:<12}{one_line(str(run[key]))}")
    lines.append(f"world size  {summary.world_size} ranks ({len(summary.ranks)} recorded)")
    job = _job_line(summary.workload)
    if job:
        lines.append(f"job         {job}")
    missing = run.get("missing_nodes") if isinstance(run.get("missing_nodes"), dict) else {}
    for host, folder in sorted(missing.items()):  # node-local parts not gathered (docs/COLLECTORS.md)
        lines.append(f"missing     node {one_line(str(host))}: its part was not gathered; it is on that node in "
                     f"{one_line(str(folder))} (copy it here, then `ddltrace merge {one_line(summary.path)} "
                     "FOLDER --out NEW`)")
    if summary.damaged:
        lines.append(f"damaged     rank {', '.join(map(str, sorted(summary.damaged)))} left out (the warnings "
                     "above say why); the figures below are of the other ranks")
    for problem in import_problems:
        lines.append(f"problem     {one_line(problem)}")
    lines.extend(_unlisted_lines(summary))
    window = profiled_window(run)
    after = _after_stop(summary)
    lines.append(f"time span   {format_ns(summary.span_ns)}" + (f", {window}" if window else "")
                 + (f"; {format_ns(after)} of it after the stop (the interrupt), which the time per category below "
                    "leaves out" if after else ""))
    lines.append(f"events      {summary.events}")
    lines.append(f"counters    {summary.counter_samples} samples"
                 + (f" of {len(summary.counter_names)} series" if summary.counter_names else ""))
    if clock is not None:
        lines.extend(clock.lines())
    ended = job_end(run)
    if ended:
        lines.append(f"job ended   {ended}")
    abrupt = [r.rank for r in summary.ranks if r.ended == "abrupt"]
    if abrupt:
        lines.append(f"ended abruptly: rank {', '.join(map(str, abrupt))} (records up to the end are kept)")
    if summary.ended_first is not None and summary.ended_first.text():  # what the records say of who ended first
        label = "ended first" if summary.ended_first.first is not None else "ended"
        lines.append(f"{label:<12}{summary.ended_first.text()}")
    stopped = [r.rank for r in summary.ranks if r.ended == ENDED_BY_INTERRUPT]
    if stopped:
        lines.append(f"ended interrupted: rank {', '.join(map(str, stopped))} (their MPI_Finalize began after the "
                     "interrupt: on the way out of the stopped job, not at the end of their work)")
    lines.extend(f"note        {one_line(note)}" for note in notes[:NOTES_SHOWN])
    if len(notes) > NOTES_SHOWN:  # (an import of a thousand files leaves a note per file)
        lines.append(f"note        ... and {len(notes) - NOTES_SHOWN} more notes (info --json lists them all)")
    aggregate = [r.rank for r in summary.ranks if r.aggregate]
    if aggregate:
        lines.append(f"aggregates  {len(aggregate)} rank(s) hold per-call totals (no timeline): the times per "
                     "category are the file's; their order and start times are the importer's layout")
    lines.extend(["", *category_table(summary)])
    if nodes:  # the per-node rows (ddltrace.node_summary), after the ranks
        lines += _node_lines(nodes)
    return "\n".join(lines) + "\n"


#: ``ended`` of a rank whose MPI_Finalize began after the job's interrupt (the launcher's ``ENDED_BY_INTERRUPT``,
#: named here so that ``info`` starts without the collectors).
ENDED_BY_INTERRUPT = "interrupted"
#: How many ranks a "not listed" line names (each reason's line).
UNLISTED_NAMED = 16


def _unlisted_lines(summary: StoreSummary) -> list[str]:
    """The ranks of the world the store holds no timeline of, each with :meth:`TraceStore.missing`'s reason (the
    run's note on them, the import's problem with the file that gave no event, ...); consecutive ranks with one
    reason on one line. A rank with no entry and no note on it: not in the files imported (an imported store), or no
    usable entry in the manifest. A rank whose entry holds no events is listed, with no events: "no events"."""
    from ddltrace.merged_manifest import unfiled_ranks
    from ddltrace.store import rank_runs

    recorded = {r.rank for r in summary.ranks}
    generic = ("not in the files imported, whose run names that world" if summary.run.get("imported_files") else
               "no usable entry in the manifest")

    def said(rank: int) -> str:
        why = summary.unlisted[rank]
        if unfiled_ranks(why) is not None:  # the run's own note on them (store.missing)
            return f"the run's note: {why}"
        return why if rank in recorded else generic

    lines = []
    for empty in (False, True):
        named = [(r, said(r)) for r in sorted(summary.unlisted) if (r in recorded) == empty]
        groups: dict[str, list[tuple[int, int]]] = {}
        for first, last, why in rank_runs(named):
            groups.setdefault(why, []).append((first, last))
        for why, spans in groups.items():
            ranks = [str(f) if f == last else f"{f}-{last}" for f, last in spans]
            shown = ", ".join(ranks[:UNLISTED_NAMED]) + (" ..." if len(ranks) > UNLISTED_NAMED else "")
            label = "no events   " if empty else "not listed  "
            lines.append(f"{label}rank {shown} of the world of {summary.world_size}: {one_line(why)}, so no "
                         "timeline here")
    return lines


def _after_stop(summary: StoreSummary) -> int:
    """ns of the store's time span after the stop (an interrupted run's ``interrupted_ns``), 0 where none."""
    from ddltrace.summary import stopped_at

    stop = stopped_at(summary.run)
    if stop is None or summary.start_ns is None or stop >= summary.end_ns:
        return 0
    return summary.end_ns - max(stop, summary.start_ns)


def category_table(summary: StoreSummary) -> list[str]:
    """Time per category per rank; a rank with a device gets two rows, its host lanes and its device lanes."""
    from ddltrace.arrow_timeline import CATEGORIES

    split = any(r.device_time_ns for r in summary.ranks)
    views = [(r, label, events, times) for r in summary.ranks for label, events, times in
             ((("host", r.events - r.device_events - (r.annotation_events or 0), r.host_time_ns),
               ("device", r.device_events, r.device_time_ns))
              if r.device_time_ns else (("all" if split else "", r.events, r.time_ns),))]
    used = [c for c in CATEGORIES if any(times.get(c) for *_, times in views)]
    stopped = any(r.after_stop_ns for r in summary.ranks)
    lines = ["time per category per rank (each instant once; share of the rank's span in parentheses)"
             + ("; a rank with a device: its host threads and its device streams (gpu:) side by side, the "
                "device idle where nothing runs on it" if split else "")
             + ("; the job was stopped (an interrupt): a rank's span runs from its first event to the stop, and its "
                "time after the stop (its wait for the stop, then its way out), in no category, is 'after stop'"
                if stopped else "")]
    header = ["rank", *(["lanes"] if split else []), "events", "span", *(["after stop"] if stopped else [])] + used
    rows = []
    for r, label, events, times in views:
        row = [str(r.rank), *([label] if split else []), str(events), format_ns(r.span_ns),
               *([format_ns(r.after_stop_ns)] if stopped else [])]
        for c in used:
            share = times[c] / r.span_ns if r.span_ns else float("nan")
            row.append(f"{format_ns(times[c])} ({format_percent(share)})")
        rows.append(row)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines.append("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        lines.append("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    marks = {r.rank: r.annotation_events for r in summary.ranks if r.annotation_events}
    if marks:
        where = f"rank(s) {', '.join(map(str, marks))}" if len(marks) <= 8 else f"{len(marks)} ranks"
        lines.append(f"  plus {sum(marks.values())} annotation span(s) of device streams (Kineto's "
                     f"gpu_user_annotation, lanes '.../annotations', {where}): "
                     "region marks, counted in neither the host nor the device row")
    return lines
