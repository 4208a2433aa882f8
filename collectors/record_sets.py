"""Record sets: the raw records of one ``ddltrace run`` job, kept until a verified store holds them.

A record set is a folder: ``/dev/shm/ddltrace-records-XXXX`` for local ranks (``--np``), else
``.STORE.XXXX/records`` beside the store (``--launcher``). It holds each rank's ``rank-NNNNN.pmpi`` (written
by the PMPI wrapper) and :data:`JOB_FILE`, what ``run`` wrote before starting the job (the command, its start
time, where the store was to go, which processes own the set) and when it ended (exit code, end time, the
collectors and GPUs), and, once the job has ended, :data:`SAMPLES_FILE`: the system and GPU samples ``run`` held
(so that a recovery keeps them where the store's write failed or was abandoned). Every
set is also named in ``<cache>/record-sets/`` (``$DDLTRACE_CACHE`` or ``~/.cache/ddltrace``) so that
``ddltrace recover`` finds those outside /dev/shm. ``run`` deletes the set only after the store is written,
verified and renamed into place; a ``run`` that is killed, fails or is abandoned leaves it for
``ddltrace recover``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ddltrace.collectors.pmpi.build import cache_root
from ddltrace.errors import DdltraceError
from ddltrace.store import atomic_output

JOB_FILE = "ddltrace-run.json"
SAMPLES_FILE = "samples.parquet"
SHM = Path("/dev/shm")
SHM_PREFIX = "ddltrace-records-"


@dataclass
class RecordSet:
    """One record set: its folder, what ``run`` wrote about the job, its rank files and their total size
    (bytes, the files' apparent size), and who still uses it."""

    path: Path
    job: dict
    rank_files: list[Path] = field(default_factory=list)
    size_bytes: int = 0
    live_ranks: list[int] = field(default_factory=list)

    @property
    def owner_alive(self) -> bool:
        """The ``ddltrace run`` that made the set is still running (it will write the store itself)."""
        return _alive(self.job.get("ddltrace_pid"), self.job.get("ddltrace_started"))

    @property
    def job_alive(self) -> bool:
        """The job (its launcher process) is still running, or a rank's process is alive inside MPI."""
        return _alive(self.job.get("job_pid"), self.job.get("job_started")) or bool(self.live_ranks)


def _alive(pid, started) -> bool:
    """Process ``pid`` exists and was started at ``started`` (psutil create time, s): not a reused pid."""
    if not pid:
        return False
    try:
        proc = psutil.Process(int(pid))
        return started is None or abs(proc.create_time() - float(started)) < 0.5 and proc.status() != "zombie"
    except psutil.Error:
        return False


def registry() -> Path:
    """The folder naming every record set (one ``.path`` file each): ``<cache>/record-sets``."""
    return cache_root().parent / "record-sets"


def _entry(records: Path) -> Path:
    key = str(records.resolve())
    return registry() / f"{zlib.crc32(key.encode()):08x}-{records.name}.path"


def register(records: Path, job: dict) -> None:
    """Write the set's job file (again, to add what became known) and name the set in the registry."""
    with atomic_output(records / JOB_FILE) as fh:
        fh.write(json.dumps(job, indent=2, default=str).encode())
    try:
        registry().mkdir(parents=True, exist_ok=True)
        _entry(records).write_text(str(records.resolve()))
    except OSError:
        pass  # the set is still found in /dev/shm, and `run` printed its path


def save_samples(records: Path, rows: list[tuple[int, str, int, float]]) -> None:
    """Keep the samplers' rows (pid or -1, counter, t_ns, value) in the set as :data:`SAMPLES_FILE` (Parquet,
    written whole then renamed: a half-written file is never read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys, names, times, values = (list(column) for column in zip(*rows, strict=True)) if rows else ([], [], [], [])
    table = pa.table({"pid": pa.array(keys, pa.int64()), "name": pa.array(names, pa.string()),
                      "t_ns": pa.array(times, pa.int64()), "value": pa.array(values, pa.float64())})
    with atomic_output(records / SAMPLES_FILE) as fh:
        pq.write_table(table, fh)


def load_samples(records: Path) -> tuple[list[tuple[int, str, int, float]], str]:
    """The rows :func:`save_samples` kept in the set, and "" or why they cannot be read (none kept: ([], ""))."""
    path = records / SAMPLES_FILE
    if not path.is_file():
        return [], ""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=["pid", "name", "t_ns", "value"])
    except Exception as exc:  # noqa: BLE001 (pyarrow raises several kinds on a damaged file)
        return [], f"{path}: the system and GPU samples kept there cannot be read ({exc})"
    columns = [table.column(c).to_pylist() for c in ("pid", "name", "t_ns", "value")]
    return list(zip(*columns, strict=True)), ""


def discard(records: Path, job: dict) -> None:
    """Delete a set whose store is in place: its folder, the work folder ``run`` left beside the store,
    and its registry entry."""
    entry = _entry(records)
    shutil.rmtree(records, ignore_errors=True)
    work = job.get("work")
    if work and Path(work).is_dir() and Path(work).name.startswith("."):
        shutil.rmtree(work, ignore_errors=True)
    entry.unlink(missing_ok=True)


def holds_data(records: Path, work: Path) -> bool:
    """Whether a set holds anything a store could be made from (a rank file, a framework profile)."""
    return any(records.glob("*.pmpi")) or any((work / "framework").rglob("*"))


def load(path: str | Path) -> RecordSet:
    """The record set at ``path``; :class:`DdltraceError` names the path when it is not one."""
    path = Path(path)
    if not path.is_dir():
        raise DdltraceError(f"{path}: no such record folder (`ddltrace recover` with no argument lists them)")
    try:
        job = json.loads((path / JOB_FILE).read_text())
    except FileNotFoundError:
        job = {}
    except (OSError, ValueError) as exc:
        raise DdltraceError(f"{path / JOB_FILE}: unreadable ({exc})") from exc
    if not isinstance(job, dict):
        raise DdltraceError(f"{path / JOB_FILE}: not a ddltrace run description (not a JSON object)")
    files = sorted(path.glob("rank-*.pmpi"))
    if not job and not files:
        raise DdltraceError(f"{path}: not a ddltrace record folder (no {JOB_FILE}, no rank-*.pmpi files)")
    size = 0
    for item in path.iterdir():
        with contextlib.suppress(OSError):  # a temporary file renamed away meanwhile
            size += item.stat().st_size if item.is_file() else 0
    started = job.get("ddltrace_started")
    return RecordSet(path=path, job=job, rank_files=files, size_bytes=size,
                     live_ranks=_live_ranks(files, float(started) if isinstance(started, (int, float)) else None))


#: The live part of a record file's header (runtime.c), at byte 20: rank, world size, pid, records written, state.
_LIVE_HEADER = struct.Struct("<iiiQI")
#: Header states of a rank inside MPI: initialised, finalising.
INSIDE_MPI = (1, 2)


def peek_header(path: Path) -> tuple[int, int, int, int, int] | None:
    """(rank, world size, pid, records written, state) from a record file's header; None when it cannot be read
    or is shorter than that."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20 + _LIVE_HEADER.size)
    except OSError:
        return None
    if len(head) < 20 + _LIVE_HEADER.size:
        return None
    return _LIVE_HEADER.unpack_from(head, 20)


def _live_ranks(files: list[Path], run_started: float | None = None) -> list[int]:
    """Ranks whose process is alive and inside MPI (header state initialised or finalising). A process with the
    header's pid is the rank only if it started after the ``ddltrace run`` (``run_started``, s since the epoch) and
    before the rank's file was last written: a pid of a rank in a PID namespace (a simulated node) or one reused
    since is another process (a rank of 2026-11-24 read as alive through the host's kworker of its pid 5)."""
    live = []
    for path in files:
        header = peek_header(path)
        if header is None or header[4] not in INSIDE_MPI:
            continue
        try:
            born = psutil.Process(header[2]).create_time()
            written = path.stat().st_mtime
        except (psutil.Error, OSError):
            continue
        if (run_started is None or born >= run_started - 1.0) and born <= written + 1.0:
            live.append(header[0])
    return live


def find() -> list[RecordSet]:
    """The record sets left on this machine: /dev/shm's, and those the registry names; newest first."""
    paths = set(SHM.glob(SHM_PREFIX + "*")) if SHM.is_dir() else set()
    named = registry()
    for entry in named.glob("*.path") if named.is_dir() else []:
        try:
            target = Path(entry.read_text().strip())
        except OSError:
            continue
        if target.is_dir():
            paths.add(target)
        else:
            entry.unlink(missing_ok=True)  # recovered or removed by hand
    found = []
    for path in paths:
        try:
            found.append(load(path))
        except (DdltraceError, OSError):
            continue
    return sorted(found, key=lambda rs: -(rs.job.get("start_ns") or 0))


def describe(rs: RecordSet) -> str:
    """One listing line: path, job command, start time, ranks, size, and what state the set is in."""
    start = rs.job.get("start_ns")
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(start / 1e9)) if start else "start unknown"
    command = rs.job.get("command")
    command = " ".join(command) if isinstance(command, list) else "command unknown"
    state = ("in use by a running `ddltrace run`" if rs.owner_alive
             else "job still running" if rs.job_alive
             else f"left; store was to be {rs.job.get('out', '?')}")
    return (f"{rs.path}  {command}  started {when}  {len(rs.rank_files)} ranks  "
            f"{rs.size_bytes / 1e6:.1f} MB  ({state})")


def now_job(**fields) -> dict:
    """A job description for :data:`JOB_FILE`, with this process as its owner."""
    me = psutil.Process(os.getpid())
    return {"ddltrace_pid": me.pid, "ddltrace_started": me.create_time(), **fields}
