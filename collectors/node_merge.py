"""Join a node's part to the store of its run: the part a node left on its own disk when its link to the
launching ``ddltrace run`` broke (the store's ``run.missing_nodes`` names the node and the folder; see
collectors/node_link.py), copied here by the user.

A part is the run's work folder as the node wrote it: ``records/`` (its ranks' PMPI record files,
``nodes/<host>/``: its agent's samples, when the agent lived to write them) and, for a framework job,
``framework/`` (its processes' profiles). The part becomes a store the way ``ddltrace recover`` makes one
(with the run's command, start and end from the store's manifest), and that store is merged with the run's
(ranks of the two are disjoint: each rank file knows its MPI rank, and its clock offset to rank 0 measured by
the PMPI ping-pong)."""

from __future__ import annotations

import io
import re
import shlex
import shutil
import tempfile
from pathlib import Path

from ddltrace.collectors import record_sets
from ddltrace.collectors.launcher import NODES, recover_store
from ddltrace.errors import DdltraceError
from ddltrace.merged_manifest import (
    on_joined_node,
    past_the_world,
    still_missing,
    still_unfiled,
    unfiled_ranks,
    unread_ranks,
)
from ddltrace.store import TraceStore, merge_stores, rank_ranges
from ddltrace.workload_entry import relocated

#: The recovery's note on a rank whose record file it could not read (collectors/launcher.py): the rank.
_UNREADABLE = re.compile(r"^unreadable record file: .*; rank (\d+) left out$")
#: The recovery's note where no rank's record file was read (collectors/launcher.py): of the part alone, false of the
#: run whose store holds the other nodes' ranks.
_NO_PMPI = "no rank wrote a PMPI record file:"


def part_host(store: TraceStore, part: Path) -> str:
    """The missing node of ``store`` whose part ``part`` is; DdltraceError naming the folder otherwise."""
    missing = store.run.get("missing_nodes") or {}
    nodes = part / "records" / NODES
    hosts = sorted(p.name for p in nodes.iterdir() if p.is_dir()) if nodes.is_dir() else []
    found = [h for h in hosts if h in missing]
    if not found:
        raise DdltraceError(f"{part}: not the part of a node missing from {store.path} (that store misses "
                            f"{', '.join(sorted(missing)) or 'no node'}; this folder holds "
                            f"{', '.join(hosts) or 'no node folder'} under records/{NODES}/)")
    return found[0]


def join_part(store_path: str | Path, part: str | Path, out: str | Path) -> TraceStore:
    """The new store ``out``: the store at ``store_path`` with the node part at ``part`` joined."""
    store, part, out = TraceStore.open(store_path), Path(part), Path(out)
    if not part.is_dir():
        raise DdltraceError(f"{part}: no such folder (the part of a missing node, copied from that node)")
    host = part_host(store, part)
    if not list(part.glob("records/rank-*.pmpi")) and not list((part / "records" / NODES / host).glob(
            "samples*.parquet")):  # (the agent's samples, or those it saved before it was stopped)
        raise DdltraceError(f"{part}: node {host}'s part holds no rank record file and no agent samples")
    if out.exists():
        raise DdltraceError(f"{out}: already exists (choose another --out)")
    run = store.run
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.join.", dir=out.parent) as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(part, work)
        records = work / "records"
        command = shlex.split(run.get("command") or "") or ["(unknown command)"]
        world = run.get("world_size")  # (the part's ranks are of the run's world, also where none is readable)
        record_sets.register(records, dict(  # no owner: the run that made the part has ended
            command=command, launch=shlex.split(run.get("launch") or ""), flavour=run.get("mpi_flavour") or "",
            np=world if type(world) is int and world >= 1 else None, launcher=run.get("launch"),
            framework=None if run.get("framework") in ("mpi", "process") else run.get("framework"),
            steps=run.get("steps_window") or run.get("profiled_steps"), sample_hz=run.get("sample_hz"),
            pyspy=False, out=str(out), work=str(work), start_ns=run.get("start_ns"), host=host,
            end_ns=run.get("end_ns"), exit_code=run.get("exit_code"), interrupted=run.get("interrupted")))
        part_store = recover_store(records, Path(tmp) / "part", stream=io.StringIO(), local=False).store
        return merge_stores(store, part_store, out,
                            amend=lambda merged, said: _fix_manifest(merged, said, store, part_store, host, part,
                                                                     work, out))


def _fix_manifest(merged: TraceStore, said: dict[str, str], store: TraceStore, part_store: TraceStore, host: str,
                  part: Path, work: Path, out: Path) -> None:
    """The merged manifest (before it is written; its ranks' clock entries from the store that held each, ``said``
    the merge's own notes): the node no longer missing, the hosts and nodes, the job's ``workload`` entry, the notes
    on ranks with no file only for those still without one (not a rank whose file the part holds unreadable), the
    store's notes on ranks whose trace gave no timeline (``unread_note``) kept, naming the ranks the part gives, the
    part's notes but the recovery's own ('no rank wrote a PMPI record file' is not true of the run), the merge's note
    on clocks aligned differently where the part gave ranks (else the store's clock entry), and every note,
    ``merged_from`` and ``run.recovered_from`` naming ``part``, the folder the user gave, not ``work`` or the part's
    store (merge's copies of it in a temporary folder)."""
    def named(note: str) -> str:
        return note.replace(str(part_store.path), str(part)).replace(str(work), str(part))

    merged.manifest["merged_from"] = [str(store.path), str(part)]
    run = merged.manifest["run"]
    if isinstance(run.get("recovered_from"), str):  # (the part's records, where the run's store was not recovered)
        run["recovered_from"] = named(run["recovered_from"])
    workload = _workload(store, part_store, out)
    if workload is not None:
        merged.manifest["workload"] = workload
    missing = still_missing(store.run.get("missing_nodes"), {host})
    if missing:
        run["missing_nodes"] = missing
    else:
        run.pop("missing_nodes", None)
    run["hosts"] = sorted(set(store.run.get("hosts", [])) | set(part_store.run.get("hosts", [])))
    if part_store.run.get("nodes"):
        run["nodes"] = sorted(set(store.run.get("nodes", [])) | set(part_store.run["nodes"]))
    run["world_size"] = max(store.run.get("world_size") or 0, max(merged.ranks, default=-1) + 1)
    # (a note on ranks with no timeline naming ranks past its store's world is damaged: named so, not read)
    store_notes = [past_the_world(n, store.world_size) or n for n in store.manifest.get("notes", [])]
    part_notes = [named(past_the_world(n, part_store.world_size) or n) for n in part_store.manifest.get("notes", [])
                  if isinstance(n, str)]
    unreadable = {int(m.group(1)) for n in part_notes if (m := _UNREADABLE.match(n))}
    # the store's notes on ranks with no record file are rebuilt for the ranks still without one; those on ranks
    # whose trace was given and gave no timeline (merged_manifest.unread_note) are kept, saying which the part gives
    notes = [_unread_kept(n, part_store.ranks, part) if unread_ranks(n) is not None else n for n in store_notes
             if (unfiled_ranks(n) is None or unread_ranks(n) is not None) and not on_joined_node(n, {host})]
    left = still_unfiled([(n, 0) for n in store_notes], [*merged.ranks, *unreadable], run["world_size"], missing)
    notes += [left] if left else []
    # the part's own notes, but not the recovery's (what the launching process held is in the run's store; its
    # 'no rank wrote a PMPI record file' is of the part alone) nor those on the ranks of other nodes
    notes += [n for n in part_notes if not n.startswith(("recovered by", _NO_PMPI))
              and (unfiled_ranks(n) is None or unread_ranks(n) is not None) and n not in notes]
    if not part_store.ranks:  # (no rank of the part: the run's store's clock is the merged store's)
        said.pop("clock", None)
        if isinstance(store.manifest.get("clock"), dict):
            merged.manifest["clock"] = store.manifest["clock"]
    if "clock" in said:
        said["clock"] = named(said["clock"])
    merged.manifest["notes"] = [*notes, *([said["clock"]] if "clock" in said else []),
                                f"node {host}: its part joined by `ddltrace merge` from {part}"]


def _unread_kept(note: str, given: list[int], part: Path) -> str:
    """The store's note on ranks whose trace gave no timeline (``unread_note``), saying which of them the part gives
    (as ``merge`` of two stores says where the other store supplies one)."""
    named = unread_ranks(note) or set()
    supplied = [r for r in given if r in named]
    return (f"{note} (the merged store holds rank{'s' if len(supplied) > 1 else ''} {rank_ranges(supplied)}, from "
            f"{part})" if supplied else note)


def _workload(store: TraceStore, part_store: TraceStore, out: Path) -> dict | None:
    """The run's ``workload`` entry (collectors/workloads/ps_sgd_config.py) for the merged store at ``out``: the
    run's store's, else the part's (both recorded it from the run's command and world size), its ground truth's
    path made relative to ``out``; None when neither has one."""
    for source in (store, part_store):
        entry = source.manifest.get("workload")
        if isinstance(entry, dict):
            return relocated(entry, source.path, out)
    return None

