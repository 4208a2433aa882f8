"""IPM XML profiles (``<ipm_job_profile>``): per rank, wall time and the total time in each MPI call.

IPM keeps no time line, only totals. Each rank becomes one aggregate lane: the time outside MPI
(``wtime - mtime``, named "compute") followed by every MPI call's total (its ``<func>`` entry: time, bytes,
count), laid end to end from the rank's start stamp, so per-category sums give the compute / barrier / wait
ratios of Hashemi et al.'s Figure 5. The rank's manifest entry says ``aggregate: true``.

A point-to-point call (send, receive, or MPI_Sendrecv: IPM keys it by its destination) is one row per partner
rank instead, its ``peer`` the partner: IPM's hash entries (``<hent call= bytes= orank= count=>time ...``) give
each partner's calls, bytes per call and time. Each partner's row holds its hash entries' bytes exactly (bytes per
call times count, whole numbers in the file) and their share of the ``<func>`` entry's time (in whole ns, the
remainders to the largest shares), so a call's rows sum to the file's total time. The ``<func>`` entry's bytes
have five significant digits: on ipm_hunold_1494937738, rank 0's MPI_Send to rank 1 as a share of its 3.1472e+07
was 13,095,849 B where the hash entries give 13,095,936 B. Times have five digits in both. The partners place
each node's point-to-point traffic within and between nodes (:mod:`~ddltrace.analyses.node_traffic`); with no
times per call they are not messages to match.

The run's world size is the file's (what most tasks' ``mpi_size`` and ``<job ntasks=>`` say), not the tasks read,
so the ranks a damaged file lost are listed as missing. After an XML error the reader reads on at the next
``<task``: each task not read whole is parsed on its own, and one problem line names the damaged ones (by place and
the ``mpi_rank`` of their opening tag) and counts the tasks read.
"""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

from ddltrace.arrow_timeline import numbers
from ddltrace.collectors.importers.base import ImportContext, Importer, RankPart, build_timeline, register
from ddltrace.collectors.importers.source import ByteSource
from ddltrace.errors import DdltraceError


def sniff(head: bytes, path: Path) -> bool:
    return b"<ipm_job_profile" in head[:4096]


#: Values at or beyond this are not times (s), byte counts or call counts of one run.
_TOO_LARGE = 1e15


def _number(text, what: str, where: str) -> float:
    """A finite, non-negative number below 1e15 from ``text``; ValueError naming ``what`` and ``where``."""
    try:
        value = float(text)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {what} {text!r} is not a number") from exc
    if not 0 <= value < _TOO_LARGE:  # NaN fails too
        raise ValueError(f"{where}: {what} {text!r} is negative, infinite or beyond {_TOO_LARGE:g}")
    return value


def _float(element, name: str, where: str) -> float:
    return _number(element.get(name), f"attribute {name}", where)


def _epoch_ns(text, where: str) -> int:
    """``stamp_init`` (s since the epoch, as decimal text) in whole ns, read exactly: through a float the
    microseconds of ``1494937738.200810`` came out 16 ns off."""
    _number(text, "attribute stamp_init", where)  # the same checks and message as every other number
    return int((Decimal(text.strip()) * 1_000_000_000).to_integral_value())


def _partners(task, where: str, p2p: frozenset[str]) -> dict[str, dict[int, list]]:
    """Per point-to-point call name (one of ``p2p``), per partner rank (``orank``): [time (s), bytes] summed
    over the task's hash entries (bytes per call times count, exact integers)."""
    out: dict[str, dict[int, list]] = {}
    for hent in task.iter("hent"):
        name = hent.get("call")
        if name not in p2p or hent.get("orank") is None:
            continue
        what = f"{name} hash entry"
        partner = int(_number(hent.get("orank"), f"{what} orank", where))
        count = _number(hent.get("count") or 0, f"{what} count", where)
        times = (hent.text or "0").split()
        entry = out.setdefault(name, {}).setdefault(partner, [0.0, 0])
        entry[0] += _number(times[0] if times else "0", f"{what} time (s)", where)
        entry[1] += int(_number(hent.get("bytes") or 0, f"{what} bytes", where)) * int(count)
    return out


def _shares(total: int, weights: list[float]) -> list[int]:
    """``total`` split in whole units in proportion to ``weights`` (equally when they are all 0), the remainder
    to the largest fractions: the parts sum to ``total``."""
    weight = float(sum(weights))
    exact = [total * w / weight for w in weights] if weight > 0 else [total / len(weights)] * len(weights)
    parts = [int(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: parts[i] - exact[i])[:total - sum(parts)]:
        parts[i] += 1
    return parts


def _task_part(task, ctx: ImportContext, path: Path, p2p: frozenset[str]) -> RankPart:
    where = f"{path}: task mpi_rank={task.get('mpi_rank')}"
    rank = int(_number(task.get("mpi_rank"), "mpi_rank", where))
    start_ns = _epoch_ns(task.get("stamp_init"), where)
    perf = task.find("perf")
    if perf is None:
        raise ValueError(f"{where}: no <perf>")
    wtime, mtime = _float(perf, "wtime", where), _float(perf, "mtime", where)
    funcs: dict[str, list[float]] = {}
    for func in task.iter("func"):
        name = func.get("name") or "?"
        entry = funcs.setdefault(name, [0.0, 0.0, 0])
        entry[0] += _number((func.text or "0").strip(), f"{name} time (s)", where)
        entry[1] += _number(func.get("bytes") or 0, f"{name} bytes", where)
        entry[2] += int(_number(func.get("count") or 0, f"{name} count", where))
    partners = _partners(task, where, p2p)
    names = ["compute", *funcs]
    keys, durs, sizes, peers = [0], [int(round(max(wtime - mtime, 0.0) * 1e9))], [0], [-1]  # -1: no partner
    for key, (name, (time_s, nbytes, _)) in enumerate(funcs.items(), 1):
        by = partners.get(name) or {-1: [time_s, nbytes]}  # a call with no partner: one row
        keys += [key] * len(by)
        durs += _shares(int(round(time_s * 1e9)), [v[0] for v in by.values()])
        sizes += [int(v[1]) for v in by.values()]
        peers += list(by)
    dur_ns = np.array(durs, dtype=np.int64)
    starts = start_ns + np.concatenate([[0], np.cumsum(dur_ns)[:-1]]).astype(np.int64)
    missing_peer = np.array(peers) < 0
    extra = {"bytes": numbers(np.array(sizes, dtype=np.int64), pa.int64(), np.arange(len(keys)) == 0),
             "peer": numbers(np.where(missing_peer, 0, peers), pa.int32(), missing_peer)}  # compute: no payload
    timeline = build_timeline(rank=rank, lane_codes=np.zeros(len(keys), dtype=np.int64),
                              lane_table=["ipm totals"], key_codes=np.array(keys),
                              key_table=[("", n) for n in names], start_ns=starts, dur_ns=dur_ns, fmt="ipm",
                              ctx=ctx, extra=extra)
    host = task.findtext("host", default="").strip()
    info = {"format": "ipm", "file": str(path), "host": host, "aggregate": True, "wtime_s": wtime,
            "mpi_time_s": mtime, "calls": {n: v[2] for n, v in funcs.items()}}
    return RankPart(rank=rank, timeline=timeline, info=info, clock="epoch")


#: A task's opening tag in the raw bytes (where the reader reads on after an XML error).
_TASK_START = re.compile(rb"<task[\s>/]")
_TASK_END = b"</task>"
#: In a task's first bytes: its rank as its opening tag writes it, and the run's size (the task's ``mpi_size``, its
#: ``<job ntasks=>``).
_TAG_RANK = re.compile(rb"""\smpi_rank\s*=\s*["']([^"'<>]{0,40})["']""")
_TAG_SIZE = re.compile(rb"""\s(?:mpi_size|ntasks)\s*=\s*["']([^"'<>]{0,40})["']""")
_ENCODING = re.compile(rb"""<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]{1,40})["']""")
#: A world size past this is not one (a rank is an MPI int).
_MAX_WORLD = 2**31
#: Damaged tasks named one by one in the import's problem line; the rest counted.
_NAMED = 10


def _size(text) -> int | None:
    """A task's ``mpi_size`` or ``ntasks`` as a world size, or None where it is not one."""
    try:
        value = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return value if 0 < value < _MAX_WORLD else None


def _sizes_of(task) -> list:
    """The world sizes a parsed ``<task>`` says (its ``mpi_size``, its ``<job ntasks=>``), as written."""
    job = task.find("job")
    return [task.get("mpi_size"), None if job is None else job.get("ntasks")]


def _world(sizes: Counter, path: Path, problems: list[str]) -> int | None:
    """The run's world size: what most tasks say (the larger where as many say each), a problem line where they
    do not all say the same."""
    if not sizes:
        return None
    world = max(sizes, key=lambda n: (sizes[n], n))
    if len(sizes) > 1:
        said = ", ".join(f"{n} ({sizes[n]}x)" for n in sorted(sizes))
        problems.append(f"{path}: the tasks disagree on the run's size (mpi_size, ntasks: {said}); world size "
                        f"taken as {world}, what most say")
    return world


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _blocks(source: ByteSource):
    """Each ``<task ...>`` of the file's bytes up to the next one (or the end): (its place, 0 first; its bytes)."""
    buf, start, scan, index = b"", -1, 0, 0  # start: where the current task starts in buf (-1: none yet)
    for chunk in source.chunks():
        if start > 0:  # (what is before the current task was yielded: dropped once per chunk, not per task)
            buf, scan, start = buf[start:], scan - start, 0
        elif start < 0:  # (before the first task: nothing kept but the bytes a tag may start in)
            buf, scan = buf[-6:], 0
        buf += chunk
        while (found := _TASK_START.search(buf, max(scan, start + 1))) is not None:
            if start >= 0:
                yield index, buf[start:found.start()]
                index += 1
            start = scan = found.start()
            scan += 1
        scan = max(scan, len(buf) - 6)  # (a tag cut by the chunk's end is searched again)
    if start >= 0:
        yield index, buf[start:]


def _split(block: bytes) -> tuple[bytes | None, bytes]:
    """A task's bytes up to the next ``<task``: (those up to and including its first ``</task>``, None where there
    is none: cut off or its end tag damaged; those after it up to the last ``</task>``: a task whose opening tag
    is damaged, or nothing)."""
    first, last = block.find(_TASK_END), block.rfind(_TASK_END)
    if first < 0:
        return None, b""
    return block[:first + len(_TASK_END)], block[first + len(_TASK_END):last + len(_TASK_END)]


def read(path: Path, ctx: ImportContext):
    import xml.etree.ElementTree as ET  # here, not at the top: every import run loads the importers' modules

    # (no pandas: an import loads none)
    from ddltrace.collectors.importers.align import MPI_RECVS, MPI_SENDRECVS, MPI_SENDS

    p2p = frozenset(MPI_SENDS | MPI_RECVS | MPI_SENDRECVS)
    report = ctx.report
    problems: list[str] = []  # (this file's, after the tasks' own)
    sizes: Counter = Counter()  # world size -> tasks that say it
    handled: Counter = Counter()  # mpi_rank as a task read whole writes it -> such tasks (read on: not again)
    tasks = 0

    def take(element):
        """The part of a whole ``<task>`` element, or None where its numbers are unreadable (skipped, named)."""
        nonlocal tasks
        tasks += 1
        handled[element.get("mpi_rank")] += 1
        sizes.update({n for n in map(_size, _sizes_of(element)) if n})
        try:
            part = _task_part(element, ctx, path, p2p)
        except (ValueError, TypeError) as exc:
            if report is not None:
                report.skipped["IPM task with unreadable numbers"] += 1
                report.problems.append(str(exc))
            return None
        finally:
            element.clear()
        if report is not None:
            report.events += 1
            report.intervals += part.rows
        return part

    source = ByteSource(path)
    parser = ET.XMLPullParser(events=("end",))
    try:
        for chunk in source.chunks():
            parser.feed(chunk)
            for _event, element in parser.read_events():
                if element.tag == "task" and (part := take(element)) is not None:
                    yield part
        parser.close()
    except ET.ParseError as exc:
        # Read on at the next task: each <task> of the file that was not read whole is parsed on its own (one bad
        # byte lost every task after it, and a cut file's run was taken as the ranks before the cut).
        line, column = exc.position
        message = f"{path}: XML broken at line {line}, column {column} ({exc})"
        head = source.head(4096)
        encoding = m.group(1).decode("ascii") if (m := _ENCODING.search(head)) else None
        before, damaged = tasks, []
        for index, raw in _blocks(ByteSource(path)):  # (its gzip damage, if any, is said once below)
            block, more = _split(raw)
            if more:  # (a task whose own <task is damaged: its bytes came after this one's end)
                said = m.group(1).decode("latin-1") if (m := _TAG_RANK.search(more, 0, 4096)) else None
                damaged.append((f"a task after the {_ordinal(index + 1)}, its opening tag damaged"
                                + (f' (mpi_rank="{said}" in it)' if said is not None else ""), False))
                sizes.update({n for n in map(_size, _TAG_SIZE.findall(more, 0, 4096)) if n})
            said = m.group(1).decode("latin-1") if (m := _TAG_RANK.search(raw, 0, 4096)) else None
            if handled[said] > 0:  # read whole before the error
                handled[said] -= 1
                continue
            element = None
            if block is not None:
                try:
                    block_parser = ET.XMLParser(encoding=encoding)
                except LookupError:
                    block_parser = ET.XMLParser()
                try:
                    block_parser.feed(block)
                    element = block_parser.close()
                except ET.ParseError:
                    element = None
            if element is None or element.tag != "task":
                what = f"the {_ordinal(index + 1)} task" + (f' (mpi_rank="{said}" by its opening tag)'
                                                            if said is not None else "")
                sizes.update({n for n in map(_size, _TAG_SIZE.findall(raw, 0, 4096)) if n})
                damaged.append((what, block is None))
                continue
            if (part := take(element)) is not None:
                yield part
        message += _resync_said(damaged, tasks - before, tasks)
        if tasks == 0:
            raise DdltraceError(message) from exc
        problems.append(message)
    world = _world(sizes, path, problems)
    if report is not None:
        report.world_size = world
        report.problems.extend(problems)
        report.problems.extend(source.problems)


def _resync_said(damaged: list[tuple[str, bool]], after: int, total: int) -> str:
    """What the reader did after the XML error: the damaged tasks named, the tasks read on."""
    read = f"{total} task(s) read in all, {after} of them after the error (each <task> from there read on its own)"
    if not damaged:
        return f"; no task damaged; {read}"
    named = ", ".join(what + (" has no </task> (cut off, or its end tag damaged)" if cut else "")
                      for what, cut in damaged[:_NAMED])
    more = f", and {len(damaged) - _NAMED} more" if len(damaged) > _NAMED else ""
    return f"; not read, damaged: {named}{more}; {read}"


register(Importer("ipm", "IPM XML profile (per-rank MPI totals)", sniff, read))
