"""``ddltrace analyze STORE [STORE ...]``: what holds the job back, with the numbers that prove it.

Prints the findings, costliest first (the time the job loses to each), each with its evidence and what to try;
the analyses that could not be made from this input and why; then the breakdown per rank (phase times and the
share of each category, the average rank beside the slowest; host and device side by side for ranks with a
device; per node for ranks on several hosts); with several stores, the scaling study with Chang's Lemma 3.1.
``--json`` prints the same for machines. ``--fail-on warning|error`` exits 1 when a finding reaches that
severity, so the command can guard a training pipeline in CI.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

from ddltrace.analyses.findings import SEVERITIES, Finding, detect, severity_rank
from ddltrace.analyses.requirements import Skipped
from ddltrace.analyses.thresholds import DEFAULTS, Thresholds
from ddltrace.errors import one_line
from ddltrace.rank_progress import PROGRESS_EVENTS, PROGRESS_EVERY_S, PROGRESS_RANKS, rank_progress
from ddltrace.units import format_ns, format_percent

if TYPE_CHECKING:  # the analyses and pandas are imported where used: the CLI starts without them
    import pandas as pd

    from ddltrace.analyses.run_analysis import RunAnalysis

#: ``--phase``'s choices besides ``all``: analyses/phases.py's PHASES, named here so that the CLI starts without
#: pandas (tests/test_cli_startup.py checks that the two agree).
PHASES = ("init", "steady", "final")
#: How a phase is named in a column's label (``overlap(steady)``).
_PHASE_WORD = {"all": "run", "init": "init", "steady": "steady", "final": "final"}
#: Said of the busiest worker where gloo's collectives are in the store: a wait inside a leaf op is still compute.
HELD_WAITS = ("; on gloo a thread waits for the collectives on gloo's threads: inside a span that holds others "
              "(DistributedDataParallel.forward waiting for the buffers' broadcast) that wait is comm, inside a "
              "leaf op it stays compute: the straggler at the host collectives reads the arrivals")
SHOWN_CATEGORIES = ("compute", "comm", "wait", "barrier", "io", "memcpy", "idle", "other")
MAX_RANKS_SHOWN = 32


#: The thresholds and their defaults, under ``--help`` of the commands that take them.
THRESHOLDS_EPILOG = ("Thresholds: " + ", ".join(f"{k}={int(t.value) if float(t.value).is_integer() else t.value}"
                                                 for k, t in DEFAULTS.items())
                     + ". See docs/ANALYSES.md for what each detector measures and why its default is what it is.")


#: How :func:`~ddltrace.analyses.phases.segment_rank` found a rank's phases, in words.
PHASE_METHODS = {"markers": "the steps the trace marks", "pattern": "the rank's repeating pattern of calls",
                 "collectives": "the collectives around its point-to-point traffic",
                 "mpi": "MPI_Init and MPI_Finalize (no steps found)",
                 "ends": "the rank's first and last event (no steps, no MPI_Init or MPI_Finalize)",
                 "aggregate": "none (per-call totals: the whole rank is one phase)"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze", help="find what holds a run back (findings with evidence, breakdown, scaling)",
        description="Analyse one run, or a series of runs of one job (different numbers of workers or batch "
                    "sizes): phases, time per category, Scalasca wait states, and the divergences ddltrace knows "
                    "(sequential initialisation, parameter-server saturation, stragglers, staleness, I/O-bound, "
                    "low overlap, cache cliff, a slow link between nodes). Findings come costliest first (the "
                    "time the job loses to each), each with its evidence; analyses the input cannot support (a "
                    "timeline, matched messages, ...) are listed with the reason.",
        epilog=THRESHOLDS_EPILOG)
    p.add_argument("stores", nargs="+", metavar="STORE",
                   help="trace store(s) written by ddltrace run / import, or trace files or folders (anything "
                        "ddltrace import reads), imported into a temporary store first")
    p.add_argument("--json", action="store_true", help="print JSON (findings, phases, breakdown, scaling)")
    p.add_argument("--fail-on", choices=["warning", "error"],
                   help="exit 1 when a finding reaches this severity (for CI)")
    add_threshold_options(p)
    p.add_argument("--phase", choices=["all", *PHASES], default="all",
                   help="phase of the breakdown table (default all: the whole run, as IPM shows it)")
    p.add_argument("--profile", metavar="FILE",
                   help="hardware profile from 'ddltrace calibrate': its r_net is the link bandwidth the slow-link "
                        "detector compares the nodes' transfers with")
    p.add_argument("--quiet", action="store_true",
                   help=f"no progress lines on stderr (printed for a store of {PROGRESS_RANKS} ranks or "
                        f"{PROGRESS_EVENTS:,} events and more, and always with --scheduler)")
    add_where_options(p)
    p.set_defaults(func=run)


#: Ranks summarised at once by default: one process each, each holding one rank's events.
DEFAULT_MAX_JOBS = 8
#: Without --jobs, a store of fewer events (from its manifest) is read in this process: forking the processes and
#: sending the summaries back costs more than the cores save there.
POOL_MIN_EVENTS = 1_000_000


def add_threshold_options(p) -> None:
    """``--threshold KEY=VALUE`` and ``--config FILE``: the detectors' thresholds (``analyze``, ``report``)."""
    p.add_argument("--threshold", action="append", default=[], metavar="KEY=VALUE",
                   help="change a threshold (repeatable), e.g. --threshold ps.busy_min=0.8")
    p.add_argument("--config", metavar="FILE", help="thresholds from a JSON or TOML file ([thresholds] table)")


def thresholds_of(args) -> Thresholds:
    """The thresholds :func:`add_threshold_options`' options give: the defaults, the file's, then each
    assignment."""
    thresholds = Thresholds()
    if args.config:
        thresholds = thresholds.with_config(args.config)
    return thresholds.with_assignments(args.threshold)


def add_where_options(p) -> None:
    """``--jobs`` and ``--scheduler``: where the ranks are read and summarised (``analyze``, ``report``)."""
    from ddltrace.options import integer

    where = p.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=integer(1, 1024), metavar="N",
                       help="ranks read at once, one per process of this machine, each holding one rank's events "
                            f"(default: one per CPU this process may use, at most {DEFAULT_MAX_JOBS}; in this "
                            f"process for a store of under {POOL_MIN_EVENTS:,} events)")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="read the ranks as tasks on this Dask cluster (tcp://host:8786); every worker must see "
                            "the store's path (a shared file system); see docs/CLUSTER.md")


def _unreadable(args: tuple, why: str):
    """The summary of a rank whose task was given up (its workers died while reading it): named as unreadable."""
    from ddltrace.analyses.rank_summary import RankSummary

    rank = args[0]
    return RankSummary(rank, damaged=f"rank {rank}: its task {why}; rank {rank} left out")


def rank_mapper(args):
    """A context giving the mapper (:mod:`ddltrace.executor`) that summarises the ranks as ``--jobs`` or
    ``--scheduler`` say, or None when neither is given (:func:`analyze_with_progress` then chooses by the store's
    size). The summaries come as they finish (the reduce takes them in any order). A rank whose task is given up
    (its workers died while reading it, Dask's ``allowed-failures`` times) is named as unreadable, like a damaged
    file, and the other ranks are reported."""
    import contextlib

    from ddltrace.executor import mapper_for

    if not (args.jobs or args.scheduler):
        return contextlib.nullcontext()
    return mapper_for(args.scheduler, args.jobs or 1, on_failure=_unreadable, ordered=False)


def check_workers_see(mapper, stores: list[str], labels: dict[str, str], verb: str) -> None:
    """On a Dask cluster, that every worker sees each store's path, else one line naming it (and the workers): a
    worker would say 'no such trace store' of a store this command reads. A trace this command imported into its
    temporary folder says how to import it where the workers see it."""
    if mapper is None:
        return

    def hint(path: str) -> str:
        if path not in labels:
            return "every worker must see the store under the same path (a shared file system; docs/CLUSTER.md)"
        return (f"it is the temporary store this command imported {labels[path]} into, on this machine: import it "
                f"onto a path every worker sees ('ddltrace import {labels[path]} --out SHARED/STORE'), then {verb} "
                "that")

    mapper.check_visible(stores, hint)


def analyze_with_progress(path, quiet: bool = False, verb: str = "analyze", mapper=None):
    """:func:`~ddltrace.analyses.run_analysis.analyze_store` of the store at ``path`` (or open), its ranks summarised by
    ``mapper`` (:mod:`ddltrace.executor`; None: in this process for a store of under :data:`POOL_MIN_EVENTS`
    events, else by one process per CPU); for a big store (see :data:`PROGRESS_RANKS`), or on a Dask cluster, a
    line on stderr before the first rank is read and then every :data:`PROGRESS_EVERY_S` seconds: ranks read,
    events read and their rate (events per second of wall time), and where the tasks run (the cluster's workers);
    then, as the wait states are matched (in this process), ranks matched of all and their rate (ranks per second
    of wall time)."""
    from ddltrace.store import TraceStore

    store = path if isinstance(path, TraceStore) else TraceStore.open(path)
    listed = sum(int(store.rank_info(r).get("events", 0) or 0) for r in store.ranks)
    if mapper is not None:
        return _analyze(store, listed, quiet, verb, mapper)
    if listed < POOL_MIN_EVENTS:
        return _analyze(store, listed, quiet, verb, map)
    from ddltrace.executor import LocalMapper, usable_cpus

    with LocalMapper(min(usable_cpus(), DEFAULT_MAX_JOBS), on_failure=_unreadable, ordered=False) as local:
        return _analyze(store, listed, quiet, verb, local)


def _analyze(store, listed: int, quiet: bool, verb: str, mapper):
    import time

    from ddltrace.analyses.run_analysis import analyze_store

    remote = getattr(mapper, "remote", False)
    if quiet or (len(store.ranks) < PROGRESS_RANKS and listed < PROGRESS_EVENTS and not remote):
        return analyze_store(store, mapper=mapper)
    started = last = 0.0  # (the matching's: set at its first call)

    def say(message: str, here: bool = False) -> None:
        where = " in this process" if here else f" {mapper.where}" if hasattr(mapper, "where") else ""
        print(f"ddltrace {verb}: {store.path}: {message}{where}", file=sys.stderr, flush=True)

    say(f"reading {len(store.ranks)} ranks ({listed:,} events) rank by rank")
    progress = rank_progress(say, "read")

    def matching(done: int, total: int) -> None:
        nonlocal last, started
        now = time.perf_counter()
        if done == 0:
            started = last = now
            say(f"matching the wait states of {total} ranks, rank by rank", here=True)
        elif done == total or now - last >= PROGRESS_EVERY_S:
            last = now
            say(f"{done} of {total} ranks matched, {done / max(now - started, 1e-9):,.1f} ranks/s", here=True)

    return analyze_store(store, mapper=mapper, progress=progress, matching=matching)


def run(args) -> int:
    from ddltrace import quiet_gc

    with quiet_gc.loading():  # (the module says why)
        import pandas as pd

        from ddltrace.analyses.run_analysis import not_made
        from ddltrace.analyses.scaling import scaling_table
        from ddltrace.heap_reuse import keep_freed_memory
        from ddltrace.trace_inputs import as_stores, refuse_twice, stores_in, usable
    keep_freed_memory()  # a third fewer page faults in the analyses' frames (the module says why)

    thresholds = thresholds_of(args)
    given = [each for path in args.stores for each in stores_in(path)]  # (a folder of stores: its stores)
    refuse_twice(given)
    left: list[tuple[str, str]] = []  # (input, why) of each left out: it could not be read, others could
    with as_stores(given, "analyze", args.quiet, left) as (stores, labels):  # (the stores read to the end)
        with rank_mapper(args) as mapper:
            check_workers_see(mapper, stores, labels, "analyze")

            def analysed(path):  # (a store that cannot be read, among several, is left out: trace_inputs.usable)
                r = analyze_with_progress(path, args.quiet, mapper=mapper)
                r.store.label = labels.get(path)
                r.store.refuse_if_empty("nothing to analyze")
                return r

            runs = usable(stores, "analyze", analysed, left)
        left = [(labels.get(path, path), why) for path, why in left]
        if args.profile:
            from ddltrace.gpu_section import copy_bandwidths
            from ddltrace.node_section import link_bandwidth

            link = link_bandwidth(args.profile)
            copies = copy_bandwidths(args.profile)
            for r in runs:
                r.link_bytes_per_s = link
                r.copy_bytes_per_s = copies
        findings, skipped = detect(runs, thresholds)
        skipped = not_made(runs) + skipped
        scaling_runs = [r for r in runs if r.can("scaling")]
        scaling = scaling_table(scaling_runs) if len(scaling_runs) > 1 else pd.DataFrame()
        if args.json:
            from ddltrace.json_output import encode

            doc = to_json(runs, findings, scaling, thresholds, args.phase, skipped)
            sys.stdout.write(encode({**doc, "left_out": [{"input": i, "reason": why} for i, why in left]}) + "\n")
        else:
            sys.stdout.write("".join(f"Left out: {one_line(why)} (the other runs are analysed).\n" for _, why in left)
                             + render(runs, findings, scaling, args.phase, skipped))
    if args.fail_on and any(severity_rank(f.severity) >= severity_rank(args.fail_on) for f in findings):
        return 1
    return 0


# -- text -----------------------------------------------------------------------------------------------------


def render(runs: list[RunAnalysis], findings: list[Finding], scaling: pd.DataFrame, phase: str,
           skipped: list[Skipped] = ()) -> str:
    lines = []
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    missing = sum(r.store.missing_count() for r in runs)
    world = sum(r.store.world_size for r in runs)
    lines.append(f"ddltrace analyze: {len(runs)} store{'s' if len(runs) > 1 else ''}; findings: "
                 f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
                 + (f"; {missing} of {world} ranks not analysed (below)" if missing else ""))
    lines.extend(render_missing(r) for r in runs if r.store.missing_count())
    lines.extend(render_import_problems(r) for r in runs if r.store.import_problems)
    lines.extend(filter(None, (render_job_end(r) for r in runs)))
    lines.append("")
    if findings:
        lines.append("Findings, costliest first (cost: the time the job loses to it)")
        for f in findings:
            lines.extend(render_finding(f))
    else:
        lines.append("No findings: nothing holds this run back by the current thresholds.")
    if skipped:
        lines.append("")
        lines.extend(render_skipped(skipped, {r.name: r.holding for r in runs}))
    for r in runs:
        lines.append("")
        lines.extend(render_run(r, phase))
    if len(scaling):
        lines.append("")
        lines.extend(render_scaling(scaling))
    return "\n".join(lines) + "\n"


def render_missing(r: RunAnalysis, named: int = 8) -> str:
    """One line naming the ranks of ``r``'s run that the store holds no usable timeline for, and why: everything
    below (findings, breakdown, scaling) is of the other ranks."""
    from ddltrace.store import rank_runs

    missing = r.store.missing()
    count = r.store.missing_count()
    world = r.store.world_size
    runs = rank_runs(list(missing.items()))[:named]  # consecutive ranks missing for one reason: one entry
    shown = "; ".join(f"rank {first} ({why})" if first == last else f"ranks {first}-{last} ({why})"
                      for first, last, why in runs)
    left = count - sum(last - first + 1 for first, last, _ in runs)
    more = f"; and {left} more" if left else ""
    return (f"Missing ranks in {r.name}: {shown}{more}. Everything below is of the other {world - count} of {world} "
            f"ranks.")


def render_job_end(r: RunAnalysis) -> str | None:
    """One line where the job did not end well: its exit code (or the interrupt that stopped it), the ranks that
    ended abruptly and those that ended on the way out of the stopped job (``ended`` "interrupted"), and each rank's
    time after the stop, which the breakdown leaves out (:func:`after_stop`); where a rank ended abruptly, what the
    records say of which rank ended first and which ended inside a call (:func:`ddltrace.summary.ended_first`);
    where ``ddltrace recover`` made the store, that it did and that the exit code is not known; None where it exited
    0 with every rank ended normally (or nothing was recorded)."""
    from ddltrace.commands.info import ENDED_BY_INTERRUPT, job_end, job_run_end

    run = job_run_end(r.store.run)
    code = run.get("exit_code")
    how = {rank: r.store.rank_info(rank).get("ended") for rank in r.store.ranks}
    abrupt = [rank for rank, ended in how.items() if ended == "abrupt"]
    stopped = [rank for rank, ended in how.items() if ended == ENDED_BY_INTERRUPT]
    ended = job_end(run)
    recovered = r.store.run.get("recovered_from")
    ranks = f"; rank {_ranks(abrupt)} ended abruptly (their records up to the end are kept)" if abrupt else ""
    if stopped:
        ranks += (f"; rank {_ranks(stopped)} ended interrupted (their MPI_Finalize began after the interrupt: on the "
                  "way out of the stopped job, not at the end of their work)")
    after = after_stop(r)
    if abrupt:  # what the records say of which rank ended first, and which ended inside a call
        from ddltrace.summary import ended_first

        first = ended_first(r.store)
        said = first.text() if first is not None else ""
        after = (f" {said[0].upper()}{said[1:]}." if said else "") + after
    if isinstance(recovered, str) and code is None:
        return (f"{r.name} was made by `ddltrace recover` from the raw records {one_line(recovered)}: the `ddltrace "
                f"run` of the job did not write it, so the job's exit code and end are not known (its end is the last "
                f"call recorded){'; ' + ended if ended else ''}{ranks}.{after}")
    if code in (0, None) and not run.get("interrupted") and not abrupt and not stopped and not after:
        return None
    return f"The job in {r.name} did not end well: {ended or 'exit code not recorded'}{ranks}.{after}"


def after_stop(r: RunAnalysis) -> str:
    """Where the job was stopped before ranks' last events (:attr:`~ddltrace.analyses.phases.RankPhases.stop_ns`):
    a sentence saying that their time after the stop (how long, of which ranks) is left out of the breakdown (its
    whole run is each rank's time up to the stop, its phases end there); "" elsewhere."""
    after = {rank: p.after_stop_ns for rank, p in r.phases.items() if p.after_stop_ns > 0}
    if not after:
        return ""
    low, high = format_ns(min(after.values())), format_ns(max(after.values()))
    length = high if low == high else f"{low} to {high}"
    return (f" The ranks' time after the stop (their wait for it, then their way out: {length}, rank "
            f"{_ranks(sorted(after))}) is left out of the breakdown below: its whole run is each rank's time up to the "
            "stop, where its phases end at the latest (--json: phases' after_stop_ns).")


def render_import_problems(r: RunAnalysis, named: int = 3) -> str:
    """One line naming what the import found wrong in the files of ``r``'s store (a file cut short, ...): the
    analysis is of what could be read of them."""
    problems = r.store.import_problems
    more = f"; and {len(problems) - named} more" if len(problems) > named else ""
    return (f"Import problems in {r.name}: {'; '.join(problems[:named])}{more}. Everything below is of what the "
            "import could read.")


def render_finding(f: Finding) -> list[str]:
    out = [f"  [{f.severity.upper()}] {f.title}"]
    where = [f"store {f.store}" if f.store else "", f"phase {f.phase}",
             f"ranks {_ranks(f.ranks)}" if f.ranks else ""]
    out.append("      " + "; ".join(w for w in where if w))
    out.append(f"      cost: {f.cost}" + (f" ({f.cost_basis})" if f.cost_basis else ""))
    width = max((len(k) for k in f.evidence), default=0)
    for key, quantity in f.evidence.items():
        out.append(f"      {key:<{width}}  {quantity}")
    if f.advice:
        out.append(f"      what to try: {f.advice}")
    return out


def render_skipped(skipped: list[Skipped], holdings: dict[str, str]) -> list[str]:
    """The analyses not made from this input: what each store holds (``holdings``, by store), then each analysis
    once with what it needs (and the stores it was not made from, when there are several); what the input holds
    that stops several analyses is said once, above them ("Where the input holds ...:", :func:`by_holding`)."""
    from ddltrace.analyses.requirements import by_holding, group, holdings_lines

    several = (len(holdings) > 1, tuple(holdings))
    alone, said_once = by_holding(group(skipped, holdings), several[0])
    lines = ["Not made from this input", *(f"  {line}:" for line in holdings_lines(skipped, holdings))]
    lines += [f"    - {g.line(*several)}" for g in alone]
    for once in said_once:
        lines += [f"  Where {once.held}:", *(f"    - {g.line(*several)}" for g in once.analyses)]
    return lines


def _ranks(ranks: list[int]) -> str:
    if len(ranks) <= 8:
        return ", ".join(map(str, ranks))
    return ", ".join(map(str, ranks[:8])) + f", ... ({len(ranks)} ranks)"


def render_run(r: RunAnalysis, phase: str) -> list[str]:
    from ddltrace.analyses import region_counters
    from ddltrace.gpu_section import render_gpu
    from ddltrace.host_section import render_host_collectives
    from ddltrace.memory_section import render_memory
    from ddltrace.node_section import render_nodes

    note = []
    if phase != "all" and not r.can("breakdown_by_phase"):
        note = [f"  (no {phase} phase in this input: it holds {r.holding}; shares of the whole run instead)"]
        phase = "all"
    table = r.table(phase)
    phases = r.phase_table
    ranks = len(r.ranks)
    from ddltrace.commands.info import profiled_window

    window = profiled_window(r.store.run)
    whole = window.split(" (", 1)[0] if window else "the whole run"  # (a framework's window: its steps alone)
    out = [f"Breakdown of {r.name} (w = {r.workers} worker{'s' if r.workers != 1 else ''}, {ranks} "
           f"rank{'s' if ranks != 1 else ''}; shares of "
           f"{whole if phase == 'all' else 'the ' + phase + ' phase'})", *note]
    if window:
        out.append(f"  the store holds {window}")
    if r.workers_inferred:
        out.append(f"  {r.workers_inferred}")
    if not len(table):
        return out + ["  (no events)"]
    timed = r.can("phases")
    shown = [c for c in SHOWN_CATEGORIES if table[c].sum() > 0]
    # the overlap of the table's phase, and beside it the overlap of the phase the detectors measure when another
    overlaps = {phase: table}
    overlaps.setdefault(r.main_phase, r.table(r.main_phase))
    header = ["rank", "role", "start-up", "init", "steady", "final", "steps", *shown,
              *[f"overlap({_PHASE_WORD[p]})" for p in overlaps]]
    rows = []
    for rank in table.index[:MAX_RANKS_SHOWN]:
        p = phases.loc[rank]
        steps = f"{int(p['steps'])}{' gradients' if p['step_unit'] == 'gradient' else ''}"
        kept = [format_ns(p["startup_ns"]) if p["startup_traced"] else "-", format_ns(p["job_init_ns"]),
                format_ns(p["steady_ns"]),
                format_ns(p["final_ns"]), steps] if timed else ["-"] * 5
        rows.append([str(rank), r.roles.get(rank, "-"), *kept,
                     *[format_percent(table.loc[rank, f"share_{c}"]) for c in shown],
                     *[format_percent(t["overlap"].get(rank, math.nan)) for t in overlaps.values()]])
    summary = r.average_and_slowest(phase)
    for label, row in summary.iterrows():
        rows.append([str(label), "", "", "", "", "", "", *[format_percent(row[f"share_{c}"]) for c in shown],
                     format_percent(row["overlap"]), *[""] * (len(overlaps) - 1)])
    out.extend("  " + line for line in _columns(header, rows))
    out.append("  overlap(P): Rudra's communication overlap over phase P of the rank (run: its whole run), compute / "
               "(compute + exposed comm + wait + barrier); the low-overlap finding takes the median worker's "
               f"overlap({_PHASE_WORD[r.main_phase]})"
               + ("" if "communication" in r.capabilities else " (n/a: the input holds no communication between ranks)")
               + ". average: the mean of the workers; slowest: the worker with "
               "the most busy time (compute + io + memcpy) in the phase, the one whose work the others wait for "
               "unless a rank is late for other reasons (a sleep, an input wait: the straggler findings name it)"
               + (HELD_WAITS if "host_comm" in r.capabilities else ""))
    if timed:
        out.append("  start-up: MPI's, the rank's first event to the end of its MPI_Init (the PMPI collector's clock "
                   "synchronisation inside it; '-' where the rank traced none, a framework's profile); init: the job's "
                   "own initialisation, from there to its first step (the init phase of the shares holds both); "
                   "steady, final: its steady state and finalisation")
    if timed and (phases["step_unit"] == "gradient").any():
        out.append("  steps: a worker's steady-state steps (compute then communicate); a server's are the gradients it "
                   "received in its steady state (receives of its largest message): one update each under "
                   "asynchronous SGD, n per update under n-softsync or hardsync (updates are made outside MPI)")
    if len(table) > MAX_RANKS_SHOWN:
        out.append(f"  ({len(table) - MAX_RANKS_SHOWN} more ranks; --json lists them all)")
    out.extend(render_device(r, phase))
    out.extend(render_nodes(r))
    out.extend(render_gpu(r))
    out.extend(render_host_collectives(r))
    out.extend(render_memory(r))
    out.extend("  " + line for line in region_counters.render(r.store))
    if r.can("wait_states"):
        totals = r.wait_state_table().sum()
        if totals.sum() > 0:
            out.append("  wait states (all ranks, whole run, summed over ranks): " + ", ".join(
                f"{k.replace('_', ' ')} {format_ns(v)}" for k, v in totals.items() if v > 0))
    out.extend(render_clock(r))
    if timed:
        out.append("  phases found by " + "; ".join(f"{PHASE_METHODS.get(m, m)}: {n} rank(s)"
                                                    for m, n in phases["method"].value_counts().items()))
        out.extend(f"  rank {rank}'s {note}" for rank, notes in phase_notes(r).items() for note in notes)
    else:
        out.append(f"  no phases or steps: this input holds {r.holding}")
    return out


def phase_notes(r: RunAnalysis) -> dict[int, list[str]]:
    """Per rank, what reading its steps had to decide (:attr:`~ddltrace.analyses.phases.RankPhases.notes`)."""
    return {rank: list(p.notes) for rank, p in sorted(r.phases.items()) if p.notes}


def render_clock(r: RunAnalysis) -> list[str]:
    """How the ranks' clocks were aligned (:mod:`ddltrace.clock_alignment`), and, where the run has wait states
    between ranks, how their mean compares with the clocks' uncertainty: a wait between two ranks is the difference
    of times on their two clocks, each offset wrong by up to its uncertainty, so by up to twice the largest."""
    from ddltrace.clock_alignment import clock_alignment

    clock = clock_alignment(r.store.manifest)
    out = [f"  clocks: {clock.summary()}"]
    bound = clock.max_uncertainty_ns
    if bound is None or not r.can("wait_states"):
        return out
    states = r.wait_state_summary
    between = states[states["peer"] >= 0]
    instances, time_ns = int(between["instances"].sum()), int(between["time_ns"].sum())
    if instances:
        mean = time_ns / instances
        out.append(f"  waits between ranks: {instances} instance(s), mean {format_ns(mean)} each; each is known to "
                   f"within ±{format_ns(2 * bound)} (twice the largest clock uncertainty)"
                   + ("; the mean is within that bound: these waits may be clock error" if mean <= 2 * bound
                      else ""))
    return out


def render_device(r: RunAnalysis, phase: str) -> list[str]:
    """Host and device of each rank with a device, side by side: time per category over the rank's span in the
    phase (host: its lanes that are not a device's; device: its ``gpu:`` lanes, idle where nothing runs)."""
    device = r.lanes_table("device", phase)
    if not len(device):
        return []
    host = r.lanes_table("host", phase)
    shown = [c for c in SHOWN_CATEGORIES if host.loc[device.index, c].sum() + device[c].sum() > 0]
    header = ["rank", "lanes", "span", *shown]
    rows = []
    for rank in device.index[:MAX_RANKS_SHOWN]:
        for label, frame in (("host", host), ("device", device)):
            row = frame.loc[rank]
            rows.append([str(rank), label, format_ns(row["total_ns"]),
                         *[f"{format_ns(row[c])} ({format_percent(row[f'share_{c}'])})" for c in shown]])
    out = ["", "  Host and device side by side (ranks with a device; time per category over the rank's span: host = "
               "its CPU threads, device = its gpu: streams, idle where none runs; streams' annotation spans in "
               "neither)"]
    out.extend("  " + line for line in _columns(header, rows))
    if len(device) > MAX_RANKS_SHOWN:
        out.append(f"  ({len(device) - MAX_RANKS_SHOWN} more ranks with a device; --json lists them all)")
    return out


def render_scaling(scaling: pd.DataFrame) -> list[str]:
    import pandas as pd

    from ddltrace.analyses.scaling import scaling_notes

    out = ["Scaling study (speedup against the run with the fewest workers of its series: one job at one batch "
           "size; Chang's Lemma 3.1 from R_O)"]
    header = ["series", "store", "w", "batch", "start-up", "init", "steady", "total", "S steady", "E steady",
              "S total", "E total", "R_O", "E lemma (base)", "E lemma (own)"]
    rows = []
    for _, row in scaling.iterrows():  # (in the table's order: by series, then w, then store)
        r_o = (f"{format_percent(row['overhead_ratio'])} ({format_percent(row['overhead_ratio_min'])}"
               f"-{format_percent(row['overhead_ratio_max'])})")
        rows.append([one_line(str(row["series"])) if isinstance(row["series"], str) else "-",
                     one_line(str(row["store"])),
                     str(int(row["workers"])), "-" if pd.isna(row["batch_size"]) else str(int(row["batch_size"])),
                     format_ns(row["startup_ns"]) if row["startup_traced"] else "-", format_ns(row["job_init_ns"]),
                     format_ns(row["steady_ns"]),
                     format_ns(row["total_ns"]),
                     *_compared(row), r_o, _compared_percent(row["efficiency_lemma_base"]),
                     _compared_percent(row["efficiency_lemma_own"])])
    out.extend("  " + line for line in _columns(header, rows))
    out.append("  S, E: speedup and efficiency against the run with the fewest workers w0 in its series (one job at "
               "one batch size; the median of its runs at w0; taken to scale perfectly up to w0; '-' for a run "
               "left out, see below), S(w) = w0 T(w0) / T(w), E = S / w, T the steady state (steady) or the whole "
               "run (total); R_O: the share of a worker's steady state that is not compute, median over the workers "
               "(their range); E lemma: Lemma 3.1's 1 / (1 + (w - 1) R_O) from the base run's R_O and from the "
               "run's own, both normalised to E(w0) = 1")
    out.append("  medians over the workers: start-up = MPI's, each worker's first event to the end of its MPI_Init "
               "(the PMPI collector's clock synchronisation inside it); init = the job's own initialisation, from "
               "there to its first step; steady = its steady state; total = the whole run, first event of any rank "
               "to the last; start-up '-': no worker traced an MPI_Init (a framework's profile), none measured")
    out.extend(f"  {one_line(note)}" for note in scaling_notes(scaling))
    return out


def _compared(row) -> list[str]:
    """S and E of the steady state and of the whole run, '-' where the run had no other to compare with (NaN)."""
    return [cell for what in ("steady", "total") for cell in (
        "-" if math.isnan(row[f"speedup_{what}"]) else f"{row[f'speedup_{what}']:.2f}x",
        _compared_percent(row[f"efficiency_{what}"]))]


def _compared_percent(fraction: float) -> str:
    return "-" if math.isnan(fraction) else format_percent(fraction)


def _columns(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in column) for column in zip(header, *rows, strict=True)]
    return ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip() for line in [header, *rows]]


# -- JSON -----------------------------------------------------------------------------------------------------


def _records(frame: pd.DataFrame) -> list[dict]:
    """The rows of ``frame`` ready for --json, its index first as columns."""
    from ddltrace.json_output import records

    return records(frame, index=True)


def missing_ranks(r: RunAnalysis) -> list[dict]:
    """The ranks of ``r``'s run the store holds no usable timeline for, each ``{"rank", "reason"}`` (the analysis
    is of the others)."""
    return [{"rank": rank, "reason": why} for rank, why in r.store.missing().items()]


def to_json(runs: list[RunAnalysis], findings: list[Finding], scaling: pd.DataFrame, thresholds: Thresholds,
            phase: str, skipped: list[Skipped] = ()) -> dict:
    from ddltrace.analyses import region_counters
    from ddltrace.analyses.requirements import not_made_json
    from ddltrace.clock_alignment import clock_alignment
    from ddltrace.commands.info import job_run_end
    from ddltrace.gpu_section import gpu_json
    from ddltrace.host_section import host_collectives_json
    from ddltrace.json_output import records
    from ddltrace.memory_section import memory_json
    from ddltrace.node_section import node_frame
    from ddltrace.summary import ended_first
    from ddltrace.timeline import CATEGORIES

    stores = []
    for r in runs:
        shown = phase if phase == "all" or r.can("breakdown_by_phase") else "all"
        table = r.table(shown)
        stores.append({
            "store": r.name, "world_size": r.store.world_size, "workers": r.workers,
            "workers_inferred": r.workers_inferred, "batch_size": r.batch_size,
            "capabilities": sorted(r.capabilities), "holds": r.holding,
            "missing_ranks": missing_ranks(r), "missing_count": r.store.missing_count(),
            "import_problems": r.store.import_problems,
            **{"exit_code": None, "interrupted": False, **job_run_end(r.store.run)},
            "recovered_from": r.store.run.get("recovered_from"),
            "ended_first": ended.to_dict() if (ended := ended_first(r.store)) is not None else None,
            "notes": r.store.notes,
            "roles": {str(k): v for k, v in r.roles.items()},
            "phases": _records(r.phase_table),
            "phase_notes": {str(rank): notes for rank, notes in phase_notes(r).items()},
            "breakdown_phase": shown,
            "breakdown_ns": _records(table[list(CATEGORIES) + ["total_ns", "overlap"]]),
            "main_phase": r.main_phase,
            "overlap_main_phase": _records(r.table(r.main_phase)[["overlap"]]),
            "host_breakdown_ns": _records(r.lanes_table("host", shown)[list(CATEGORIES) + ["total_ns"]]),
            "device_breakdown_ns": _records(r.lanes_table("device", shown)[list(CATEGORIES) + ["total_ns"]]),
            "average_and_slowest": _records(r.average_and_slowest(shown)),
            "wait_states_ns": _records(r.wait_state_table()) if r.can("wait_states") else [],  # not made: none
            "gpu": gpu_json(r),
            "host_collectives": host_collectives_json(r),
            "memory": memory_json(r),
            "hardware_counters": {"series": records(region_counters.series_totals(r.store)),
                                  "regions": records(region_counters.region_table(r.store))},
            "nodes": records(node_frame(r, thresholds)),
            "clock": clock_alignment(r.store.manifest).to_dict(),
        })
    return {
        "findings": [f.to_dict() for f in findings],
        "not_made": not_made_json(skipped),
        "stores": stores,
        "scaling": _records(scaling) if len(scaling) else [],
        "thresholds": dict(thresholds),
        "units": "times in ns (cost_ns: the time the job loses to a finding); shares and overlap as fractions 0..1 "
                 "(breakdown_ns's overlap over breakdown_phase; overlap_main_phase over main_phase, the phase the "
                 "detectors measure)",
    }
