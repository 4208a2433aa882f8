"""TensorBoard profile folders: ``<logdir>/plugins/profile/<run>/<host>.<tool>``.

The TensorFlow profiler writes one folder per profiling run, named by its start time (``2024_05_01_12_30_05``),
and in it, per host, the session's XSpace (``<host>.xplane.pb``), with older versions (or xprof's converter) the
same session again as trace-viewer JSON (``<host>.trace.json.gz``), and the other tools' files
(``.overview_page.pb``, ``.input_pipeline.pb``, ...). So when a folder is searched:

* **one session per host**: a host's XPlane is read and its trace-viewer JSON of the same folder is not (it holds
  the same events, fewer of them, on a relative clock);
* **the newest run**: where one ``profile`` folder holds several runs, only the newest is read (by the run names,
  which are start times, else by the files' modification times), and the import says which;
* **ranks from the hosts**: the hosts of run folders are ranks in the order of the ``TF_CONFIG`` cluster
  (environment variable, as the job had it: ``chief`` then ``worker`` addresses, a file ``10.0.0.2_6003.xplane.pb``
  matching ``10.0.0.2:6003``), else in the order of their names, never from a file's position in the listing.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

#: The session files of one host, in order of preference (same session, same events).
SESSION_SUFFIXES = (".xplane.pb", ".trace.json.gz", ".trace.json")
#: A run folder's name: the profile's start time.
_RUN_NAME = re.compile(r"^\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}$")


@dataclass
class Selection:
    """What to read of the files found in one folder: ``files`` (in order), ``left`` (file -> why it is not read)
    and ``notes`` (one line each, for the import summary and the manifest)."""

    files: list[Path]
    left: dict[Path, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def host_of(path: Path) -> str | None:
    """The host a session file names (``vm`` of ``vm.xplane.pb``), None for other files."""
    return next((path.name[:-len(s)] for s in SESSION_SUFFIXES if path.name.endswith(s) and len(path.name) > len(s)),
                None)


def is_run_folder(folder: Path) -> bool:
    """A profiling run's folder: inside ``plugins/profile/``, or named by a start time."""
    return folder.parent.name == "profile" or bool(_RUN_NAME.match(folder.name))


def select(found: list[Path]) -> Selection:
    """Of the files found by searching one folder: the newest run of each ``profile`` folder, and one session
    file per host and folder."""
    selection = Selection(files=list(found))
    runs: dict[Path, set[Path]] = defaultdict(set)  # profile folder -> its run folders holding sessions
    for path in found:
        if host_of(path) is not None and is_run_folder(path.parent):
            runs[path.parent.parent].add(path.parent)
    for profile, folders in runs.items():
        if len(folders) < 2:
            continue
        by_name = all(_RUN_NAME.match(f.name) for f in folders)
        newest = max(folders, key=(lambda f: f.name) if by_name else (lambda f: _newest_mtime(f, found)))
        older = sorted((f for f in folders if f != newest), key=lambda f: f.name)
        for path in selection.files:
            if path.parent in older:
                selection.left[path] = f"an older profiling run than {newest.name}"
        how = "run names are their start times" if by_name else "by the files' modification times"
        selection.notes.append(f"{profile}: {len(folders)} profiling runs; imported the newest, {newest.name} ({how}); "
                               f"not imported: {', '.join(f.name for f in older)} (name a run's folder to import it)")
    sessions: dict[tuple[Path, str], list[Path]] = defaultdict(list)
    for path in selection.files:
        host = host_of(path)
        if host is not None and path not in selection.left:
            sessions[path.parent, host].append(path)
    for (_folder, host), paths in sessions.items():
        paths.sort(key=lambda p: next(i for i, s in enumerate(SESSION_SUFFIXES) if p.name.endswith(s)))
        for other in paths[1:]:
            selection.left[other] = f"the same profiling session of host {host} as {paths[0].name}, which is read"
            selection.notes.append(f"{other}: not read: {selection.left[other]}")
    selection.files = [p for p in selection.files if p not in selection.left]
    return selection


def _newest_mtime(folder: Path, found: list[Path]) -> float:
    return max((p.stat().st_mtime for p in found if p.parent == folder), default=0.0)


def host_ranks(files: list[Path], tf_config: str | None) -> tuple[dict[Path, tuple[int, str]], list[str]]:
    """Ranks of the session files in run folders: {file: (rank, host)} and notes saying how they were numbered.
    ``tf_config`` is the ``TF_CONFIG`` JSON (None when unset): its ``chief`` then ``worker`` addresses give the
    ranks of the hosts they name; the other hosts follow in name order."""
    sessions = {p: host for p in files if (host := host_of(p)) is not None and is_run_folder(p.parent)}
    if not sessions:
        return {}, []
    addresses, notes = _cluster(tf_config)
    rank_of: dict[str, int] = {}
    for host in sorted(set(sessions.values()), key=_natural):
        match = [i for i, a in enumerate(addresses) if host in (a, a.replace(":", "_"), a.split(":")[0])]
        if match:
            rank_of[host] = match[0]
    rest = sorted(set(sessions.values()) - rank_of.keys(), key=_natural)
    first = max(rank_of.values(), default=-1) + 1
    method = ("TF_CONFIG cluster order (chief, then workers)" if not rest else
              "host name order, after the hosts TF_CONFIG names" if rank_of else
              "host name order: the TF_CONFIG cluster names none of them" if addresses else
              "host name order: no TF_CONFIG")
    rank_of.update({host: first + i for i, host in enumerate(rest)})
    named = ", ".join(f"{rank} = {host}" for host, rank in sorted(rank_of.items(), key=lambda item: item[1]))
    notes.append(f"TensorBoard profile: ranks from the hosts ({method}): {named}")
    return {p: (rank_of[host], host) for p, host in sessions.items()}, notes


def _cluster(tf_config: str | None) -> tuple[list[str], list[str]]:
    """The cluster's task addresses in rank order (chief, then workers) from ``TF_CONFIG``, and a note when it
    cannot be read."""
    if not tf_config:
        return [], []
    try:
        cluster = json.loads(tf_config)["cluster"]
        return [str(a) for role in ("chief", "worker") for a in cluster.get(role, [])], []
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return [], [f"TF_CONFIG: not a cluster description ({type(exc).__name__}: {exc}); not used"]


def _natural(text: str) -> list:
    """Sort key in which numbers compare as numbers (10.0.0.2 before 10.0.0.10)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]
