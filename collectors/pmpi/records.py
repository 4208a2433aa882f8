"""Read a rank's PMPI record file (written by runtime.c) and turn it into a timeline.

The file is readable whatever way the rank ended: records are complete up to the last call, a call still
in progress when the rank died has exit time 0 (:attr:`RankRecords.open_calls`), and the header says
whether MPI_Finalize returned (``ended`` "normal") or not ("abrupt").

Times are converted to the common clock (rank 0's) with the offsets the runtime measured at MPI_Init and
MPI_Finalize, interpolated linearly in between (drift); without a finalize measurement the init offset holds.

An MPI_Sendrecv (or _replace) is two rows of the timeline, as it is two records of the file: the call (its send half:
``bytes`` sent, ``peer`` its destination, ``tag`` its send tag, its duration) and, at its exit, a row of no duration
named :data:`~ddltrace.collectors.pmpi.table.SENDRECV_RECEIVED` (its receive half: ``bytes`` received, ``peer`` the
source of the message, ``tag`` its tag), so that each byte of an exchange is counted once as sent, by the call that
sent it, and once as received (:mod:`~ddltrace.analyses.node_traffic`). Files written before the receive halves
existed (:attr:`RankRecords.sendrecv_split` False) give a Sendrecv's ``bytes`` as what it sent and received together.

Communicators and peers. A record's ``comm`` is the communicator's id, the same on each of its ranks under any MPI
library (:attr:`RankRecords.comm_ids`): :data:`COMM_WORLD` and :data:`COMM_SELF` fixed, those the job made agreed by
their ranks when they were made (above :data:`COMM_MADE`), and its ``peer`` (a root, a status's source) the partner's
MPI_COMM_WORLD rank (:attr:`RankRecords.world_peers`). Files written before held the handle, which only MPICH gives
alike on every rank (its MPI_COMM_WORLD's is :data:`COMM_WORLD`; Open MPI's are addresses, another in each process:
no message or collective of theirs is matched across ranks), and the rank in the communicator. A communicator the
wrapper did not see made (made around it by ``PMPI_`` calls) keeps its handle, and its peers their rank in it: its
records are flagged (:data:`COMM_HANDLE`, :data:`PEER_IN_COMM`; :attr:`RankRecords.comm_handles`). A partner outside
the rank's MPI_COMM_WORLD (spawned, connected) has no world rank: its record keeps its rank in the communicator,
flagged :data:`PEER_IN_COMM`. The calls that make and free communicators are rows too (their ids follow the call
table's: :func:`~ddltrace.collectors.pmpi.table.record_names`), ``comm`` the communicator made or freed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace.collectors.pmpi.table import (
    REQUEST_DONE,
    SENDRECV_RECEIVED,
    makers_hash,
    names,
    polls,
    record_categories,
    record_names,
    table_hashes,
)
from ddltrace.errors import DdltraceError
from ddltrace.timeline import make_timeline

HEADER_SIZE = 4096
_HEADER = struct.Struct("<8sIIIiiiQIIii8qq256s256sIIii128q")
RECORD_DTYPE = np.dtype([("fn", "<u2"), ("flags", "<u2"), ("tid", "<i4"), ("peer", "<i4"), ("tag", "<i4"),
                         ("t0", "<i8"), ("t1", "<i8"), ("bytes", "<i8"), ("comm", "<i8"), ("request", "<i8"),
                         ("aux", "<i8")])
NA32, NA64 = -(2**31), -(2**63)
OUTSIDE_MPI = "outside MPI"
#: A gap between calls in which the rank polls: it follows a call of :func:`~ddltrace.collectors.pmpi.table.polls`
#: that found nothing and ends at the next such call, in a loop of them whose median gap is within :data:`POLL_GAP_NS`.
POLLING = "polling (between MPI_Test / MPI_Iprobe calls that found nothing)"
#: The longest median gap of a loop of polls that is the rank waiting, not working (ns): a loop that only polls spends
#: 0.1-2 us between its calls (mpi4py's ``while not req.Test(): pass``: about 0.3 us); one that works between them
#: more.
POLL_GAP_NS = 20_000
#: The record's flag bit set where a Test* / Iprobe / Improbe found something (runtime.h's DDLT_F_COMPLETED).
COMPLETED = 2
#: Flag bits (runtime.h): the record's ``comm`` is its rank's handle, not an id (DDLT_F_COMM_HANDLE), its ``peer`` a
#: rank in that communicator, not in MPI_COMM_WORLD (DDLT_F_PEER_IN_COMM).
COMM_HANDLE, PEER_IN_COMM = 4, 8
#: The header's features (runtime.h DDLT_FEATURE_*; 0 in files written before): ``comm`` holds ids, ``peer`` world
#: ranks.
FEATURE_COMM_IDS, FEATURE_WORLD_PEERS = 1, 2
_FEATURES = struct.Struct("<II")  # features, and the hash of the communicator calls' names (table.makers_hash)
_FEATURES_AT = 1680
#: The ids of MPI_COMM_WORLD and MPI_COMM_SELF (MPICH's handles: what the files of MPICH jobs held before), and the
#: least id of a communicator the job made (runtime.h DDLT_COMM_*).
COMM_WORLD, COMM_SELF, COMM_MADE = 0x44000000, 0x44000001, 2**62
#: The function ids - 1 (as :func:`to_timeline` indexes the names) of the calls that poll.
_POLL_IDS = np.flatnonzero(np.isin(names(), polls()))
#: Each function's id in the record (its position in :func:`~ddltrace.collectors.pmpi.table.names`, plus 1).
_ID = {name: i + 1 for i, name in enumerate(record_names()) if name}


@dataclass
class ClockSync:
    """One offset measurement: rank 0's clock minus this rank's, in ns, at local time ``local_t_ns``."""

    offset_ns: int
    uncertainty_ns: int
    local_t_ns: int
    rtt_ns: int


@dataclass
class RankRecords:
    """The content of one record file."""

    path: Path
    rank: int
    world_size: int
    pid: int
    state: int
    main_tid: int
    host: str
    library: str
    test_offset_ns: int
    syncs: list[ClockSync]
    records: np.ndarray = field(repr=False)
    #: records the rank wrote (slots it took: calls, and the requests its Waitall and kin completed) that the file
    #: does not hold: it ends before them (cut short, or a segment could not be mapped); 0 for a whole file
    lost: int = 0
    #: the requests completed by calls that complete several (MPI_Waitall, Waitany, Waitsome and their Test twins),
    #: one :data:`~ddltrace.collectors.pmpi.table.REQUEST_DONE` record each, apart from the calls in ``records``:
    #: ``request`` the request, ``aux`` its message's bytes (-1 unknown), ``peer`` and ``tag`` its status's, ``t0`` and
    #: ``t1`` the completing call's exit (files written before the runtime made them have none)
    completions: np.ndarray = field(default_factory=lambda: np.zeros(0, RECORD_DTYPE), repr=False)
    #: the receive halves of the rank's MPI_Sendrecv and MPI_Sendrecv_replace calls, one
    #: :data:`~ddltrace.collectors.pmpi.table.SENDRECV_RECEIVED` record each, apart from the calls in ``records``:
    #: ``peer``, ``tag`` and ``bytes`` (-1 unknown) of the message received, ``comm`` the call's, ``t0`` and ``t1`` the
    #: call's exit
    received: np.ndarray = field(default_factory=lambda: np.zeros(0, RECORD_DTYPE), repr=False)
    #: whether the wrapper recorded a Sendrecv's bytes sent, its receive half apart (``received``); False for a file
    #: written before it did: a Sendrecv's ``bytes`` are what it sent and received together
    sendrecv_split: bool = True
    #: whether ``comm`` holds communicator ids, the same on each rank of a communicator (see the module's docstring);
    #: False for a file written before: handles
    comm_ids: bool = True
    #: whether ``peer`` holds MPI_COMM_WORLD ranks; False for a file written before: ranks in the call's communicator
    world_peers: bool = True

    @property
    def ended(self) -> str:
        """"normal" when MPI_Finalize returned, else "abrupt"."""
        return "normal" if self.state == 3 else "abrupt"

    @property
    def comm_handles(self) -> int:
        """Records (calls and receive halves) whose ``comm`` is the rank's own handle of a communicator the wrapper
        did not see made (flag :data:`COMM_HANDLE`): not matched across ranks under Open MPI."""
        return int(sum(((part["flags"] & COMM_HANDLE) != 0).sum() for part in (self.records, self.received)))

    @property
    def open_calls(self) -> list[str]:
        """Names of the calls the rank was inside when it stopped (none after a normal end)."""
        fn_names = record_names()
        return [fn_names[f - 1] for f in self.records["fn"][self.records["t1"] == 0]]

    def offset_at(self, t_ns: np.ndarray) -> np.ndarray:
        """Offset (ns) to add to local times ``t_ns`` to put them on rank 0's clock."""
        t_ns = np.asarray(t_ns, dtype=np.int64)
        if not self.syncs:
            return np.zeros_like(t_ns)
        first = self.syncs[0]
        if len(self.syncs) < 2 or self.syncs[1].local_t_ns <= first.local_t_ns:
            return np.full_like(t_ns, first.offset_ns)
        last = self.syncs[1]
        slope = (last.offset_ns - first.offset_ns) / (last.local_t_ns - first.local_t_ns)
        return (first.offset_ns + np.round(slope * (t_ns - first.local_t_ns))).astype(np.int64)

    @property
    def drift_ppm(self) -> float | None:
        """Clock drift to rank 0 between init and finalize, parts per million (None with one measurement)."""
        if len(self.syncs) < 2 or self.syncs[1].local_t_ns <= self.syncs[0].local_t_ns:
            return None
        a, b = self.syncs
        return (b.offset_ns - a.offset_ns) / (b.local_t_ns - a.local_t_ns) * 1e6


def read_records(path: str | Path) -> RankRecords:
    """Parse one ``rank-NNNNN.pmpi`` file; :class:`DdltraceError` names the file and what is wrong."""
    path = Path(path)
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise DdltraceError(f"{path}: cannot read PMPI record file ({exc.strerror})") from exc
    if len(data) < _HEADER.size or bytes(data[:8]) != b"DDLTPMPI":
        raise DdltraceError(f"{path}: not a ddltrace PMPI record file (bad magic or too short)")
    (_, version, header_size, record_size, rank, world, pid, n_slots, state, thash, main_tid, n_sync,
     *rest) = _HEADER.unpack_from(data.tobytes()[:_HEADER.size])
    sync_values, test_offset, host, library = rest[:8], rest[8], rest[9], rest[10]
    clock_kind, n_cal, cal_latest = rest[11], rest[12], rest[13]
    cal = np.array(rest[15:], dtype=np.int64).reshape(64, 2)
    if version != 1 or header_size != HEADER_SIZE or record_size != RECORD_DTYPE.itemsize:
        raise DdltraceError(f"{path}: unsupported record file version {version} (record size {record_size})")
    features, makers = _FEATURES.unpack_from(data.tobytes()[_FEATURES_AT:_FEATURES_AT + _FEATURES.size]) \
        if len(data) >= _FEATURES_AT + _FEATURES.size else (0, 0)
    if thash not in table_hashes():
        raise DdltraceError(f"{path}: written by a wrapper built from another call table (hash {thash:#x}); "
                            "read it with the ddltrace version that recorded it")
    available = (len(data) - HEADER_SIZE) // RECORD_DTYPE.itemsize
    count = min(int(n_slots), available)
    records = data[HEADER_SIZE:HEADER_SIZE + count * RECORD_DTYPE.itemsize].view(RECORD_DTYPE).copy()
    records = records[records["fn"] > 0]
    if clock_kind == 1:
        pairs = cal[:min(n_cal, 62)]
        if n_cal > 62 and cal_latest in (62, 63):
            pairs = np.vstack([pairs, cal[cal_latest]])
        if len(pairs) < 2:
            raise DdltraceError(f"{path}: fewer than 2 clock calibration pairs; times cannot be converted")
        for column in ("t0", "t1"):
            ticks = records[column]
            records[column] = np.where(ticks == 0, 0, ticks_to_ns(ticks, pairs))
    elif clock_kind != 0:
        raise DdltraceError(f"{path}: unknown clock kind {clock_kind}")
    top = int(records["fn"].max()) if len(records) else 0
    if top > len(record_names()):
        raise DdltraceError(f"{path}: record with unknown function id {top}")
    if top > len(names()) and makers != makers_hash():
        raise DdltraceError(f"{path}: written by a wrapper built from another list of communicator calls (hash "
                            f"{makers:#x}); read it with the ddltrace version that recorded it")
    syncs = [ClockSync(*sync_values[4 * i:4 * i + 4]) for i in range(min(max(n_sync, 0), 2))]
    done = records["fn"] == _ID[REQUEST_DONE]
    halves = records["fn"] == _ID[SENDRECV_RECEIVED]
    return RankRecords(path=path, rank=rank, world_size=world, pid=pid, state=state, main_tid=main_tid,
                       host=host.split(b"\0")[0].decode(errors="replace"),
                       library=library.split(b"\0")[0].decode(errors="replace"),
                       test_offset_ns=test_offset, syncs=syncs, records=records[~done & ~halves],
                       lost=max(int(n_slots) - available, 0), completions=records[done], received=records[halves],
                       sendrecv_split=thash in table_hashes(SENDRECV_RECEIVED),
                       comm_ids=bool(features & FEATURE_COMM_IDS), world_peers=bool(features & FEATURE_WORLD_PEERS))


def ticks_to_ns(ticks: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """TSC ticks to ns: piecewise linear between the (tick, ns) calibration pairs, and beyond them the
    rate of the widest span (first to last pair)."""
    pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]
    tick0, ns0 = int(pairs[0, 0]), int(pairs[0, 1])
    x = (pairs[:, 0] - tick0).astype(np.float64)
    y = (pairs[:, 1] - ns0).astype(np.float64)
    rate = y[-1] / x[-1] if x[-1] > 0 else 1.0
    t = (np.asarray(ticks, dtype=np.int64) - tick0).astype(np.float64)
    out = np.interp(t, x, y)
    out = np.where(t < 0, t * rate, out)
    out = np.where(t > x[-1], y[-1] + (t - x[-1]) * rate, out)
    return ns0 + np.round(out).astype(np.int64)


def to_timeline(rr: RankRecords, *, end_ns: int | None = None, align: bool = True) -> pd.DataFrame:
    """The rank's timeline: one row per MPI call (source "pmpi"), a row of no duration at the exit of each
    MPI_Sendrecv (and _replace) for its receive half (:data:`~ddltrace.collectors.pmpi.table.SENDRECV_RECEIVED`, see
    the module's docstring), plus the gaps between calls on the thread that initialised MPI, as category "compute"
    named "outside MPI" (IPM's view: wall time minus MPI time).

    A call still open when the rank died lasts until ``end_ns`` (local ns; default: its own start).
    ``align`` puts times on rank 0's clock.
    """
    rec = _completed(_imrecv_envelopes(rr.records), rr.completions)
    t0 = rec["t0"].astype(np.int64)
    t1 = rec["t1"].astype(np.int64)
    open_ = t1 == 0
    t1 = np.where(open_, np.maximum(t0, end_ns if end_ns is not None else t0), t1)
    t1 = np.maximum(t1, t0)
    fn = rec["fn"].astype(np.int64) - 1
    fn_names = np.array(record_names(), dtype=object)
    fn_cats = np.array(record_categories(), dtype=object)
    main = rec["tid"] == rr.main_tid
    lanes = np.where(main, "main", np.char.add("thread:", rec["tid"].astype(str)).astype(object))

    category = fn_cats[fn]
    sync = np.flatnonzero(fn == _ID["ddltrace_clock_sync"] - 1)
    if len(sync) > 1:  # the closing synchronisation, in MPI_Finalize: every rank waits there for the last to come
        category = category.copy()
        category[sync[np.argsort(t0[sync])[1:]]] = "barrier"
    frame = pd.DataFrame({
        "rank": np.full(len(rec), rr.rank, dtype=np.int32),
        "lane": lanes,
        "name": fn_names[fn],
        "category": category,
        "start_ns": t0,
        "dur_ns": t1 - t0,
        "bytes": _nullable(rec["bytes"], rec["bytes"] < 0, "Int64"),
        "peer": _nullable(rec["peer"], (rec["peer"] == NA32) | (rec["peer"] < 0), "Int32"),
        "tag": _nullable(rec["tag"], (rec["tag"] == NA32) | (rec["tag"] < 0), "Int32"),
        "comm": _nullable(rec["comm"], rec["comm"] == NA64, "Int64"),
        "request": _nullable(rec["request"], rec["request"] == NA64, "Int64"),
        "source": "pmpi",
    })
    is_poll = np.isin(fn, _POLL_IDS)
    missed = is_poll & ((rec["flags"] & COMPLETED) == 0)
    gaps = _outside_mpi(t0[main], t1[main], rr.rank, missed[main], is_poll[main])
    halves = _receive_halves(rr)
    frame = pd.concat([frame, *(part for part in (halves, gaps) if len(part))], ignore_index=True)
    if align and len(frame):  # both ends, so that rows that touch still touch after a drift correction
        start = frame["start_ns"].to_numpy()
        end = start + frame["dur_ns"].to_numpy()
        start = start + rr.offset_at(start)
        frame["start_ns"] = start
        frame["dur_ns"] = np.maximum(end + rr.offset_at(end) - start, 0)
    frame = frame.sort_values("start_ns", kind="stable").reset_index(drop=True)
    return make_timeline(frame)


def _receive_halves(rr: RankRecords) -> pd.DataFrame:
    """The rows of the receive halves of the rank's Sendrecv calls (:attr:`RankRecords.received`): no duration, at
    the call's exit, on its thread's lane; ``peer`` the source (none for MPI_PROC_NULL), ``bytes`` received."""
    rec = rr.received
    if not len(rec):
        return pd.DataFrame()
    fn = _ID[SENDRECV_RECEIVED] - 1
    return pd.DataFrame({
        "rank": np.full(len(rec), rr.rank, dtype=np.int32),
        "lane": np.where(rec["tid"] == rr.main_tid, "main",
                         np.char.add("thread:", rec["tid"].astype(str)).astype(object)).astype(object),
        "name": SENDRECV_RECEIVED, "category": record_categories()[fn],
        "start_ns": rec["t0"].astype(np.int64), "dur_ns": np.zeros(len(rec), dtype=np.int64),
        "bytes": _nullable(rec["bytes"], rec["bytes"] < 0, "Int64"),
        "peer": _nullable(rec["peer"], (rec["peer"] == NA32) | (rec["peer"] < 0), "Int32"),
        "tag": _nullable(rec["tag"], (rec["tag"] == NA32) | (rec["tag"] < 0), "Int32"),
        "comm": _nullable(rec["comm"], rec["comm"] == NA64, "Int64"),
        "source": "pmpi",
    })


def _imrecv_envelopes(rec: np.ndarray) -> np.ndarray:
    """``rec`` with each MPI_Imrecv given the source (``peer``), ``tag`` and ``comm`` of the matched probe (MPI_Mprobe,
    or an MPI_Improbe that found a message) whose message it receives: the latest one entered before it on the rank
    with its message handle (MPICH reuses handles). The wrapper records that handle in ``aux``, read before the call
    sets it to MPI_MESSAGE_NULL (files written before it did have none there: their Imrecv rows keep no source); its
    ``request`` is the one its MPI_Wait*/Test* completes, so the row reads as an MPI_Irecv of the probed envelope.
    Its ``bytes`` are the probe's, the message's size from the probe's status (the wrapper's own figure for the
    Imrecv is its buffer's size, count x the datatype's, which may be larger than the message)."""
    posts = np.flatnonzero(np.isin(rec["fn"], [_ID[n] for n in ("MPI_Imrecv", "MPI_Imrecv_c")])
                           & (rec["aux"] != NA64))
    probes = np.flatnonzero(np.isin(rec["fn"], [_ID[n] for n in ("MPI_Mprobe", "MPI_Improbe")])
                            & (rec["request"] != NA64))
    if not len(posts) or not len(probes):
        return rec
    left = pd.DataFrame({"handle": rec["aux"][posts], "t0": rec["t0"][posts], "row": posts}).sort_values("t0")
    right = pd.DataFrame({"handle": rec["request"][probes], "t0": rec["t0"][probes],
                          "probe": probes}).sort_values("t0")
    found = pd.merge_asof(left, right, on="t0", by="handle", direction="backward").dropna(subset=["probe"])
    rows, probe = found["row"].to_numpy(np.int64), found["probe"].to_numpy(np.int64)
    rec = rec.copy()
    for column in ("peer", "tag", "comm"):
        rec[column][rows] = rec[column][probe]
    sized = rec["bytes"][probe] >= 0  # the probe's status: the message's own size (the Imrecv's count is its buffer's)
    rec["bytes"][rows[sized]] = rec["bytes"][probe[sized]]
    return rec


#: The calls that complete several requests, each writing a completion record per request (table.REQUEST_DONE).
_MULTI = ("MPI_Waitall", "MPI_Waitany", "MPI_Waitsome", "MPI_Testall", "MPI_Testany", "MPI_Testsome")
#: Calls whose ``request`` is a message handle (matched probes and receives), not a request.
_MESSAGE_HANDLES = ("MPI_Mprobe", "MPI_Improbe", "MPI_Mrecv", "MPI_Mrecv_c")
#: The ``request`` a call completing several requests and the posts it completed share in the timeline: this less the
#: call's row (below every handle a library gives: MPICH's are 32-bit ints, Open MPI's addresses).
SHARED_REQUEST_BASE = -(2**62)


def _completed(rec: np.ndarray, completions: np.ndarray) -> np.ndarray:
    """``rec`` with what the completion of each request says: an MPI_Irecv's ``bytes`` become the size of the message
    it received, and the posts completed by a call completing several (MPI_Waitall and its kin) share that call's
    ``request``.

    A post (a call that makes a request) is completed by the first of these after it with its request handle, before
    the handle's next post (MPICH reuses handles once a request is freed): an MPI_Wait, an MPI_Test that found it done
    (the record's ``aux``: its status's bytes), or a completion record (``completions``,
    :attr:`RankRecords.completions`: its ``aux``, and the call it follows: the call of :data:`_MULTI` on its thread that
    ended when it was written). The wrapper's own figure for an Irecv is its buffer's, count x the datatype's: mpi4py's
    ``irecv()`` posts 32 KiB for any message. An Irecv whose completion recorded no status keeps it: in files written
    before the wrapper recorded them, and where the wrapper could not lend a call given MPI_STATUSES_IGNORE an array
    of its own (malloc failed). The call completing several records only its first request; the requests it
    completed are given its ``request``, :data:`SHARED_REQUEST_BASE` less its row, on its row and theirs, so that
    wait-state analysis finds each post's completion (its own ``request`` column is a handle to match, nothing
    more)."""
    handled = rec["request"] != NA64
    completing = [i for name, i in _ID.items() if name.startswith(("MPI_Wait", "MPI_Test"))]
    posted = handled & ~np.isin(rec["fn"], completing + [_ID[n] for n in _MESSAGE_HANDLES])
    single = handled & ((rec["fn"] == _ID["MPI_Wait"])
                        | ((rec["fn"] == _ID["MPI_Test"]) & ((rec["flags"] & COMPLETED) != 0)))
    multi = np.flatnonzero(np.isin(rec["fn"], [_ID[n] for n in _MULTI]))
    # the call each completion record follows: the call of its thread that ended at its time
    calls = pd.DataFrame({"tid": rec["tid"][multi], "t": rec["t1"][multi], "call": multi})
    calls = calls.drop_duplicates(["tid", "t"], keep="last")  # (two calls of a thread ending at one tick: damage)
    done = pd.DataFrame({"tid": completions["tid"], "t": completions["t0"]}).merge(calls, how="left", on=["tid", "t"])
    by = done["call"].to_numpy(np.float64)  # (row numbers: exact in a float)
    known = (completions["request"] != NA64) & ~np.isnan(by)
    if not posted.any() or not (single.any() or known.any()):
        return rec
    left = pd.DataFrame({"handle": rec["request"][posted], "t0": rec["t0"][posted],
                         "row": np.flatnonzero(posted)}).sort_values("t0")
    ends = pd.DataFrame({"handle": np.concatenate([rec["request"][single], completions["request"][known]]),
                         "t0": np.concatenate([rec["t0"][single], completions["t0"][known]]),
                         "size": np.concatenate([rec["aux"][single], completions["aux"][known]]),
                         "call": np.concatenate([np.full(int(single.sum()), -1), by[known].astype(np.int64)])})
    ends = ends.sort_values("t0", kind="stable")
    again = left[["handle", "t0"]].copy()
    # nullable integers: a post with no completion leaves them missing, and a float would round the clock's ticks
    again["next_post"] = again["t0"].astype("Int64")
    ends["done"] = ends["t0"].astype("Int64")
    found = pd.merge_asof(left, ends, on="t0", by="handle", direction="forward")
    found = pd.merge_asof(found, again, on="t0", by="handle", direction="forward", allow_exact_matches=False)
    found = found[found["done"].notna() & (found["done"] < found["next_post"]).fillna(True).astype(bool)]
    rows, size = found["row"].to_numpy(np.int64), found["size"].to_numpy(np.int64)
    call = found["call"].to_numpy(np.int64)
    rec = rec.copy()
    irecv = np.isin(rec["fn"][rows], [_ID["MPI_Irecv"], _ID["MPI_Irecv_c"]]) & (size >= 0)
    rec["bytes"][rows[irecv]] = size[irecv]
    shared = call >= 0
    rec["request"][rows[shared]] = SHARED_REQUEST_BASE - call[shared]
    calls_done = np.unique(call[shared])  # (the calls' own rows take the same)
    rec["request"][calls_done] = SHARED_REQUEST_BASE - calls_done
    return rec


def _nullable(values: np.ndarray, missing: np.ndarray, dtype: str) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.where(missing, 0, values).astype(dtype.lower()), np.asarray(missing, bool))


def _outside_mpi(t0: np.ndarray, t1: np.ndarray, rank: int, missed: np.ndarray, is_poll: np.ndarray) -> pd.DataFrame:
    """Intervals between consecutive calls (ns), from the end of MPI_Init to the start of the last call: the rank's
    own work (:data:`OUTSIDE_MPI`, compute), or its polling (:data:`POLLING`, wait): the gaps of a loop of polls
    (each after a poll that found nothing, ``missed``, and before a poll, ``is_poll``) whose median gap is at most
    :data:`POLL_GAP_NS` (a gap of such a loop in which the rank lost its core is the loop's too)."""
    if len(t0) < 2:
        return pd.DataFrame()
    order = np.argsort(t0, kind="stable")
    t0, t1, missed, is_poll = t0[order], t1[order], missed[order], is_poll[order]
    busy_until = np.maximum.accumulate(t1)[:-1]
    start, stop = busy_until, t0[1:]
    keep = stop > start
    between = missed[:-1] & is_poll[1:]  # gaps of a loop of polls, numbered by loop: its median gap says what it is
    loop = np.cumsum(~between)[between]
    typical = pd.Series(np.maximum(stop - start, 0)[between]).groupby(loop).transform("median").to_numpy()
    polling = np.zeros(len(start), dtype=bool)
    polling[between] = typical <= POLL_GAP_NS
    polling = polling[keep]
    n = int(keep.sum())
    return pd.DataFrame({
        "rank": np.full(n, rank, dtype=np.int32), "lane": "main",
        "name": np.where(polling, POLLING, OUTSIDE_MPI).astype(object),
        "category": np.where(polling, "wait", "compute").astype(object),
        "start_ns": start[keep], "dur_ns": (stop - start)[keep], "source": "pmpi",
    })
