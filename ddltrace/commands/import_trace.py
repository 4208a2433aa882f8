"""``ddltrace import``: read other tools' traces (PyTorch/Kineto, TensorFlow, MXNet, CNTK, Horovod, OTF2, IPM,
any Chrome trace) into a trace store, one rank at a time."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections import Counter
from pathlib import Path

from ddltrace.errors import DdltraceError
from ddltrace.options import integer
from ddltrace.units import format_bytes

#: Files read at once by default: each reader holds one file's ranks, so memory grows with it.
DEFAULT_MAX_JOBS = 8

FORMAT_HELP = """formats (recognised by content; --format forces one):
{formats}

Rank numbers: each format's own (Kineto distributedInfo.rank, TF1 /job:worker/task:k, OTF2/IPM ranks, CNTK
file suffix, MXNet file name, Horovod = rank 0, TensorBoard plugins/profile/<run>/ = the hosts, in TF_CONFIG's
cluster order or by name); a file that gives none (none in it, its name or its folder's) takes its place among the
traces where no other file gives that rank, else the first rank no file gives, said in one line; --rank-from
name|dir|order overrides it with the number in the file name, the folder name, or the position on the command
line. Of a TensorBoard profile folder the newest run is read, one session file per host (the .xplane.pb).

Categories come from rules in ddltrace/collectors/importers/categories.toml; --rules FILE adds yours in front
(or replaces them: 'replace = true'); --explain prints which rule put each event name in which category."""


#: The importers' names and descriptions (``collectors/importers``; a new importer adds its line here): the help and
#: ``--format``'s choices come from this table so that the CLI starts without the importers (pandas, pyarrow).
#: tests/test_cli_startup.py checks it against ``collectors.importers.REGISTRY``.
FORMATS = (
    ("cntk", "CNTK profiler detail JSON (B/E pairs in completion order)"),
    ("cntk-csv", "CNTK profiler detail CSV (older CNTK 2.x)"),
    ("cntk-summary", "CNTK profiler summary text (aggregates per event)"),
    ("ddltrace", "ddltrace's own Chrome trace JSON (ddltrace export --chrome, a report's trace.json)"),
    ("horovod", "Horovod timeline JSON (HOROVOD_TIMELINE), also never-closed arrays"),
    ("ipm", "IPM XML profile (per-rank MPI totals)"),
    ("kineto", "PyTorch profiler / Kineto trace JSON (.json, .json.gz)"),
    ("mxnet", "MXNet profiler JSON (mx.profiler.dump)"),
    ("nsys", "Nsight Systems SQLite export (nsys export --type sqlite)"),
    ("nsys-csv", "Nsight Systems NVTX push/pop trace report, CSV (nsys stats)"),
    ("otf2", "OTF2 archive (anchor file .otf2; needs the otf2 package)"),
    ("rocprofv3", "ROCm rocprofv3 (rocprofiler-sdk) JSON (--output-format json)"),
    ("rocprofv3-csv", "ROCm rocprofv3 CSV trace (kernel_trace.csv, memory_copy_trace.csv, *_api_trace.csv)"),
    ("tf1", "TensorFlow 1.x timeline JSON (client.timeline)"),
    ("tf2", "TensorFlow 2 profiler trace-viewer JSON (.json, .json.gz)"),
    ("tf1-stepstats", "TensorFlow 1.x RunMetadata.step_stats as protobuf text (RecvTensor bytes and peers)"),
    ("tf1-stepstats-pb", "TensorFlow 1.x RunMetadata / StepStats as binary protobuf (.pb, .pb.gz)"),
    ("tf2-xplane", "TensorFlow 2 profiler XPlane (<host>.xplane.pb), read without TensorFlow"),
    ("chrome", "generic Chrome Trace Event Format JSON (.json, .json.gz)"),
)


def register(subparsers) -> None:
    formats = "\n".join(f"  {name:13s} {description}" for name, description in FORMATS)
    p = subparsers.add_parser(
        "import", help="import traces of PyTorch, TensorFlow, MXNet, CNTK, Horovod, OTF2, IPM into a store",
        description="Read framework and MPI traces into one ddltrace trace store (files or folders; several "
                    "files of one job become one store).",
        epilog=FORMAT_HELP.format(formats=formats), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files or folders (searched recursively)")
    p.add_argument("--out", required=True, metavar="STORE", help="trace store to create (a folder)")
    p.add_argument("--format", metavar="F", choices=[name for name, _ in FORMATS],
                   help="read every file as this format instead of sniffing")
    p.add_argument("--rank-from", default="auto", choices=["auto", "name", "dir", "order"],
                   help="where rank numbers come from (default: the format's own)")
    p.add_argument("--rules", metavar="FILE", help="your categorisation rules (TOML), tried before the shipped")
    p.add_argument("--explain", action="store_true", help="print which rule gave each event name its category")
    p.add_argument("--align", choices=["auto", "messages", "none"], default="auto",
                   help="clock alignment across ranks from matched send/receive pairs (OTF2 MPI messages, TF1 "
                        "step_stats receives): auto when the ranks' hosts differ, messages always, none never")
    p.add_argument("--force", action="store_true",
                   help="replace STORE if it exists and is a trace store (never a file or another folder)")
    p.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                   help="progress line on stderr (auto: inputs over 32 MiB)")
    p.add_argument("--quiet", dest="progress", action="store_const", const="never",
                   help="no progress line (--progress never, as analyze's and report's --quiet)")
    p.add_argument("--jobs", type=integer(1, 1024), metavar="N",
                   help="processes reading at once: files one per process, each holding one file's ranks; a "
                        "single large Chrome-format file (Kineto, TF2, MXNet, ...) is shared by them (default: one "
                        f"per CPU this process may use, at most {DEFAULT_MAX_JOBS})")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="read the files as tasks on this Dask cluster (tcp://host:8786; every worker must see the "
                        "files' paths) instead of --jobs local processes; see docs/CLUSTER.md")
    p.set_defaults(func=run)


#: How the profilers name their trace files (torch.profiler's ``*.pt.trace.json[.gz]``, a TensorBoard profile's
#: ``*.trace.json.gz`` and ``*.xplane.pb``, Nsight's ``*.nsys-rep``, OTF2's ``*.otf2``): a file of a folder named so
#: that is no trace is damaged (empty, cut, overwritten), an import problem naming it, not a file skipped beside the
#: traces (QA: an empty rank-1 profile beside rank 0's was only "not a trace", its rank "not in the trace").
TRACE_NAMES = (".pt.trace.json", ".pt.trace.json.gz", ".trace.json.gz", ".xplane.pb", ".nsys-rep", ".otf2")


def _named_as_trace(path: Path) -> bool:
    """Whether ``path``'s name is a profiler's name for its trace files (:data:`TRACE_NAMES`)."""
    return path.name.lower().endswith(TRACE_NAMES)


def _expand(paths: list[str]) -> tuple[list[Path], set[Path], list[str]]:
    """Files to import, which of them came from searching a folder (not named on the command line), and notes
    on what a folder held but is not read. An OTF2 archive's member files (``X.def``, ``X/``) are left to its
    anchor ``X.otf2``; of a TensorBoard profile folder, the newest run and one session file per host are read
    (``collectors/importers/tb_profile.py``)."""
    from ddltrace.collectors.importers import tb_profile
    from ddltrace.collectors.importers.source import not_a_file
    from ddltrace.trace_inputs import is_trace_input

    files: list[Path] = []
    found_in_folders: set[Path] = set()
    notes: list[str] = []
    for text in paths:
        path = Path(text)
        if not is_trace_input(text) and path.is_dir():
            raise DdltraceError(f"{path}: a ddltrace trace store already, not a trace to import: give it to 'ddltrace "
                                "info', 'analyze' or 'report' as it is ('ddltrace merge' joins two stores)")
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
            anchors = [p.with_suffix("") for p in found if p.suffix == ".otf2"]
            found = [p for p in found if not any(p == a.with_suffix(".def") or a in p.parents for a in anchors)]
            selection = tb_profile.select(found)
            found = selection.files
            notes.extend(selection.notes)
            files.extend(found)
            found_in_folders.update(found)
        elif path.is_file():
            files.append(path)
        else:
            raise DdltraceError(not_a_file(path) or f"{path}: no such file or folder")
    if not files:
        raise DdltraceError(f"{', '.join(paths)}: no files to import")
    return files, found_in_folders, notes


class _Progress:
    """One line on stderr, rewritten at most twice a second: bytes read of the total."""

    def __init__(self, files: list[Path], mode: str):
        self.sizes = {str(p): p.stat().st_size for p in files}
        self.total = sum(self.sizes.values())
        self.done_files: set[str] = set()
        self.reading: dict[str, int] = {}  # bytes read so far of the files being read
        self.enabled = mode == "always" or (mode == "auto" and self.total > 32 << 20)
        self.last = 0.0
        self.shown = False

    def update(self, path: Path, consumed: int) -> None:
        """``consumed`` bytes of ``path`` read (several files may be read at once)."""
        self.reading[str(path)] = consumed
        now = time.monotonic()
        if not self.enabled or now - self.last < 0.5:
            return
        self.last = now
        done = sum(self.sizes[f] for f in self.done_files) + sum(self.reading.values())
        percent = 100.0 * done / self.total if self.total else 100.0
        print(f"\rimporting {path.name}: {percent:5.1f} % of {format_bytes(self.total)} "
              f"({len(self.done_files)} of {len(self.sizes)} files done)", end="", file=sys.stderr, flush=True)
        self.shown = True

    def tasks(self, done: int, total: int, where: str) -> None:
        """``done`` of ``total`` files read by the tasks running ``where`` (a Dask cluster's workers)."""
        if self.enabled:
            print(f"\rimporting: {done} of {total} files done {where}", end="", file=sys.stderr, flush=True)
            self.shown = True

    def file_done(self, path: Path) -> None:
        self.done_files.add(str(path))
        self.reading.pop(str(path), None)

    def close(self) -> None:
        if self.shown:
            print("\r" + " " * 100 + "\r", end="", file=sys.stderr, flush=True)


_CLOCK_METHODS = {
    "epoch": "wall clock: each host's time since the Unix epoch as the trace recorded it; "
             "skew between hosts not corrected",
    "relative": "none: each rank's times are relative to its own start (the format records no absolute time)",
    "shared": "single clock: all ranks from one archive or file on the clock it was written with",
}


def run(args) -> int:
    from ddltrace import deferred_import

    deferred_import.defer("pyarrow")  # loaded while a large file's readers read (chrome_split), or at first use
    from ddltrace.heap_reuse import keep_freed_memory
    from ddltrace.store import StoreLock

    keep_freed_memory()  # a third fewer page faults (the module says why)
    out = Path(args.out)
    if out.exists() and not args.force:
        raise DdltraceError(f"{out}: already exists (choose another --out, or add --force)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with StoreLock(out, replace=args.force):  # before any work: a second writer of --out stops here
        return _import(args, out)


def _import(args, out: Path) -> int:
    """Read the files and write the store at ``out`` (the caller holds its lock)."""
    from ddltrace.collectors.importers import Categorizer, chrome_split, detect, get_importer
    from ddltrace.collectors.importers import source as source_module
    from ddltrace.collectors.importers.base import FileReport
    from ddltrace.collectors.importers.pool import FileTask, given_up, read_files
    from ddltrace.collectors.importers.tb_profile import host_ranks
    from ddltrace.executor import DaskMapper, usable_cpus
    from ddltrace.store import TraceStore, building, publish, verify_written

    files, found_in_folders, folder_notes = _expand(args.paths)
    session_ranks: dict = {}  # TensorBoard session files: (rank, host) from the hosts, not the files' positions
    if args.rank_from == "auto":
        session_ranks, rank_notes = host_ranks(files, os.environ.get("TF_CONFIG"))
        folder_notes += rank_notes
    categorizer = Categorizer(args.rules)
    progress = _Progress(files, args.progress)
    reports: list[FileReport] = []
    unknown: list[str] = []  # files of the folders in no known format: named only when nothing else was read
    unread: list[tuple[Path, int | None, str]] = []  # files given that did not read: path, place among traces, why
    plan = []
    for path in files:
        report = FileReport(str(path))
        reports.append(report)
        try:
            importer = get_importer(args.format) if args.format else detect(path)
        except DdltraceError as exc:
            report.skipped["not a known trace format"] += 1
            if path not in found_in_folders or _named_as_trace(path):
                report.problems.append(str(exc))
                unread.append((path, None, str(exc)))
            else:
                unknown.append(str(exc))
            continue
        report.format = importer.name
        # a file's place among the traces (the rank of a file whose name gives none): the files skipped beside
        # them are not counted (a JAX profile with its job's script in the folder was rank 2 of 3)
        plan.append((importer.name.endswith("summary") or importer.name == "ipm", len(plan), path, importer, report))
    plan.sort(key=lambda item: (item[0], item[1]))  # aggregates after detailed traces of the same ranks

    started = time.perf_counter()
    mapper = None
    chrome_split.while_readers_start = functools.partial(_while_readers_read, categorizer,
                                                         {importer.name for *_, importer, _ in plan})
    try:
        with building(out) as staging:  # a Ctrl-C, a SIGTERM or a full disk at any point removes what was built
            store = TraceStore.create(staging, run={"command": "ddltrace import " + " ".join(args.paths)})
            if args.scheduler:
                mapper = DaskMapper(args.scheduler, progress.tasks, on_failure=given_up)
                mapper.check_visible([path for *_, path, _, _ in plan])
            clocks, formats, deferred, detailed, messages = {}, Counter(), [], set(), []
            placed = []  # (task, part) of files that give no rank of their own: numbered once the others are read
            exchanging: set[int] = set()  # ranks with MPI sends/receives naming a peer: alignment reads only these
            world_sizes = []
            aggregate = {index for is_aggregate, index, *_ in plan if is_aggregate}
            tasks = [FileTask(index, path, importer, report) for _, index, path, importer, report in plan]
            jobs = args.jobs or min(usable_cpus(), DEFAULT_MAX_JOBS)
            for task, parts in read_files(tasks, categorizer, args.rank_from, jobs, progress.update, mapper):
                is_aggregate, path, importer, report = task.index in aggregate, task.path, task.importer, task.report
                try:
                    for part in parts():
                        if part.messages is not None and len(part.messages):
                            messages.append(part.messages)
                        if path in session_ranks:
                            _set_rank(part, session_ranks[path][0])
                            part.info["host"] = session_ranks[path][1]
                        if isinstance(part.rank, tuple):
                            deferred.append(part)
                            continue
                        if part.rank == report.placed_rank and path not in session_ranks:
                            placed.append((task, part))  # (its place among the files: another may give that rank)
                            continue
                        if is_aggregate and part.rank in detailed:
                            rows = part.table.num_rows  # counted kept as the file was read
                            report.dropped["aggregate profile of a rank whose detailed trace was imported"] += rows
                            report.intervals -= rows
                            continue
                        if not is_aggregate:
                            detailed.add(part.rank)
                        _refuse_another_run(store, part, path, clocks)
                        _add(store, part, clocks, exchanging, report)
                        formats[importer.name] += 1
                        if part.info.get("world_size"):
                            world_sizes.append(int(part.info["world_size"]))
                except TwoRuns:
                    raise
                except DdltraceError as exc:
                    report.skipped["unreadable file"] += 1
                    report.problems.append(str(exc))
                    unread.append((path, task.index, str(exc)))
                progress.file_done(path)
            claimed = _claimed_ranks(store, reports, unread, args.rank_from, session_ranks)
            world = max([*world_sizes, *(r.world_size for r in reports if r.world_size)], default=0)
            for (task, part), (rank, line) in zip(placed, _place(placed, claimed, world), strict=True):
                if line and rank >= world > 0:  # (not a rank of the world the other files give: a problem)
                    task.report.problems.append(line)
                elif line:
                    folder_notes.append(line)
                if rank != part.rank:
                    _set_rank(part, rank)
                _add(store, part, clocks, exchanging, task.report)
                formats[task.importer.name] += 1
                if part.info.get("world_size"):
                    world_sizes.append(int(part.info["world_size"]))
            next_rank = max(store.ranks, default=-1) + 1
            numbered: dict[tuple, int] = {}
            for part in sorted(deferred, key=lambda p: p.rank):
                if part.rank not in numbered:
                    numbered[part.rank] = next_rank
                    next_rank += 1
                rank = numbered[part.rank]
                part.info["identity"] = "/".join(map(str, part.rank))
                _set_rank(part, rank)
                _add(store, part, clocks, exchanging)
            if not any(store.rank_info(r).get("events") or store.rank_info(r).get("counter_samples")
                       for r in store.ranks):  # no rank, or none with an event or a counter sample
                named = [p for r in reports for p in r.problems[:1]] or unknown or [_kept_nothing(r) for r in reports]
                details = "; ".join(named[:3]) + (f"; and {len(named) - 3} more" if len(named) > 3 else "")
                raise DdltraceError(f"nothing imported from {len(files)} file(s): {details}")
            _resolve_peers(store, numbered)
            _finish_manifest(store, reports, clocks, formats, world_sizes)
            _note_missing(store, reports, unread, args.rank_from, session_ranks)
            from ddltrace.store import separate_runs

            folder_notes += separate_runs(store)
            store.manifest["notes"].extend(folder_notes)
            uncategorised = _note_uncategorised(store, categorizer)
            _align_clocks(store, args.align, _resolve_messages(messages, numbered), exchanging)
            store.save_manifest()
            verify_written(store, store.ranks)  # every rank's rows as the manifest counts them, before publishing
            publish(staging, out, replace=args.force)
    finally:
        source_module.progress_hook = None
        chrome_split.while_readers_start = None
        progress.close()
        if mapper is not None:
            mapper.close()
    elapsed = time.perf_counter() - started
    _print_summary(out, reports, elapsed, TraceStore.open(out), folder_notes, uncategorised)
    if args.explain:
        _print_explain(categorizer)
    return 0


def _while_readers_read(categorizer, formats: set[str]) -> None:
    """What the command does while a large file's forked readers read: pyarrow, pyarrow.parquet and the compute
    functions the columns are made with loaded (0.05 s), the category rules of the files' formats compiled."""
    import importlib

    importlib.import_module("pyarrow.parquet")
    importlib.import_module("pyarrow._compute")
    for fmt in formats:
        categorizer.prepare(fmt)


def _claimed_ranks(store, reports, unread: list[tuple[Path, int | None, str]], rank_from: str,
                   session_ranks: dict) -> dict[int, str]:
    """The ranks the files give of their own, each with the file that gives it: those read (a TraceFusion file's
    ranks, a Kineto trace's ``distributedInfo.rank``, a rank in a file's name), those of files that did not read
    whose rank is known (:func:`_rank_of_unread`; its note names the file), and those an export says its run has
    but it does not hold (``ddltrace_missing``): no file without a rank of its own is numbered as one of them."""
    claimed = {}
    for path, index, _ in unread:
        rank, _how = _rank_of_unread(path, index, rank_from, session_ranks)
        if rank is not None:
            claimed[rank] = f"the rank of {path}, which did not read"
    for report in reports:
        for rank in report.missing:
            claimed.setdefault(rank, f"a rank {report.path} says its run has and it does not hold")
    for rank, entry in store.manifest["ranks"].items():
        files = (entry.get("files") or [entry.get("file")]) if isinstance(entry, dict) else []
        claimed[int(rank)] = f"given by {files[0]}" if files and files[0] else "given by another file"
    return claimed


def _place(placed: list, claimed: dict[int, str], world: int) -> list[tuple[int, str | None]]:
    """The rank each part of a file that gives no rank of its own gets (``placed``: (task, part), in the files'
    order), and the line that says so where it is not the file's place among the traces: its place where no other
    file gives that rank (as before), else the first rank no file gives, the files in their order; ``world``: the
    world size the other files give (0: none), past which the line says the file may be of another run. Was: its
    place whatever another file gave, so a plain Kineto trace beside a TraceFusion file of 4 ranks was merged into
    the fused file's rank 1 (two processes' events on one rank, its span both files')."""
    taken = set(claimed)
    got: dict[int, int] = {}  # task index -> rank
    for task, part in placed:  # first the files whose place is free, so that a file moved takes none of theirs
        if task.index not in got and part.rank not in taken:
            got[task.index] = part.rank
            taken.add(part.rank)
    lines: dict[int, str] = {}
    candidate = 0
    for task, part in placed:
        if task.index in got:
            continue
        while candidate in taken:
            candidate += 1
        got[task.index] = candidate
        taken.add(candidate)
        lines[task.index] = (f"{task.path}: gives no rank of its own (none in the file, its name or its folder's): "
                             f"imported as rank {candidate}, the first rank no other file gives (by its place among "
                             f"the traces it would be rank {part.rank}, "
                             f"{claimed.get(part.rank, 'given by another file')})")
        if candidate >= world > 0:
            lines[task.index] += (f"; the other files give a world of {world} ranks, so it may be of another run "
                                  "(a rank in its name, rank<N>, says which rank it is)")
    return [(got[task.index], lines.pop(task.index, None)) for task, _ in placed]


def _set_rank(part, rank: int) -> None:
    """Give a part (its rows and counters) the rank the command chose for it."""
    import numpy as np
    import pyarrow as pa

    def renumbered(table):
        column = pa.array(np.full(table.num_rows, rank, dtype=np.int32))
        return table.set_column(table.schema.get_field_index("rank"), "rank", column)

    part.timeline = renumbered(part.table)
    if part.counter_table is not None:
        part.counters = renumbered(part.counter_table)
    part.rank = rank


class TwoRuns(DdltraceError):
    """Two files of the import give one rank but are of two runs: the whole import is refused."""


def _refuse_another_run(store, part, path, clocks: dict) -> None:
    """Refuse (one line, nothing written) a part that gives a rank an earlier file already gave, where the two are
    of two runs: the files say worlds of different sizes, or their times on the wall clock lie more than an hour,
    and more than ten times the longer span, apart. Merged, their rank would read as one run spanning both
    (two traces 2.8 years apart: 24,736 h, 100 % idle)."""
    entry = store.manifest["ranks"].get(str(part.rank))
    if not isinstance(entry, dict):
        return
    earlier = (entry.get("files") or [entry.get("file")])[0]
    rank, size, old_size = part.rank, part.info.get("world_size"), entry.get("world_size")
    if size and old_size and size != old_size:
        raise TwoRuns(f"{earlier} and {path} both give rank {rank}, of a world of {old_size} and of {size} "
                      "ranks: they are of two runs (import each into a store of its own)")
    table = part.table
    if part.clock != "epoch" or rank not in clocks.get("epoch", ()) or not table.num_rows or "start_ns" not in entry:
        return
    import pyarrow.compute as pc

    from ddltrace.store import two_runs_apart

    start = pc.min(table["start_ns"]).as_py()
    end = pc.max(pc.add(table["start_ns"], table["dur_ns"])).as_py()
    gap = two_runs_apart((start, end), (entry["start_ns"], entry["end_ns"]))
    if gap:
        from ddltrace.units import format_ns

        raise TwoRuns(f"{earlier} and {path} both give rank {rank}, {format_ns(gap)} apart on the wall clock: "
                      "they are of two runs (import each into a store of its own)")


def _add(store, part, clocks: dict, exchanging: set[int], report=None) -> None:
    """Write a part's rank (as the Arrow table the importer made: no pandas), merging with what earlier files
    gave the same rank: their union, a row (an interval, a counter sample) both give kept once and counted in
    ``report`` (a file given twice, exports of overlapping ranks: their rows were doubled, and the last file's
    counters replaced the others'); note it in ``exchanging`` when it holds MPI sends or receives that clock
    alignment could pair (not per-call totals: IPM's name their partners, but a total has no send or receive
    time)."""
    import pyarrow as pa

    from ddltrace.collectors.importers.align import has_point_to_point

    rank = int(part.rank)
    info = {k: v for k, v in part.info.items() if v is not None}
    timeline, counters = part.table, part.counter_table
    if str(rank) in store.manifest["ranks"]:  # (not store.ranks: that sorts every rank, each time)
        import pandas as pd

        written = store.written_table(rank)
        both = pa.concat_tables([written, timeline])
        if _overlap(written, timeline):  # (files of a rank one after another, TF1's per step, hold no row twice)
            both = both.to_pandas()
            timeline = both.drop_duplicates(ignore_index=True)
        else:
            timeline = both
        earlier = store.counters([rank]) if rank in store.counter_ranks else None
        if earlier is not None and len(earlier):
            given = counters.to_pandas() if isinstance(counters, pa.Table) else counters
            samples = pd.concat([earlier, given], ignore_index=True) if given is not None else earlier
            counters = samples.drop_duplicates(["name", "t_ns", "value"], ignore_index=True)
        if report is not None and len(both) > len(timeline):
            report.dropped["rows of a rank another file gave already (the same interval twice)"] += \
                len(both) - len(timeline)
            report.intervals -= len(both) - len(timeline)
        old = store.rank_info(rank)
        files = old.get("files", [old.get("file")])
        info["files"] = [*files, info.pop("file", None)]
        if old.get("format") and old.get("format") != info.get("format"):
            info["format"] = f"{old['format']}+{info.get('format')}"
        if old.get("peer_identities") or info.get("peer_identities"):
            info["peer_identities"] = {**old.get("peer_identities", {}), **info.get("peer_identities", {})}
    store.add_rank(rank, timeline, counters, save=False, group=True, **info)  # small ranks: one file
    clocks.setdefault(part.clock, set()).add(rank)
    if has_point_to_point(part.table) and not info.get("aggregate"):  # per-call totals have no times to pair
        exchanging.add(rank)


def _overlap(a, b) -> bool:
    """Whether two Arrow timelines' spans (first start to last start) overlap: only then can a row be in both."""
    import pyarrow.compute as pc

    if not a.num_rows or not b.num_rows:
        return False
    a_lo, a_hi = pc.min_max(a.column("start_ns")).values()
    b_lo, b_hi = pc.min_max(b.column("start_ns")).values()
    return a_lo.as_py() <= b_hi.as_py() and b_lo.as_py() <= a_hi.as_py()


def _resolve_peers(store, numbered: dict[tuple, int]) -> None:
    """Peers that named a task numbered after the workers (a ps task: a negative placeholder and the task in
    the rank's ``peer_identities``) get that task's rank."""
    for rank in store.ranks:
        info = store.rank_info(rank)
        placeholders = info.pop("peer_identities", None)
        if not placeholders:
            continue
        import pandas as pd

        mapping = {int(code): numbered.get(tuple(identity)) for code, identity in placeholders.items()}
        timeline = store.timeline([rank])
        resolved = [mapping.get(int(v), pd.NA) if pd.notna(v) and v < 0 else v for v in timeline["peer"]]
        store.add_rank(rank, timeline.assign(peer=pd.array(resolved, dtype="Int32")), save=False)


def _resolve_messages(messages: list, numbered: dict[tuple, int]):
    """The importers' matched messages with identities (ps tasks) replaced by their ranks (None when none)."""
    if not messages:
        return None
    import pandas as pd

    frame = pd.concat(messages, ignore_index=True)
    for column in ("src", "dst"):
        frame[column] = [numbered.get(v, -1) if isinstance(v, tuple) else int(v) for v in frame[column]]
    return frame[(frame["src"] >= 0) & (frame["dst"] >= 0)].astype("int64")


def _align_clocks(store, mode: str, messages, exchanging: set[int]) -> None:
    """Shift each rank's times by its offset to the lowest rank, estimated from matched send/receive pairs
    (``collectors/importers/align.py``), when the ranks come from different hosts or when asked. The pairs
    are the importers' ``messages`` (None: none) and the MPI sends/receives of the ``exchanging`` ranks, the
    only ranks read back. With neither (an IPM profile, a trace of one process per host without MPI calls)
    there is nothing to align by: the manifest's notes say so, and nothing is read again."""
    hosts = {store.rank_info(r).get("host") for r in store.ranks} - {None, ""}
    notes = store.manifest.setdefault("notes", [])
    if mode == "none" or (mode == "auto" and len(hosts) < 2) or len(store.ranks) < 2:
        return
    why = f"ranks on {len(hosts)} hosts" if mode == "auto" else "--align messages"
    if messages is None and not exchanging:
        totals = any(store.rank_info(r).get("aggregate") for r in store.ranks)
        held = ("per-call totals, with no send or receive times" if totals else
                "no matched messages, no MPI send or receive naming its peer")
        notes.append(f"clock alignment ({why}): not attempted, the input holds no send/receive pairs to bound the "
                     f"clocks by ({held}); times left as recorded")
        return
    import pandas as pd

    from ddltrace.collectors.importers.align import METHOD, estimate_offsets, mpi_messages, no_messages

    mpi = mpi_messages(store.iter_timeline(sorted(exchanging)))
    found = [m for m in (messages, mpi) if m is not None and len(m)]
    pairs = pd.concat(found, ignore_index=True) if found else no_messages()
    result = estimate_offsets(pairs, store.ranks)
    if not result.consistent:
        notes.append(f"clock alignment ({why}): the {result.messages} matched messages' bounds contradict each "
                     "other (clock drift during the trace, or mismatched pairs); times left as recorded")
        return
    if not result.messages or len(result.unaligned) == len(store.ranks) - 1:
        notes.append(f"clock alignment ({why}): no rank has messages both ways with the reference rank's "
                     "clock chain; times left as recorded")
        return
    for rank, offset in result.offsets_ns.items():
        if offset == 0:
            continue
        timeline = store.timeline([rank])
        counters = store.counters([rank]) if rank in store.counter_ranks else None
        if counters is not None:
            counters = counters.assign(t_ns=counters["t_ns"] + offset)
        store.add_rank(rank, timeline.assign(start_ns=timeline["start_ns"] + offset), counters, save=False)
    clock = store.manifest["clock"]
    clock.update({"method": METHOD.format(ref=result.reference) + f" ({why}); before: " + clock["method"],
                  "reference_rank": result.reference,
                  "offsets_ns": {str(r): v for r, v in result.offsets_ns.items()},
                  "uncertainty_ns": {str(r): v for r, v in result.uncertainty_ns.items()},
                  "matched_messages": result.messages,
                  "max_uncertainty_ns": max(result.uncertainty_ns.values(), default=0)})
    if result.unaligned:
        clock["unaligned_ranks"] = result.unaligned
        notes.append(f"clock alignment: ranks {result.unaligned} have no two-sided bound (messages in one direction "
                     "only, or none); their times are left as recorded")


def _name_mixed_clocks(store, reports, clocks: dict) -> None:
    """Where some ranks are on the wall clock and others' times are not (relative to their own start, or on one
    file's or archive's own clock: a TraceFusion file, an OTF2 archive), a problem of the first file of such a
    rank: no span or alignment across the two sets means anything (QA: a TensorBoard folder of two such hosts read
    as a run of 492,109 h)."""
    from ddltrace.store import rank_ranges

    def timed(kind: str) -> list[int]:  # the ranks of that clock with events (an empty rank has no times)
        return sorted(r for r in clocks.get(kind, ()) if store.rank_info(r).get("events"))

    wall = timed("epoch")
    for kind, theirs in (("relative", "relative to its own start"), ("shared", "on its own clock, not the wall "
                                                                                 "clock")):
        other = timed(kind)
        if not other or not wall:
            continue
        path = store.rank_info(other[0]).get("file")
        report = next((r for r in reports if r.path == path), None)
        if report is not None:
            report.problems.append(f"{path}: its times are {theirs} (ranks {rank_ranges(other)}), while ranks "
                                   f"{rank_ranges(wall)} are on the wall clock: their times cannot be put on one "
                                   "clock, and a span or a wait across the two is not the run's")
        return


def _kept_nothing(report) -> str:
    """Why a file gave no event: what was read of it and what was skipped."""
    skipped = ", ".join(f"{n} {why}" for why, n in report.skipped.most_common())
    return (f"{report.path}: {report.events} events read, none kept as an interval or a counter sample"
            + (f" (skipped: {skipped})" if skipped else ""))


def _finish_manifest(store, reports, clocks: dict, formats: Counter, world_sizes: list[int]) -> None:
    from ddltrace.store import IMPORT_PROBLEM

    kinds = sorted(clocks)
    method = _CLOCK_METHODS[kinds[0]] if len(kinds) == 1 else "mixed: " + "; ".join(
        f"ranks {sorted(clocks[k])}: {_CLOCK_METHODS[k]}" for k in kinds)
    store.manifest["clock"] = {"method": method, "offsets_ns": {}, "uncertainty_ns": {},
                               "per_rank": {str(r): k for k, ranks in clocks.items() for r in ranks}}
    store.manifest["run"].update({"framework": "+".join(sorted(formats)),
                                  "imported_files": sum(1 for report in reports if report.format),
                                  "world_size": max([max(store.ranks, default=-1) + 1, *world_sizes,
                                                     *(r.world_size for r in reports if r.world_size)])})
    hosts = sorted({host for report in reports for host in report.hosts or ()})
    if hosts:
        store.manifest["run"]["hosts"] = hosts
    read = [report for report in reports if report.format]
    for key in sorted({key for report in read for key in report.run}):  # what the run was, where every file says so
        said = [report.run.get(key) for report in read]
        if said and said[0] is not None and all(value == said[0] for value in said):
            store.manifest["run"][key] = said[0]
    _name_mixed_clocks(store, reports, clocks)
    notes = store.manifest.setdefault("notes", [])
    for report in reports:
        skipped = ", ".join(f"{n} {why}" for why, n in report.skipped.most_common())
        dropped = ", ".join(f"{n} {why}" for why, n in report.dropped.most_common())
        notes.append(f"import {report.path} ({report.format or 'unknown format'}): {report.events} events read, "
                     f"{report.intervals} intervals kept" + (f"; skipped: {skipped}" if skipped else "")
                     + (f"; intervals dropped: {dropped}" if dropped else ""))
        notes.extend(f"{IMPORT_PROBLEM}{p}" for p in report.problems)
    notes.extend(_views(store))
    _restore_run_entries(store, reports)


def _note_missing(store, reports, unread: list[tuple[Path, int | None, str]], rank_from: str,
                  session_ranks: dict) -> None:
    """A note (ddltrace/merged_manifest.py's ``unread_note``: :meth:`TraceStore.missing` gives it as the reason, and
    ``info`` on its ``not listed`` line) on each rank of the world the store holds no timeline of whose trace was
    given: a rank an export names as not in it, with the exported store's reason (a file it found damaged, ...); the
    rank of a file that did not read (by its TensorBoard host, else as ``--rank-from`` numbers it, in ``auto`` by
    the number in its name or its folder's), naming the file and why; and the other ranks of the world no file read
    gave while some file given did not read whose rank is not known (or is one another file gave), naming those files
    (was: "not in the files imported", the file and why only among the problems). A rank another file gave, or one
    the run's own notes already explain, gets none."""
    from itertools import islice

    from ddltrace.merged_manifest import NO_FILE_READ, NOT_EXPORTED, UNREAD_FILE, unfiled_ranks, unread_note
    from ddltrace.store import MAX_MISSING_NAMED

    held, world = set(store.ranks), store.world_size
    notes = store.manifest.setdefault("notes", [])
    # the ranks the run's notes already explain, kept as the notes' lists (a note may name a range of ranks; one
    # past the world is damaged and explains none)
    explained_by = [ranks for note in notes if (ranks := unfiled_ranks(note, world))]

    def explained(rank: int) -> bool:
        return any(rank in ranks for ranks in explained_by)

    said: dict[str, list[int]] = {}
    for report in reports:
        for rank, why in sorted(report.missing.items()):
            if rank < world and rank not in held and not explained(rank) and why not in notes:
                said.setdefault(f"{NOT_EXPORTED} {report.path}: {why}", []).append(rank)
    unplaced = []  # (no rank number known of them, or one another file gave or outside the world: may be any)
    for path, index, error in unread:
        rank, how = _rank_of_unread(path, index, rank_from, session_ranks)
        if rank is not None and rank < world and rank not in held and not explained(rank):
            said.setdefault(f"{UNREAD_FILE} (rank {rank} {how}): {error}", []).append(rank)
        elif rank is None or rank in held or rank >= world:
            unplaced.append(error)
    for why, ranks in said.items():
        notes.append(unread_note(ranks, why))
    now = {r for ranks in said.values() for r in ranks}
    left = list(islice((r for r in range(world) if r not in held and r not in now and not explained(r)),
                       MAX_MISSING_NAMED))
    if left and unplaced:
        listed = "; ".join(unplaced[:3]) + (f"; and {len(unplaced) - 3} more" if len(unplaced) > 3 else "")
        notes.append(unread_note(left, f"{NO_FILE_READ}; of the files given, {len(unplaced)} did not read and may "
                                       f"hold {'it' if len(left) == 1 else 'them'}: {listed}"))


def _rank_of_unread(path: Path, index: int | None, rank_from: str, session_ranks: dict) -> tuple[int | None, str]:
    """The rank a file that did not read was given as, and how that is known: its host's (a TensorBoard session
    file), else as ``--rank-from`` numbers files (``order``: its place among the traces; ``name``/``dir``: the number in
    its name or its folder's; ``auto``: a rank-like number there, ``rank3``, ``worker_3``); (None, "") where none is
    (the rank the format would have read from the file)."""
    from ddltrace.collectors.importers.base import ImportContext, rank_from_path

    if path in session_ranks:
        return session_ranks[path][0], "by its host, as TensorBoard's profile folder orders them"
    if rank_from == "order":
        return (index, "by its place among the traces given") if index is not None else (None, "")
    try:
        rank = rank_from_path(path, rank_from, ImportContext(None, rank_from, -1))
    except DdltraceError:  # (--rank-from name or dir, and no number there)
        return None, ""
    if rank < 0:  # auto: no rank-like number in its name or its folder's
        return None, ""
    return rank, {"name": "by its file name", "dir": "by its folder's name"}.get(
        rank_from, "by its name")


def _restore_run_entries(store, reports) -> None:
    """The run-level manifest entries the files carry (``FileReport.manifest``: ddltrace's own export's workload,
    clock and notes) put back in the store's manifest, where every file read carries the same one: its notes
    before the import's own, its workload and clock in place of none and the import's clock (the export kept the
    times on that clock). Files that disagree, or that mix in another format, leave the import's own, and a note
    says which entry was not restored."""
    read = [report for report in reports if report.format]
    for key in sorted({key for report in read for key in report.manifest}):
        values = [report.manifest.get(key) for report in read]
        if any(value != values[0] for value in values):
            store.manifest["notes"].append(f"the {key} entry of the exported run(s) is not restored: not every file "
                                           "imported carries the same one")
        elif key == "notes":
            store.manifest["notes"][:0] = values[0]
        else:
            store.manifest[key] = values[0]


def _views(store) -> list[str]:
    """What a rank's file sees beyond itself (a Horovod timeline: rank 0's view of every rank)."""
    views = {rank: store.rank_info(rank).get("view") for rank in store.ranks}
    return [f"rank {rank}: {view}" for rank, view in views.items() if view]


def _note_uncategorised(store, categorizer) -> list[dict]:
    """The events no rule knew, by raw category: in the manifest (``uncategorised``, read by ``info``) and its notes;
    after the rows an exported store's ``otherData`` gave back (:func:`_restore_run_entries`: its events were filed
    under a category before the export, and its note is among the notes restored). Returns this import's own rows."""
    from ddltrace.collectors.importers.categories import uncategorised_text

    rows = categorizer.uncategorised()
    if rows:
        restored = store.manifest.get("uncategorised") or []
        store.manifest["uncategorised"] = [*restored, *rows]
        store.manifest.setdefault("notes", []).append(uncategorised_text(rows))
    return rows


def _print_summary(out: Path, reports, elapsed: float, store, folder_notes: list[str],
                   uncategorised: list[dict]) -> None:
    """What was imported; ``uncategorised``: the events of this import no rule knew (not those an export's
    ``otherData`` gave back: filed under a category before the export, no rule of this import would find them)."""
    total_events = sum(r.events for r in reports)
    total_intervals = sum(r.intervals for r in reports)
    ignored = [r for r in reports if not r.format and not r.problems]
    print(f"imported {sum(1 for r in reports if r.format)} file(s) into {out}: {total_events} events read, "
          f"{total_intervals} intervals kept, ranks {', '.join(map(str, store.ranks))}, in {elapsed:.2f} s")
    if ignored:
        print(f"  {len(ignored)} file(s) in the folders are not traces and were skipped: "
              + ", ".join(Path(r.path).name for r in ignored[:5]) + (", ..." if len(ignored) > 5 else ""))
    for r in reports:
        if r in ignored:
            continue
        print(f"  {r.path} [{r.format or '?'}]: {r.events} events, {r.intervals} intervals")
        for why, n in r.skipped.most_common():
            print(f"      skipped {n} event(s): {why}")
        for why, n in r.dropped.most_common():
            print(f"      dropped {n} interval(s): {why}")
        for problem in r.problems:
            print(f"      problem: {problem}")
    for note in [*folder_notes, *_views(store)]:
        print(f"  {note}")
    if uncategorised:
        from ddltrace.collectors.importers.categories import uncategorised_text

        print(f"  {uncategorised_text(uncategorised)}")
    print(f"  clock: {store.manifest['clock']['method']}")
    for note in store.manifest.get("notes", []):
        if note.startswith("clock alignment"):
            print(f"  {note}")


def _print_explain(categorizer) -> None:
    rows = categorizer.explain()
    print("\nwhich rule gave each event name its category (format, category, rule, events, cat | name):")
    for row in rows:
        cat = f"{row['cat']} | " if row["cat"] else ""
        print(f"  {row['format']:8s} {row['category']:8s} {row['rule']:24s} {row['events']:9d}  {cat}{row['name']}")
    origins = sorted({r["rule_file"] for r in rows if r["rule_file"]})
    print(f"rules from: {', '.join(origins)}")
