"""ddltrace's own Chrome trace JSON (``ddltrace export --chrome``, a report's ``trace.json``) read back into a store.

The inverse of ddltrace/chrome.py: each process is a rank (``pid``; the process named "machine" holds the
machine-wide counters, read back as the store's machine counters, counters rank -1), each thread a lane (its
``thread_name``), ``cat`` the timeline category as the store had it (rules ``ddltrace-*`` of categories.toml, tried
before every other rule), ``ts``/``dur`` the exact ns the export wrote (``ts`` from ``otherData.origin_ns``),
``args`` the nullable columns (bytes, peer, step, tag, comm, request, correlation) and the rank's ``source``; a
rank's host comes from its process name ("rank 3 (node7)") and the rest of its manifest entry (role, aggregate,
world size, ...) from that event's ``ddltrace_rank``. Counters are the rank's ``C`` events (the machine's go with
the first rank's part, as rows of rank -1, which the store writes to its machine counters); those of a process that
is neither a rank nor the machine are not kept, and counted so. The run's workload, clock, notes and uncategorised
entries (``otherData``) go to the file's report (``FileReport.manifest``), which ``ddltrace import`` writes into the
store's manifest, and so does the run's world size (``FileReport.world_size``: an export of ranks 3-4 of a world of 5
imports as those ranks of a world of 5), the run's own entries (``otherData.run``: its command, start and end, GPU
models, ...; every one but :data:`IMPORT_OWN`: ``FileReport.run``, :func:`_run`), and the ranks of the run the export
does not hold, each with why (the ``ddltrace_missing`` key after the events: ``FileReport.missing``, a note on each
rank the store does not hold). An entry whose value is null (``mpi_flavour`` of a run without MPI) comes back
absent, which every reader of the manifest takes the same (``run.get``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ddltrace.arrow_timeline import counters_table
from ddltrace.collectors.importers.base import ImportContext, Importer, register
from ddltrace.collectors.importers.chrome import NEVER_CLOSED, read_chrome
from ddltrace.collectors.importers.convert import chrome_part, record
from ddltrace.store import MAX_WORLD_SIZE, WALL_CLOCK_NS

#: The start of every file ddltrace/chrome.py writes (``ddltrace_export`` first since the export says so;
#: ``run`` first in files written before), also pretty-printed (``json.dumps(indent=...)`` keeps the keys' order).
_SNIFF = re.compile(rb'^\s*\{\s*"displayTimeUnit"\s*:\s*"ns"\s*,\s*"otherData"\s*:\s*\{\s*"(ddltrace_export|run)"\s*:')
_PROCESS = re.compile(r"^rank (\d+)(?: \((.*)\))?$")
#: The timeline's nullable integer columns the export writes in ``args`` (ddltrace/chrome.py's ``_ARG_COLUMNS``).
COLUMNS = ("bytes", "peer", "step", "tag", "comm", "request", "correlation")
FORMAT = "ddltrace"
#: The process of the machine-wide counters (ddltrace/chrome.py's ``MACHINE_PID``) and their rank in the store.
MACHINE_PROCESS = "machine"
MACHINE_RANK = -1
#: The reader's count of ``C`` events (collectors/importers/chrome.py), one sample each in ddltrace's export.
#: ``otherData.origin_ns`` at or beyond this is damage (2**62 ns is 146 years; the times added to it stay in int64).
_ORIGIN_BELOW = 1 << 62
KEPT_COUNTERS = "counter (C) events, kept as counters"
NOT_KEPT_COUNTERS = "counter (C) events of a process that is neither a rank nor the machine, not kept"


def sniff(head: bytes, path: Path) -> bool:
    return bool(_SNIFF.search(head))


class ExportArgs(msgspec.Struct, gc=False):
    """The ``args`` of an exported interval; the rest of the object is skipped undecoded."""

    bytes: Any = None
    peer: Any = None
    step: Any = None
    tag: Any = None
    comm: Any = None
    request: Any = None
    correlation: Any = None
    source: Any = None


_DECODE_ARGS = msgspec.json.Decoder(ExportArgs)


class ArgColumns:
    """Collects, while the file is read, each ``X`` event's :data:`COLUMNS` values (missing where absent or not an
    integer) and its ``source``, in the reader's order (an ``amend`` of :func:`read_chrome`)."""

    def __init__(self):
        self.values: dict[str, list[int]] = {c: [] for c in COLUMNS}
        self.missing: dict[str, list[bool]] = {c: [] for c in COLUMNS}
        self.sources: list[str | None] = []

    def fresh(self) -> ArgColumns:
        return ArgColumns()

    def absorb(self, other: ArgColumns, rows_before: int) -> None:
        for column in COLUMNS:
            self.values[column].extend(other.values[column])
            self.missing[column].extend(other.missing[column])
        self.sources.extend(other.sources)

    def __call__(self, events: list) -> None:
        for event in events:
            args = event.args
            if isinstance(args, msgspec.Raw):  # read on the field-by-field path
                try:
                    args = _DECODE_ARGS.decode(args) if len(args) > 2 else None
                except msgspec.DecodeError:
                    args = None
            for column in COLUMNS:
                value = getattr(args, column, None)
                whole = isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 63
                self.values[column].append(value if whole else 0)
                self.missing[column].append(not whole)
            source = getattr(args, "source", None)
            self.sources.append(source if isinstance(source, str) else None)

    def arrays(self, rows: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Each column's values and missing mask over the trace's ``rows`` intervals (rows past the ``X`` events,
        paired ``B``/``E`` ones, have none)."""
        extra = rows - len(self.sources)
        values = {c: np.concatenate([np.array(v, dtype=np.int64), np.zeros(extra, np.int64)])
                  for c, v in self.values.items()}
        missing = {c: np.concatenate([np.array(m, dtype=bool), np.ones(extra, bool)]) for c, m in self.missing.items()}
        return values, missing


def read(path: Path, ctx: ImportContext):
    columns = ArgColumns()
    trace = read_chrome(path, amend=columns, x_args=ExportArgs, processes=ctx.processes)
    ranks: dict[Any, tuple[int, str | None]] = {}
    for pid, name in trace.process_names.items():
        found = _PROCESS.match(name)
        if found:
            ranks[pid] = (int(found.group(1)), found.group(2))
    machine = [pid for pid, name in trace.process_names.items() if name == MACHINE_PROCESS]
    _count_unclaimed_counters(trace, {*ranks, *machine})
    _cut_at_line(trace)
    origin = _origin(trace)
    record(ctx, trace)
    problems = ctx.report.problems if ctx.report is not None else []
    lane_pid = np.array([pid for pid, _ in trace.lanes], dtype=object)
    row_pid = lane_pid[trace.lane_key] if len(trace.lane_key) else np.empty(0, dtype=object)
    values, missing = columns.arrays(len(trace.ts_ns))
    sources = np.array(columns.sources + [None] * (len(trace.ts_ns) - len(columns.sources)), dtype=object)
    epoch = origin is not None and bool(len(trace.ts_ns)) and int(trace.ts_ns.min()) + origin >= WALL_CLOCK_NS
    clock = "epoch" if epoch else "relative"
    origin = origin or 0
    if ctx.report is not None:
        ctx.report.manifest = _run_entries(trace.header.get("otherData"), ctx.report)
        ctx.report.world_size = _world_size(trace.header.get("otherData"), ctx.report)
        ctx.report.hosts = _hosts(trace.header.get("otherData"), ctx.report)
        ctx.report.run = _run(trace.header.get("otherData"), ctx.report)
        ctx.report.missing = _missing(trace.header, ctx.report)
    for index, (pid, (rank, host)) in enumerate(sorted(ranks.items(), key=lambda item: item[1][0])):
        rows = np.flatnonzero(row_pid == pid)
        part = chrome_part(trace, fmt=FORMAT, rank=rank, ctx=ctx, rows=rows, clock=clock, offset_ns=origin,
                           lane_name=lambda p, t: trace.thread_names.get((p, t)) or f"tid {t}",
                           row_columns=values, row_missing=missing,
                           info={**_saved(trace, pid, rank, problems), "host": host},
                           counter_pid=pid)
        _keep_source(part, Counter(sources[rows].tolist()))
        if index == 0:
            _add_machine_counters(part, trace, machine, origin)
        yield part


def _cut_at_line(trace) -> None:
    """An events array that never closes (the text ends after a whole event: an export cut at a line, one event a
    line) named among the file's problems: ``ddltrace export`` writes a temporary file and renames it, so its array
    is always closed, and the reader's tolerance of an open one is for old Horovod timelines."""
    if trace.open_end is None:
        return
    trace.skipped.pop(NEVER_CLOSED, None)
    trace.problems.append(f"{trace.path}: cut at byte {trace.open_end}: the file ends after a whole event with its "
                          f"events array still open (ddltrace export always closes it); the events before the cut "
                          f"were kept, those after it are not in the file")


def _origin(trace) -> int | None:
    """The ns that ``ts`` count from (``otherData.origin_ns``); None where it is damaged or missing while the times
    are not on the wall clock themselves (exports written before it: their ``ts`` the store's ns), named among the
    file's problems: the times are then relative, not placed in 1970."""
    other = trace.header.get("otherData")
    other = other if isinstance(other, dict) else {}
    origin = other.get("origin_ns")
    if type(origin) is int and 0 <= origin < _ORIGIN_BELOW:
        return origin
    if origin is None and (not len(trace.ts_ns) or int(trace.ts_ns.min()) >= WALL_CLOCK_NS):
        return 0
    said = "missing" if origin is None else f"{str(origin)[:40]!r} is not a time (integer ns since the epoch)"
    trace.problems.append(f"{trace.path}: otherData.origin_ns {said}: the times are relative (from an unknown "
                          "origin), not on the wall clock")
    return None


def _count_unclaimed_counters(trace, claimed: set) -> None:
    """Move the ``C`` events of the processes not in ``claimed`` (neither a rank nor the machine: not read back)
    from the reader's count of counters kept to one of counters not kept (one sample an event, as the export
    writes them)."""
    pids = trace.counter_arrays()[0]
    unclaimed = sum(pid not in claimed for pid in pids.tolist())
    if unclaimed:
        trace.skipped[KEPT_COUNTERS] -= unclaimed
        trace.skipped[NOT_KEPT_COUNTERS] += unclaimed
        if not trace.skipped[KEPT_COUNTERS]:
            del trace.skipped[KEPT_COUNTERS]


def _add_machine_counters(part, trace, machine: list, origin: int) -> None:
    """Add the samples of the ``machine`` processes (their ``ts`` from ``origin``, ns) to ``part``'s counters as
    rows of :data:`MACHINE_RANK`: the store writes them to its machine counters, names and all (``NAME@HOST`` for
    a node's of a store made across nodes)."""
    import pyarrow as pa

    tables = [part.counter_table] if part.counter_table is not None else []
    for pid in machine:
        _pid, names, t_ns, values = trace.counter_arrays(pid)
        if len(names):
            tables.append(counters_table(np.full(len(names), MACHINE_RANK, dtype=np.int32), names,
                                         t_ns + origin, values))
    if tables:
        part.counters = pa.concat_tables(tables)


def _uncategorised_rows(value: Any) -> bool:
    """Whether ``value`` is a manifest's ``uncategorised`` entry (collectors/importers/categories.py's
    ``Categorizer.uncategorised``): a list of rows, each a format and raw category (texts) with the events and the
    distinct names of it (integers from 0), as ``info`` shows them."""
    return isinstance(value, list) and all(
        isinstance(row, dict) and isinstance(row.get("format"), str) and isinstance(row.get("cat"), str)
        and _whole(0)(row.get("events")) and _whole(0)(row.get("names")) for row in value)


def _run_entries(other, report) -> dict:
    """The run-level manifest entries the export carried in ``otherData`` (ddltrace/chrome.py's ``RUN_ENTRIES``:
    workload, clock, notes, uncategorised) for the store's manifest; one of the wrong kind is named among the file's
    problems and left out (the store's own entry stays)."""
    from ddltrace.chrome import RUN_ENTRIES

    other = other if isinstance(other, dict) else {}
    kept = {}
    for key in RUN_ENTRIES:
        value = other.get(key)
        if value is None:
            continue
        if key == "notes" and not (isinstance(value, list) and all(isinstance(n, str) for n in value)):
            report.problems.append(f"{report.path}: otherData.notes is not a list of texts: the run's notes are not "
                                   "restored")
        elif key == "uncategorised":
            if _uncategorised_rows(value):
                kept[key] = value
            else:
                report.problems.append(f"{report.path}: otherData.uncategorised is not a list of rows of a format, a "
                                       "raw category and its events and names: the events no rule knew are not "
                                       "restored")
        elif key != "notes" and not isinstance(value, dict):
            report.problems.append(f"{report.path}: otherData.{key} is not an object: the run's {key} entry is not "
                                   "restored")
        else:
            kept[key] = value
    return kept


def _missing(header: dict, report) -> dict[int, str]:
    """The ranks of the exported run the export does not hold, each with the store's line saying why (the key after
    the events array, ddltrace/chrome.py's ``MISSING_KEY``: a rank whose file the store found damaged, ...); one
    that is not an object of ranks and texts is named among the file's problems and left out."""
    from ddltrace.chrome import MISSING_KEY

    said = header.get(MISSING_KEY)
    if said is None:
        return {}
    if isinstance(said, dict) and all(isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 11
                                      and isinstance(v, str) for k, v in said.items()):
        return {int(k): v for k, v in said.items()}
    report.problems.append(f"{report.path}: {MISSING_KEY} is not an object of ranks and texts: why the ranks it "
                           "names are not in the export is not kept")
    return {}


def _world_size(other, report) -> int | None:
    """The world size of the exported run (``otherData.run.world_size``: an export of some of its ranks is a part
    of that world), or None where the export gives none; one that is not a world size is named among the file's
    problems and left out."""
    from ddltrace.store import MAX_WORLD_SIZE

    run = other.get("run") if isinstance(other, dict) else None
    world = run.get("world_size") if isinstance(run, dict) else None
    if world is None or (type(world) is int and 1 <= world <= MAX_WORLD_SIZE):
        return world
    report.problems.append(f"{report.path}: otherData.run.world_size {str(world)[:40]!r} is not a world size (an "
                           f"integer from 1 to {MAX_WORLD_SIZE}); the store counts its ranks")
    return None


def _hosts(other, report) -> list[str] | None:
    """The hosts of the exported run (``otherData.run.hosts``: the host of its machine counters' plain names), or
    None where the export gives none; one that is not a list of texts is named among the file's problems and left
    out."""
    run = other.get("run") if isinstance(other, dict) else None
    hosts = run.get("hosts") if isinstance(run, dict) else None
    if hosts is None or (isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)):
        return hosts
    report.problems.append(f"{report.path}: otherData.run.hosts is not a list of texts: the run's hosts are not "
                           "restored (nor the node of its machine counters)")
    return None


def _whole(low: int, high: int = 1 << 63) -> Callable[[Any], bool]:
    return lambda v: type(v) is int and low <= v < high


def _step_pair(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_whole(0)(x) for x in v)


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _gpus(v: Any) -> bool:
    """The run's GPU models: a list of texts, or one per host (a run across nodes: host -> its list)."""
    return _texts(v) or (isinstance(v, dict) and all(isinstance(k, str) and _texts(x) for k, x in v.items()))


#: The entries of the exported run (``otherData.run``) whose kind is known, each with the test its value must pass
#: to be taken back: the job's command and framework, when it started and ended (ns, the launcher's clock) and how
#: it ended, the framework profiler's steps, the collectors and samplers that ran (whose rows' meaning depends on
#: them: py-spy's are left out of a rank's time), the GPU models, the MPI library and its calls, the nodes. The
#: import's own entries stand where a value fails (named among the file's problems). Every other entry of the
#: exported run is taken back as it is (:func:`_run`), but :data:`IMPORT_OWN`.
RUN_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "command": (lambda v: isinstance(v, str), "a text"),
    "launch": (lambda v: isinstance(v, str), "a text"),
    "framework": (lambda v: isinstance(v, str), "a text"),
    "exit_code": (_whole(-(1 << 31), 1 << 31), "an integer"),
    "interrupted": (lambda v: isinstance(v, bool), "true or false"),
    "interrupted_ns": (_whole(0), "a time (integer ns)"),
    "profiled_steps": (_step_pair, "a [first, last] pair of steps"),
    "steps_window": (_step_pair, "a [first, last] pair of steps"),
    "collectors": (_texts, "a list of texts"),
    "sample_hz": (lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v >= 0, "a rate (Hz)"),
    "mpi_flavour": (lambda v: v is None or isinstance(v, str), "a text"),
    "mpi_library": (lambda v: v is None or isinstance(v, str), "a text"),
    "record_shapes": (lambda v: isinstance(v, bool), "true or false"),
    "start_ns": (_whole(0), "a time (integer ns)"),
    "end_ns": (_whole(0), "a time (integer ns)"),
    "gpus": (_gpus, "a list of GPU models (or a list per host)"),
    "mpi_calls": (_whole(0), "a count"),
    "nodes": (_texts, "a list of texts"),
    "missing_nodes": (lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
                      "an object of hosts and folders"),
    "recovered_from": (lambda v: isinstance(v, str), "a text"),
}
#: The entries of the exported run the import does not take back as they are, and why: the world size and the hosts
#: are read with their own tests (:func:`_world_size`, :func:`_hosts`) and written by the import (the same figures
#: where the export's pass), and ``imported_files`` counts the files of this import (the export is one), not of the
#: one that made the exported store.
IMPORT_OWN = frozenset({"world_size", "hosts", "imported_files"})


def _run(other, report) -> dict:
    """What the export says of its run (``otherData.run``): every entry but :data:`IMPORT_OWN`, those of
    :data:`RUN_KINDS` where they pass their test (one that fails is named among the file's problems and left out: the
    import's own stands), the others as they are (an entry a later ddltrace records, kept as the rank's entries are:
    was, only the entries listed, and the run's GPU models, start and end were lost)."""
    run = other.get("run") if isinstance(other, dict) else None
    run = run if isinstance(run, dict) else {}
    kept = {}
    for key in run:
        if key in IMPORT_OWN:
            continue
        ok, kind = RUN_KINDS.get(key, (lambda v: True, ""))
        if ok(run[key]):
            kept[key] = run[key]
        else:
            report.problems.append(f"{report.path}: otherData.run.{key} {str(run[key])[:40]!r} is not {kind}: left "
                                   "out of the store's run")
    return kept


#: The entries of a rank's manifest entry whose kind is known, and the test a value carried in ``ddltrace_rank``
#: must pass to be restored (what the collectors and importers write there); others are restored as they are.
RANK_ENTRY_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pid": (_whole(0), "a process id (an integer from 0)"),
    "pids": (lambda v: isinstance(v, list) and all(_whole(0)(x) for x in v), "a list of process ids"),
    "state": (_whole(-(1 << 63)), "an integer"),
    "ended": (lambda v: isinstance(v, str), "a text"),
    "role": (lambda v: isinstance(v, str), "a text"),
    "open_calls": (_texts, "a list of call names"),
    "notes": (_texts, "a list of texts"),
    "aggregate": (lambda v: isinstance(v, bool), "true or false"),
    "world_size": (_whole(1, MAX_WORLD_SIZE + 1), "a world size"),
    "exited_ns": (_whole(0), "a time (integer ns)"),
    "clock_offset_ns": (_whole(-(1 << 63)), "an integer (ns)"),
    "clock_uncertainty_ns": (_whole(0), "an integer (ns) from 0"),
}


def _saved(trace, pid, rank: int, problems: list[str]) -> dict:
    """The rank's manifest entry the export carried (``ddltrace_rank`` of its ``process_name``: role, aggregate,
    world size, ...), without what the store derives from the files again; an entry of :data:`RANK_ENTRY_KINDS`
    whose value is not of its kind is named in ``problems`` (the file's) and left out."""
    from ddltrace.chrome import DERIVED_INFO  # (here: the export module loads pandas, which no import needs)

    saved = trace.process_args.get(pid, {}).get("ddltrace_rank")
    if saved is None:
        return {}
    if not isinstance(saved, dict):
        problems.append(f"{trace.path}: rank {rank}'s ddltrace_rank is not an object: its manifest entry "
                              "(role, how it ended, ...) is not restored")
        return {}
    kept = {}
    for key, value in saved.items():
        if key in DERIVED_INFO:
            continue
        test, kind = RANK_ENTRY_KINDS.get(key, (None, ""))
        if test is not None and not test(value):
            problems.append(f"{trace.path}: rank {rank}'s ddltrace_rank.{key} {str(value)[:40]!r} is not "
                                  f"{kind}: left out of its manifest entry")
            continue
        kept[key] = value
    return kept


def _keep_source(part, sources: Counter) -> None:
    """The rank's ``source`` as the store had it, where its intervals name one (else ``ddltrace``)."""
    import pyarrow as pa

    named = [s for s in sources if s is not None]
    if len(named) == 1 and None not in sources:
        table = part.table
        column = pa.array([named[0]] * table.num_rows, type=table.schema.field("source").type)
        part.timeline = table.set_column(table.schema.get_field_index("source"), "source", column)


register(Importer(FORMAT, "ddltrace's own Chrome trace JSON (ddltrace export --chrome, a report's trace.json)",
                  sniff, read))
