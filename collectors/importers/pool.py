"""Several trace files read at once, one file per process, the results handed back in the files' order: how
``ddltrace import`` uses every core on a folder of ranks.

The workers are forked, so they share the importers and rules already loaded; each reads whole files and sends
back the file's parts, its report and the categorisation decisions it made, and its reading progress (bytes)
through a queue. At most ``jobs + 1`` files are out at a time, so memory holds a few ranks, not the folder. One
job (or one file) reads in this process, part by part, as before.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields, replace
from itertools import repeat
from pathlib import Path

from ddltrace.collectors.importers import source as source_module
from ddltrace.collectors.importers.base import FileReport, ImportContext, Importer, RankPart
from ddltrace.collectors.importers.categories import Categorizer
from ddltrace.errors import DdltraceError

#: Seconds between two progress messages of one worker.
PROGRESS_EVERY_S = 0.2


@dataclass
class FileTask:
    """One file to read: its place on the command line, the importer that reads it, and its report."""

    index: int
    path: Path
    importer: Importer
    report: FileReport


def read_files(tasks: list[FileTask], categorizer: Categorizer, rank_from: str, jobs: int,
               on_progress: Callable[[Path, int], None], mapper=None,
               ) -> Iterator[tuple[FileTask, Callable[[], Iterable[RankPart]]]]:
    """Each task, in order, with a function giving its parts (it raises the file's :class:`DdltraceError`).
    ``on_progress(path, bytes read)`` is called as files are read; ``jobs`` processes read at once. With a
    ``mapper`` (:mod:`ddltrace.executor`, a Dask cluster's), each whole file is read by one of its tasks instead."""
    if mapper is not None:
        yield from _read_mapped(tasks, categorizer, rank_from, mapper)
        return
    if jobs <= 1 or len(tasks) <= 1 or sys.platform == "win32":  # (no fork there)
        for task in tasks:  # a single file may be read by all the jobs (collectors/importers/chrome_split.py)
            ctx = ImportContext(categorizer, rank_from, task.index, task.report, jobs if len(tasks) == 1 else 1)
            source_module.progress_hook = lambda source: on_progress(source.path, source.consumed)
            yield task, (lambda task=task, ctx=ctx: task.importer.read(task.path, ctx))
        return
    import multiprocessing  # here: one file, or one job, needs neither these modules nor their 20-40 ms of imports
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("fork")
    global _WORK
    _WORK = (tasks, categorizer, rank_from, context.SimpleQueue())
    progress = _WORK[3]
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=context) as pool:
            queued = deque(pool.submit(_read_whole, i) for i in range(min(len(tasks), jobs + 1)))
            for i, task in enumerate(tasks):
                future = queued.popleft()
                while True:
                    try:
                        parts, report, decided, error = future.result(timeout=PROGRESS_EVERY_S)
                        break
                    except FutureTimeout:
                        _drain(progress, tasks, on_progress)
                    except BrokenProcessPool as exc:  # a reader died (a library crashed on a file, or memory)
                        out = ", ".join(str(t.path) for t in tasks[i:i + len(queued) + 1])
                        raise DdltraceError(f"a process reading one of {out} died without a word; --jobs 1 reads "
                                            "the files one by one, in this process") from exc
                _drain(progress, tasks, on_progress)
                if i + len(queued) + 1 < len(tasks):
                    queued.append(pool.submit(_read_whole, i + len(queued) + 1))
                for name in (f.name for f in fields(FileReport)):
                    setattr(task.report, name, getattr(report, name))
                categorizer.merge(decided)
                yield task, (lambda parts=parts, error=error: _parts_or_raise(parts, error))
    finally:
        _WORK = None


def _read_mapped(tasks: list[FileTask], categorizer: Categorizer, rank_from: str, mapper,
                 ) -> Iterator[tuple[FileTask, Callable[[], Iterable[RankPart]]]]:
    """The files read by the mapper's tasks, each given by its absolute path (the workers' folders are not ours);
    the parts and the problems name the file as the command line did."""
    remote = [replace(task, path=task.path.absolute()) for task in tasks]
    results = mapper(read_file, remote, repeat(categorizer), repeat(rank_from))
    for task, remote_task, (parts, report, decided, error) in zip(tasks, remote, results, strict=True):
        given, absolute = str(task.path), str(remote_task.path)
        for part in parts:
            if part.info.get("file") == absolute:
                part.info["file"] = given
        report.problems = [p.replace(absolute, given) for p in report.problems]
        if error is not None:
            error = DdltraceError(str(error).replace(absolute, given))
        for name in (f.name for f in fields(FileReport)):
            setattr(task.report, name, getattr(report, name))
        categorizer.merge(decided)
        yield task, (lambda parts=parts, error=error: _parts_or_raise(parts, error))


def read_file(task: FileTask, categorizer: Categorizer, rank_from: str,
              ) -> tuple[list[RankPart], FileReport, Categorizer, DdltraceError | None]:
    """One whole file read (a task of a mapper, in any process): its parts, report, the categorisation decisions
    made (a :meth:`~Categorizer.fresh` categorizer's) and the file's error, if any."""
    mine = categorizer.fresh()
    ctx = ImportContext(mine, rank_from, task.index, FileReport(task.report.path, task.report.format))
    try:
        return list(task.importer.read(task.path, ctx)), ctx.report, mine, None
    except DdltraceError as exc:  # as a plain DdltraceError: its subclasses do not all pickle
        return [], ctx.report, mine, DdltraceError(str(exc))


def given_up(args: tuple, why: str) -> tuple[list[RankPart], FileReport, Categorizer, DdltraceError]:
    """What :func:`read_file` hands back for a file whose task the cluster gave up (its workers died reading it):
    no parts, and the error naming the file (``on_failure`` of :mod:`ddltrace.executor`)."""
    task, categorizer, _ = args
    error = DdltraceError(f"{task.path}: the task reading it {why}")
    return [], FileReport(task.report.path, task.report.format), categorizer.fresh(), error


def _parts_or_raise(parts: list[RankPart], error: DdltraceError | None) -> list[RankPart]:
    if error is not None:
        raise error
    return parts


def _drain(progress, tasks: list[FileTask], on_progress: Callable[[Path, int], None]) -> None:
    while not progress.empty():
        index, consumed = progress.get()
        on_progress(tasks[index].path, consumed)


_WORK = None  # (tasks, categorizer, rank_from, progress queue), set before the workers are forked


def _read_whole(index: int) -> tuple[list[RankPart], FileReport, Categorizer, DdltraceError | None]:
    """A forked worker's job: read one whole file, its progress (bytes) sent through the queue."""
    tasks, categorizer, rank_from, progress = _WORK
    last = [0.0]

    def hook(source) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            progress.put((index, source.consumed))

    source_module.progress_hook = hook
    return read_file(tasks[index], categorizer, rank_from)
