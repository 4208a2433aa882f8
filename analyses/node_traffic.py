"""Traffic within and between nodes: which MPI calls cross hosts, how many bytes and how much time they take, and
the effective bandwidth of each pair of nodes.

A rank's node is its ``host`` in the store's manifest (``ddltrace run`` records it for every rank). From the MPI
calls of the timeline (:func:`~ddltrace.analyses.wait_states.mpi_calls`, with their ``peer`` and ``bytes``):

* **Point-to-point calls** (:func:`p2p_traffic`): each send or receive with a partner counts for the pair of hosts
  (its rank's, its partner's): its payload ``bytes`` (the call's own count, as the collector recorded it; 0 where
  unknown) and its ``time_ns`` (the call's own duration; for a non-blocking call only the post, the Wait* that
  completes it is counted with the Wait*'s own calls, not here). A pair of one host with itself is intra-node.
  An MPI_Sendrecv (or _replace) counts once, for its destination (the ``peer`` the collectors record): its time,
  and its ``bytes`` as sent (IPM's hash entry per call; the PMPI collector's bytes sent). What it received counts
  where the PMPI collector recorded it, in the call's receive half (a row of no duration at the call's exit naming
  the message's source; :data:`~ddltrace.analyses.wait_states.RECEIVE_HALF` among the MPI calls): as a receive of
  no time (the call's row holds it), for the pair of its rank's host and its source's, in the node's bytes
  received. So each byte of an exchange counts once as sent and once as received. IPM keeps no receive half: there
  a Sendrecv's received bytes count nowhere. Stores made by the PMPI collector before it recorded receive halves
  hold a Sendrecv's bytes sent and received together in its ``bytes``, read here as sent: an exchange's bytes
  count twice there.
* **Collectives** (:func:`collective_traffic`): the k-th collective of every rank on a communicator is one
  instance (as in wait-state matching); an instance whose ranks sit on two or more hosts is inter-node, else
  intra-node. Each rank's call counts for its own host: bytes (its own count) and time (its duration).
* **Transfers** (:func:`transfers`): each send matched to its receive (MPI's matching, as for Late Sender). Its
  transfer time is from when both sides had entered (``max(enter(send), enter(recv))``) to the end of the receive
  (the receive's leave, the leave of the Wait* that completed an Irecv, or that of the Sendrecv whose receive half
  took it): the time the payload took to arrive once both sides were ready. Over a pair of hosts' matched
  inter-node messages of at least ``min_bytes`` (small messages are left out: their time is latency, not
  bandwidth), its **effective bandwidth** is their bytes divided
  by the sum of their transfer times, and its **peak bandwidth** the highest of each message's bytes / flight time
  (bytes per second), its **flight time** being from the send's entry to the end of the receive: the payload
  cannot have left before the send was entered, so that time holds its whole way over the link. The peak
  estimates what the link can carry: a busy CPU, a late receiver, the first message's connection set-up or other
  traffic only make a flight slower, never faster than the link (the packet-pair idea of capacity estimation); on
  a loaded machine the effective bandwidth of a fast link varies several times over. The transfer time is not a
  bound: what the sender put in flight before a late receiver entered (socket buffers, eager messages) is not in
  it, and a 320 KB message over a 100 Mbit/s link was timed at 4 GB/s from the receive's entry
  (tests/test_demo_cluster.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.wait_states import (
    BLOCKING_RECEIVES,
    COLLECTIVES,
    P2P,
    RECEIVE_HALF,
    SEND_BLOCKING,
    SEND_NONBLOCKING,
    SENDRECV,
    completions,
    match_messages,
)

#: The calls whose ``bytes`` count as sent to their ``peer``: sends, and MPI_Sendrecv (its peer is its destination).
SENDS = SEND_BLOCKING | SEND_NONBLOCKING | SENDRECV
#: The point-to-point calls counted here: :data:`~ddltrace.analyses.wait_states.P2P` and MPI_Sendrecv.
POINT_TO_POINT = P2P | SENDRECV

#: Columns of :func:`pair_bandwidth`.
BANDWIDTH_COLUMNS = ["host_a", "host_b", "messages", "bytes", "time_ns", "bytes_per_s", "peak_bytes_per_s"]


def rank_hosts(store) -> dict[int, str]:
    """Each rank's host, from the store's manifest (ranks without one are left out)."""
    out = {}
    for rank in store.ranks:
        host = store.rank_info(rank).get("host")
        if host:
            out[int(rank)] = str(host)
    return out


def p2p_calls(calls: pd.DataFrame, hosts: dict[int, str]) -> pd.DataFrame:
    """Every point-to-point call with a partner, both ranks with a host: columns host (its rank's), peer_host,
    sent (the send's bytes, 0 for a receive or where unknown), received (the receive's bytes, 0 for a send),
    time_ns (the call's own duration). The receive half of a Sendrecv (:data:`~ddltrace.analyses.wait_states.
    RECEIVE_HALF`) is a receive of no time: its call's row holds the time."""
    p2p = calls[calls["name"].isin(POINT_TO_POINT | {RECEIVE_HALF}) & (calls["peer"] >= 0)]
    own, peer = p2p["rank"].map(hosts), p2p["peer"].map(hosts)
    known = own.notna() & peer.notna()
    p2p = p2p[known]
    size = p2p["bytes"].clip(lower=0)
    sends = p2p["name"].isin(SENDS)
    return pd.DataFrame({"host": own[known].astype(str), "peer_host": peer[known].astype(str),
                         "sent": size.where(sends, 0), "received": size.where(~sends, 0),
                         "time_ns": (p2p["end_ns"] - p2p["start_ns"]).where(p2p["name"] != RECEIVE_HALF, 0)})


def p2p_traffic(calls: pd.DataFrame, hosts: dict[int, str]) -> pd.DataFrame:
    """Point-to-point bytes and call time per pair of hosts (see the module docstring): columns host_a, host_b
    (sorted, equal for intra-node traffic), calls, bytes, time_ns."""
    p2p = calls[calls["name"].isin(POINT_TO_POINT) & (calls["peer"] >= 0)]
    own = p2p["rank"].map(hosts)
    peer = p2p["peer"].map(hosts)
    known = own.notna() & peer.notna()
    p2p, own, peer = p2p[known], own[known].astype(str), peer[known].astype(str)
    frame = pd.DataFrame({"host_a": np.minimum(own, peer), "host_b": np.maximum(own, peer), "calls": 1,
                          "bytes": p2p["bytes"].clip(lower=0).where(p2p["name"].isin(SENDS), 0),
                          "time_ns": p2p["end_ns"] - p2p["start_ns"]})
    return frame.groupby(["host_a", "host_b"], as_index=False)[["calls", "bytes", "time_ns"]].sum()


def p2p_without_partner(calls: pd.DataFrame, hosts: dict[int, str]) -> pd.DataFrame:
    """The point-to-point calls of ranks with a host whose partner's host is unknown (no ``peer``, as in IPM's
    per-call totals, or a partner rank without a host), per host: columns host, calls (rows of the timeline: an
    IPM row is all of a rank's calls of one name), sent (the sends' bytes), time_ns (the calls' own durations).
    :func:`p2p_calls` cannot place them within or across nodes."""
    p2p = calls[calls["name"].isin(POINT_TO_POINT) & calls["rank"].isin(list(hosts))]
    p2p = p2p[p2p["peer"].map(hosts).isna()]
    frame = pd.DataFrame({"host": p2p["rank"].map(hosts).astype(str), "calls": 1,
                          "sent": p2p["bytes"].clip(lower=0).where(p2p["name"].isin(SENDS), 0),
                          "time_ns": p2p["end_ns"] - p2p["start_ns"]})
    return frame.groupby("host", as_index=False)[["calls", "sent", "time_ns"]].sum()


def collective_traffic(calls: pd.DataFrame, hosts: dict[int, str]) -> pd.DataFrame:
    """Collective bytes and call time per host, split by whether the instance spans hosts: columns host, scope
    ("intra-node" / "inter-node"), calls, bytes, time_ns."""
    coll = calls[calls["name"].isin(COLLECTIVES) & calls["rank"].isin(list(hosts))].sort_values("start_ns",
                                                                                                kind="stable")
    if not len(coll):
        return pd.DataFrame(columns=["host", "scope", "calls", "bytes", "time_ns"])
    coll = coll.assign(host=coll["rank"].map(hosts), instance=coll.groupby(["comm", "rank"]).cumcount())
    spans = coll.groupby(["comm", "instance"])["host"].transform("nunique")
    frame = pd.DataFrame({"host": coll["host"], "scope": np.where(spans > 1, "inter-node", "intra-node"),
                          "calls": 1, "bytes": coll["bytes"].clip(lower=0),
                          "time_ns": coll["end_ns"] - coll["start_ns"]})
    return frame.groupby(["host", "scope"], as_index=False)[["calls", "bytes", "time_ns"]].sum()


def transfers(calls: pd.DataFrame, hosts: dict[int, str]) -> pd.DataFrame:
    """Every matched message between ranks with a host: columns src, dst (ranks), host_src, host_dst, bytes (the
    send's count, else the receive's), start_ns (both sides entered), end_ns (the receive completed), time_ns
    (transfer time: end_ns - start_ns) and flight_ns (end_ns - the send's entry), in ns."""
    columns = ["src", "dst", "host_src", "host_dst", "bytes", "start_ns", "end_ns", "time_ns", "flight_ns"]
    pairs = match_messages(calls)
    if pairs is None or not len(pairs):
        return pd.DataFrame(columns=columns)
    end = pairs["end_ns_r"].to_numpy().copy()
    posted = ~pairs["name_r"].isin(BLOCKING_RECEIVES).to_numpy()  # a Sendrecv's receive half ends with its call
    if posted.any():
        done = completions(calls)
        idx = pairs["idx_r"].to_numpy()
        known = posted & np.isin(idx, done.index)
        end[known] = done.loc[idx[known], "w_leave"].to_numpy()
        end[posted & ~known] = -1  # an Irecv never completed: no transfer time
    start = np.maximum(pairs["start_ns_s"].to_numpy(), pairs["start_ns_r"].to_numpy())
    size = np.where(pairs["bytes_s"].to_numpy() >= 0, pairs["bytes_s"].to_numpy(), pairs["bytes_r"].to_numpy())
    out = pd.DataFrame({"src": pairs["src"].to_numpy(), "dst": pairs["dst"].to_numpy(),
                        "host_src": pairs["src"].map(hosts).to_numpy(), "host_dst": pairs["dst"].map(hosts).to_numpy(),
                        "bytes": size, "start_ns": start, "end_ns": end, "time_ns": end - start,
                        "flight_ns": end - pairs["start_ns_s"].to_numpy()})
    return out[out["host_src"].notna() & out["host_dst"].notna() & (end >= 0)][columns].reset_index(drop=True)


def pair_bandwidth(moves: pd.DataFrame, min_bytes: float) -> pd.DataFrame:
    """Effective bandwidth of each pair of hosts (both directions together) over the inter-node transfers of at
    least ``min_bytes`` (from :func:`transfers`): columns host_a, host_b (sorted), messages, bytes, time_ns,
    bytes_per_s (effective: bytes / transfer time) and peak_bytes_per_s (the highest of its messages' bytes / flight
    time)."""
    inter = moves[(moves["host_src"] != moves["host_dst"]) & (moves["bytes"] >= min_bytes) & (moves["time_ns"] > 0)
                  & (moves["flight_ns"] > 0)]
    if not len(inter):
        return pd.DataFrame(columns=BANDWIDTH_COLUMNS)
    a, b = inter["host_src"].astype(str), inter["host_dst"].astype(str)
    frame = pd.DataFrame({"host_a": np.minimum(a, b), "host_b": np.maximum(a, b), "messages": 1,
                          "bytes": inter["bytes"], "time_ns": inter["time_ns"],
                          "rate": inter["bytes"] / inter["flight_ns"] * 1e9})
    group = frame.groupby(["host_a", "host_b"], as_index=False)
    out = group[["messages", "bytes", "time_ns"]].sum()
    out["bytes_per_s"] = out["bytes"] / out["time_ns"] * 1e9
    out["peak_bytes_per_s"] = group["rate"].max()["rate"].to_numpy()
    return out[BANDWIDTH_COLUMNS]


def node_table(run, min_bytes: float) -> pd.DataFrame:
    """The per-node breakdown, one row per host: its ranks; the mean over its ranks of the time in compute, comm,
    wait and barrier over the whole run (ns); its ranks' point-to-point calls within the node (bytes sent, call
    time) and with other nodes (bytes sent, bytes received: the receive halves of Sendrecv calls too, call time);
    its ranks' collective calls in instances within the node and spanning nodes (their own bytes and time); its
    ranks' point-to-point calls whose partner's
    host is unknown (:func:`p2p_without_partner`: bytes sent, call time), in neither of the two before (which
    are None, not 0, for a host none of whose point-to-point calls names its partner's host); and
    the effective bandwidth of the matched inter-node messages of at least ``min_bytes`` to or from it (bytes per
    second).

    Each group of columns only where the store holds what it needs (:data:`~ddltrace.analyses.requirements.ANALYSES`,
    ``node_p2p`` and ``node_collectives``; None, or NaN for the bandwidth, where not): per-call totals (IPM) have
    no instances of a collective to tell within from spanning nodes, and no transfer to time."""
    hosts = rank_hosts(run.store)
    names = sorted(set(hosts.values()))
    table = run.table("all")
    rows = []
    calls = run.calls if run.can("node_p2p") else run.calls.iloc[0:0]
    p2p = p2p_calls(calls, hosts)
    unplaced = p2p_without_partner(run.calls, hosts).set_index("host")
    timed = run.can("node_collectives")
    coll = collective_traffic(run.calls if timed else run.calls.iloc[0:0], hosts)
    moves = transfers(run.calls if timed else run.calls.iloc[0:0], hosts)
    inter = moves[(moves["host_src"] != moves["host_dst"]) & (moves["bytes"] >= min_bytes) & (moves["time_ns"] > 0)]
    for host in names:
        ranks = sorted(r for r, h in hosts.items() if h == host)
        mine = table.reindex([r for r in ranks if r in table.index])
        mine_p2p = p2p[p2p["host"] == host]
        intra = mine_p2p[mine_p2p["peer_host"] == host]
        cross = mine_p2p[mine_p2p["peer_host"] != host]
        c_in = coll[(coll["host"] == host) & (coll["scope"] == "intra-node")]
        c_out = coll[(coll["host"] == host) & (coll["scope"] == "inter-node")]
        through = inter[(inter["host_src"] == host) | (inter["host_dst"] == host)]
        time = float(through["time_ns"].sum())
        rows.append({
            "host": host, "ranks": ranks,
            **{f"{c}_ns": float(mine[c].mean()) if c in mine and len(mine) else float("nan")
               for c in ("compute", "comm", "wait", "barrier")},
            **({k: None for k in ("p2p_intra_bytes", "p2p_intra_ns", "p2p_inter_sent_bytes",
                                  "p2p_inter_received_bytes", "p2p_inter_ns")}
               if not run.can("node_p2p") or (unplaced["calls"].get(host, 0) and not len(mine_p2p)) else  # unknown
               {"p2p_intra_bytes": int(intra["sent"].sum()), "p2p_intra_ns": int(intra["time_ns"].sum()),
                "p2p_inter_sent_bytes": int(cross["sent"].sum()),
                "p2p_inter_received_bytes": int(cross["received"].sum()), "p2p_inter_ns": int(cross["time_ns"].sum())}),
            "p2p_no_partner_sent_bytes": int(unplaced["sent"].get(host, 0)),
            "p2p_no_partner_ns": int(unplaced["time_ns"].get(host, 0)),
            **({"coll_intra_bytes": int(c_in["bytes"].sum()), "coll_intra_ns": int(c_in["time_ns"].sum()),
                "coll_inter_bytes": int(c_out["bytes"].sum()), "coll_inter_ns": int(c_out["time_ns"].sum())} if timed
               else dict.fromkeys(("coll_intra_bytes", "coll_intra_ns", "coll_inter_bytes", "coll_inter_ns"))),
            "inter_bytes_per_s": float(through["bytes"].sum()) / time * 1e9 if time > 0 else float("nan"),
        })
    return pd.DataFrame(rows)
