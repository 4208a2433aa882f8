"""A slow link between nodes: one pair of nodes moving data far slower than the others.

It measures, from the matched point-to-point messages between ranks on different hosts
(:mod:`~ddltrace.analyses.node_traffic`: flight time from the send's entry to the end of the receive), the peak
bandwidth of each pair of nodes: the highest bytes / flight time of its messages of at least ``slow_link.min_bytes``
(64 KiB), what the link showed it can carry (a loaded CPU, a late receiver, connection set-up or other traffic slow
a flight down, never up; timed from the receive's entry instead, a message the sender had already put in flight
looks faster than the link). A pair is slow when its peak is below ``slow_link.ratio_max`` (0.05) of the fastest
pair's, or, when a hardware profile is given (``ddltrace analyze --profile``, ``r_net`` from ``ddltrace
calibrate``), below ``slow_link.profile_ratio`` (0.5) of the calibrated bandwidth 1 / r_net. Comparing with the
fastest pair (not the median) finds a node whose own link is slow: every pair through it is slow, which on three
nodes is two pairs of three.

A store with no inter-node message of ``slow_link.min_bytes`` or more to time, or one pair of nodes and no profile
to compare it with, is listed as not made.

When every pair through one node is slow and some pair not through it is not, the finding names that node's link
(a slow uplink, NIC or switch port slows every pair through it); otherwise it names the slow pairs.

Cost: the time the slow pairs' transfers took beyond what the same bytes take at the reference bandwidth (the
fastest other pair's peak, or the calibrated one when only the profile finds them): sum over the slow pairs of
time - bytes / reference, over their messages of at least ``slow_link.min_bytes``.
"""

from __future__ import annotations

import math

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.node_traffic import pair_bandwidth, rank_hosts, transfers
from ddltrace.analyses.requirements import Skipped
from ddltrace.units import counted, format_bytes, three_digits

ADVICE = ("Check the named node's network: its link speed and duplex (ethtool), errors and drops (ip -s link), "
          "traffic shaping (tc qdisc), the switch port, and other jobs' traffic on it; until fixed, place the ranks "
          "that talk most on the other nodes, or exclude the node.")


@detector("slow_link", "slow link between nodes", {"timeline", "messages", "hosts"})
def detect(runs, th) -> list[Finding | Skipped]:
    """Pairs of nodes whose inter-node transfers run well below the others' (see the module docstring); a
    :class:`Skipped` for a store with no pair to time, or one pair and nothing to compare it with."""
    findings = []
    for run in runs:
        finding = _detect_run(run, th)
        if finding is not None:
            findings.append(finding)
    return findings


def _detect_run(run, th) -> Finding | Skipped | None:
    hosts = rank_hosts(run.store)
    moves = transfers(run.calls, hosts)
    least = th["slow_link.min_bytes"]
    bw = pair_bandwidth(moves, least).dropna(subset=["peak_bytes_per_s"])
    calibrated = getattr(run, "link_bytes_per_s", None)
    if not len(bw):
        across = int((moves["host_src"] != moves["host_dst"]).sum())
        return short_of("slow_link", run.name, f"matched point-to-point messages of {format_bytes(least)} or more "
                        "between ranks on different nodes (slow_link.min_bytes), to time a link",
                        f"{counted(across, 'matched message')} between nodes, none that large" if across else
                        "no matched message between nodes")
    if len(bw) == 1 and not calibrated:
        return short_of("slow_link", run.name, "two or more pairs of nodes exchanging such messages, or the "
                        "network's calibrated bandwidth (a hardware profile's r_net, --profile), to compare a "
                        "link with", f"one pair of nodes ({bw['host_a'].iloc[0]} - {bw['host_b'].iloc[0]})")
    peak = bw["peak_bytes_per_s"]
    slow = peak < th["slow_link.ratio_max"] * float(peak.max())
    if calibrated:
        slow |= peak < th["slow_link.profile_ratio"] * calibrated
    if not slow.any():
        return None
    bad, good = bw[slow], bw[~slow]
    reference = float(good["peak_bytes_per_s"].max()) if len(good) else float(calibrated)
    pairs = [(a, b) for a, b in zip(bad["host_a"], bad["host_b"], strict=True)]
    node = _common_node(pairs, bw)
    lost = float((bad["time_ns"] - bad["bytes"] / reference * 1e9).clip(lower=0).sum())
    worst = bad.loc[bad["peak_bytes_per_s"].idxmin()]
    named = ", ".join(f"{a} - {b}" for a, b in pairs)
    title = (f"Slow link: node {node}'s link ({len(pairs)} pair{'s' if len(pairs) > 1 else ''} through it, "
             f"{named}) peak at {_rate(float(bad['peak_bytes_per_s'].max()))} or less against {_rate(reference)}"
             if node else f"Slow link between nodes {named}: peak {_rate(float(worst['peak_bytes_per_s']))} against "
                           f"{_rate(reference)}")
    ranks = sorted({int(r) for r, h in hosts.items() if any(h in p for p in pairs)} if node is None
                   else {int(r) for r, h in hosts.items() if h == node})
    evidence = {}
    for _, row in bw.iterrows():
        pair = f"{row['host_a']} - {row['host_b']}"
        evidence[f"peak bandwidth {pair}"] = Quantity(float(row["peak_bytes_per_s"]) / 1e6, "MB/s")
        evidence[f"effective bandwidth {pair}"] = Quantity(float(row["bytes_per_s"]) / 1e6, "MB/s")
        evidence[f"bytes {pair}"] = Quantity(float(row["bytes"]), "bytes")
    evidence["reference_bandwidth"] = Quantity(reference / 1e6, "MB/s")
    if calibrated:
        evidence["calibrated_bandwidth"] = Quantity(float(calibrated) / 1e6, "MB/s")
    evidence["slowest_peak_vs_reference"] = Quantity(float(worst["peak_bytes_per_s"]) / reference, "fraction")
    evidence["slow_transfer_time"] = Quantity(float(bad["time_ns"].sum()), "ns")
    evidence["time_lost"] = Quantity(lost, "ns")
    basis = "the fastest other pair's peak" if len(good) else "the calibrated (1 / r_net)"
    return Finding(
        id="slow_link",
        title=title,
        severity="warning",
        evidence=evidence,
        ranks=ranks,
        phase="all",
        advice=ADVICE,
        store=run.name,
        cost_ns=lost,
        cost_basis=f"the slow pairs' transfer time minus the time their bytes take at {basis} bandwidth "
                   f"(messages of {int(th['slow_link.min_bytes'])} bytes or more)",
    )


def _common_node(pairs: list[tuple[str, str]], bw) -> str | None:
    """The node every slow pair goes through, when every pair through it is slow and some other pair is not (or
    it has two or more pairs and no pair avoids it); else None. One slow pair goes through both its nodes: the one
    whose every pair is slow is named (a star: the server's pair with the worker of the slow link, the server's
    other pairs fast), none where both or neither are."""
    def every_pair_through_is_slow(node: str) -> bool:
        through = bw[(bw["host_a"] == node) | (bw["host_b"] == node)]
        return len(through) == len(pairs) and (len(bw) - len(through) > 0 or len(pairs) >= 2)

    found = [node for node in sorted(set(pairs[0]).intersection(*map(set, pairs[1:])))
             if every_pair_through_is_slow(node)]
    return found[0] if len(found) == 1 else None


def _rate(bytes_per_s: float) -> str:
    """'11.8 MB/s (94 Mbit/s)'."""
    if not math.isfinite(bytes_per_s):
        return "n/a"
    return f"{three_digits(bytes_per_s / 1e6)} MB/s ({three_digits(bytes_per_s * 8 / 1e6)} Mbit/s)"
