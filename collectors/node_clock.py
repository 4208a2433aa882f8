"""Each node's clock against the launching process's, from the node agents' ping-pong (collectors/node_link.py),
as the store's manifest entries and as a correction of the node's times; and what the store says of a node
whose part was not gathered.

Offsets are the launching process's clock minus the node's, in ns, measured at the agent's start and at its
end; between the two the offset is interpolated linearly (drift, in ppm = ns per ms), outside them the
nearest measurement holds. Uncertainty: half the shortest round trip of the measurement (ns)."""

from __future__ import annotations

import numpy as np
import pandas as pd

METHOD = ("node agent ping-pong with the launching process at the agent's start and end (min round trip of 10), "
          "linear drift in between")


class NodeClocks:
    """The measured clocks of the nodes whose agent completed its link (host: start and end measurement)."""

    def __init__(self, links: dict[str, dict]):
        self.clocks = {host: (node["clock_start"], node.get("clock_end") or node["clock_start"])
                       for host, node in links.items() if node.get("clock_start")}

    def __contains__(self, host: str) -> bool:
        return host in self.clocks

    def __bool__(self) -> bool:
        return bool(self.clocks)

    def offset_at(self, host: str, t_ns) -> np.ndarray:
        """The offset (ns) to add to node ``host``'s times ``t_ns`` (its clock) to put them on this machine's."""
        start, end = self.clocks[host]
        t = np.asarray(t_ns, dtype="float64")
        span = end["at_ns"] - start["at_ns"]
        if span <= 0:
            return np.full(t.shape, start["offset_ns"], dtype="int64")
        frac = np.clip((t - start["at_ns"]) / span, 0.0, 1.0)
        return np.rint(start["offset_ns"] + frac * (end["offset_ns"] - start["offset_ns"])).astype("int64")

    def correct(self, host: str, frame: pd.DataFrame, column: str) -> None:
        """Put ``frame[column]`` (ns on node ``host``'s clock) on this machine's clock, in place."""
        if len(frame):
            frame[column] = frame[column].to_numpy(dtype="int64") + self.offset_at(host, frame[column])

    def manifest(self, clock: dict | None) -> dict:
        """``clock`` (the PMPI or framework entry, or None) with the nodes' offsets, uncertainties and drift."""
        clock = dict(clock or {"method": "single clock (this host's wall clock)", "offsets_ns": {},
                               "uncertainty_ns": {}})
        clock["node_method"] = METHOD
        clock["node_offsets_ns"] = {h: s["offset_ns"] for h, (s, _) in self.clocks.items()}
        clock["node_uncertainty_ns"] = {h: s["uncertainty_ns"] for h, (s, _) in self.clocks.items()}
        clock["node_end_offsets_ns"] = {h: e["offset_ns"] for h, (_, e) in self.clocks.items()}
        clock["node_end_uncertainty_ns"] = {h: e["uncertainty_ns"] for h, (_, e) in self.clocks.items()}
        clock["node_drift_ppm"] = {h: round((e["offset_ns"] - s["offset_ns"]) / (e["at_ns"] - s["at_ns"]) * 1e6, 3)
                                   for h, (s, e) in self.clocks.items() if e["at_ns"] > s["at_ns"]}
        return clock


def link_summary(links: dict[str, dict]) -> dict[str, dict]:
    """Per host, what its link did: state (complete, lost), files and bytes gathered, where its part lies."""
    return {host: {k: node.get(k) for k in ("state", "shared", "files", "bytes", "part", "error")
                   if node.get(k) is not None} for host, node in sorted(links.items())}


def lost_notes(links: dict[str, dict], store: str) -> list[str]:
    """A note per node whose part did not reach this process: which node, why, where its part is, how to join it."""
    notes = []
    for host, node in sorted(links.items()):
        if node.get("state") == "complete":
            continue
        if node.get("shared"):
            notes.append(f"node {host}: its agent's link broke ({node.get('error')}); its records are in the "
                         "shared record folder")
            continue
        notes.append(f"missing node {host}: its part was not gathered ({node.get('error')}); it stays on {host} "
                     f"in {node.get('part')}: copy that folder here and run `ddltrace merge {store} FOLDER "
                     f"--out NEW_STORE` to join it")
    return notes
