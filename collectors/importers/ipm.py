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
"""

from __future__ import annotations

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


def read(path: Path, ctx: ImportContext):
    import xml.etree.ElementTree as ET  # here, not at the top: every import run loads the importers' modules

    # (no pandas: an import loads none)
    from ddltrace.collectors.importers.align import MPI_RECVS, MPI_SENDRECVS, MPI_SENDS

    source = ByteSource(path)
    parser = ET.XMLPullParser(events=("end",))
    tasks = 0
    try:
        for chunk in source.chunks():
            parser.feed(chunk)
            for _event, element in parser.read_events():
                if element.tag != "task":
                    continue
                tasks += 1
                try:
                    part = _task_part(element, ctx, path, frozenset(MPI_SENDS | MPI_RECVS | MPI_SENDRECVS))
                except (ValueError, TypeError) as exc:
                    if ctx.report is not None:
                        ctx.report.skipped["IPM task with unreadable numbers"] += 1
                        ctx.report.problems.append(str(exc))
                    continue
                finally:
                    element.clear()
                if ctx.report is not None:
                    ctx.report.events += 1
                    ctx.report.intervals += part.rows
                yield part
        parser.close()
    except ET.ParseError as exc:
        line, column = exc.position
        message = f"{path}: XML broken at line {line}, column {column} ({exc})"
        if tasks == 0:
            raise DdltraceError(message) from exc
        if ctx.report is not None:
            ctx.report.problems.append(message + f"; kept the {tasks} complete task(s) before it")
    if ctx.report is not None:
        ctx.report.problems.extend(source.problems)


register(Importer("ipm", "IPM XML profile (per-rank MPI totals)", sniff, read))
