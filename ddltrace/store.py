"""The trace store: one folder per run, a person can keep, diff and send.

Layout::

    STORE/
      manifest.json                  schema version, run metadata, clock alignment, ranks, ddltrace version
      timeline/rank-00000.parquet    one timeline file per rank (read rank by rank for big runs)
      counters/rank-00000.parquet    sampled values of one rank
      counters/machine.parquet       sampled values of the machine (counters rank -1)

Every file is written to a temporary name in the same folder and renamed into place, and the manifest is
written last: a crash mid-write never leaves a file that reads as valid, and a rank's files only count once
the manifest lists the rank. :func:`write_store` over an existing store builds the new store beside it and
swaps the folders, so an interrupted rewrite leaves the old store as it was.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ddltrace import __version__
from ddltrace.errors import SchemaError, StoreError
from ddltrace.timeline import (
    COUNTER_DTYPES,
    TIMELINE_DTYPES,
    empty_counters,
    empty_timeline,
    make_counters,
    make_timeline,
    time_order,
)

#: Version of the on-disk layout; a store with a higher number is refused.
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
_MACHINE = -1
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def _now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for writing; rename it to ``path`` only if the block succeeds."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; the result is a normal file others may read
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_output(path) as fh:
        fh.write(data)


def _atomic_write_parquet(path: Path, frame: pd.DataFrame) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)
    os.close(fd)
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        # times delta-encoded (sorted, they shrink to a few bits each); no min/max statistics (nothing reads them)
        times = [c for c in ("start_ns", "dur_ns", "t_ns") if c in frame.columns]
        pq.write_table(table, tmp, compression="zstd", write_statistics=False,
                       use_dictionary=[c for c in frame.columns if c not in times],
                       column_encoding=dict.fromkeys(times, "DELTA_BINARY_PACKED"))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _rank_file(folder: Path, rank: int) -> Path:
    return folder / ("machine.parquet" if rank == _MACHINE else f"rank-{rank:05d}.parquet")


def new_manifest(run: Mapping[str, Any] | None = None, clock: Mapping[str, Any] | None = None) -> dict:
    """A manifest for a new store: ``run`` says what was run, ``clock`` how the ranks' clocks were aligned."""
    return {
        "schema_version": SCHEMA_VERSION,
        "ddltrace_version": __version__,
        "created": _now_iso(),
        "run": dict(run or {}),
        "clock": dict(clock or {"method": "single clock", "offsets_ns": {}, "uncertainty_ns": {}}),
        "ranks": {},
        "notes": [],
    }


class TraceStore:
    """A trace store on disk. Open one with :meth:`open`, make one with :meth:`create`.

    Reads are lazy: :meth:`iter_timeline` yields one rank's DataFrame at a time, and :meth:`timeline`
    reads only the ranks asked for.
    """

    def __init__(self, path: Path, manifest: dict):
        self.path = Path(path)
        self.manifest = manifest

    # -- opening and creating -------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike) -> TraceStore:
        """Open an existing store; :class:`StoreError` names the path and what is wrong."""
        path = Path(path)
        if not path.exists():
            raise StoreError(f"{path}: no such trace store")
        if not path.is_dir():
            raise StoreError(f"{path}: not a trace store (a store is a folder with {MANIFEST})")
        manifest_path = path / MANIFEST
        if not manifest_path.exists():
            raise StoreError(f"{path}: not a trace store (no {MANIFEST})")
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoreError(f"{manifest_path}: unreadable manifest ({exc})") from exc
        if not isinstance(manifest, dict) or not isinstance(manifest.get("schema_version"), int):
            raise StoreError(f"{manifest_path}: not a ddltrace manifest (no integer schema_version)")
        version = manifest["schema_version"]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path}: written with store schema version {version} by ddltrace "
                f"{manifest.get('ddltrace_version', '?')}; this ddltrace {__version__} reads up to version "
                f"{SCHEMA_VERSION}: upgrade ddltrace to read it")
        if not isinstance(manifest.get("ranks"), dict):
            raise StoreError(f"{manifest_path}: manifest has no 'ranks' table")
        return cls(path, manifest)

    @classmethod
    def create(cls, path: str | os.PathLike, run: Mapping[str, Any] | None = None,
               clock: Mapping[str, Any] | None = None, *, exist_ok: bool = False) -> TraceStore:
        """Make an empty store at ``path`` (a new folder); ``exist_ok`` reopens an existing store instead."""
        path = Path(path)
        if path.exists():
            if exist_ok:
                return cls.open(path)
            raise StoreError(f"{path}: already exists (choose another --out, or remove it)")
        try:
            (path / "timeline").mkdir(parents=True)
            (path / "counters").mkdir()
        except OSError as exc:
            raise StoreError(f"{path}: cannot create trace store ({exc.strerror})") from exc
        store = cls(path, new_manifest(run, clock))
        store.save_manifest()
        return store

    # -- metadata -------------------------------------------------------------------------------------

    @property
    def ranks(self) -> list[int]:
        """The ranks this store holds a timeline for, in order."""
        return sorted(int(r) for r in self.manifest["ranks"] if int(r) >= 0)

    @property
    def world_size(self) -> int:
        """World size of the run (from the run metadata, else the number of ranks recorded)."""
        return int(self.manifest["run"].get("world_size") or len(self.ranks))

    @property
    def run(self) -> dict:
        """What was run: command, framework, world_size, hosts, batch size, ... (free-form dict)."""
        return self.manifest["run"]

    def rank_info(self, rank: int) -> dict:
        """Per-rank metadata: events, start_ns, end_ns, host, role, how the rank ended."""
        return self.manifest["ranks"][str(rank)]

    def save_manifest(self) -> None:
        """Write the manifest atomically."""
        data = json.dumps(self.manifest, indent=2, sort_keys=True, default=str).encode()
        _atomic_write_bytes(self.path / MANIFEST, data)

    def update_run(self, **run: Any) -> None:
        """Merge keys into the run metadata and save."""
        self.manifest["run"].update(run)
        self.save_manifest()

    # -- writing --------------------------------------------------------------------------------------

    def add_rank(self, rank: int, timeline: pd.DataFrame, counters: pd.DataFrame | None = None,
                 *, save: bool = True, **info: Any) -> None:
        """Write (or replace) one rank's timeline and counters, then list it in the manifest.

        ``timeline`` is validated (rows of other ranks are an error); ``info`` goes into the rank's
        manifest entry (host, role, ended="normal"/"abrupt", ...).
        """
        timeline = make_timeline(timeline)
        if len(timeline) and (timeline["rank"] != rank).any():
            raise SchemaError("timeline", [f"rows of rank {sorted(set(timeline['rank']) - {rank})} "
                                           f"passed to add_rank({rank})"])
        order = time_order(timeline["start_ns"].to_numpy(), pd.factorize(timeline["lane"], sort=True)[0])
        if order is not None:
            timeline = timeline.take(order).reset_index(drop=True)
        _atomic_write_parquet(_rank_file(self.path / "timeline", rank), timeline)
        entry = {"events": int(len(timeline))}
        if len(timeline):
            entry["start_ns"] = int(timeline["start_ns"].min())
            entry["end_ns"] = int((timeline["start_ns"] + timeline["dur_ns"]).max())
        if counters is not None:
            counters = make_counters(counters)
            for crank, part in counters.groupby("rank", sort=True):
                if crank not in (rank, _MACHINE):
                    raise SchemaError("counters", [f"rows of rank {crank} passed to add_rank({rank})"])
                self._write_counters(int(crank), part)
            entry["counter_samples"] = int((counters["rank"] == rank).sum())
        old = self.manifest["ranks"].get(str(rank), {})
        old.update(entry)
        old.update(info)
        self.manifest["ranks"][str(rank)] = old
        if save:
            self.save_manifest()

    def add_counters(self, counters: pd.DataFrame, *, save: bool = True) -> None:
        """Append sampled values (any ranks, -1 for the machine) to the store."""
        counters = make_counters(counters)
        for crank, part in counters.groupby("rank", sort=True):
            existing = self.counters([int(crank)]) if int(crank) in self.counter_ranks else None
            if existing is not None and len(existing):
                part = pd.concat([existing, part], ignore_index=True)
            self._write_counters(int(crank), part)
        if save:
            self.save_manifest()

    def _write_counters(self, rank: int, part: pd.DataFrame) -> None:
        part = part.sort_values(["t_ns", "name"], kind="stable").reset_index(drop=True)
        _atomic_write_parquet(_rank_file(self.path / "counters", rank), part)
        listed = set(self.manifest.setdefault("counter_ranks", []))
        listed.add(rank)
        self.manifest["counter_ranks"] = sorted(listed)

    # -- reading --------------------------------------------------------------------------------------

    @property
    def counter_ranks(self) -> list[int]:
        """Ranks (and -1 for the machine) with sampled values."""
        return list(self.manifest.get("counter_ranks", []))

    def _read(self, folder: str, rank: int, dtypes: Mapping[str, Any]) -> pd.DataFrame:
        path = _rank_file(self.path / folder, rank)
        try:
            frame = pq.read_table(path).to_pandas()
        except FileNotFoundError as exc:
            raise StoreError(f"{path}: listed in the manifest but missing") from exc
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"{path}: corrupt Parquet file ({exc})") from exc
        missing = [c for c in dtypes if c not in frame.columns]
        if missing:
            raise StoreError(f"{path}: missing column(s) {', '.join(missing)}")
        return frame

    def iter_timeline(self, ranks: Iterable[int] | None = None) -> Iterator[tuple[int, pd.DataFrame]]:
        """Yield ``(rank, timeline)`` one rank at a time: memory stays at one rank's events."""
        wanted = self._select(ranks)
        for rank in wanted:
            yield rank, self._read("timeline", rank, TIMELINE_DTYPES)

    def timeline(self, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """The timeline of the given ranks (all when None), concatenated and sorted by rank then start."""
        parts = [frame for _, frame in self.iter_timeline(ranks)]
        if not parts:
            return empty_timeline()
        return pd.concat(parts, ignore_index=True)

    def counters(self, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """Sampled values of the given ranks (all, machine included, when None)."""
        available = self.counter_ranks
        wanted = available if ranks is None else [r for r in ranks if r in available]
        parts = [self._read("counters", r, COUNTER_DTYPES) for r in wanted]
        if not parts:
            return empty_counters()
        return pd.concat(parts, ignore_index=True)

    def _select(self, ranks: Iterable[int] | None) -> list[int]:
        known = self.ranks
        if ranks is None:
            return known
        wanted = [int(r) for r in ranks]
        unknown = sorted(set(wanted) - set(known))
        if unknown:
            raise StoreError(f"{self.path}: no rank {', '.join(map(str, unknown))} "
                             f"(the store has ranks {_ranges(known)})")
        return wanted

    def __repr__(self) -> str:
        return f"TraceStore({str(self.path)!r}, ranks={_ranges(self.ranks)})"


def _ranges(ranks: list[int]) -> str:
    """'0-3, 7' for [0, 1, 2, 3, 7]."""
    if not ranks:
        return "none"
    out, start, prev = [], ranks[0], ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
        if r is not None:
            start = prev = r
    return ", ".join(out)


def write_store(path: str | os.PathLike, timeline: pd.DataFrame, counters: pd.DataFrame | None = None,
                run: Mapping[str, Any] | None = None, clock: Mapping[str, Any] | None = None,
                rank_info: Mapping[int, Mapping[str, Any]] | None = None, *,
                overwrite: bool = False) -> TraceStore:
    """Write a whole store from one timeline (all ranks) and optional counters.

    The store is built in a temporary folder beside ``path`` and moved into place at the end; with
    ``overwrite`` an existing store is replaced only once the new one is complete.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise StoreError(f"{path}: already exists (choose another --out, or remove it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    timeline = make_timeline(timeline)
    counters = make_counters(counters) if counters is not None else None
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        staging.rmdir()
        store = TraceStore.create(staging, run, clock)
        ranks = sorted(set(int(r) for r in timeline["rank"]) | set((rank_info or {}).keys()))
        by_rank = dict(tuple(timeline.groupby("rank", sort=True))) if len(timeline) else {}
        for rank in ranks:
            part = by_rank.get(rank, empty_timeline())
            store.add_rank(rank, part, save=False, **dict((rank_info or {}).get(rank, {})))
        if counters is not None and len(counters):
            store.add_counters(counters, save=False)
        store.save_manifest()
        _swap_into_place(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return TraceStore.open(path)


def _swap_into_place(staging: Path, path: Path) -> None:
    if not path.exists():
        os.replace(staging, path)
        return
    old = path.with_name(f".{path.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(path, old)
    os.replace(staging, path)
    shutil.rmtree(old, ignore_errors=True)


def merge_stores(first: TraceStore, second: TraceStore, out: str | os.PathLike, *,
                 renumber: bool = False) -> TraceStore:
    """Merge two stores of one job into a new store at ``out``.

    Ranks present in both are an error unless ``renumber``, which shifts the second store's ranks past
    the first's. Run metadata of the first wins; both sources are recorded in the manifest.
    """
    offset = 0
    overlap = set(first.ranks) & set(second.ranks)
    if overlap:
        if not renumber:
            raise StoreError(f"{second.path}: ranks {_ranges(sorted(overlap))} are also in {first.path} "
                             "(use renumber=True to append them as new ranks)")
        offset = max(first.ranks) + 1
    out = Path(out)
    if out.exists():
        raise StoreError(f"{out}: already exists (choose another output)")
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    staging.rmdir()
    try:
        run = {**second.run, **first.run}
        run["world_size"] = len(first.ranks) + len(second.ranks)
        merged = TraceStore.create(staging, run, first.manifest.get("clock"))
        merged.manifest["merged_from"] = [str(first.path), str(second.path)]
        for source, shift in ((first, 0), (second, offset)):
            for rank, frame in source.iter_timeline():
                frame = frame.assign(rank=(frame["rank"] + shift).astype("int32"))
                counters = source.counters([rank])
                counters = counters.assign(rank=(counters["rank"] + shift).astype("int32"))
                merged.add_rank(rank + shift, frame, counters if len(counters) else None, save=False,
                                **{k: v for k, v in source.rank_info(rank).items()
                                   if k not in ("events", "start_ns", "end_ns", "counter_samples")})
            if _MACHINE in source.counter_ranks:
                merged.add_counters(source.counters([_MACHINE]), save=False)
        merged.save_manifest()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return TraceStore.open(out)
