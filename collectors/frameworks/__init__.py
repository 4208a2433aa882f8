"""``ddltrace run --framework``: switch a framework's own profiler on from outside the job, and gather what
each process wrote into the run's store.

The job runs with ``bootstrap/`` first on its PYTHONPATH (docs/FRAMEWORKS.md): in every Python process a
small standard-library bootstrap starts the framework's profiler around a window of training steps and writes,
per process, the trace files and a ``meta.json`` (role, rank, pid, files, clock marks). This module gives the
job's environment and, afterwards, reads those folders back as store parts: the importers read the files, the
process's identity picks the rank, and the ``ddltrace.mark`` event puts the framework's clock on the
samplers' (wall clock, ns).
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace.errors import DdltraceError

BOOTSTRAP = Path(__file__).parent / "bootstrap"
NAMES = ("pytorch", "mxnet", "tf", "horovod", "cntk")
ALIASES = {"torch": "pytorch", "tensorflow": "tf", "tf2": "tf", "tf1": "tf"}
MARK_NAME = "ddltrace.mark"  # the bootstrap's own copy: bootstrap/_ddltrace_boot.py (it cannot import ddltrace)
DEFAULT_STEPS = (5, 9)  # the bootstrap's default too (DDLTRACE_FW_STEPS unset)
#: The frameworks profiled by torch.profiler (Horovod's bootstrap uses PyTorch's): those ``--record-shapes`` is for.
TORCH_PROFILED = ("pytorch", "horovod")


def canonical(name: str) -> str:
    """The framework's name as ddltrace spells it (``torch`` -> ``pytorch``)."""
    name = ALIASES.get(name.lower(), name.lower())
    if name not in NAMES:
        raise DdltraceError(f"--framework {name}: unknown (known: {', '.join(NAMES)})")
    return name


def parse_steps(text: str) -> tuple[int, int]:
    """``"10-20"`` -> (10, 20): the training steps to profile, counted from 1, both included."""
    first, sep, last = text.partition("-")
    try:
        window = (int(first), int(last) if sep else int(first))
    except ValueError:
        raise DdltraceError(f"--steps {text}: want FIRST-LAST, e.g. 10-20") from None
    if window[0] < 1 or window[1] < window[0]:
        raise DdltraceError(f"--steps {text}: want 1 <= FIRST <= LAST")
    return window


def module(name: str):
    """The host-side module of framework ``name`` (its ``env()`` and, where it has one, a ``NOTE``)."""
    return importlib.import_module(f"ddltrace.collectors.frameworks.{name}")


def job_env(name: str, fw_dir: Path, steps: tuple[int, int], record_shapes: bool = False) -> dict[str, str]:
    """Environment variables that switch framework ``name``'s profiler on in every process of the job;
    ``record_shapes``: torch.profiler records each op's input shapes (:data:`TORCH_PROFILED` only)."""
    path = os.pathsep.join(filter(None, [str(BOOTSTRAP), os.environ.get("PYTHONPATH", "")]))
    return {"PYTHONPATH": path, "DDLTRACE_FRAMEWORK": name, "DDLTRACE_FW_DIR": str(fw_dir),
            "DDLTRACE_FW_STEPS": f"{steps[0]}-{steps[1]}", "DDLTRACE_FW_RECORD_SHAPES": "1" if record_shapes else "0",
            **module(name).env(fw_dir, steps)}


@dataclass
class ProcessPart:
    """What one process of the job left: its identity (int rank, or (role, index) for servers and the
    like), its pid, the imported timeline and counters on the wall clock, and what the manifest says of it."""

    identity: int | tuple
    pid: int
    timeline: pd.DataFrame
    counters: pd.DataFrame | None
    info: dict = field(default_factory=dict)


def _read_meta(folder: Path) -> dict:
    try:
        return json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise DdltraceError(f"{folder / 'meta.json'}: unreadable ({exc})") from None


def _clock_offset(timeline: pd.DataFrame, marks: list[dict], clock: str) -> tuple[int, str, int | None]:
    """(ns to add to the framework's times, how they were aligned, uncertainty in ns)."""
    found = timeline[timeline["name"] == MARK_NAME]
    if marks and len(found):
        mark, event = marks[0], found.sort_values("start_ns").iloc[0]
        middle = int(event["start_ns"]) + int(event["dur_ns"]) // 2
        return mark["wall_ns"] - middle, "framework mark", int(mark["half_width_ns"] + event["dur_ns"] // 2)
    if clock == "epoch":
        return 0, "framework wall clock (no mark)", None
    return 0, "unaligned (relative times, no mark)", None


def collect(fw_dir: Path, categorizer, notes: list[str]) -> list[ProcessPart]:
    """Every process folder under ``fw_dir`` read into parts; problems become ``notes`` (nothing is lost)."""
    from ddltrace.collectors.importers import ImportContext, detect, get_importer
    from ddltrace.collectors.importers.base import FileReport

    parts = []
    for folder in sorted(p for p in fw_dir.glob("*") if (p / "meta.json").exists()):
        meta = _read_meta(folder)
        notes.extend(f"pid {meta['pid']} ({meta.get('role')}): {n}" for n in meta.get("notes", []))
        who = f"rank {meta['rank']}" if meta.get("rank") is not None else meta.get("role") or "a process"
        if meta.get("ended_by"):
            notes.append(f"{who} (pid {meta['pid']}) ended by {meta['ended_by']}")
        elif not meta.get("exited_ns"):  # the bootstrap records Python's exit: none ran
            notes.append(f"{who}'s process (pid {meta['pid']}) ended without Python's exit (a signal, os.abort, "
                         "os._exit): abrupt")
        timelines, counters, clocks, formats, groups = [], [], set(), set(), set()
        for index, entry in enumerate(meta.get("files", [])):
            path = folder / entry["path"]
            report = FileReport(str(path))
            try:
                importer = get_importer(entry["format"]) if entry.get("format") else detect(path)
                ctx = ImportContext(categorizer=categorizer, rank_from="order", file_index=index, report=report)
                for part in importer.read(path, ctx):
                    timelines.append(part.timeline)
                    if part.counters is not None:
                        counters.append(part.counters)
                    clocks.add(part.clock)
                    groups.update(part.info.get("group_sizes") or ())
                formats.add(importer.name)
            except (DdltraceError, OSError) as exc:
                notes.append(f"pid {meta['pid']}: {path.name} not imported: {exc}")
            notes.extend(f"pid {meta['pid']}: {path.name}: {p}" for p in report.problems)
        if not timelines and meta.get("files"):
            continue  # every file failed (said in the notes)
        parts.append(_part(meta, timelines, counters, clocks, formats, groups))
    return parts


def _part(meta: dict, timelines: list, counters: list, clocks: set, formats: set,
          groups: set[int]) -> ProcessPart:
    """The process's part; ``groups``: the sizes of the process groups its Kineto traces list (the importer's
    ``group_sizes``), kept as its ``group_sizes`` for the host collectives' sizes."""
    from ddltrace.timeline import empty_timeline, make_counters, make_timeline

    filled = [t for t in timelines if len(t)]
    timeline = make_timeline(pd.concat(filled, ignore_index=True)) if filled else empty_timeline()
    if meta.get("unfinished_step") is not None:
        timeline = _without_step(timeline, int(meta["unfinished_step"]))
    offset, method, uncertainty = _clock_offset(timeline, meta.get("marks", []), min(clocks, default="epoch"))
    timeline["start_ns"] = timeline["start_ns"] + np.int64(offset)
    table = None
    if counters:
        table = make_counters(pd.concat(counters, ignore_index=True))
        table["t_ns"] = table["t_ns"] + np.int64(offset)
    role = meta.get("role") or "worker"
    identity = int(meta["rank"]) if role in ("worker", "chief") and meta.get("rank") is not None \
        else (role, meta.get("index") if meta.get("index") is not None else meta["pid"])
    info = {"role": role, "pid": meta["pid"], "host": meta.get("host"), "framework": meta.get("framework"),
            "identity_from": meta.get("identity_from") or meta.get("from"), "format": "+".join(sorted(formats)),
            "profiled_steps": meta.get("profiled_steps"), "steps_window": meta.get("steps"),
            "clock_method": method, "clock_offset_ns": offset, "clock_uncertainty_ns": uncertainty,
            "backend": meta.get("backend"), "ended_by": meta.get("ended_by"),
            "ended_by_ns": meta.get("ended_by_ns"), "exited_ns": meta.get("exited_ns"),
            "unfinished_step": meta.get("unfinished_step"), "group_sizes": sorted(groups) or None}
    return ProcessPart(identity=identity, pid=int(meta["pid"]), timeline=timeline, counters=table,
                       info={k: v for k, v in info.items() if v is not None})


def _without_step(timeline: pd.DataFrame, number: int) -> pd.DataFrame:
    """``timeline`` without the span ``ProfilerStep#number`` of a step the job did not finish (the torch bootstrap's
    ``unfinished_step``: the profiler stopped inside it), host's and devices' copies; its rows are kept, without a
    step."""
    timeline = timeline[timeline["name"] != f"ProfilerStep#{number}"].reset_index(drop=True)
    timeline.loc[timeline["step"] == number, "step"] = pd.NA
    return timeline


def number(parts: list[ProcessPart], taken: set[int]) -> dict[int, int]:
    """Rank of each part (by index): workers keep their rank; other roles get the next numbers after the
    workers, in (role, index) order. ``taken``: ranks already in the store (an MPI job's ranks)."""
    ranks = {}
    for i, part in enumerate(parts):
        if isinstance(part.identity, int):
            ranks[i] = part.identity
    next_rank = max([*ranks.values(), *taken], default=-1) + 1
    others = sorted((i for i in range(len(parts)) if i not in ranks),
                    key=lambda i: (str(parts[i].identity[0]), int(parts[i].identity[1])))
    for i in others:
        ranks[i] = next_rank
        next_rank += 1
    return ranks
