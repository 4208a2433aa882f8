"""The table of intercepted MPI calls, from which the C wrappers are generated (as mpiP and IPM do).

Each :class:`Wrapper` gives a function's parameters (MPI-4 C binding), its timeline category, and C
expressions, evaluated after the call, for the record's columns. In ``params``:

- ``COUNT`` is ``int`` (``MPI_Count`` in the large-count ``_c`` twin),
- ``COUNTS`` an array of counts (``const int x[]`` / ``const MPI_Count x[]``),
- ``DISPLS`` an array of displacements (``const int x[]`` / ``const MPI_Aint x[]``),
- in expressions ``SUM(counts, type, comm)`` is the bytes of the summed counts, for either binding.

The record's function id is the 1-based position in :data:`WRAPPERS` followed by :data:`PSEUDO`, the
same for every MPI library, so a record file is read without the build that made it (see
:func:`table_hash`); the calls that make and free communicators (:data:`MAKERS`) take the ids after those
(:func:`record_names`), checked by a hash of their own (:func:`makers_hash`), so that the call table's hash is that
of the files written before they were recorded. Categories (see ``ddltrace.timeline.CATEGORIES``): ``barrier``
for MPI_Barrier and MPI_Ibarrier; ``wait`` for Wait*/Test*, blocking receives and probes (time blocked on a peer's
data); ``comm`` for calls that move payload (sends, matched receives, collectives); ``other`` for Init/Finalize. The
communicator calls' categories are in :class:`Maker`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Wrapper:
    """One intercepted MPI function.

    ``bytes``, ``peer``, ``tag``, ``comm``, ``request``, ``aux``: C expressions (after the call) for the record;
    ``comm`` names the communicator (the record holds its id, :data:`MAKERS`), ``peer`` a rank in it (the record
    holds its MPI_COMM_WORLD rank; in ``known`` write ``DDLT_PEER(rank)``);
    ``aux`` is the request count of Waitall/Testall/..., the message handle of MPI_Imrecv, the bytes of the status
    of an MPI_Wait (an MPI_Test that completed).
    ``done``: a C statement run after a successful call, after its record, that writes records of its own: a call
    that completes several requests (Waitall, Waitany, Waitsome and their Test twins) one :data:`REQUEST_DONE` record
    per request completed, with its status; MPI_Sendrecv and MPI_Sendrecv_replace one :data:`SENDRECV_RECEIVED`
    record, their receive half (their own record is their send half).
    ``pre``: C statements run before the call. ``known``: C statements run on the record ``r`` before the call,
    what the arguments already say (a blocking call's partner), so that a call still open when the rank stopped
    names it (a receive no rank sends to: :mod:`~ddltrace.analyses.detect_hang`); the expressions after the call
    overwrite it. ``status``: name of an ``MPI_Status *`` parameter to capture
    (a local status replaces MPI_STATUS_IGNORE so that source, tag and size are known). ``flag``: name of the
    ``int *`` set by Test*/Iprobe; a true flag marks the record completed. ``large``: has a ``_c`` twin.
    """

    name: str
    params: str
    category: str
    large: bool = False
    bytes: str | None = None
    peer: str | None = None
    tag: str | None = None
    comm: str | None = "comm"
    request: str | None = None
    aux: str | None = None
    done: str | None = None
    pre: str = ""
    known: str = ""
    post: str = ""  # after the call's records, on every path that ran ``pre``: free what it took
    status: str | None = None
    flag: str | None = None
    kind: str = field(default="plain")  # plain | init | finalize


#: A send to MPI_PROC_NULL moves nothing: its bytes are 0, whatever count it was given.
_TO_NULL = "dest == MPI_PROC_NULL"
_P2P_SEND = "const void *buf, COUNT count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm"
_P2P_ISEND = _P2P_SEND + ", MPI_Request *request"
_REQ_POST = "DDLT_H(*request)"
_COPY_REQS = ("MPI_Request ddlt_cp_local[DDLT_MAX_DONE]; int ddlt_n = {n} > 0 ? {n} : 0; "
              "MPI_Request *ddlt_cp = ddlt_room(ddlt_cp_local, ddlt_n, sizeof(MPI_Request)); if (!ddlt_cp) {{ "
              "ddlt_cp = ddlt_cp_local; ddlt_n = DDLT_MAX_DONE; }} "
              "for (int i = 0; i < ddlt_n; i++) ddlt_cp[i] = array_of_requests[i];")
#: Before a call that fills an array of statuses: an array of its own in place of MPI_STATUSES_IGNORE, so that the
#: sizes of the messages it completes are known.
_OWN_STATUSES = ("MPI_Status ddlt_sts_local[DDLT_MAX_DONE]; MPI_Status *ddlt_sts = ddlt_sts_local; "
                 "if (array_of_statuses == MPI_STATUSES_IGNORE) {{ ddlt_sts = ddlt_room(ddlt_sts_local, {n}, "
                 "sizeof(MPI_Status)); if (ddlt_sts) array_of_statuses = ddlt_sts; }}")
#: After the call: free what the two above took from the heap.
_FREE_REQS = "ddlt_unroom(ddlt_cp, ddlt_cp_local);"
_FREE_STATUSES = "ddlt_unroom(ddlt_sts, ddlt_sts_local);"
#: After a call that completes all its requests (Waitall, a Testall that found them done): a record for each.
_DONE_ALL = "ddlt_done_all(ddlt_cp, ddlt_n, array_of_statuses, t1);"
#: After a Waitany / Testany that completed one: its record.
_DONE_ANY = "if (*indx >= 0 && *indx < ddlt_n) ddlt_done(ddlt_cp[*indx], status, t1);"
#: After a matched probe that found a message: its envelope (communicator, source's world rank) for the MPI_Mrecv.
_PROBED = "ddlt_probed(*message, status, r);"
#: After a Waitsome / Testsome: a record for each request it completed.
_DONE_SOME = "ddlt_done_some(ddlt_cp, ddlt_n, *outcount, array_of_indices, array_of_statuses, t1);"


def _sends(name: str, blocking: bool) -> Wrapper:
    return Wrapper(name, _P2P_SEND if blocking else _P2P_ISEND, "comm", large=True,
                   bytes=f"{_TO_NULL} ? 0 : ddlt_type_bytes(count, datatype)", peer="dest", tag="tag",
                   request=None if blocking else _REQ_POST,
                   known="r->peer = DDLT_PEER(dest); r->tag = tag;" if blocking else "")


WRAPPERS: tuple[Wrapper, ...] = (
    Wrapper("MPI_Init", "int *argc, char ***argv", "other", comm=None, kind="init"),
    Wrapper("MPI_Init_thread", "int *argc, char ***argv, int required, int *provided", "other", comm=None,
            kind="init"),
    Wrapper("MPI_Finalize", "void", "other", comm=None, kind="finalize"),
    # point to point
    _sends("MPI_Send", True), _sends("MPI_Ssend", True), _sends("MPI_Bsend", True), _sends("MPI_Rsend", True),
    _sends("MPI_Isend", False), _sends("MPI_Issend", False), _sends("MPI_Ibsend", False),
    _sends("MPI_Irsend", False),
    Wrapper("MPI_Recv", "void *buf, COUNT count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, "
            "MPI_Status *status", "wait", large=True, status="status",
            bytes="ret == MPI_SUCCESS ? ddlt_status_bytes(status, datatype) : -1",
            peer="ret == MPI_SUCCESS ? status->MPI_SOURCE : source",
            tag="ret == MPI_SUCCESS ? status->MPI_TAG : tag", known="r->peer = DDLT_PEER(source); r->tag = tag;"),
    Wrapper("MPI_Irecv", "void *buf, COUNT count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, "
            "MPI_Request *request", "comm", large=True, bytes="ddlt_type_bytes(count, datatype)",
            peer="source", tag="tag", request=_REQ_POST),
    # send and receive in one call: the record is the send half (bytes sent, to dest, sendtag); after it, a
    # SENDRECV_RECEIVED record holds the receive half, from the status (source, tag, bytes received)
    Wrapper("MPI_Sendrecv", "const void *sendbuf, COUNT sendcount, MPI_Datatype sendtype, int dest, int sendtag, "
            "void *recvbuf, COUNT recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, "
            "MPI_Status *status", "comm", large=True, status="status",
            bytes=f"{_TO_NULL} ? 0 : ddlt_type_bytes(sendcount, sendtype)", peer="dest", tag="sendtag",
            done="ddlt_received(status, recvtype, ddlt_ci, t1);"),
    Wrapper("MPI_Sendrecv_replace", "void *buf, COUNT count, MPI_Datatype datatype, int dest, int sendtag, "
            "int source, int recvtag, MPI_Comm comm, MPI_Status *status", "comm", large=True, status="status",
            bytes=f"{_TO_NULL} ? 0 : ddlt_type_bytes(count, datatype)", peer="dest", tag="sendtag",
            done="ddlt_received(status, datatype, ddlt_ci, t1);"),
    # probes and matched receives
    Wrapper("MPI_Probe", "int source, int tag, MPI_Comm comm, MPI_Status *status", "wait", status="status",
            bytes="ret == MPI_SUCCESS ? ddlt_status_bytes(status, MPI_BYTE) : -1",
            peer="ret == MPI_SUCCESS ? status->MPI_SOURCE : source", tag="ret == MPI_SUCCESS ? status->MPI_TAG : tag"),
    Wrapper("MPI_Iprobe", "int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status", "wait",
            status="status", flag="flag",
            bytes="ret == MPI_SUCCESS && *flag ? ddlt_status_bytes(status, MPI_BYTE) : -1",
            peer="ret == MPI_SUCCESS && *flag ? status->MPI_SOURCE : source",
            tag="ret == MPI_SUCCESS && *flag ? status->MPI_TAG : tag"),
    Wrapper("MPI_Mprobe", "int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status", "wait",
            status="status", bytes="ret == MPI_SUCCESS ? ddlt_status_bytes(status, MPI_BYTE) : -1",
            peer="ret == MPI_SUCCESS ? status->MPI_SOURCE : source",
            tag="ret == MPI_SUCCESS ? status->MPI_TAG : tag", request="DDLT_H(*message)", done=_PROBED),
    Wrapper("MPI_Improbe", "int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, "
            "MPI_Status *status", "wait", status="status", flag="flag",
            bytes="ret == MPI_SUCCESS && *flag ? ddlt_status_bytes(status, MPI_BYTE) : -1",
            peer="ret == MPI_SUCCESS && *flag ? status->MPI_SOURCE : source",
            tag="ret == MPI_SUCCESS && *flag ? status->MPI_TAG : tag",
            request="ret == MPI_SUCCESS && *flag ? DDLT_H(*message) : DDLT_NA64", done=f"if (*flag) {_PROBED}"),
    # the communicator and the source's world rank come from the probe that matched the message (its envelope)
    Wrapper("MPI_Mrecv", "void *buf, COUNT count, MPI_Datatype datatype, MPI_Message *message, MPI_Status *status",
            "comm", large=True, status="status", comm=None,
            pre="int64_t ddlt_msg = DDLT_H(*message); ddlt_envelope ddlt_env = ddlt_take_envelope(ddlt_msg);",
            known="ddlt_set_envelope(r, &ddlt_env);",
            bytes="ret == MPI_SUCCESS ? ddlt_status_bytes(status, datatype) : -1",
            peer="ret == MPI_SUCCESS ? ddlt_envelope_peer(&ddlt_env, status->MPI_SOURCE) : DDLT_NA32",
            tag="ret == MPI_SUCCESS ? status->MPI_TAG : DDLT_NA32", request="ddlt_msg"),
    # the message handle read before the call (it sets *message to MPI_MESSAGE_NULL) goes to aux: records.py gives
    # the row the communicator, source and tag of the probe that returned that handle
    Wrapper("MPI_Imrecv", "void *buf, COUNT count, MPI_Datatype datatype, MPI_Message *message, "
            "MPI_Request *request", "comm", large=True, comm=None, bytes="ddlt_type_bytes(count, datatype)",
            pre="int64_t ddlt_msg = DDLT_H(*message);", request=_REQ_POST, aux="ddlt_msg"),
    # completion
    # a single completion's status gives the size of the message a receive got (aux; records.py gives it to the
    # MPI_Irecv whose request it completes: the Irecv's own count is its buffer's); a call completing several
    # requests writes a REQUEST_DONE record per request, with its status's size (``done``)
    Wrapper("MPI_Wait", "MPI_Request *request, MPI_Status *status", "wait", comm=None, status="status",
            pre="int64_t ddlt_rq = DDLT_H(*request);", request="ddlt_rq",
            aux="ret == MPI_SUCCESS ? ddlt_status_bytes(status, MPI_BYTE) : DDLT_NA64"),
    Wrapper("MPI_Waitall", "int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[]", "wait",
            comm=None, pre="int64_t ddlt_rq = ddlt_first_request(count, array_of_requests); "
            + _COPY_REQS.format(n="count") + " " + _OWN_STATUSES.format(n="count"), request="ddlt_rq",
            aux="count", done=_DONE_ALL, post=_FREE_REQS + " " + _FREE_STATUSES),
    Wrapper("MPI_Waitany", "int count, MPI_Request array_of_requests[], int *indx, MPI_Status *status", "wait",
            comm=None, status="status", pre=_COPY_REQS.format(n="count"),
            request="ret == MPI_SUCCESS && *indx >= 0 && *indx < ddlt_n ? DDLT_H(ddlt_cp[*indx]) : DDLT_NA64",
            aux="count", done=_DONE_ANY, post=_FREE_REQS),
    Wrapper("MPI_Waitsome", "int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[], "
            "MPI_Status array_of_statuses[]", "wait", comm=None,
            pre=_COPY_REQS.format(n="incount") + " " + _OWN_STATUSES.format(n="incount"),
            request="ret == MPI_SUCCESS && *outcount > 0 && array_of_indices[0] < ddlt_n ? "
                    "DDLT_H(ddlt_cp[array_of_indices[0]]) : DDLT_NA64", aux="incount", done=_DONE_SOME,
            post=_FREE_REQS + " " + _FREE_STATUSES),
    Wrapper("MPI_Test", "MPI_Request *request, int *flag, MPI_Status *status", "wait", comm=None, flag="flag",
            status="status", pre="int64_t ddlt_rq = DDLT_H(*request);", request="ddlt_rq",
            aux="ret == MPI_SUCCESS && *flag ? ddlt_status_bytes(status, MPI_BYTE) : DDLT_NA64"),
    Wrapper("MPI_Testall", "int count, MPI_Request array_of_requests[], int *flag, MPI_Status array_of_statuses[]",
            "wait", comm=None, flag="flag", pre="int64_t ddlt_rq = ddlt_first_request(count, array_of_requests); "
            + _COPY_REQS.format(n="count") + " " + _OWN_STATUSES.format(n="count"), request="ddlt_rq", aux="count",
            done=f"if (*flag) {_DONE_ALL}", post=_FREE_REQS + " " + _FREE_STATUSES),
    Wrapper("MPI_Testany", "int count, MPI_Request array_of_requests[], int *indx, int *flag, MPI_Status *status",
            "wait", comm=None, flag="flag", status="status", pre=_COPY_REQS.format(n="count"),
            request="ret == MPI_SUCCESS && *flag && *indx >= 0 && *indx < ddlt_n ? DDLT_H(ddlt_cp[*indx]) "
                    ": DDLT_NA64", aux="count", done=f"if (*flag) {_DONE_ANY}", post=_FREE_REQS),
    Wrapper("MPI_Testsome", "int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[], "
            "MPI_Status array_of_statuses[]", "wait", comm=None,
            pre=_COPY_REQS.format(n="incount") + " " + _OWN_STATUSES.format(n="incount"),
            request="ret == MPI_SUCCESS && *outcount > 0 && array_of_indices[0] < ddlt_n ? "
                    "DDLT_H(ddlt_cp[array_of_indices[0]]) : DDLT_NA64", aux="incount", done=_DONE_SOME,
            post=_FREE_REQS + " " + _FREE_STATUSES),
    # collectives
    Wrapper("MPI_Barrier", "MPI_Comm comm", "barrier"),
    Wrapper("MPI_Ibarrier", "MPI_Comm comm, MPI_Request *request", "barrier", request=_REQ_POST),
)

_BCAST = "void *buffer, COUNT count, MPI_Datatype datatype, int root, MPI_Comm comm"
_REDUCE = "const void *sendbuf, void *recvbuf, COUNT count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm"
_ALLREDUCE = "const void *sendbuf, void *recvbuf, COUNT count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm"
_GATHER = ("const void *sendbuf, COUNT sendcount, MPI_Datatype sendtype, void *recvbuf, COUNT recvcount, "
           "MPI_Datatype recvtype, int root, MPI_Comm comm")
_ALLGATHER = ("const void *sendbuf, COUNT sendcount, MPI_Datatype sendtype, void *recvbuf, COUNT recvcount, "
              "MPI_Datatype recvtype, MPI_Comm comm")
_ALLGATHERV = ("const void *sendbuf, COUNT sendcount, MPI_Datatype sendtype, void *recvbuf, COUNTS recvcounts, "
               "DISPLS displs, MPI_Datatype recvtype, MPI_Comm comm")
_GATHERV = ("const void *sendbuf, COUNT sendcount, MPI_Datatype sendtype, void *recvbuf, COUNTS recvcounts, "
            "DISPLS displs, MPI_Datatype recvtype, int root, MPI_Comm comm")
_SCATTERV = ("const void *sendbuf, COUNTS sendcounts, DISPLS displs, MPI_Datatype sendtype, void *recvbuf, "
             "COUNT recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm")
_ALLTOALLV = ("const void *sendbuf, COUNTS sendcounts, DISPLS sdispls, MPI_Datatype sendtype, void *recvbuf, "
              "COUNTS recvcounts, DISPLS rdispls, MPI_Datatype recvtype, MPI_Comm comm")
_REDUCE_SCATTER = ("const void *sendbuf, void *recvbuf, COUNTS recvcounts, MPI_Datatype datatype, MPI_Op op, "
                   "MPI_Comm comm")
_REDUCE_SCATTER_BLOCK = ("const void *sendbuf, void *recvbuf, COUNT recvcount, MPI_Datatype datatype, MPI_Op op, "
                         "MPI_Comm comm")

_SEND_PIECE = "sendbuf == MPI_IN_PLACE ? ddlt_type_bytes(recvcount, recvtype) : ddlt_type_bytes(sendcount, sendtype)"
_COLLECTIVES = (
    # name, params, bytes (this rank's contribution), peer (root)
    ("Bcast", _BCAST, "ddlt_type_bytes(count, datatype)", "root"),
    ("Reduce", _REDUCE, "ddlt_type_bytes(count, datatype)", "root"),
    ("Allreduce", _ALLREDUCE, "ddlt_type_bytes(count, datatype)", None),
    ("Scan", _ALLREDUCE, "ddlt_type_bytes(count, datatype)", None),
    ("Exscan", _ALLREDUCE, "ddlt_type_bytes(count, datatype)", None),
    ("Gather", _GATHER, _SEND_PIECE, "root"),
    ("Gatherv", _GATHERV, "sendbuf == MPI_IN_PLACE ? -1 : ddlt_type_bytes(sendcount, sendtype)", "root"),
    ("Scatter", _GATHER, "recvbuf == MPI_IN_PLACE ? -1 : ddlt_type_bytes(recvcount, recvtype)", "root"),
    ("Scatterv", _SCATTERV, "recvbuf == MPI_IN_PLACE ? -1 : ddlt_type_bytes(recvcount, recvtype)", "root"),
    ("Allgather", _ALLGATHER, _SEND_PIECE, None),
    ("Allgatherv", _ALLGATHERV, "sendbuf == MPI_IN_PLACE ? -1 : ddlt_type_bytes(sendcount, sendtype)", None),
    ("Alltoall", _ALLGATHER, "sendbuf == MPI_IN_PLACE ? -1 : "
     "ddlt_type_bytes((int64_t)sendcount * ddlt_comm_size(comm), sendtype)", None),
    ("Alltoallv", _ALLTOALLV, "sendbuf == MPI_IN_PLACE ? -1 : SUM(sendcounts, sendtype, comm)", None),
    ("Reduce_scatter", _REDUCE_SCATTER, "SUM(recvcounts, datatype, comm)", None),
    ("Reduce_scatter_block", _REDUCE_SCATTER_BLOCK,
     "ddlt_type_bytes((int64_t)recvcount * ddlt_comm_size(comm), datatype)", None),
)

WRAPPERS += tuple(
    Wrapper(f"MPI_{short}", params, "comm", large=True, bytes=nbytes, peer=peer)
    for short, params, nbytes, peer in _COLLECTIVES
) + tuple(
    Wrapper(f"MPI_I{short.lower()}", params + ", MPI_Request *request", "comm", large=True, bytes=nbytes, peer=peer,
            request=_REQ_POST)
    for short, params, nbytes, peer in _COLLECTIVES
)

#: A record a call completing several requests writes for each (``done``), after its own: ``request`` the request
#: completed, ``aux`` the size of its status's message (bytes; -1 unknown), ``peer`` and ``tag`` its status's, both
#: times the call's exit. Not a call: :func:`~ddltrace.collectors.pmpi.records.read_records` keeps them apart.
REQUEST_DONE = "ddltrace_request_done"
#: The receive half of an MPI_Sendrecv or MPI_Sendrecv_replace, a record written after the call's own (its send half:
#: ``bytes`` sent, ``peer`` its destination, ``tag`` its send tag): ``peer``, ``tag`` and ``bytes`` (-1 unknown) of
#: its status, the message it received, ``comm`` the call's, both times the call's exit. Not a call:
#: :func:`~ddltrace.collectors.pmpi.records.read_records` keeps them apart. Files written before it existed record
#: what a Sendrecv sent and received together in its ``bytes``, and no receive half.
SENDRECV_RECEIVED = "ddltrace_sendrecv_received"
#: Record kinds that the runtime writes itself (not MPI calls): name and category. New kinds go at the end, so that
#: a file written by an older table (one without the last of them) keeps its ids (:func:`table_hashes`).
PSEUDO: tuple[tuple[str, str], ...] = (("ddltrace_clock_sync", "other"), (REQUEST_DONE, "wait"),
                                       (SENDRECV_RECEIVED, "comm"))


def names() -> list[str]:
    """Function names by record id - 1: every wrapper and its ``_c`` twin, then the pseudo records."""
    out: list[str] = []
    for w in WRAPPERS:
        out.append(w.name)
        out.append(w.name + "_c" if w.large else "")
    out.extend(name for name, _ in PSEUDO)
    return out


def polls() -> list[str]:
    """The calls that return at once saying whether something was there (a ``flag``: MPI_Test*, MPI_Iprobe,
    MPI_Improbe): a rank calls them in a loop to wait while it polls."""
    return [w.name for w in WRAPPERS if w.flag]


def categories() -> list[str]:
    """Category by record id - 1 (same order as :func:`names`)."""
    out: list[str] = []
    for w in WRAPPERS:
        out += [w.category, w.category]
    out.extend(cat for _, cat in PSEUDO)
    return out


def table_hash() -> int:
    """CRC32 of the names in id order: the record file carries it, the reader checks it."""
    return zlib.crc32("\n".join(names()).encode())


def table_hashes(having: str | None = None) -> frozenset[int]:
    """The hashes of the tables whose record files this one reads: its own and those of the tables it extends by
    pseudo records only (the same ids for every call; a file written before a pseudo kind existed has none).
    ``having``: only those of the tables that have that pseudo kind (the files written since it existed)."""
    full = names()
    last = len(PSEUDO) if having is None else len(PSEUDO) - [name for name, _ in PSEUDO].index(having)
    return frozenset(zlib.crc32("\n".join(full[:len(full) - k]).encode()) for k in range(last))


@dataclass(frozen=True)
class Maker:
    """An MPI call that makes or frees communicators: its wrapper keeps the runtime's table from handle to
    communicator id, and records the call (ids after the call table's, :func:`record_names`): its ``comm`` the id of
    the communicator made (none where MPI_COMM_NULL was), or freed; its time is MPI time.

    ``kind``: "made", after a call that made ``*new`` (MPI_COMM_NULL: none), the new communicator's ranks agree its
    id (an 8-byte MPI_Bcast from its rank 0; two 8-byte MPI_Allreduce for an intercommunicator: across MPI worlds
    for MPI_Comm_spawn, connect / accept and join, whose spawned processes take part from their MPI_Init) and note
    their world ranks; "idup", MPI_Comm_idup (non-blocking: no communication), its id from the parent's and the
    parent's count of idups, taken when it is first used; "free", before the call, the communicator ``*new`` is
    forgotten (its handle, made again, gets the new one's id). ``category``: the timeline's, ``barrier`` for the
    collectives that make one (every rank waits there for the last), ``wait`` for those that wait for another job
    (connect, accept, join), ``other`` for starting processes (spawn) and for a local free.

    A communicator the wrapper did not see made (around it, by ``PMPI_`` calls) keeps its handle, and its peers their
    rank in it: records flagged (runtime.h DDLT_F_COMM_HANDLE, DDLT_F_PEER_IN_COMM)."""

    name: str
    params: str
    new: str
    kind: str = "made"  # made | idup | free
    category: str = "barrier"


MAKERS: tuple[Maker, ...] = (
    Maker("MPI_Comm_dup", "MPI_Comm comm, MPI_Comm *newcomm", "newcomm"),
    Maker("MPI_Comm_dup_with_info", "MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm", "newcomm"),
    Maker("MPI_Comm_idup", "MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request", "newcomm", "idup"),
    Maker("MPI_Comm_idup_with_info", "MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm, MPI_Request *request",
          "newcomm", "idup"),
    Maker("MPI_Comm_split", "MPI_Comm comm, int color, int key, MPI_Comm *newcomm", "newcomm"),
    Maker("MPI_Comm_split_type", "MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm",
          "newcomm"),
    Maker("MPI_Comm_create", "MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm", "newcomm"),
    Maker("MPI_Comm_create_group", "MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm", "newcomm"),
    Maker("MPI_Cart_create", "MPI_Comm comm_old, int ndims, const int dims[], const int periods[], int reorder, "
          "MPI_Comm *comm_cart", "comm_cart"),
    Maker("MPI_Cart_sub", "MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm", "newcomm"),
    Maker("MPI_Graph_create", "MPI_Comm comm_old, int nnodes, const int indx[], const int edges[], int reorder, "
          "MPI_Comm *comm_graph", "comm_graph"),
    Maker("MPI_Dist_graph_create", "MPI_Comm comm_old, int n, const int sources[], const int degrees[], "
          "const int destinations[], const int weights[], MPI_Info info, int reorder, MPI_Comm *comm_dist_graph",
          "comm_dist_graph"),
    Maker("MPI_Dist_graph_create_adjacent", "MPI_Comm comm_old, int indegree, const int sources[], "
          "const int sourceweights[], int outdegree, const int destinations[], const int destweights[], "
          "MPI_Info info, int reorder, MPI_Comm *comm_dist_graph", "comm_dist_graph"),
    Maker("MPI_Intercomm_create", "MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm, int remote_leader, "
          "int tag, MPI_Comm *newintercomm", "newintercomm"),
    Maker("MPI_Intercomm_merge", "MPI_Comm intercomm, int high, MPI_Comm *newintracomm", "newintracomm"),
    Maker("MPI_Comm_create_from_group", "MPI_Group group, const char *stringtag, MPI_Info info, "
          "MPI_Errhandler errhandler, MPI_Comm *newcomm", "newcomm"),
    Maker("MPI_Intercomm_create_from_groups", "MPI_Group local_group, int local_leader, MPI_Group remote_group, "
          "int remote_leader, const char *stringtag, MPI_Info info, MPI_Errhandler errhandler, "
          "MPI_Comm *newintercomm", "newintercomm"),
    Maker("MPI_Comm_spawn", "const char *command, char *argv[], int maxprocs, MPI_Info info, int root, "
          "MPI_Comm comm, MPI_Comm *intercomm, int array_of_errcodes[]", "intercomm", category="other"),
    Maker("MPI_Comm_spawn_multiple", "int count, char *array_of_commands[], char **array_of_argv[], "
          "const int array_of_maxprocs[], const MPI_Info array_of_info[], int root, MPI_Comm comm, "
          "MPI_Comm *intercomm, int array_of_errcodes[]", "intercomm", category="other"),
    Maker("MPI_Comm_accept", "const char *port_name, MPI_Info info, int root, MPI_Comm comm, MPI_Comm *newcomm",
          "newcomm", category="wait"),
    Maker("MPI_Comm_connect", "const char *port_name, MPI_Info info, int root, MPI_Comm comm, MPI_Comm *newcomm",
          "newcomm", category="wait"),
    Maker("MPI_Comm_join", "int fd, MPI_Comm *intercomm", "intercomm", category="wait"),
    Maker("MPI_Comm_free", "MPI_Comm *comm", "comm", "free", "other"),
    Maker("MPI_Comm_disconnect", "MPI_Comm *comm", "comm", "free"),
)


def record_names() -> list[str]:
    """Names by record id - 1: :func:`names`, then the calls that make and free communicators (:data:`MAKERS`)."""
    return names() + [m.name for m in MAKERS]


def record_categories() -> list[str]:
    """Category by record id - 1 (same order as :func:`record_names`)."""
    return categories() + [m.category for m in MAKERS]


def makers_hash() -> int:
    """CRC32 of :data:`MAKERS`' names in id order: the record file's header carries it, the reader checks it where
    the file holds their records (the call table's hash, :func:`table_hash`, leaves them out)."""
    return zlib.crc32("\n".join(m.name for m in MAKERS).encode())
