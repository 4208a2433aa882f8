"""The per-node section of ``ddltrace analyze`` (text and ``--json``) and of the report: for a store whose ranks
sit on two or more hosts, one row per node (:func:`~ddltrace.analyses.node_traffic.node_table`), each number with
its unit and window."""

from __future__ import annotations

import math

import pandas as pd

from ddltrace.units import format_bytes, format_ns, three_digits

TITLE = ("Per node (whole run; compute, comm, wait: mean over the node's ranks; point-to-point: its ranks' send "
         "and receive calls within the node (the bytes sent, in the summed time of the sends and the receives: not "
         "a send bandwidth) and with other nodes (bytes sent / received, in the same calls' time); "
         "collectives: its ranks' calls in instances within the node or spanning nodes (their bytes in call "
         "time); partner unknown: its ranks' point-to-point calls that name no partner (IPM's per-call totals), "
         "the bytes sent in the sends' and receives' time, counted neither within nor across ('-' there where no "
         "call names its partner); "
         "bandwidth: bytes / transfer time of the matched messages of {min_bytes} or more between it and other "
         "nodes)")


def min_bytes(thresholds=None) -> float:
    """The smallest message counted in a bandwidth (``slow_link.min_bytes``)."""
    from ddltrace.analyses.thresholds import DEFAULTS

    return float(thresholds["slow_link.min_bytes"] if thresholds is not None else
                 DEFAULTS["slow_link.min_bytes"].value)


def node_frame(run, thresholds=None) -> pd.DataFrame:
    """The per-node table of ``run`` (empty where the per-node view is not made: ranks on fewer than two hosts;
    its column groups each where the store holds what they need, see :func:`~ddltrace.analyses.node_traffic.
    node_table`)."""
    if not run.can("node_traffic"):
        return pd.DataFrame()
    from ddltrace.analyses.node_traffic import node_table

    return node_table(run, min_bytes(thresholds))


def link_bandwidth(path: str, required: bool = True) -> float | None:
    """The payload bandwidth (bytes/s) of the network of the hardware profile at ``path`` (``ddltrace
    calibrate``): 1 / r_net. A profile without r_net is bad input when ``required``, else None."""
    from ddltrace.errors import DdltraceError
    from ddltrace.models.quantities import load_json, profile_constants

    r_net = profile_constants(load_json(path, "hardware profile"), path).get("r_net")
    if isinstance(r_net, float) and r_net > 0:
        return 1.0 / r_net
    if required:
        raise DdltraceError(f"{path}: the hardware profile has no network constant r_net (s/B) > 0")
    return None


def title(thresholds=None) -> str:
    return TITLE.format(min_bytes=format_bytes(min_bytes(thresholds)))


def node_display(run, thresholds=None) -> pd.DataFrame:
    """The per-node view as the text and the report show it: one row of cells (str, each with its unit) per node,
    indexed by host (empty for a store on one host). The partner-unknown column is there only where a call names
    no partner."""
    table = node_frame(run, thresholds)
    if not len(table):
        return pd.DataFrame()
    unplaced = bool(table["p2p_intra_ns"].isna().any() or table["p2p_no_partner_sent_bytes"].sum()
                    or table["p2p_no_partner_ns"].sum())
    header = ["ranks", "compute", "comm", "wait", "p2p within", "p2p across (sent / received)",
              *(["p2p partner unknown"] if unplaced else []), "coll within", "coll across", "bandwidth across"]
    rows = []
    for _, row in table.iterrows():
        rate = row["inter_bytes_per_s"]
        placed = pd.notna(row["p2p_intra_ns"])  # None: no point-to-point call of the node names its partner
        rows.append([",".join(map(str, row["ranks"])),
                     *[format_ns(row[f"{c}_ns"]) if not math.isnan(row[f"{c}_ns"]) else "-"
                       for c in ("compute", "comm", "wait")],
                     f"{format_bytes(row['p2p_intra_bytes'])} in {format_ns(row['p2p_intra_ns'])}" if placed else "-",
                     f"{format_bytes(row['p2p_inter_sent_bytes'])} / {format_bytes(row['p2p_inter_received_bytes'])} "
                     f"in {format_ns(row['p2p_inter_ns'])}" if placed else "-",
                     *([f"{format_bytes(row['p2p_no_partner_sent_bytes'])} in {format_ns(row['p2p_no_partner_ns'])}"]
                       if unplaced else []),
                     *[f"{format_bytes(row[f'{k}_bytes'])} in {format_ns(row[f'{k}_ns'])}"
                       if pd.notna(row[f"{k}_bytes"]) else "-" for k in ("coll_intra", "coll_inter")],
                     f"{three_digits(rate / 1e6)} MB/s" if math.isfinite(rate) else "-"])
    return pd.DataFrame(rows, columns=header, index=pd.Index(table["host"].astype(str), name="host"))


def render_nodes(run, thresholds=None) -> list[str]:
    """The text lines of the per-node view (none for a store on one host)."""
    shown = node_display(run, thresholds)
    if not len(shown):
        return []
    header = ["host", *shown.columns]
    rows = [[host, *cells] for host, cells in zip(shown.index, shown.itertuples(index=False), strict=True)]
    widths = [max(len(x) for x in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip() for line in [header, *rows]]
    return ["", "  " + title(thresholds), *("  " + line for line in lines)]
