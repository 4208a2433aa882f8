"""Traces written by others: every one goes through the real CLI, and what ddltrace prints is the file's number.

Every trace folder of ``../shared/wild_traces`` (skipped when absent) and ``tests/data/wild`` (PROVENANCE.md in
each) is imported, then given to ``info``, ``analyze``, ``report`` and ``export --chrome``: no traceback, exit 0,
or exit 2 with one line naming the file for the formats listed in :data:`UNREADABLE`. Then the figures are
checked against values this file computes from the raw trace with its own readers (json with exact decimals,
ElementTree, the ``otf2`` package, a few lines of protobuf wire format), never with ddltrace's:

- Chrome-family JSON (Kineto, MXNet, TF1): events of each phase and intervals kept; every interval of the file
  found in the store at its exact start (ns, from the decimal text) and duration; device time and event count per
  device lane (Kineto: ``args.device``/``args.stream``, else pid/tid) to 1 us; the span ``info`` prints, and its
  device side (device events; busy time = the union of the file's device intervals);
- IPM: per rank ``wtime - mtime`` (``info``'s compute) to 1 us, and one row per MPI call name;
- OTF2: exclusive time per (rank, region) from the archive's Enter/Leave events, to 1 us;
- XPlane: device time and event count per device stream line, each line's first start (ns), info's device side;
- Kineto jobs of one file per rank: per file the events read and intervals kept, per rank and device lane the
  events and time, NCCL kernels' time as communication, info's device side per rank, the world size;
- Nsight Systems SQLite (sqlite3): the rows read, per device lane (deviceId, streamId) events and time, the host
  rows, info's start, span and device side.

Checks that today's importers fail on are marked ``xfail(strict=True)`` with the item of issue 20 that fixes them
(:data:`KNOWN`), so they turn into failures to remove once the fix lands.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import traceback
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from decimal import Decimal
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from interval_truth import union_ns
from shared_data import CORPUS_DIRS

from ddltrace.analyses.wait_states import P2P, SENDRECV
from ddltrace.cli import main
from ddltrace.collectors.importers.kineto import ANNOTATION_CAT, HOST_CATS
from ddltrace.store import TraceStore

ROOTS = {"shared": CORPUS_DIRS[0] if CORPUS_DIRS[0].is_dir() else None, "repo": CORPUS_DIRS[1]}
NOT_TRACES = {"MANIFEST.md", "scorep.cfg", "PROVENANCE.md"}

#: Formats no importer reads yet: `import` must refuse them in one line naming the file (exit 2).
UNREADABLE: dict[str, str] = {
    "pytorch_et_linear": "PyTorch execution trace (ExecutionTraceObserver, Chakra's input): operators and tensors, "
                         "no times",
}

#: (trace, check) -> why it fails on today's main: a check a new trace fails on is marked strict xfail here,
#: with the issue item that fixes it, and removed when the fix lands (none at present).
KNOWN: dict[tuple[str, str], str] = {}


def _folders():
    for root in ROOTS.values():
        if root is None:
            yield pytest.param(None, id="shared-absent",
                               marks=pytest.mark.skip(reason="../shared/wild_traces absent on this machine"))
            continue
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "licenses"):
            yield pytest.param(folder, id=folder.name)


FOLDERS = list(_folders())


def _with_known(check: str):
    """FOLDERS, each known failure of ``check`` marked strict xfail."""
    out = []
    for param in FOLDERS:
        folder = param.values[0]
        reason = KNOWN.get((folder.name, check)) if folder is not None else None
        out.append(pytest.param(folder, id=param.id, marks=[*param.marks, *(
            [pytest.mark.xfail(strict=True, reason=reason)] if reason else [])]))
    return out


def _trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in NOT_TRACES)


# ---------------------------------------------------------------------------------------------------------------
# the CLI, run once per folder


def _cli(*argv: str) -> tuple[int, str, str]:
    """``ddltrace ARGV`` in this process: (exit status, stdout, stderr); an exception is a traceback on stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except Exception:  # noqa: BLE001 (what a user would see as a traceback)
            traceback.print_exc()
            rc = 1
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """folder -> {verb: (rc, out, err)}, "store" and "export" paths, "files"; each folder imported once."""
    done: dict[Path, dict] = {}

    def run(folder: Path) -> dict:
        if folder in done:
            return done[folder]
        base = tmp_path_factory.mktemp(folder.name)
        store = base / "store"
        files = _trace_files(folder)
        target = str(files[0]) if folder.name in UNREADABLE and len(files) == 1 else str(folder)
        result = {"import": _cli("import", target, "--out", str(store), "--jobs", "1", "--progress", "never"),
                  "store": store, "files": files}
        if result["import"][0] == 0:
            result["info"] = _cli("info", str(store))
            result["info --json"] = _cli("info", "--json", str(store))
            result["analyze"] = _cli("analyze", str(store))
            result["report"] = _cli("report", str(store), "--out", str(base / "report"), "--quiet")
            result["export --chrome"] = _cli("export", str(store), "--chrome", str(base / "export.json"))
            result["export"] = base / "export.json"
        done[folder] = result
        return result

    return run


def _store(run: dict) -> TraceStore:
    if run["import"][0] != 0:
        pytest.skip("not imported (see test_cli)")
    return TraceStore.open(run["store"])


def _import_summary(out: str) -> tuple[dict[str, tuple[int, int]], Counter, Counter]:
    """From import's own lines: {file: (events read, intervals kept)}, the skipped events by reason and the
    intervals dropped by reason."""
    per_file = {m[1]: (int(m[2]), int(m[3]))
                for m in re.finditer(r"^  (.+) \[[\w-]+(?: \([^\]]*\))?\]: (\d+) events, (\d+) intervals", out, re.M)}
    skipped, dropped = Counter(), Counter()
    for m in re.finditer(r"^\s+(skipped|dropped) (\d+) (?:event|interval)\(s\): (.+)$", out, re.M):
        (skipped if m[1] == "skipped" else dropped)[m[3].strip()] += int(m[2])
    return per_file, skipped, dropped


@pytest.mark.parametrize("folder", FOLDERS)
def test_cli(folder, runs):
    """import, info, analyze, report, export --chrome: exit 0 and no traceback (or a one-line refusal)."""
    run = runs(folder)
    rc, out, err = run["import"]
    assert "Traceback" not in out + err, err
    if folder.name in UNREADABLE:
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1, (rc, err)
        assert str(run["files"][0]) in lines[0], lines[0]
        return
    assert rc == 0, err
    for verb in ("info", "info --json", "analyze", "report", "export --chrome"):
        rc, out, err = run[verb]
        assert "Traceback" not in out + err, f"{verb}: {err}"
        assert rc == 0, f"{verb} exit {rc}: {err}"
    report = run["store"].parent / "report"
    assert (report / "report.html").stat().st_size > 0 and (report / "findings.json").exists()
    exported = json.loads(run["export"].read_text())
    intervals = [e for e in exported["traceEvents"] if e.get("ph") == "X"]
    assert len(intervals) == json.loads(run["info --json"][1])["events"]


# ---------------------------------------------------------------------------------------------------------------
# Chrome-family JSON read here: exact decimals, B/E and b/e pairs


def _json(path: Path):
    raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    return json.loads(raw, parse_float=Decimal)


def _ns(us) -> int:
    """Microseconds as written (int or exact Decimal) to integer ns."""
    return int((Decimal(us) * 1000).to_integral_value())


#: Words of a collective in a kernel's name (lower-cased, without separators).
_NAMED_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "send", "recv")


@cache
def _chrome(path: Path) -> dict:
    """What a Chrome-trace file holds, read here: phase counts, process names, and its intervals (X, B/E per
    thread, b/e per id) as (name, cat, pid, tid, start_ns, dur_ns, {device, stream} from args)."""
    doc = _json(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    header = {k: v for k, v in doc.items() if k != "traceEvents"} if isinstance(doc, dict) else {}
    phases = Counter(e.get("ph") for e in events)
    procs = {e["pid"]: e["args"].get("name", "") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name" and isinstance(e.get("args"), dict)}
    intervals, open_sync, open_async = [], defaultdict(list), defaultdict(list)

    def where(e) -> dict:  # the args this test reads (device, stream; TraceFusion's rank); the rest is not kept
        args = e.get("args")
        return {k: args[k] for k in ("device", "stream", "rank") if k in args} if isinstance(args, dict) else {}

    def named(e) -> str:  # Kineto: a device event whose name says no collective gets the one its args name
        name, args = e.get("name", ""), e.get("args")
        device = str(e.get("cat", "")).lower() not in HOST_CATS | {ANNOTATION_CAT}
        said = args.get("Collective name") if isinstance(args, dict) and device else None
        flat = re.sub(r"[^a-z0-9]+", "", str(name).lower())
        if isinstance(said, str) and said and not any(w in flat for w in _NAMED_COLLECTIVES):
            return f"{name} [{said}]"
        return name

    for e in events:
        ph = e.get("ph")
        if ph == "X":
            intervals.append((named(e), e.get("cat", ""), e.get("pid"), e.get("tid"), _ns(e["ts"]),
                              _ns(e.get("dur", 0)), where(e)))
        elif ph == "B":
            open_sync[e.get("pid"), e.get("tid")].append(e)
        elif ph == "E" and open_sync[e.get("pid"), e.get("tid")]:
            b = open_sync[e.get("pid"), e.get("tid")].pop()
            intervals.append((b.get("name", ""), b.get("cat", ""), b.get("pid"), b.get("tid"), _ns(b["ts"]),
                              _ns(e["ts"]) - _ns(b["ts"]), where(b)))
        elif ph == "b":
            open_async[e.get("cat"), e.get("id"), e.get("name")].append(e)
        elif ph == "e" and open_async[e.get("cat"), e.get("id"), e.get("name")]:
            b = open_async[e.get("cat"), e.get("id"), e.get("name")].pop(0)
            intervals.append((b.get("name", ""), b.get("cat", ""), b.get("pid"), b.get("tid"), _ns(b["ts"]),
                              _ns(e["ts"]) - _ns(b["ts"]), where(b)))
    return {"header": header, "phases": phases, "procs": procs, "intervals": intervals, "events": len(events)}


#: Kineto's device categories, every generation (PyTorch 1.9's capitalised ones, MTIA's).
KINETO_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "mtia_ccp_events"}
_TF1_DEVICE = re.compile(r"/(device:)?gpu:\d+/(stream:\d+|memcpy) Compute$", re.I)


def _device_lane(fmt: str, trace: dict, iv) -> tuple | None:
    """The device lane (device, stream) of a file interval, or None for host work."""
    name, cat, pid, tid, _s, _d, args = iv
    if fmt == "kineto" and cat.lower() in KINETO_DEVICE_CATS:  # (a TraceFusion file: each rank's own)
        return (args.get("device", pid), args.get("stream", tid), *([args["rank"]] if "rank" in args else []))
    if fmt == "tf1" and _TF1_DEVICE.search(trace["procs"].get(pid, "")):
        return (trace["procs"][pid].split()[0], None)
    if fmt == "mxnet" and trace["procs"].get(pid, "").startswith("gpu/"):
        return (trace["procs"][pid], tid)
    return None


def _offset_ns(fmt: str, trace: dict) -> int:
    """Kineto with relative ts (< 1e15 us) counts from baseTimeNanoseconds (Kineto's definition)."""
    base = trace["header"].get("baseTimeNanoseconds")
    if fmt == "kineto" and isinstance(base, int) and trace["intervals"] and \
            min(iv[4] for iv in trace["intervals"]) < 10**18:
        return base
    return 0


def _match(file_ivs: list, timeline, offset_ns: int) -> np.ndarray:
    """For each file interval, the store row holding it (-1: none): the same name, start and duration, else the
    same name and start (the n-th of equal ones, by duration), else the closest untaken row of that name starting
    within 1 us."""
    import pandas as pd

    file_df = pd.DataFrame({"name": [iv[0] for iv in file_ivs],
                            "start": np.array([iv[4] for iv in file_ivs], dtype=np.int64) + offset_ns,
                            "dur": np.array([iv[5] for iv in file_ivs], dtype=np.int64),
                            "k": np.arange(len(file_ivs))})
    store_df = pd.DataFrame({"name": timeline["name"].to_numpy(), "start": timeline["start_ns"].to_numpy(),
                             "dur": timeline["dur_ns"].to_numpy(), "row": np.arange(len(timeline))})
    found = np.full(len(file_ivs), -1, dtype=np.int64)
    taken = np.zeros(len(timeline), dtype=bool)
    for keys in (["name", "start", "dur"], ["name", "start"]):  # the same interval, then the same start
        f = file_df[found[file_df["k"].to_numpy()] < 0].sort_values(["name", "start", "dur"], kind="stable")
        s = store_df[~taken[store_df["row"].to_numpy()]].sort_values(["name", "start", "dur"], kind="stable")
        f = f.assign(nth=f.groupby(keys).cumcount())
        s = s.assign(nth=s.groupby(keys).cumcount())
        exact = f.merge(s[[*keys, "nth", "row"]], on=[*keys, "nth"])
        found[exact["k"].to_numpy()] = exact["row"].to_numpy()
        taken[exact["row"].to_numpy()] = True
    rest = file_df[found[file_df["k"].to_numpy()] < 0]
    left = store_df[~taken[store_df["row"].to_numpy()]]
    for name, group in rest.groupby("name", sort=False):
        cand = left[left["name"] == name].sort_values("start", kind="stable")
        starts, durs, rows = (cand[c].to_numpy() for c in ("start", "dur", "row"))
        for start, dur, k in zip(group["start"].to_numpy(), group["dur"].to_numpy(), group["k"].to_numpy(),
                                 strict=True):
            lo, hi = np.searchsorted(starts, [start - 1000, start + 1000], side="left")
            window = [j for j in range(lo, min(hi + 1, len(starts)))
                      if not taken[rows[j]] and abs(int(starts[j]) - start) <= 1000]
            if window:
                j = min(window, key=lambda j: (abs(int(starts[j]) - start), abs(int(durs[j]) - dur)))
                taken[rows[j]] = True
                found[k] = rows[j]
    return found


@cache
def _chrome_case(folder: Path, store_path: Path):
    """(format, file trace, timeline, matched rows) of a single-file Chrome-family folder, else None."""
    files = _trace_files(folder)
    if len(files) != 1 or not files[0].name.endswith((".json", ".json.gz")):
        return None
    store = TraceStore.open(store_path)
    fmt = store.manifest.get("run", {}).get("framework") or ""
    if fmt.startswith("rocprofv3"):  # rocprofiler-sdk's own JSON, not Chrome trace events (test_rocprofv3_*)
        return None
    trace = _chrome(files[0])
    if fmt == "tf1":  # /stream:all repeats every stream's ops (TF1's own union view), one copy of each is kept;
        trace = {**trace, "intervals": _tf1_once(trace)}  # /memcpy repeats the streams' copies
    timeline = store.timeline()
    return fmt, trace, timeline, _match(trace["intervals"], timeline, _offset_ns(fmt, trace))


def _tf1_once(trace: dict) -> list:
    """A TF1 file's intervals with each op once: none of ``/stream:all`` (every kernel again), and none of a
    GPU's ``/memcpy`` that is also on one of that GPU's ``/stream:N`` (TF1's GPU tracer saves each copy to both)."""
    procs = trace["procs"]
    def device(iv, rest):
        m = re.search(rf"^(.*)/{rest} Compute$", procs.get(iv[2], ""))
        return m.group(1) if m else None
    on_streams = Counter((device(iv, r"stream:\d+"), iv[0], iv[4], iv[5]) for iv in trace["intervals"])
    out = []
    for iv in trace["intervals"]:
        gpu = device(iv, "memcpy")
        if gpu is not None and on_streams[gpu, iv[0], iv[4], iv[5]] > 0:
            on_streams[gpu, iv[0], iv[4], iv[5]] -= 1
            continue
        if "/stream:all" not in procs.get(iv[2], ""):
            out.append(iv)
    return out


def _chrome_or_skip(folder, runs):
    run = runs(folder)
    _store(run)
    case = _chrome_case(folder, run["store"])
    if case is None:
        pytest.skip("not a single Chrome-family JSON file")
    return run, case


#: import's reasons for events that are not intervals, and the phases they count.
PHASE_REASONS = {"flow arrows (s/t/f)": "stf", "instant events (no duration)": "iI",
                 "metadata (M) events, used for names": "M", "counter (C) events, kept as counters": "C"}
#: PyTorch's allocator events are instants too, counted apart (kept as counters: tests/test_allocator_memory.py).
MEMORY_REASON = "[memory] events (PyTorch's allocator), kept as counters"


@pytest.mark.parametrize("folder", FOLDERS)
def test_event_counts(folder, runs):
    """Events read = the file's events; each phase skipped = the file's count of it; intervals kept plus the
    intervals import says it dropped = the file's X events, B/E and b/e pairs; info counts the store's rows."""
    run, (_fmt, trace, timeline, found) = _chrome_or_skip(folder, runs)
    per_file, skipped, dropped = _import_summary(run["import"][1])
    (read, kept), = per_file.values()
    assert read == trace["events"]
    for reason, phases in PHASE_REASONS.items():
        memory = skipped.get(MEMORY_REASON, 0) if phases == "iI" else 0
        assert skipped.get(reason, 0) + memory == sum(trace["phases"][p] for p in phases), reason
    assert not {reason for reason in skipped if reason not in PHASE_REASONS and reason != MEMORY_REASON}, skipped
    assert kept + sum(dropped.values()) == trace["phases"]["X"] + trace["phases"]["B"] + trace["phases"]["b"]
    assert kept == len(timeline) == json.loads(run["info --json"][1])["events"]
    # what was kept is what the file holds: every kept row is one of the file's intervals
    assert (found >= 0).sum() == kept


@pytest.mark.parametrize("folder", _with_known("exact_times"))
def test_exact_times(folder, runs):
    """Every interval's start and duration in the store are the file's, to the ns (decimal text, not floats);
    ``info``'s span is the file's span of what was kept."""
    run, (fmt, trace, timeline, found) = _chrome_or_skip(folder, runs)
    offset = _offset_ns(fmt, trace)
    ivs = [iv for iv, row in zip(trace["intervals"], found, strict=True) if row >= 0]
    rows = found[found >= 0]
    file_starts = np.array([iv[4] + offset for iv in ivs], dtype=np.int64)
    file_durs = np.array([iv[5] for iv in ivs], dtype=np.int64)
    start_err = timeline["start_ns"].to_numpy()[rows] - file_starts
    dur_err = timeline["dur_ns"].to_numpy()[rows] - file_durs
    assert np.abs(start_err).max(initial=0) == 0, f"starts off by up to {np.abs(start_err).max()} ns"
    assert np.abs(dur_err).max(initial=0) == 0, f"durations off by up to {np.abs(dur_err).max()} ns"
    info = json.loads(run["info --json"][1])
    assert info["start_ns"] == file_starts.min()
    assert info["span_ns"] == (file_starts + file_durs).max() - file_starts.min()


def _device_groups(fmt, trace, found):
    groups = defaultdict(list)
    for k, iv in enumerate(trace["intervals"]):
        lane = _device_lane(fmt, trace, iv)
        if lane is not None:
            groups[lane].append(k)
    return groups


@pytest.mark.parametrize("folder", FOLDERS)
def test_device_time_per_lane(folder, runs):
    """Per device lane of the file: every event in the store, all on one store lane, their time summed to 1 us."""
    _run, (fmt, trace, timeline, found) = _chrome_or_skip(folder, runs)
    groups = _device_groups(fmt, trace, found)
    if not groups:
        pytest.skip("no device work in this file")
    lanes, durs = timeline["lane"].to_numpy(), timeline["dur_ns"].to_numpy()
    for lane, idx in groups.items():
        rows = found[idx]
        assert (rows >= 0).all(), f"{lane}: {(rows < 0).sum()} of {len(idx)} device events not in the store"
        assert len(set(lanes[rows])) == 1, f"{lane}: spread over store lanes {sorted(set(lanes[rows]))}"
        file_ns = sum(trace["intervals"][k][5] for k in idx)
        assert abs(int(durs[rows].sum()) - file_ns) < 1000, f"{lane}: {durs[rows].sum()} ns vs {file_ns} ns"


@pytest.mark.parametrize("folder", _with_known("device_lane"))
def test_device_work_on_a_device_lane(folder, runs):
    """Device work is on a lane named for its device, never on a host thread's lane."""
    _run, (fmt, trace, timeline, found) = _chrome_or_skip(folder, runs)
    groups = _device_groups(fmt, trace, found)
    if not groups:
        pytest.skip("no device work in this file")
    lanes = timeline["lane"].to_numpy()
    for lane, idx in groups.items():
        rows = found[idx]
        names = set(lanes[rows[rows >= 0]])
        assert names and not any(n.startswith(("cpu", "host")) for n in names), f"{lane} -> {sorted(names)}"


@pytest.mark.parametrize("folder", _with_known("device_category"))
def test_device_work_categorised(folder, runs):
    """Kineto's and TF1's device work (kernels, copies, memsets, a stream waiting on an event) is compute, comm,
    memcpy or wait: never silently 'other'. (MXNet's device lanes also hold the engine's DeleteVariable, 'other'
    by a rule of its own.)"""
    _run, (fmt, trace, timeline, found) = _chrome_or_skip(folder, runs)
    if fmt not in ("kineto", "tf1"):
        pytest.skip(f"{fmt}: device lanes hold more than device work")
    idx = [k for ks in _device_groups(fmt, trace, found).values() for k in ks]
    if not idx:
        pytest.skip("no device work in this file")
    rows = found[idx]
    cats = Counter(timeline["category"].astype(str).to_numpy()[rows[rows >= 0]])
    assert set(cats) <= {"compute", "comm", "memcpy", "wait"}, dict(cats)


def _check_info_device(info_rank: dict, n_events: int, busy_ns: int) -> None:
    assert info_rank.get("device_events") == n_events, (info_rank.get("device_events"), n_events)
    device = info_rank["device_time_ns"]
    assert abs(info_rank["span_ns"] - device["idle"] - busy_ns) < 1000, (info_rank["span_ns"] - device["idle"],
                                                                         busy_ns)


@pytest.mark.parametrize("folder", _with_known("info_device"))
def test_info_device_side(folder, runs):
    """``info``'s device side of the rank: its events are the file's device events, and its busy time (span less
    device idle) is the union of the file's device intervals, to 1 us (a TraceFusion file: of each rank, by the
    events' ``args.rank``)."""
    run, (fmt, trace, _timeline, found) = _chrome_or_skip(folder, runs)
    idx = [k for ks in _device_groups(fmt, trace, found).values() for k in ks]
    if not idx:
        pytest.skip("no device work in this file")
    offset = _offset_ns(fmt, trace)
    ivs = [trace["intervals"][k] for k in idx]
    ranks = json.loads(run["info --json"][1])["ranks"]
    by_rank = defaultdict(list)
    for iv in ivs:
        by_rank[iv[6].get("rank", ranks[0]["rank"])].append(iv)
    assert sorted(by_rank) == [rank["rank"] for rank in ranks]
    for rank in ranks:
        ivs = by_rank[rank["rank"]]
        _check_info_device(rank, len(ivs), union_ns((iv[4] + offset, iv[4] + offset + iv[5]) for iv in ivs))


# ---------------------------------------------------------------------------------------------------------------
# IPM (ElementTree) and OTF2 (the otf2 package)


@pytest.mark.parametrize("folder", FOLDERS)
def test_ipm_compute_per_rank(folder, runs):
    """IPM: per rank, info's compute is the file's wtime - mtime to 1 us; one row per MPI call name, and per
    partner of a point-to-point call (its hash entries' orank)."""
    xmls = _trace_files(folder) if folder is not None else []
    if not (len(xmls) == 1 and xmls[0].suffix == ".xml" and b"<ipm_job_profile" in xmls[0].open("rb").read(4096)):
        pytest.skip("not an IPM profile")
    run = runs(folder)
    store = _store(run)
    tasks = ET.parse(xmls[0]).getroot().iter("task")
    truth = {}
    for task in tasks:
        perf = task.find("perf")
        calls = {f.get("name") for f in task.iter("func")}
        p2p = {(h.get("call"), h.get("orank")) for h in task.iter("hent") if h.get("call") in P2P | SENDRECV}
        rows = len(calls) + len(p2p) - len({call for call, _ in p2p})  # a point-to-point call: a row per partner
        truth[int(task.get("mpi_rank"))] = (Decimal(perf.get("wtime")) - Decimal(perf.get("mtime")), rows)
    info = json.loads(run["info --json"][1])
    assert info["world_size"] == len(truth)
    rows = store.timeline().groupby("rank").size().to_dict()
    for r in info["ranks"]:
        compute_s, calls = truth[r["rank"]]
        assert abs(r["time_ns"]["compute"] - compute_s * 10**9) < 1000, (r["rank"], r["time_ns"]["compute"])
        assert rows[r["rank"]] == 1 + calls


@pytest.mark.parametrize("folder", FOLDERS)
def test_otf2_exclusive_time_per_region(folder, runs):
    """OTF2: per (rank, region), the store's time is the region's exclusive time in the archive, to 1 us; the
    events import read are the archive's."""
    anchors = [p for p in _trace_files(folder) if p.suffix == ".otf2"] if folder is not None else []
    if len(anchors) != 1:
        pytest.skip("not an OTF2 archive")
    otf2 = pytest.importorskip("otf2")
    run = runs(folder)
    store = _store(run)
    exclusive, stacks, n_events = defaultdict(int), defaultdict(list), 0
    with otf2.reader.open(str(anchors[0])) as reader:
        clock = reader.definitions.clock_properties
        for location, event in reader.events:
            n_events += 1
            t_ns = (event.time - clock.global_offset) * 10**9 / clock.timer_resolution
            stack = stacks[location]
            rank = int(location.group.name.split()[-1])
            if isinstance(event, otf2.events.Enter):
                stack.append([event.region.name, t_ns, 0])
            elif isinstance(event, otf2.events.Leave):
                name, start, children = stack.pop()
                exclusive[rank, name] += t_ns - start - children
                if stack:
                    stack[-1][2] += t_ns - start
    stored = store.timeline().groupby(["rank", "name"])["dur_ns"].sum().to_dict()
    for key, ns in exclusive.items():
        assert abs(stored.get(key, 0) - ns) < 1000, (key, stored.get(key, 0), ns)
    assert set(stored) <= set(exclusive)
    (read, _kept), = _import_summary(run["import"][1])[0].values()
    assert read == n_events


# ---------------------------------------------------------------------------------------------------------------
# XPlane: the protobuf wire format, read here (tsl/profiler/protobuf/xplane.proto field numbers)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(b: bytes):
    """(field number, value) of one message: ints for varints, bytes for the rest."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        kind = key & 7
        if kind == 0:
            value, i = _varint(b, i)
        elif kind in (1, 5):
            size = 8 if kind == 1 else 4
            value, i = b[i:i + size], i + size
        elif kind == 2:
            size, i = _varint(b, i)
            value, i = b[i:i + size], i + size
        else:
            raise ValueError(f"wire type {kind}")
        yield key >> 3, value


#: Lines of a device plane that annotate its streams (issue 20 item 4): never device time.
XPLANE_DERIVED = {"Steps", "TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops", "XLA Modules", "Framework Ops",
                  "Framework Name Scope", "Source code", "XLA TraceMe", "Launch Stats"}


def _xplane(path: Path) -> tuple[int, dict, list]:
    """(profile start ns or 0, {(device plane, stream line): (events, total ps, first start in ps)}, and every
    device stream event's (start, end) in ps)."""
    start_ns, lines, spans = 0, {}, []
    for number, plane in _fields(path.read_bytes()):
        if number != 1:
            continue
        name, raw_lines, stat_names, stats = "", [], {}, []
        for f, v in _fields(plane):
            if f == 2:
                name = v.decode()
            elif f == 3:
                raw_lines.append(v)
            elif f == 5:  # map<int64, XStatMetadata>
                meta = dict(_fields(dict(_fields(v)).get(2, b"")))
                stat_names[meta.get(1)] = meta.get(2, b"").decode()
            elif f == 6:
                stats.append(dict(_fields(v)))
        if name == "Task Environment":
            start_ns = next((s.get(3) for s in stats if stat_names.get(s.get(1)) == "profile_start_time"), 0)
        if not name.startswith("/device:"):
            continue
        for raw in raw_lines:
            line_name, timestamp_ns, n, total_ps, first_ps = "", 0, 0, 0, None
            events = []
            for f, v in _fields(raw):
                if f == 2:
                    line_name = v.decode()
                elif f == 3:
                    timestamp_ns = v
                elif f == 4:
                    events.append(dict(_fields(v)))
            if line_name in XPLANE_DERIVED:
                continue
            for e in events:
                n += 1
                total_ps += e.get(3, 0)
                start_ps = timestamp_ns * 1000 + e.get(2, 0)
                first_ps = start_ps if first_ps is None else min(first_ps, start_ps)
                spans.append((start_ps, start_ps + e.get(3, 0)))
            lines[name, line_name] = (n, total_ps, first_ps)
    return start_ns, lines, spans


@pytest.mark.parametrize("folder", FOLDERS)
def test_xplane_device_time_per_stream(folder, runs):
    """XPlane: per device stream line, the store has its events (count), its time to 1 us, its first start to 1 ns
    (ps truncated to ns)."""
    files = _trace_files(folder) if folder is not None else []
    if not (len(files) == 1 and files[0].name.endswith(".xplane.pb")):
        pytest.skip("not an XPlane")
    run = runs(folder)
    timeline = _store(run).timeline()
    start_ns, lines, spans = _xplane(files[0])
    assert lines, "no device lines in the file"
    by_lane = timeline.groupby("lane").agg(n=("dur_ns", "size"), total=("dur_ns", "sum"), first=("start_ns", "min"))
    for (plane, line), (n, total_ps, first_ps) in lines.items():
        if not n:
            continue
        device = plane.removeprefix("/device:").lower()
        lane = [name for name in by_lane.index if name.lower().startswith(device + "/") and name.endswith(line)]
        assert len(lane) == 1, f"{plane} {line}: store lanes {lane}"
        got = by_lane.loc[lane[0]]
        assert got["n"] == n
        # each event's ps are truncated to whole ns: up to 1 ns per event below the file's ps
        assert -n - 1000 < got["total"] - total_ps / 1000 < 1000, (plane, line, got["total"], total_ps)
        assert got["first"] == first_ps // 1000 + start_ns
    # info's device side: the device events, and its busy time the union of them (ps to ns: 1 ns per event)
    (rank,) = json.loads(run["info --json"][1])["ranks"]
    assert rank.get("device_events") == len(spans)
    busy_ns = union_ns(spans) / 1000
    assert -len(spans) - 1000 < rank["span_ns"] - rank["device_time_ns"]["idle"] - busy_ns < 1000


# ---------------------------------------------------------------------------------------------------------------
# rocprofv3 (rocprofiler-sdk JSON): its records read here with json


def _rocprofv3(path: Path) -> dict:
    """What a rocprofv3 JSON holds, read here: records of every buffer list, and per device lane (GPU index, HIP
    stream) its kernel dispatches as (start, end, kernel name, correlation id)."""
    raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    (process,) = json.loads(raw)["rocprofiler-sdk-tool"]
    gpus = {a["id"]["handle"]: a["gpu_index"] for a in process["agents"] if a["type"] == 2}
    names = {k["kernel_id"]: k["formatted_kernel_name"] for k in process["kernel_symbols"]}
    lanes = defaultdict(list)
    for r in process["buffer_records"]["kernel_dispatch"]:
        info = r["dispatch_info"]
        lanes[f"gpu:{gpus[info['agent_id']['handle']]}/stream {r['stream_id']['handle']}"].append(
            (r["start_timestamp"], r["end_timestamp"], names[info["kernel_id"]], r["correlation_id"]["internal"]))
    records = sum(len(v) for v in process["buffer_records"].values() if isinstance(v, list))
    return {"lanes": lanes, "records": records}


def _rocprofv3_case(folder, runs):
    files = _trace_files(folder) if folder is not None else []
    if not (len(files) == 1 and files[0].name.endswith(("results.json", "results.json.gz"))):
        pytest.skip("not a rocprofv3 JSON")
    run = runs(folder)
    return run, _store(run).timeline(), _rocprofv3(files[0])


@pytest.mark.parametrize("folder", FOLDERS)
def test_rocprofv3_kernels_per_lane(folder, runs):
    """rocprofv3: per device lane (GPU index, HIP stream) of the file, the store's kernel count and time (to 1 us,
    exact here: integer ns), each kernel's correlation id, RCCL's kernels as communication; import's event count,
    and info's start, span and device side."""
    run, timeline, truth = _rocprofv3_case(folder, runs)
    (read, kept), = _import_summary(run["import"][1])[0].values()
    assert read == truth["records"]
    dispatches = [k for ks in truth["lanes"].values() for k in ks]
    assert kept == len(timeline) == len(dispatches)
    for lane, kernels in truth["lanes"].items():
        rows = timeline[timeline["lane"] == lane].sort_values(["start_ns", "correlation"])
        assert len(rows) == len(kernels), lane
        file_ns = sum(end - start for start, end, _n, _c in kernels)
        assert abs(int(rows["dur_ns"].sum()) - file_ns) < 1000, (lane, int(rows["dur_ns"].sum()), file_ns)
        kernels = sorted(kernels, key=lambda k: (k[0], k[3]))
        assert rows["correlation"].tolist() == [k[3] for k in kernels], lane
        assert rows["name"].tolist() == [k[2] for k in kernels], lane
    comm_ns = sum(e - s for s, e, name, _c in dispatches if re.search(r"(?i)nccl|rccl", name))
    assert comm_ns > 0
    assert int(timeline.loc[timeline["category"] == "comm", "dur_ns"].sum()) == comm_ns
    info = json.loads(run["info --json"][1])
    first, last = min(k[0] for k in dispatches), max(k[1] for k in dispatches)
    assert (info["start_ns"], info["span_ns"]) == (first, last - first)
    (rank,) = info["ranks"]
    _check_info_device(rank, len(dispatches), union_ns((s, e) for s, e, _n, _c in dispatches))


# ---------------------------------------------------------------------------------------------------------------
# Kineto jobs of several ranks (one file per rank): each file read here with json, as the single-file checks do


def _kineto_ranks(folder, runs) -> tuple[dict, dict]:
    """(import's run, {rank: the file's trace, its path and world size}) of a folder of two or more Kineto files,
    each naming its rank and world size in ``distributedInfo``."""
    files = _trace_files(folder) if folder is not None else []
    if len(files) < 2 or not all(f.name.endswith((".json", ".json.gz")) for f in files):
        pytest.skip("not a folder of several Chrome-family JSON files")
    run = runs(folder)
    if TraceStore.open(run["store"]).manifest.get("run", {}).get("framework") != "kineto":
        pytest.skip("not Kineto")
    infos = {f: _json(f)["distributedInfo"] for f in files}
    return run, {info["rank"]: {**_chrome(f), "file": f, "world_size": info["world_size"]} for f, info in infos.items()}


@pytest.mark.parametrize("folder", FOLDERS)
def test_kineto_ranks_events(folder, runs):
    """Per file: events read = the file's; intervals kept + dropped = the file's X events; the store's rows of
    each rank = its file's intervals kept; the world is the files' ``distributedInfo.world_size``."""
    run, traces = _kineto_ranks(folder, runs)
    per_file, _skipped, dropped = _import_summary(run["import"][1])
    timeline = _store(run).timeline()
    rows = timeline.groupby("rank").size().to_dict()
    for rank, trace in traces.items():
        (read, kept), = [v for k, v in per_file.items() if k.endswith(trace["file"].name)]
        assert read == trace["events"]
        assert rows[rank] == kept
    assert sum(kept for _read, kept in per_file.values()) + sum(dropped.values()) == \
        sum(t["phases"]["X"] for t in traces.values())
    info = json.loads(run["info --json"][1])
    (world_size,) = {t["world_size"] for t in traces.values()}
    assert info["world_size"] == world_size


@pytest.mark.parametrize("folder", FOLDERS)
def test_kineto_ranks_device(folder, runs):
    """Per rank and device lane (``args.device``/``args.stream``): the store's event count and time (1 us) on
    lane ``gpu:<device>/stream <stream>``; its NCCL kernels' time as communication; ``info``'s device side."""
    run, traces = _kineto_ranks(folder, runs)
    timeline = _store(run).timeline()
    info = {r["rank"]: r for r in json.loads(run["info --json"][1])["ranks"]}
    for rank, trace in traces.items():
        mine = timeline[timeline["rank"] == rank]
        device = [iv for iv in trace["intervals"] if _device_lane("kineto", trace, iv) is not None]
        lanes = defaultdict(list)
        for iv in device:
            lanes[f"gpu:{iv[6]['device']}/stream {iv[6]['stream']}"].append(iv[5])
        for lane, durs in lanes.items():
            got = mine.loc[mine["lane"] == lane, "dur_ns"]
            assert (len(got), abs(int(got.sum()) - sum(durs)) < 1000) == (len(durs), True), (rank, lane)
        nccl_ns = sum(iv[5] for iv in device if "nccl" in iv[0].lower())
        on_gpu = mine["lane"].str.startswith("gpu:").to_numpy()
        assert int(mine.loc[on_gpu & (mine["category"] == "comm").to_numpy(), "dur_ns"].sum()) == nccl_ns
        _check_info_device(info[rank], len(device), union_ns((iv[4], iv[4] + iv[5]) for iv in device))


# ---------------------------------------------------------------------------------------------------------------
# Nsight Systems SQLite exports: the tables read here with sqlite3


#: The export's device tables, as the nsys importer reads them.
NSYS_DEVICE_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def _nsys(path: Path, tmp: Path) -> dict:
    """What an export holds, read here: rows of the tables read (events), per device lane its (start, end) ns,
    the runtime calls that are not CUDA backtrace records (``eventClass`` 67) and the NVTX ranges with an end
    (host rows), the first start and last end of all these (ns since the session's start), and the session's
    start (epoch ns)."""
    import sqlite3

    if path.suffix == ".gz":
        (tmp / path.stem).write_bytes(gzip.open(path).read())
        path = tmp / path.stem
    db = sqlite3.connect(path)
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    lanes, events = defaultdict(list), 0
    for table in [t for t in NSYS_DEVICE_TABLES if t in tables]:
        for start, end, device, stream in db.execute(f"SELECT start, end, deviceId, streamId FROM {table}"):
            lanes[f"gpu:{device}/stream {stream}"].append((start, end))
            events += 1
    runtime = db.execute("SELECT count(*), sum(eventClass = 67) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone() \
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables else (0, 0)
    nvtx = db.execute("SELECT count(*), sum(eventType IN (59, 60) AND end IS NOT NULL) FROM NVTX_EVENTS"
                      ).fetchone() if "NVTX_EVENTS" in tables else (0, 0)
    host = [db.execute(sql).fetchone() for sql, table in (
        ("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass != 67",
         "CUPTI_ACTIVITY_KIND_RUNTIME"),
        ("SELECT min(start), max(end) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND end IS NOT NULL",
         "NVTX_EVENTS")) if table in tables]
    (epoch,), = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    db.close()
    bounds = [b for b in host if b[0] is not None] + [iv for ivs in lanes.values() for iv in ivs]
    return {"events": events + runtime[0] + nvtx[0], "lanes": lanes, "epoch": epoch,
            "host_rows": runtime[0] - (runtime[1] or 0) + (nvtx[1] or 0),
            "first": min(b[0] for b in bounds), "last": max(b[1] for b in bounds)}


@pytest.mark.parametrize("folder", FOLDERS)
def test_nsys_device_time_per_lane(folder, runs, tmp_path):
    """nsys SQLite: events read = the rows of the tables read; per device lane (deviceId, streamId) the store's
    event count and time (exact: integer ns); the host rows (runtime calls, NVTX ranges); ``info``'s start,
    span and device side."""
    files = _trace_files(folder) if folder is not None else []
    if not (len(files) == 1 and files[0].name.endswith((".sqlite", ".sqlite.gz"))):
        pytest.skip("not an Nsight Systems SQLite export")
    run = runs(folder)
    timeline = _store(run).timeline()
    truth = _nsys(files[0], tmp_path)
    (read, kept), = _import_summary(run["import"][1])[0].values()
    device = [iv for ivs in truth["lanes"].values() for iv in ivs]
    assert (read, kept, len(timeline)) == (truth["events"], len(device) + truth["host_rows"], kept)
    for lane, ivs in truth["lanes"].items():
        got = timeline.loc[timeline["lane"] == lane, "dur_ns"]
        assert (len(got), int(got.sum())) == (len(ivs), sum(e - s for s, e in ivs)), lane
    assert (~timeline["lane"].str.startswith("gpu:")).sum() == truth["host_rows"]
    info = json.loads(run["info --json"][1])
    assert (info["start_ns"], info["span_ns"]) == (truth["epoch"] + truth["first"], truth["last"] - truth["first"])
    (rank,) = info["ranks"]
    _check_info_device(rank, len(device), union_ns(device))
