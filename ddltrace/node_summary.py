"""Per node: what the machine counters of each node (host) of a store say, for ``ddltrace info``.

A store made across nodes (``ddltrace run --launcher``) holds each node's machine counters (counters rank -1)
named ``NAME@HOST`` (collectors/node_agent.py); a single-node store holds them as ``NAME``, for the one host
of its run. Per node, over the samples its sampler took (the job's span on that node):

- ``cpu_percent``: mean of the machine's CPU use, all cores, 0-100 %;
- ``mem_peak_bytes``: the largest ``mem_used_bytes`` (total minus available memory), bytes;
- ``sent_bytes`` / ``recv_bytes``: bytes sent / received on all its interfaces but loopback from the sampler's
  start to its last sample (the last ``net_IFACE_sent_bytes`` / ``net_IFACE_recv_bytes`` summed over the
  interfaces), None where the store has no per-interface counters (stores made before they existed).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import pandas as pd

_IFACE = re.compile(r"^net_(.+)_(sent|recv)_bytes$")


@dataclass
class NodeRow:
    """One node's figures (see the module's docstring for the definitions and units)."""

    host: str
    samples: int
    cpu_percent: float | None
    mem_peak_bytes: float | None
    sent_bytes: float | None
    recv_bytes: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def per_node(machine: pd.DataFrame, hosts: list[str]) -> list[NodeRow]:
    """One row per node from the machine counters ``machine`` (counters rank -1); ``hosts``: the run's hosts
    (the host of plain names when the store has a single one)."""
    if not len(machine):
        return []
    names = machine["name"].astype(str)
    split = names.str.rsplit("@", n=1, expand=True)
    if split.shape[1] == 2 and split[1].notna().any():
        frame = machine.assign(metric=split[0], host=split[1])
        frame = frame[frame["host"].notna()]
    elif len(hosts) == 1:
        frame = machine.assign(metric=names, host=hosts[0])
    else:
        return []
    rows = []
    for host, part in frame.groupby("host", sort=True):
        by = {m: g.sort_values("t_ns")["value"] for m, g in part.groupby("metric")}
        cpu, mem = by.get("cpu_percent"), by.get("mem_used_bytes")
        total = {"sent": None, "recv": None}
        for metric, values in by.items():
            found = _IFACE.match(metric)
            if found and found.group(1) != "lo":
                total[found.group(2)] = (total[found.group(2)] or 0.0) + float(values.iloc[-1])
        rows.append(NodeRow(str(host), int(len(cpu)) if cpu is not None else 0,
                            float(cpu.mean()) if cpu is not None else None,
                            float(mem.max()) if mem is not None else None, total["sent"], total["recv"]))
    return rows
