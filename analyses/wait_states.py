"""Wait states in MPI traces, as Scalasca defines them.

Each pattern is time a rank spends blocked inside an MPI call because another rank is late. ``enter`` and
``leave`` are a call's start and end on the common clock (ns); a pattern's time is only counted when > 0.

================== =========================================================================================
pattern            time (charged to the waiting rank)
================== =========================================================================================
late_sender        blocking receive (MPI_Recv/Mrecv, the MPI_Wait* completing an Irecv/Imrecv, or the receive half of an
                   MPI_Sendrecv) entered before the matching send: ``min(enter(send), leave(recv)) - enter(recv)``;
                   for a Wait* completing several receives only the latest sender counts. A blocking MPI_Probe or
                   MPI_Mprobe that returned a message waits for that message's send the same way:
                   ``min(enter(send), leave(probe)) - enter(probe)`` (the instance is named after the probe);
                   MPI_Iprobe / MPI_Improbe polling is not counted (see docs/ANALYSES.md)
late_receiver      blocking send (MPI_Send/Ssend/Bsend/Rsend, or the Wait* completing an Isend) entered before the
                   matching receive was posted: ``min(enter(recv), leave(send)) - enter(send)``
wait_at_barrier    MPI_Barrier: ``min(max over ranks of enter, leave) - enter`` (waiting for the last rank)
barrier_completion MPI_Barrier: ``leave - min over ranks of leave`` (time after the first rank has left)
wait_at_nxn        all-to-all collectives (Allreduce, Allgather(v), Alltoall(v/w), Reduce_scatter(_block)):
                   ``min(max over ranks of enter, leave) - enter``
early_reduce       N-to-1 (Reduce, Gather(v)), on the root: ``min(min over others of enter, leave) - enter``
late_broadcast     1-to-N (Bcast, Scatter(v)), on each non-root: ``min(enter(root), leave) - enter``
================== =========================================================================================

Matching. A send is matched to a receive by (communicator, source, destination, tag) in FIFO order of posting
(MPI's non-overtaking rule); ``peer`` must be the partner's rank as the collector recorded it (world ranks) and a
wildcard receive (peer < 0) is left unmatched. A non-blocking call is matched to the first MPI_Wait* / Test-free
completion on its rank, after it, that carries its ``request`` handle (a Waitall recorded as several rows with the
same enter and leave, one per request, is one call). A probe is matched to the message that the first
receive on its rank after it with the same communicator, source and tag takes (MPI's rule: a probe returns the
message such a receive would take); an MPI_Mrecv, which records no communicator, takes that of the latest
MPI_Mprobe / MPI_Improbe before it on its rank with its message handle (an MPI_Imrecv's row already carries that
probe's communicator, source and tag: the PMPI reader gives them). Collectives are matched by their order on
each communicator: the k-th collective call of every rank on communicator c is one instance; ``peer`` is the root of
rooted ones.
Names ending in ``_c`` (MPI-4 large count) count as their base name.

MPI_Sendrecv (and _replace) is a send and a receive in one call. Its row is its send half, ``peer`` the destination
and ``tag`` the send tag (as the PMPI collector and IPM record it): matched as a send entered at the call's entry, so
a receive that waits for it counts Late Sender. Not Late Receiver: the call's time also holds its own receive's wait,
so its send half is not taken as a blocking send. Its receive half is matched where the store holds it: the row of no
duration the PMPI collector writes at the call's exit (:data:`SENDRECV_RECEIVED`: ``peer`` the message's source,
``tag`` its tag), which :func:`mpi_calls` gives as a blocking receive over the call's time (:data:`RECEIVE_HALF`):
``min(enter(send), leave(Sendrecv)) - enter(Sendrecv)`` is its Late Sender, and a blocking send to it that waits
for the call's entry counts Late Receiver. Without receive halves (IPM; PMPI records made before the collector wrote
them) a Sendrecv's receive is not matched: a ring of Sendrecvs alone then shows no wait state.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.collectors.pmpi.table import SENDRECV_RECEIVED

SEND_BLOCKING = frozenset({"MPI_Send", "MPI_Ssend", "MPI_Bsend", "MPI_Rsend"})
SEND_NONBLOCKING = frozenset({"MPI_Isend", "MPI_Issend", "MPI_Ibsend", "MPI_Irsend"})
RECV_BLOCKING = frozenset({"MPI_Recv", "MPI_Mrecv"})
RECV_NONBLOCKING = frozenset({"MPI_Irecv", "MPI_Imrecv"})
WAITS = frozenset({"MPI_Wait", "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome"})
#: Blocking probes: they wait for a message's send without receiving it (the receive after them takes it; after an
#: MPI_Mprobe, the MPI_Mrecv of its message handle: mpi4py's ``comm.recv()``).
PROBES = frozenset({"MPI_Probe", "MPI_Mprobe"})
#: Matched probes: they hand the message to an MPI_Mrecv by its handle (``request``), which records no communicator.
MATCHED_PROBES = frozenset({"MPI_Mprobe", "MPI_Improbe"})
BARRIER = frozenset({"MPI_Barrier"})
N_TO_N = frozenset({"MPI_Allreduce", "MPI_Allgather", "MPI_Allgatherv", "MPI_Alltoall", "MPI_Alltoallv",
                    "MPI_Alltoallw", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block"})
N_TO_1 = frozenset({"MPI_Reduce", "MPI_Gather", "MPI_Gatherv"})
ONE_TO_N = frozenset({"MPI_Bcast", "MPI_Scatter", "MPI_Scatterv"})
COLLECTIVES = BARRIER | N_TO_N | N_TO_1 | ONE_TO_N
#: Send and receive in one call (see the module's docstring): its row's ``peer`` is the destination, its ``bytes`` as
#: the collector counted them.
SENDRECV = frozenset({"MPI_Sendrecv", "MPI_Sendrecv_replace"})
#: Point-to-point calls, MPI_Sendrecv among them (before 2026-11-26 it was not: a store whose only calls with a
#: partner were Sendrecvs held no ``messages`` and its wait states were not made).
P2P = SEND_BLOCKING | SEND_NONBLOCKING | RECV_BLOCKING | RECV_NONBLOCKING | SENDRECV
#: That receive half among :func:`mpi_calls`' rows: a blocking receive from the call's entry to its exit.
RECEIVE_HALF = "MPI_Sendrecv receive half"
#: The calls matched as sends and as receives of one message (:func:`match_messages`), and the receives that block.
MESSAGE_SENDS = SEND_BLOCKING | SEND_NONBLOCKING | SENDRECV
MESSAGE_RECEIVES = RECV_BLOCKING | RECV_NONBLOCKING | {RECEIVE_HALF}
BLOCKING_RECEIVES = RECV_BLOCKING | {RECEIVE_HALF}
RELEVANT = P2P | {RECEIVE_HALF} | WAITS | PROBES | COLLECTIVES

PATTERNS: dict[str, str] = {
    "late_sender": "Late Sender",
    "late_receiver": "Late Receiver",
    "wait_at_barrier": "Wait at Barrier",
    "barrier_completion": "Barrier Completion",
    "wait_at_nxn": "Wait at N x N",
    "early_reduce": "Early Reduce",
    "late_broadcast": "Late Broadcast",
}
COLUMNS = ["pattern", "rank", "peer", "name", "enter_ns", "time_ns", "comm"]
#: A missing peer, tag, communicator, request or byte count in :func:`mpi_calls`. Handles may be negative: MPICH's
#: are C ints with the top bit set (a request 0xAC000000 is recorded as -1409286144), so a handle is present when it
#: is not this value, not when it is >= 0.
MISSING = -1


def base_name(name: str) -> str:
    """'MPI_Send_c' -> 'MPI_Send' (MPI-4 large-count twins count as their base call)."""
    return name[:-2] if name.endswith("_c") else name


def mpi_calls(timeline: pd.DataFrame) -> pd.DataFrame:
    """The rows wait-state analysis needs (point-to-point, waits, blocking probes, collectives), in compact form.

    Columns rank, name (base name), start_ns, end_ns, peer, tag, comm, request, bytes (int64; :data:`MISSING`
    where missing). The receive half of a Sendrecv (:data:`SENDRECV_RECEIVED`) comes after the calls, named
    :data:`RECEIVE_HALF`, over its call's time (:func:`receive_halves`).
    Call it rank by rank while streaming a store and concatenate: memory stays at the MPI calls.
    """
    codes, uniques = pd.factorize(timeline["name"], use_na_sentinel=False)
    base = np.array([base_name(n) if isinstance(n, str) else n for n in uniques], dtype=object)  # once per name
    keep = np.isin(base, list(RELEVANT))[codes] if len(codes) else np.zeros(0, dtype=bool)
    out = _call_rows(timeline[keep], base[codes[keep]])
    if (out["name"] == "MPI_Mrecv").any():
        _mrecv_communicators(out, timeline[np.isin(base, list(MATCHED_PROBES))[codes]])
    if SENDRECV_RECEIVED in set(base) and out["name"].isin(SENDRECV).any():
        out = pd.concat([out, receive_halves(timeline, codes, base)], ignore_index=True)
    return out


def _call_rows(part: pd.DataFrame, names: np.ndarray, start=None, end=None) -> pd.DataFrame:
    """The columns of :func:`mpi_calls` of the timeline rows ``part`` named ``names``; ``start`` and ``end`` (ns):
    their times where not the rows' own."""
    out = pd.DataFrame({
        "rank": part["rank"].to_numpy(np.int64),
        "name": names,
        "start_ns": part["start_ns"].to_numpy(np.int64) if start is None else start,
        "end_ns": (part["start_ns"] + part["dur_ns"]).to_numpy(np.int64) if end is None else end,
    })
    for column in ("peer", "tag", "comm", "request", "bytes"):
        out[column] = part[column].astype("Int64").fillna(MISSING).to_numpy(np.int64)
    return out


def receive_halves(timeline: pd.DataFrame, codes: np.ndarray, base: np.ndarray) -> pd.DataFrame:
    """The receive halves (:data:`SENDRECV_RECEIVED` rows) of ``timeline`` as calls named :data:`RECEIVE_HALF`
    from their Sendrecv's entry to its exit (ns): each half's call is the Sendrecv or _replace on its rank and lane
    that ended where the half is (the collector writes it at the call's exit); a half whose call is not
    in the timeline is left out. ``codes`` and ``base``: the rows' names as :func:`mpi_calls` factorised them."""
    halves = timeline[(base == SENDRECV_RECEIVED)[codes]]
    calls = timeline[np.isin(base, list(SENDRECV))[codes]]
    lane = pd.concat([halves["lane"], calls["lane"]]).astype("string").fillna("")
    ends = pd.DataFrame({"rank": calls["rank"].to_numpy(np.int64), "lane": lane.iloc[len(halves):].to_numpy(object),
                         "at": (calls["start_ns"] + calls["dur_ns"]).to_numpy(np.int64),
                         "enter": calls["start_ns"].to_numpy(np.int64)})
    # keyed by rank too: ranks' lanes share names ("main"), and two ranks' calls may end in the same ns
    key = ["rank", "lane", "at"]
    found = pd.DataFrame({"rank": halves["rank"].to_numpy(np.int64), "lane": lane.iloc[:len(halves)].to_numpy(object),
                          "at": halves["start_ns"].to_numpy(np.int64), "row": np.arange(len(halves))}
                         ).merge(ends.drop_duplicates(key, keep=False), on=key)
    return _call_rows(halves.iloc[found["row"].to_numpy()], RECEIVE_HALF, found["enter"].to_numpy(np.int64),
                      found["at"].to_numpy(np.int64))


def _mrecv_communicators(calls: pd.DataFrame, probes: pd.DataFrame) -> None:
    """Give each MPI_Mrecv of ``calls`` (in place) the communicator of the matched probe (MPI_Mprobe, or MPI_Improbe
    that found one: ``probes``, timeline rows) whose message it receives: the latest one before it on its rank
    with its message handle (``request``; MPICH reuses handles). The PMPI collector records none for MPI_Mrecv,
    whose message alone names it, and without one it matched no send."""
    mrecv = np.flatnonzero((calls["name"] == "MPI_Mrecv").to_numpy() & (calls["comm"] == MISSING).to_numpy()
                           & (calls["request"] != MISSING).to_numpy())
    probes = probes[probes["request"].notna() & probes["comm"].notna()]
    if not len(mrecv) or not len(probes):
        return
    left = pd.DataFrame({"rank": calls["rank"].to_numpy()[mrecv], "request": calls["request"].to_numpy()[mrecv],
                         "start_ns": calls["start_ns"].to_numpy()[mrecv], "row": mrecv}).sort_values("start_ns")
    right = pd.DataFrame({"rank": probes["rank"].to_numpy(np.int64), "request": probes["request"].to_numpy(np.int64),
                          "start_ns": probes["start_ns"].to_numpy(np.int64),
                          "probe_comm": probes["comm"].to_numpy(np.int64)}).sort_values("start_ns")
    found = pd.merge_asof(left, right, on="start_ns", by=["rank", "request"], direction="backward").dropna()
    calls.loc[found["row"].to_numpy(), "comm"] = found["probe_comm"].to_numpy(np.int64)


def wait_states(calls: pd.DataFrame) -> pd.DataFrame:
    """Every wait-state instance in ``calls`` (from :func:`mpi_calls`): columns pattern, rank, peer, name,
    enter_ns, time_ns, comm. Only instances with time > 0 are listed."""
    if not len(calls):
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("pattern", "name") else "int64") for c in COLUMNS})
    calls = calls.reset_index(drop=True)
    parts = [point_to_point(calls), _collectives(calls)]
    out = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else None
    if out is None:
        return wait_states(calls.iloc[0:0])
    out = out[out["time_ns"] > 0]
    return out[COLUMNS].sort_values(["enter_ns", "rank"], kind="stable").reset_index(drop=True)


def summarize(states: pd.DataFrame, ranks=None) -> pd.DataFrame:
    """Time per rank and pattern (ns): one row per rank, one column per pattern."""
    table = states.pivot_table(index="rank", columns="pattern", values="time_ns", aggfunc="sum", fill_value=0)
    table = table.reindex(columns=list(PATTERNS), fill_value=0)
    if ranks is not None:
        table = table.reindex(sorted(ranks), fill_value=0)
    table.columns.name = None
    return table.astype("int64")


def _completions(calls: pd.DataFrame) -> pd.DataFrame:
    """For each non-blocking post (index into calls): the enter, leave and id of the Wait* that completed it."""
    posts = calls[calls["name"].isin(SEND_NONBLOCKING | RECV_NONBLOCKING) & (calls["request"] != MISSING)]
    waits = calls[calls["name"].isin(WAITS) & (calls["request"] != MISSING)]
    if not len(posts) or not len(waits):
        return pd.DataFrame(columns=["post", "w_enter", "w_leave", "w_call", "w_name"])
    call_id = waits.groupby(["rank", "name", "start_ns", "end_ns"], sort=False).ngroup()
    # the times as nullable integers: a post no Wait* completed leaves them missing, and a float would move a time
    # since the epoch (1.8e18 ns) by up to 256 ns
    waits = pd.DataFrame({"rank": waits["rank"], "request": waits["request"], "w_at": waits["start_ns"],
                          "w_enter": waits["start_ns"].astype("Int64"), "w_leave": waits["end_ns"].astype("Int64"),
                          "w_call": call_id.to_numpy(), "w_name": waits["name"]})
    left = pd.DataFrame({"rank": posts["rank"], "request": posts["request"], "post_ns": posts["start_ns"],
                         "post": posts.index})
    merged = pd.merge_asof(left.sort_values("post_ns"), waits.sort_values("w_at"), left_on="post_ns",
                           right_on="w_at", by=["rank", "request"], direction="forward")
    merged = merged.dropna(subset=["w_call"]).drop(columns="w_at")
    return merged.astype({"w_enter": "int64", "w_leave": "int64"})


def _fifo(frame: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    frame = frame.sort_values("start_ns", kind="stable")
    return frame.assign(seq=frame.groupby(key, sort=False).cumcount())


def match_messages(calls: pd.DataFrame) -> pd.DataFrame | None:
    """Each send matched to its receive (see Matching above): one row per message, the columns of
    :func:`mpi_calls` suffixed ``_s`` (the send) and ``_r`` (the receive), ``src``, ``dst``, ``seq`` and ``idx_s``,
    ``idx_r`` (the calls' index in ``calls``); None when ``calls`` holds no sends or no receives with a partner.
    A Sendrecv's row is a send, its receive half (:data:`RECEIVE_HALF`) a receive."""
    sends = calls[calls["name"].isin(MESSAGE_SENDS) & (calls["peer"] >= 0)]
    recvs = calls[calls["name"].isin(MESSAGE_RECEIVES) & (calls["peer"] >= 0)]
    if not len(sends) or not len(recvs):
        return None
    sends = _fifo(sends.assign(src=sends["rank"], dst=sends["peer"], idx=sends.index), ["comm", "src", "dst", "tag"])
    recvs = _fifo(recvs.assign(src=recvs["peer"], dst=recvs["rank"], idx=recvs.index), ["comm", "src", "dst", "tag"])
    return sends.merge(recvs, on=["comm", "src", "dst", "tag", "seq"], suffixes=("_s", "_r"))


def completions(calls: pd.DataFrame) -> pd.DataFrame:
    """For each non-blocking post (index into ``calls``, the index of the result): ``w_enter``, ``w_leave``,
    ``w_call``, ``w_name`` of the Wait* that completed it (posts never completed are left out)."""
    return _completions(calls).set_index("post")


def following(channel: np.ndarray, start: np.ndarray, channel_next: np.ndarray, start_next: np.ndarray) -> np.ndarray:
    """For each call (``channel`` ids, entries ``start`` in ns): the index into the ``*_next`` calls of the first one
    of the same channel entered at or after it, -1 where none. Used to give each probe the receive after it."""
    n = len(channel)
    if not n:
        return np.zeros(0, dtype=np.int64)
    both_channel = np.concatenate([channel, channel_next])
    is_next = np.r_[np.zeros(n, dtype=bool), np.ones(len(channel_next), dtype=bool)]
    order = np.lexsort((is_next, np.concatenate([start, start_next]), both_channel))  # at equal entry: probe first
    at = np.where(is_next[order], np.arange(len(order)), len(order))
    nearest = np.minimum.accumulate(at[::-1])[::-1]  # per sorted position: the first "next" call at or after it
    mine = np.flatnonzero(~is_next[order])
    hit = nearest[mine]
    valid = hit < len(order)
    valid[valid] = both_channel[order[hit[valid]]] == both_channel[order[mine[valid]]]
    out = np.full(n, -1, dtype=np.int64)
    out[order[mine[valid]]] = order[hit[valid]] - n
    return out


def probe_receives(calls: pd.DataFrame) -> pd.DataFrame:
    """Each blocking probe of ``calls`` that returned a message (``peer`` >= 0) with the receive that takes it (see
    Matching above): columns ``probe`` and ``recv``, indices into ``calls``; probes with no receive after them on
    their channel are left out."""
    probes = calls[calls["name"].isin(PROBES) & (calls["peer"] >= 0)]
    recvs = calls[calls["name"].isin(MESSAGE_RECEIVES) & (calls["peer"] >= 0)]
    if not len(probes) or not len(recvs):
        return pd.DataFrame({"probe": np.zeros(0, np.int64), "recv": np.zeros(0, np.int64)})
    key = ["rank", "comm", "peer", "tag"]
    channel = pd.concat([probes[key], recvs[key]]).groupby(key, sort=False).ngroup().to_numpy()
    nxt = following(channel[:len(probes)], probes["start_ns"].to_numpy(), channel[len(probes):],
                    recvs["start_ns"].to_numpy())
    found = nxt >= 0
    return pd.DataFrame({"probe": probes.index.to_numpy()[found], "recv": recvs.index.to_numpy()[nxt[found]]})


def point_to_point(calls: pd.DataFrame) -> pd.DataFrame:
    pairs = match_messages(calls)
    if pairs is None:
        return pd.DataFrame(columns=COLUMNS)
    done = completions(calls)
    out = [_probe_late_senders(calls, pairs)]
    # the call that blocks each side: itself if blocking, else the Wait* that completed it; a Sendrecv's send half
    # blocks as neither (its call's time holds its receive's wait: see the module's docstring)
    for side, other, pattern in (("r", "s", "late_sender"), ("s", "r", "late_receiver")):
        mine = pairs if side == "r" else pairs[~pairs["name_s"].isin(SENDRECV)]
        blocking = mine[f"name_{side}"].isin(BLOCKING_RECEIVES | SEND_BLOCKING).to_numpy()
        frame = pd.DataFrame({
            "rank": mine[f"rank_{side}"].to_numpy(), "peer": mine[f"rank_{other}"].to_numpy(),
            "comm": mine["comm"].to_numpy(), "other_enter": mine[f"start_ns_{other}"].to_numpy(),
            "name": mine[f"name_{side}"].to_numpy(dtype=object),
            "enter": mine[f"start_ns_{side}"].to_numpy(), "leave": mine[f"end_ns_{side}"].to_numpy(),
            "call": mine[f"idx_{side}"].to_numpy(),
        })
        nb = ~blocking
        if nb.any():
            posted = mine.loc[nb, f"idx_{side}"].to_numpy()
            known = np.isin(posted, done.index)
            rows = np.flatnonzero(nb)
            frame = frame.drop(index=rows[~known])
            hit = done.loc[posted[known]]
            frame.loc[rows[known], "enter"] = hit["w_enter"].to_numpy()
            frame.loc[rows[known], "leave"] = hit["w_leave"].to_numpy()
            frame.loc[rows[known], "name"] = hit["w_name"].to_numpy()
            frame.loc[rows[known], "call"] = -1 - hit["w_call"].to_numpy(np.int64)  # Wait* calls: negative ids
        if not len(frame):
            continue
        # a Wait* completing several operations: only the latest partner counts
        latest = frame.sort_values("other_enter", kind="stable").groupby(["rank", "call"], sort=False).tail(1)
        time = np.minimum(latest["other_enter"], latest["leave"]) - latest["enter"]
        out.append(pd.DataFrame({"pattern": pattern, "rank": latest["rank"], "peer": latest["peer"],
                                 "name": latest["name"], "enter_ns": latest["enter"], "time_ns": time,
                                 "comm": latest["comm"]}))
    out = [part for part in out if len(part)]
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=COLUMNS)


def _probe_late_senders(calls: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Late Sender of the blocking probes: ``min(enter(send), leave(probe)) - enter(probe)``, the send being that
    of the message the receive after the probe takes (:func:`probe_receives`; ``pairs`` of :func:`match_messages`)."""
    taken = probe_receives(calls)
    sent = pd.Series(pairs["start_ns_s"].to_numpy(), index=pairs["idx_r"].to_numpy())
    taken = taken[taken["recv"].isin(sent.index)]
    if not len(taken):
        return pd.DataFrame(columns=COLUMNS)
    probe = calls.loc[taken["probe"]]
    send_enter = sent.loc[taken["recv"]].to_numpy()
    return pd.DataFrame({"pattern": "late_sender", "rank": probe["rank"].to_numpy(), "peer": probe["peer"].to_numpy(),
                         "name": probe["name"].to_numpy(dtype=object), "enter_ns": probe["start_ns"].to_numpy(),
                         "time_ns": np.minimum(send_enter, probe["end_ns"].to_numpy()) - probe["start_ns"].to_numpy(),
                         "comm": probe["comm"].to_numpy()})


def collective_rows(calls: pd.DataFrame) -> pd.DataFrame:
    """The collective calls of ``calls`` with their ``instance``: the k-th collective call of a rank on a
    communicator is instance k of that communicator (computed within each rank: the ranks may come one by one)."""
    coll = calls[calls["name"].isin(COLLECTIVES)]
    coll = coll.sort_values("start_ns", kind="stable")
    return coll.assign(instance=coll.groupby(["comm", "rank"], sort=False).cumcount())


#: Per collective instance (communicator, k), over the ranks: how many took part, its name (or "mixed" when the
#: ranks disagree), the latest entry, the earliest leave, the root's entry and the earliest entry of the others
#: (rooted collectives; :data:`NONE_LATE` / :data:`NONE_EARLY` where none). Each is a sum, max or min over the
#: ranks: folded rank by rank (:class:`InstanceFold`), in int64 ns (exact on clocks since the epoch).
AGGREGATE_COLUMNS = ["n", "name", "max_enter", "min_leave", "root_enter", "others_enter"]
NONE_LATE, NONE_EARLY = np.iinfo(np.int64).min, np.iinfo(np.int64).max
COLLECTIVE_NAMES = sorted(COLLECTIVES)
_NO_NAME, _MIXED = -1, -2


class InstanceFold:
    """The :data:`AGGREGATE_COLUMNS` of the collective instances, folded one rank at a time (:meth:`add`): memory
    in proportion to a rank's collective calls, not the job's. A rank's k-th collective on a communicator is
    instance k, so folding a rank is one vectorised operation per communicator and figure."""

    def __init__(self):
        self.comms: dict[int, dict[str, np.ndarray]] = {}

    def add(self, coll: pd.DataFrame) -> None:
        """Fold the rows of :func:`collective_rows` of one rank."""
        if not len(coll):
            return
        code = {n: i for i, n in enumerate(COLLECTIVE_NAMES)}
        names = np.array([code[n] for n in pd.unique(coll["name"])], dtype=np.int16)
        name_codes = names[pd.factorize(coll["name"])[0]]
        comm, start = coll["comm"].to_numpy(np.int64), coll["start_ns"].to_numpy(np.int64)
        end, instance = coll["end_ns"].to_numpy(np.int64), coll["instance"].to_numpy(np.int64)
        rooted = coll["peer"].to_numpy() >= 0
        is_root = rooted & (coll["rank"].to_numpy() == coll["peer"].to_numpy())
        for c in np.unique(comm):
            rows = np.flatnonzero(comm == c)
            rows = rows[np.argsort(instance[rows], kind="stable")]  # instance k is the rank's k-th: 0, 1, ...
            self._fold(int(c), name_codes[rows], start[rows], end[rows], rooted[rows], is_root[rows])

    def add_rank(self, rank: int, names: np.ndarray, comm: np.ndarray, start: np.ndarray, end: np.ndarray,
                 peer: np.ndarray) -> None:
        """Fold the collective calls of one rank given as arrays (``names``: indices into
        :data:`COLLECTIVE_NAMES`; times in ns), in numpy: the same as :meth:`add` of their
        :func:`collective_rows`."""
        order = np.argsort(start, kind="stable")  # a rank's k-th collective on a communicator: instance k
        rooted = peer >= 0
        is_root = rooted & (peer == rank)
        for c in np.unique(comm):
            rows = order[comm[order] == c]
            self._fold(int(c), names[rows], start[rows], end[rows], rooted[rows], is_root[rows])

    def _fold(self, comm: int, mine: np.ndarray, start: np.ndarray, end: np.ndarray, rooted: np.ndarray,
              is_root: np.ndarray) -> None:
        """Fold one rank's instances 0, 1, ... of communicator ``comm`` (one row each, in order)."""
        m = len(mine)
        agg = self._grow(comm, m)
        agg["n"][:m] += 1
        unset = agg["name"][:m] == _NO_NAME
        agg["name"][:m] = np.where(unset, mine, np.where(agg["name"][:m] == mine, mine, _MIXED))
        np.maximum(agg["max_enter"][:m], start, out=agg["max_enter"][:m])
        np.minimum(agg["min_leave"][:m], end, out=agg["min_leave"][:m])
        np.maximum(agg["root_enter"][:m], np.where(is_root, start, NONE_LATE), out=agg["root_enter"][:m])
        np.minimum(agg["others_enter"][:m], np.where(rooted & ~is_root, start, NONE_EARLY),
                   out=agg["others_enter"][:m])

    def _grow(self, comm: int, m: int) -> dict[str, np.ndarray]:
        agg = self.comms.get(comm)
        have = 0 if agg is None else len(agg["n"])
        if have >= m:
            return agg
        blank = {"n": np.zeros(m - have, np.int64), "name": np.full(m - have, _NO_NAME, np.int16),
                 "max_enter": np.full(m - have, NONE_LATE), "min_leave": np.full(m - have, NONE_EARLY),
                 "root_enter": np.full(m - have, NONE_LATE), "others_enter": np.full(m - have, NONE_EARLY)}
        self.comms[comm] = blank if agg is None else {k: np.concatenate([agg[k], blank[k]]) for k in agg}
        return self.comms[comm]

    def frame(self) -> pd.DataFrame:
        """The figures, one row per instance, indexed by (comm, instance); name "mixed" where the ranks disagree."""
        parts = []
        labels = np.array([*COLLECTIVE_NAMES, "mixed"], dtype=object)  # index -2 is "mixed"
        for comm, agg in self.comms.items():
            part = pd.DataFrame({k: agg[k] for k in AGGREGATE_COLUMNS})
            part["name"] = labels[np.where(agg["name"] == _MIXED, len(labels) - 1, agg["name"])]
            part.index = pd.MultiIndex.from_arrays([np.full(len(part), comm), np.arange(len(part))],
                                                   names=["comm", "instance"])
            parts.append(part)
        if not parts:
            return pd.DataFrame(columns=AGGREGATE_COLUMNS, index=pd.MultiIndex.from_arrays(
                [[], []], names=["comm", "instance"]))
        return pd.concat(parts)


def collective_wait_states(coll: pd.DataFrame, aggregates: pd.DataFrame) -> pd.DataFrame:
    """The collective wait states of the rows ``coll`` (of :func:`collective_rows`; any subset of ranks) given the
    :func:`instance_aggregates` of all ranks: columns :data:`COLUMNS`, zero times included."""
    if not len(coll):
        return pd.DataFrame(columns=COLUMNS)
    agg = aggregates.reindex(pd.MultiIndex.from_arrays([coll["comm"], coll["instance"]]))
    agg.index = coll.index
    coll = coll.assign(n=agg["n"].to_numpy(), same=(agg["name"] != "mixed").to_numpy(),
                       max_enter=agg["max_enter"].to_numpy(), min_leave=agg["min_leave"].to_numpy(),
                       root_enter=agg["root_enter"].to_numpy(), others_enter=agg["others_enter"].to_numpy())
    coll = coll[(coll["n"] > 1) & coll["same"]]
    out = []

    def emit(pattern, rows, time, peer):
        out.append(pd.DataFrame({"pattern": pattern, "rank": rows["rank"], "peer": peer, "name": rows["name"],
                                 "enter_ns": rows["start_ns"], "time_ns": time, "comm": rows["comm"]}))

    barrier = coll[coll["name"].isin(BARRIER)]
    emit("wait_at_barrier", barrier,
         np.minimum(barrier["max_enter"], barrier["end_ns"]).astype("int64") - barrier["start_ns"], -1)
    emit("barrier_completion", barrier, barrier["end_ns"] - barrier["min_leave"].astype("int64"), -1)
    nxn = coll[coll["name"].isin(N_TO_N)]
    emit("wait_at_nxn", nxn, np.minimum(nxn["max_enter"], nxn["end_ns"]).astype("int64") - nxn["start_ns"], -1)

    rooted = coll[coll["name"].isin(N_TO_1 | ONE_TO_N) & (coll["peer"] >= 0)]
    if len(rooted):
        is_root = rooted["rank"] == rooted["peer"]
        reduce_root = rooted[is_root & rooted["name"].isin(N_TO_1)]
        others = reduce_root["others_enter"].astype("int64")
        emit("early_reduce", reduce_root, np.where(others == NONE_EARLY, 0, np.minimum(
            others, reduce_root["end_ns"]) - reduce_root["start_ns"]), -1)
        bcast = rooted[~is_root & rooted["name"].isin(ONE_TO_N)]
        root = bcast["root_enter"].astype("int64")
        emit("late_broadcast", bcast, np.where(root == NONE_LATE, 0, np.minimum(root, bcast["end_ns"])
                                               - bcast["start_ns"]), bcast["peer"])
    return pd.concat(out, ignore_index=True)


def _collectives(calls: pd.DataFrame) -> pd.DataFrame:
    coll = collective_rows(calls)
    if not len(coll):
        return pd.DataFrame(columns=COLUMNS)
    fold = InstanceFold()
    for _, part in coll.groupby("rank", sort=True):
        fold.add(part)
    return collective_wait_states(coll, fold.frame())
