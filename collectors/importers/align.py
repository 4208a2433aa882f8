"""Clock alignment of imported ranks from matched send/receive pairs.

A message cannot arrive before it was sent: with ``o_r`` the amount rank r's clock is ahead of the reference
rank's, a message from a to b gives ``o_b - o_a <= recv_b - send_a`` (receive end on b's clock, send start on
a's). Messages in both directions bound each difference from both sides; chains of ranks combine the bounds
(shortest paths in the graph of these difference constraints, Bellman-Ford). Each rank's offset is the midpoint
of its interval and its uncertainty half the interval's width: exact when the shortest one-way delays are the
same both ways, never wrong by more than the uncertainty when the clocks do not drift over the trace.

Offsets follow collectors/clock.py: ``offsets_ns[r]`` is the reference clock minus rank r's, the amount added
to rank r's times to put them on the reference's clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

METHOD = ("matched messages: each rank's offset to rank {ref} bounded by its send/receive pairs (a receive cannot "
          "end before its send started), midpoint of the bounds; uncertainty half their gap")
MPI_SENDS = {"MPI_Send", "MPI_Isend", "MPI_Ssend", "MPI_Issend", "MPI_Bsend", "MPI_Ibsend", "MPI_Rsend",
             "MPI_Irsend"}
MPI_RECVS = {"MPI_Recv", "MPI_Irecv"}
#: Calls that send and receive at once: not paired for alignment (the collectors record one partner, the
#: destination, and one byte count for both halves), but point-to-point traffic with that partner.
MPI_SENDRECVS = {"MPI_Sendrecv", "MPI_Sendrecv_replace"}
MPI_BLOCKING_RECVS = {"MPI_Recv"}  # an Irecv's end says nothing about the data's arrival


@dataclass
class Alignment:
    """What the matched messages say: ``offsets_ns`` and ``uncertainty_ns`` by rank (the reference has 0),
    ``unaligned`` ranks with no two-sided bound, ``messages`` used, ``consistent`` False when the bounds
    contradict each other (clock drift, or pairs matched wrongly): then nothing should be shifted."""

    reference: int
    offsets_ns: dict[int, int] = field(default_factory=dict)
    uncertainty_ns: dict[int, int] = field(default_factory=dict)
    unaligned: list[int] = field(default_factory=list)
    messages: int = 0
    consistent: bool = True


def _point_to_point(timeline: pd.DataFrame) -> pd.Series:
    """The rows :func:`mpi_messages` pairs: MPI sends and receives that name their peer."""
    return timeline["peer"].notna() & timeline["name"].isin(MPI_SENDS | MPI_RECVS)


def has_point_to_point(table: pa.Table) -> bool:
    """Whether a rank's timeline (an Arrow table, :mod:`ddltrace.arrow_timeline`) holds any send or receive
    :func:`mpi_messages` could pair (the importing command reads back for alignment only the ranks that do)."""
    peer = table.column("peer")
    if peer.null_count == len(peer):
        return False
    calls = MPI_SENDS | MPI_RECVS
    return any(p is not None and name in calls
               for p, name in zip(peer.to_pylist(), table.column("name").to_pylist(), strict=True))


def no_messages():
    """A frame of no matched messages (src, dst, send_ns, recv_ns)."""
    import pandas as pd

    return pd.DataFrame(columns=["src", "dst", "send_ns", "recv_ns"])


def mpi_messages(timelines: Iterable[tuple[int, pd.DataFrame]]) -> pd.DataFrame:
    """Send/receive pairs from MPI point-to-point calls that carry ``peer`` (and ``tag``): the n-th send from
    a to b with tag t is the n-th receive on b from a with tag t (MPI's non-overtaking rule). Only blocking
    receives give a pair (an Irecv returns before the data arrives)."""
    import pandas as pd

    sends, recvs = [], []
    for rank, tl in timelines:
        sel = _point_to_point(tl)
        if not sel.any():
            continue
        part = tl.loc[sel, ["name", "start_ns", "dur_ns", "peer", "tag"]]
        is_send = part["name"].isin(MPI_SENDS).to_numpy()
        frame = pd.DataFrame({"rank": rank, "peer": part["peer"].astype("int64").to_numpy(),
                              "tag": part["tag"].fillna(-1).astype("int64").to_numpy(),
                              "start": part["start_ns"].to_numpy(),
                              "end": (part["start_ns"] + part["dur_ns"]).to_numpy(),
                              "blocking": part["name"].isin(MPI_BLOCKING_RECVS).to_numpy()})
        sends.append(frame[is_send])
        recvs.append(frame[~is_send])
    if not sends or not recvs:
        return no_messages()
    s = pd.concat(sends).sort_values("start", kind="stable")
    r = pd.concat(recvs).sort_values("start", kind="stable")
    s = s.assign(src=s["rank"], dst=s["peer"])
    r = r.assign(src=r["peer"], dst=r["rank"])
    s["n"] = s.groupby(["src", "dst", "tag"]).cumcount()
    r["n"] = r.groupby(["src", "dst", "tag"]).cumcount()
    pairs = s.merge(r, on=["src", "dst", "tag", "n"], suffixes=("_s", "_r"))
    pairs = pairs[pairs["blocking_r"]]
    return pd.DataFrame({"src": pairs["src"].astype("int64"), "dst": pairs["dst"].astype("int64"),
                         "send_ns": pairs["start_s"].astype("int64"), "recv_ns": pairs["end_r"].astype("int64")})


def _shortest(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, origin: int) -> np.ndarray | None:
    """Bellman-Ford distances from ``origin`` (float, inf where unreachable); None on a negative cycle."""
    dist = np.full(n, np.inf)
    dist[origin] = 0.0
    for _ in range(n):
        candidate = dist[src] + weight
        new = dist.copy()
        np.minimum.at(new, dst, candidate)
        if np.array_equal(new, dist):
            return dist
        dist = new
    return None


def estimate_offsets(messages: pd.DataFrame, ranks: Iterable[int], reference: int | None = None) -> Alignment:
    """Each rank's clock offset to ``reference`` (the lowest rank by default) from matched messages."""
    import pandas as pd

    ranks = sorted(set(int(r) for r in ranks))
    reference = ranks[0] if reference is None else reference
    result = Alignment(reference=reference)
    index = {r: i for i, r in enumerate(ranks)}
    m = messages[messages["src"].isin(index) & messages["dst"].isin(index) & (messages["src"] != messages["dst"])]
    result.messages = len(m)
    if m.empty:
        result.unaligned = [r for r in ranks if r != reference]
        result.offsets_ns, result.uncertainty_ns = {reference: 0}, {reference: 0}
        return result
    # tightest constraint per ordered pair: x_dst - x_src <= min(recv - send)  (x: how far ahead a clock is)
    slack = (m["recv_ns"].astype("int64") - m["send_ns"].astype("int64")).to_numpy()
    edges = pd.DataFrame({"a": m["src"].map(index).to_numpy(), "b": m["dst"].map(index).to_numpy(), "w": slack})
    edges = edges.groupby(["a", "b"], as_index=False)["w"].min()
    a, b, w = edges["a"].to_numpy(), edges["b"].to_numpy(), edges["w"].to_numpy(dtype=float)
    origin = index[reference]
    upper = _shortest(len(ranks), a, b, w, origin)        # x_r - x_ref <= upper[r]
    back = _shortest(len(ranks), b, a, w, origin)         # x_ref - x_r <= back[r]
    if upper is None or back is None or np.any(-back > upper + 0.5):
        result.consistent = False
        return result
    for r, i in index.items():
        if np.isfinite(upper[i]) and np.isfinite(back[i]):
            ahead = (upper[i] - back[i]) / 2.0  # midpoint of [-back, upper]
            result.offsets_ns[r] = -int(round(ahead))
            result.uncertainty_ns[r] = int(round((upper[i] + back[i]) / 2.0))
        else:
            result.unaligned.append(r)
    return result
