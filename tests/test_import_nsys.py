"""Nsight Systems exports: a real SQLite export (pipit's MPI+CUDA saxpy on Perlmutter, rank 0, nsys 2022.2), its
figures checked against plain SQL on the same database, and a real NVTX push/pop trace CSV report (pipit's CUDA
n-body), checked against the csv module's reading of it."""

from __future__ import annotations

import csv
import gzip
import json
import re
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest
from shared_data import corpus, needs

from ddltrace.cli import main
from ddltrace.store import TraceStore

SAXPY = corpus("pipit_nsys_saxpy_mpi", "saxpy-mpi-cuda_nsys_perlmutter0.sqlite.gz")
NBODY = corpus("pipit_nsys_nbody_nvtx", "trace.csv")
DEVICE_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
#: The analyses that need the ``correlation`` column (a launch linked to its kernel) or copies' ``bytes``.
LINKED_ANALYSES = {"gpu_launches", "gpu_idle", "gpu_stream_idle", "gpu_operators", "gpu_memcpy_bandwidth"}


@pytest.fixture(scope="module")
def saxpy(tmp_path_factory):
    """(the decompressed database, the store imported from the .sqlite.gz)."""
    if not SAXPY.is_file():
        pytest.skip(f"{SAXPY.name} absent (see tests/data/wild/PROVENANCE.md for where it comes from)")
    base = tmp_path_factory.mktemp("nsys")
    database = base / "saxpy.sqlite"
    database.write_bytes(gzip.decompress(SAXPY.read_bytes()))
    assert main(["import", str(SAXPY), "--out", str(base / "store"), "--progress", "never"]) == 0
    db = sqlite3.connect(database)
    yield db, TraceStore.open(base / "store")
    db.close()


def test_device_time_per_device_and_stream(saxpy):
    """Per (deviceId, streamId): the kernels, copies and fills of the export, their count and summed ns exactly."""
    db, store = saxpy
    union = " UNION ALL ".join(f"SELECT deviceId, streamId, start, end FROM {t}" for t in DEVICE_TABLES
                               if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone())
    want = {f"gpu:{device}/stream {stream}": (n, ns) for device, stream, n, ns in db.execute(
        f"SELECT deviceId, streamId, count(*), sum(end - start) FROM ({union}) GROUP BY deviceId, streamId")}
    kernel_ns = db.execute("SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    tl = store.timeline()
    device = tl[tl["lane"].str.startswith("gpu:")]
    got = {lane: (len(rows), int(rows["dur_ns"].sum())) for lane, rows in device.groupby("lane")}
    assert got == want and want
    assert int(device.loc[device["category"] == "compute", "dur_ns"].sum()) == kernel_ns
    assert set(device.loc[device["category"] != "compute", "name"]) <= {"Memcpy HtoD", "Memcpy DtoH", "Memset"}


def test_runtime_calls_and_mpi_ranges_on_the_host_thread(saxpy):
    """CUDA runtime calls and NVTX ranges (those of nsys's MPI domain categorised by the MPI rules) are on the
    calling thread, named from StringIds without CUPTI's version suffix (cudaMalloc_v3020: cudaMalloc), the CUDA
    backtrace records (eventClass 67, each around a call of its correlation id) left out; start times are the
    session's utcEpochNs plus the export's ns."""
    db, store = saxpy
    tl = store.timeline()
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    runtime = [(re.sub(r"_v\d+$", "", strings[n]), s) for n, s in db.execute(
        "SELECT nameId, start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass != 67")]
    epoch = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    rows = tl[tl["name"].isin({n for n, _s in runtime})]
    assert sorted(zip(rows["name"], rows["start_ns"] - epoch, strict=True)) == sorted(runtime)
    assert {"cudaMalloc", "cudaMemcpy", "cudaLaunchKernel"} <= set(rows["name"])
    mpi = db.execute("SELECT textId, end - start FROM NVTX_EVENTS WHERE domainId = 1 AND eventType = 59").fetchall()
    calls = tl[tl["name"].str.startswith("MPI_")]
    assert sorted(zip(calls["name"], calls["dur_ns"], strict=True)) == sorted((strings[t], d) for t, d in mpi)
    category = dict(zip(calls["name"], calls["category"].astype(str), strict=False))
    assert category["MPI_Send"] == category["MPI_Recv"] == "comm" and category["MPI_Init"] == "other"
    host = set(tl.loc[~tl["lane"].str.startswith("gpu:"), "lane"])
    assert host == {"cpu/thread 1230493 (MPI Rank 0)"}
    assert store.world_size == 1 and int(tl["rank"].iloc[0]) == 0
    assert int(tl["start_ns"].min()) == epoch + min(
        db.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0],
        db.execute("SELECT min(start) FROM NVTX_EVENTS WHERE end IS NOT NULL").fetchone()[0])


def test_copy_bytes_and_correlation_ids_are_the_exports(saxpy, capsys):
    """Each copy's bytes (262144000 each) and correlationId, each kernel's and runtime call's correlationId, are
    the export's; each kernel shares its id with its cudaLaunchKernel, so analyze makes the launch analyses and
    the copy bandwidth (they said they needed correlation ids, and showed '-' for the bandwidth)."""
    db, store = saxpy
    tl = store.timeline()
    epoch = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    tl = tl.assign(start_ns=tl["start_ns"] - epoch)
    copies = tl[tl["name"].str.startswith("Memcpy")]
    assert sorted(zip(copies["start_ns"], copies["bytes"], copies["correlation"], strict=True)) == sorted(
        db.execute("SELECT start, bytes, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY"))
    kernels = tl[tl["lane"].str.startswith("gpu:") & (tl["category"] == "compute")]
    assert sorted(zip(kernels["start_ns"], kernels["correlation"], strict=True)) == sorted(
        db.execute("SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    calls = tl[tl["lane"].str.startswith("cpu/") & tl["correlation"].notna()]
    assert sorted(zip(calls["start_ns"], calls["correlation"], strict=True)) == sorted(db.execute(
        "SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass != 67"))
    launches = calls[calls["name"] == "cudaLaunchKernel"]
    assert sorted(launches["correlation"]) == sorted(kernels["correlation"]) and len(launches) == 5
    assert tl.loc[~tl["name"].str.startswith(("Memcpy", "Memset")), "bytes"].isna().all()
    assert main(["analyze", "--json", str(store.path)]) == 0
    assert not LINKED_ANALYSES & {n["analysis"] for n in json.loads(capsys.readouterr().out)["not_made"]}


def test_info_device_side_is_the_exports(saxpy, capsys):
    """info's device events are the export's device rows; its device busy time (span - idle) their union."""
    import json

    db, store = saxpy
    intervals = sorted(row for t in DEVICE_TABLES for row in db.execute(f"SELECT start, end FROM {t}"))
    busy, reach = 0, None
    for start, end in intervals:
        if reach is None or start > reach:
            busy, reach = busy + end - start, end
        elif end > reach:
            busy, reach = busy + end - reach, end
    assert main(["info", "--json", str(store.path)]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    assert rank["device_events"] == len(intervals)
    assert rank["span_ns"] - rank["device_time_ns"]["idle"] == busy


@needs(SAXPY)
def test_a_damaged_export_is_one_line(tmp_path, capsys):
    """An export cut short: exit 2, one line naming the file, no traceback."""
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(gzip.decompress(SAXPY.read_bytes())[:300_000])
    rc = main(["import", str(cut), "--out", str(tmp_path / "store"), "--progress", "never"])
    err = capsys.readouterr().err
    assert rc == 2 and str(cut) in err and "Traceback" not in err


@needs(SAXPY)
def test_a_cut_gzip_export_is_one_line_that_keeps_nothing(tmp_path, capsys):
    """The gzip of an export cut short: one line naming the file once, saying nothing was kept (it said the
    path twice and '(kept what was decoded)' while it imported nothing)."""
    cut = tmp_path / "cut.sqlite.gz"
    cut.write_bytes(SAXPY.read_bytes()[:100_000])
    rc = main(["import", str(cut), "--out", str(tmp_path / "store"), "--progress", "never"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and err.count(str(cut)) == 1, err
    assert (f"{cut}: not a readable Nsight Systems SQLite export (gzip stream truncated at compressed byte 100000; "
            "a database cannot be read in part)") in err and "kept" not in err


@needs(NBODY)
def test_nvtx_csv_report_ranges_per_name(tmp_path, capsys):
    """The CSV report's rows: each an interval on its thread's lane, per name the count and summed ns of the
    file exactly (starts relative to the session), the wrapped cudaDeviceSynchronize ranges wait."""
    with NBODY.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    want: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        want[row["Name"]][0] += 1
        want[row["Name"]][1] += int(row["End (ns)"]) - int(row["Start (ns)"])
    assert main(["import", str(NBODY), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    assert f"{len(rows)} events, {len(rows)} intervals" in capsys.readouterr().out
    tl = TraceStore.open(tmp_path / "store").timeline()
    got = {name: [len(g), int(g["dur_ns"].sum())] for name, g in tl.groupby("name")}
    assert got == dict(want)
    assert set(tl["lane"]) == {f"cpu/thread {rows[0]['TID']}"}
    assert int(tl["start_ns"].min()) == min(int(row["Start (ns)"]) for row in rows)
    assert set(tl.loc[tl["name"] == "cudaDeviceSynchronize", "category"].astype(str)) == {"wait"}
    assert set(tl.loc[tl["name"] == "cudaMallocManaged", "category"].astype(str)) == {"other"}


def test_nvtx_csv_ranges_named_as_runtime_calls_are_categorised_as_them(tmp_path):
    """A range named as a CUDA runtime call is categorised as the SQLite export's runtime calls (cudaMalloc*:
    other, a synchronisation: wait, a copy call: memcpy; cudaMallocManaged was compute), the program's own ranges
    stay compute."""
    report = tmp_path / "report.csv"
    report.write_text("Start (ns),End (ns),Duration (ns),Name,PID,TID\n"
                      "0,100,100,main,7,7\n10,30,20,cudaMallocManaged,7,7\n30,40,10,cudaMemcpy,7,7\n"
                      "40,50,10,cudaDeviceSynchronize,7,7\n50,60,10,cudaGetLastError,7,7\n60,70,10,bodyForce,7,7\n")
    assert main(["import", str(report), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    tl = TraceStore.open(tmp_path / "store").timeline()
    assert dict(zip(tl["name"], tl["category"].astype(str), strict=True)) == {
        "main": "compute", "cudaMallocManaged": "other", "cudaMemcpy": "memcpy", "cudaDeviceSynchronize": "wait",
        "cudaGetLastError": "other", "bodyForce": "compute"}


def test_nvtx_csv_report_without_its_columns_is_one_line(tmp_path, capsys):
    """A CSV with the report's header but without its Name column: refused in one line naming the file and the
    column, exit 2."""
    bad = tmp_path / "report.csv"
    bad.write_text("Start (ns),End (ns),Duration (ns),PID,TID\n1,2,1,7,7\n")
    rc = main(["import", str(bad), "--out", str(tmp_path / "store"), "--progress", "never"])
    err = capsys.readouterr().err
    assert rc == 2 and str(bad) in err and "Name" in err and "Traceback" not in err


def test_nvtx_csv_damaged_rows_are_named_and_skipped(tmp_path, capsys):
    """A row run into the next by garbage bytes (line 3: 9 fields) and a row the file ends inside (line 6, 4 of
    its 6 fields) are each named by their line and skipped, the other rows kept. The first was kept from its first
    fields while the row it swallowed was lost, and the cut row imported, both without a word (QA: nsys stats
    CSV of the n-body, 130 of 131 rows read, no problem line)."""
    report = tmp_path / "report.csv"
    report.write_bytes(b"Start (ns),End (ns),Duration (ns),Name,PID,TID\n0,100,100,main,7,7\n"
                       b"10,20,10,a,7\x00\xff\xff9,10,b,7,7\n30,40,10,c,7,7\n40,50,99,d,7,7\n60,70,10,e")
    assert main(["import", str(report), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    out = capsys.readouterr().out
    assert "5 events, 2 intervals" in out
    assert (f"{report}: 3 damaged row(s) skipped, the rest kept: line 3 (9 fields where the header has 6), "
            "line 5 (duration 99 ns where end - start is 10 ns), line 6 (the file ends inside it)") in out
    assert list(TraceStore.open(tmp_path / "store").timeline()["name"]) == ["main", "c"]
    report.write_bytes(b"Start (ns),End (ns),Duration (ns),Name,PID,TID\n0,100,100,main,7")
    assert main(["import", str(report), "--out", str(tmp_path / "store2"), "--progress", "never"]) == 2
    err = capsys.readouterr().err
    assert "every row of the nsys NVTX push/pop trace CSV is damaged: line 2 (the file ends inside it)" in err
    assert "Traceback" not in err


#: The synthetic export's copy and fill per process: (correlation id, bytes) of its Memcpy HtoD and its Memset.
COPY, FILL = (100, 4096), (101, 1024)


def _two_rank_export(path: Path, rank_names: bool = True) -> None:
    """An export in nsys's schema (the tables and columns read) of two MPI processes on one node, each with its
    own GPU: what ``nsys profile mpirun -np 2 ...`` exports in one file (``rank_names`` False: its threads
    unnamed, as without ``--trace=mpi``). Process r launches 3 + r kernels (correlation ids 1, 2, ...: CUPTI counts
    from 1 in each process), a copy of ``COPY`` bytes (r + 1 times) and a fill of ``FILL``; each launch call is
    named with CUPTI's version suffix and has a CUDA backtrace record (eventClass 67) around it, as nsys 2022.2
    writes them."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE ThreadNames (nameId INT, priority INT, globalTid INT);
        CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INT, utcTime TEXT, localTime TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT, correlationId INT,
                                                 globalPid INT, demangledName INT, shortName INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, streamId INT, correlationId INT,
                                                 globalPid INT, bytes INT, copyKind INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INT, end INT, deviceId INT, streamId INT, correlationId INT,
                                                 globalPid INT, value INT, bytes INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT,
                                                  correlationId INT, nameId INT);
        INSERT INTO StringIds VALUES (1, 'MPI Rank 0'), (2, 'MPI Rank 1'), (3, 'gemm'), (4, 'cudaLaunchKernel_v7000'),
                                     (5, 'cudaLaunchKernel'), (6, 'cudaMemcpyAsync_v3020'),
                                     (7, 'cudaMemsetAsync_v3020');
        INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '', '');
    """)
    for rank, pid in ((0, 4100), (1, 4200)):
        process = (1 << 56) | (pid << 24)
        if rank_names:
            db.execute("INSERT INTO ThreadNames VALUES (?, 10, ?)", (rank + 1, process | pid))
        for k in range(3 + rank):
            start = 1000 + 500 * k
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 4)",
                       (start, start + 20, process | pid, k + 1))
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 67, ?, ?, 5)",
                       (start - 1, start + 21, process | pid, k + 1))
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 7, ?, ?, 3, 3)",
                       (start + 30, start + 130 + 50 * rank, rank, k + 1, process))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (5000, 5020, 0, ?, ?, 6)", (process | pid, COPY[0]))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (5030, 5300, ?, 7, ?, ?, ?, 1)",
                   (rank, COPY[0], process, COPY[1] * (rank + 1)))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (6000, 6020, 0, ?, ?, 7)", (process | pid, FILL[0]))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (6030, 6100, ?, 7, ?, ?, 0, ?)",
                   (rank, FILL[0], process, FILL[1]))
    db.commit()
    db.close()


def test_one_rank_per_process_when_processes_name_their_ranks(tmp_path):
    """Two processes whose threads are 'MPI Rank 0' and 'MPI Rank 1': two ranks, each with its own process's
    runtime calls and kernels (globalPid), per rank the kernel time of SQL on the file."""
    path = tmp_path / "job.sqlite"
    _two_rank_export(path)
    assert main(["import", str(path), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    store = TraceStore.open(tmp_path / "store")
    db = sqlite3.connect(path)
    want = dict(db.execute("SELECT t.value, sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                           "JOIN ThreadNames n ON (n.globalTid & ~16777215) = k.globalPid "
                           "JOIN StringIds t ON t.id = n.nameId GROUP BY k.globalPid"))
    db.close()
    tl = store.timeline()
    assert store.world_size == 2
    for rank in (0, 1):
        mine = tl[tl["rank"] == rank]
        kernels = mine[mine["name"] == "gemm"]
        assert int(kernels["dur_ns"].sum()) == want[f"MPI Rank {rank}"]
        assert set(kernels["lane"]) == {f"gpu:{rank}/stream 7"}
        assert set(mine.loc[mine["name"] == "cudaLaunchKernel", "lane"]) == {
            f"cpu/thread {4100 + 100 * rank} (MPI Rank {rank})"}


def test_copy_bytes_and_correlation_ids_of_each_rank(tmp_path, capsys):
    """Per rank (process), each copy's and fill's bytes and every row's correlation id are the export's; each
    kernel shares its id with its cudaLaunchKernel call (named without the _v7000 suffix, once: the backtrace
    records left out), each copy and fill with its async call; host calls have no bytes. analyze then makes the
    launch analyses and the copy bandwidth."""
    path = tmp_path / "job.sqlite"
    _two_rank_export(path)
    assert main(["import", str(path), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    assert "skipped 7 event(s): CUDA backtrace records" in capsys.readouterr().out
    store = TraceStore.open(tmp_path / "store")
    tl = store.timeline()
    for rank in (0, 1):
        mine = tl[tl["rank"] == rank]
        ids = {name: sorted(rows["correlation"]) for name, rows in mine.groupby("name")}
        assert ids == {"gemm": list(range(1, 4 + rank)), "cudaLaunchKernel": list(range(1, 4 + rank)),
                       "Memcpy HtoD": [COPY[0]], "cudaMemcpyAsync": [COPY[0]], "Memset": [FILL[0]],
                       "cudaMemsetAsync": [FILL[0]]}
        nbytes = {name: list(rows["bytes"].dropna()) for name, rows in mine.groupby("name")}
        assert nbytes == {"gemm": [], "cudaLaunchKernel": [], "Memcpy HtoD": [COPY[1] * (rank + 1)],
                          "cudaMemcpyAsync": [], "Memset": [FILL[1]], "cudaMemsetAsync": []}
    assert main(["analyze", "--json", str(store.path)]) == 0
    assert not LINKED_ANALYSES & {n["analysis"] for n in json.loads(capsys.readouterr().out)["not_made"]}


def test_processes_of_one_rank_keep_their_correlation_ids_apart(tmp_path):
    """Two processes whose threads name no rank: one rank, where both processes' ids 1, 2, ... would pair a
    launch with the other process's kernel; each id is kept apart by its process (its id + its position among
    the processes x 2**32), so each launch shares its id with its own kernel only."""
    path = tmp_path / "job.sqlite"
    _two_rank_export(path, rank_names=False)
    assert main(["import", str(path), "--out", str(tmp_path / "store"), "--progress", "never"]) == 0
    tl = TraceStore.open(tmp_path / "store").timeline()
    assert set(tl["rank"]) == {0}
    kernels, launches = tl[tl["name"] == "gemm"], tl[tl["name"] == "cudaLaunchKernel"]
    assert sorted(kernels["correlation"]) == sorted(launches["correlation"]) == [
        *range(1, 4), *((1 << 32) + k for k in range(1, 5))]
    pairs = kernels.merge(launches, on="correlation", suffixes=("_kernel", "_launch"))
    assert sorted(set(zip(pairs["lane_launch"], pairs["lane_kernel"], strict=True))) == [
        ("cpu/thread 4100", "gpu:0/stream 7"), ("cpu/thread 4200", "gpu:1/stream 7")]


def test_gaps_ended_by_a_blocking_copy_waited_for_the_host(saxpy, tmp_path, capsys):
    """Every device activity of the export has its runtime call (same correlationId), the copies' being blocking
    cudaMemcpy calls, which HTA's launch list lacks: the device's idle gaps they end are host wait, as the
    per-stream table has them (QA: the device table called all 724 ms unlinked, the stream table host wait)."""
    db, store = saxpy
    device_ids = {c for t in DEVICE_TABLES
                  if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()
                  for (c,) in db.execute(f"SELECT correlationId FROM {t}")}
    runtime = {c for (c,) in db.execute("SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    assert device_ids and device_ids <= runtime
    capsys.readouterr()
    assert main(["analyze", str(store.path), "--json"]) == 0
    gpu = json.loads(capsys.readouterr().out)["stores"][0]["gpu"]
    (idle,) = gpu["idle"]
    assert idle["unlinked_ns"] == 0 and idle["host_wait_gaps"] == idle["gaps"]
    streams = sum(row["idle_ns"] for row in gpu["idle_streams"] if row["idle_category"] == "host_wait")
    assert idle["host_wait_ns"] == pytest.approx(streams, rel=0.01)
