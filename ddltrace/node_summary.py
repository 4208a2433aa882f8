"""Per node: what the machine counters of each node (host) of a store say, for ``ddltrace info``.

A store made across nodes (``ddltrace run --launcher``) holds each node's machine counters (counters rank -1)
named ``NAME@HOST`` (collectors/node_agent.py); a single-node store holds them as ``NAME``, for the one host
of its run. Per node, over the samples its sampler took (the job's span on that node):

- ``samples``: how many samples the node's sampler took, the most of any one of its series (before 2026-11-26 the
  count of ``cpu_percent`` samples alone: 0 beside a memory peak of 30 samples where a node had none);
- ``cpu_percent``: mean of the machine's CPU use, all cores, 0-100 %;
- ``mem_peak_bytes``: the largest ``mem_used_bytes`` (total minus available memory), bytes;
- ``sent_bytes`` / ``recv_bytes``: bytes sent / received on all its interfaces but loopback from the sampler's
  start to its last sample (the last ``net_IFACE_sent_bytes`` / ``net_IFACE_recv_bytes`` summed over the
  interfaces), None where the store has no per-interface counters (stores made before they existed);
- ``job_cpu_percent``: mean CPU use of the job's processes on the node (``job_cpu_percent``; 100 % = one core),
  ``job_rss_peak_bytes``: the largest of their summed resident memory (``job_rss_bytes``): the job's own, where
  the machine's figures hold every other user of the node too.

Read from the counters' Arrow table with NumPy (no pandas: ``ddltrace info`` starts without it).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from ddltrace.arrow_timeline import codes_of, values_of

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
    job_cpu_percent: float | None = None
    job_rss_peak_bytes: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def per_node(machine: pa.Table, hosts: list[str]) -> list[NodeRow]:
    """One row per node from the machine counters ``machine`` (counters rank -1, an Arrow table); ``hosts``: the
    run's hosts (the host of plain names when the store has a single one)."""
    if not machine.num_rows:
        return []
    codes, names = codes_of(machine.column("name"))
    split = [name.rsplit("@", 1) for name in names]
    if any(len(parts) == 2 for parts in split):  # NAME@HOST: rows of plain names are no node's
        series = {i: tuple(parts) for i, parts in enumerate(split) if len(parts) == 2}
    elif len(hosts) == 1:
        series = {i: (name, hosts[0]) for i, name in enumerate(names)}
    else:
        return []
    t_ns = values_of(machine.column("t_ns"))[0]
    values = values_of(machine.column("value"))[0].astype(np.float64)
    order = np.lexsort((t_ns, codes))  # by series, then time: a series' last row is its last sample
    codes, values = codes[order], values[order]
    bounds = np.searchsorted(codes, np.arange(len(names) + 1))
    by_host: dict[str, dict[str, np.ndarray]] = {}
    for code, (metric, host) in series.items():
        by_host.setdefault(host, {})[metric] = values[bounds[code]:bounds[code + 1]]
    rows = []
    for host, by in sorted(by_host.items()):
        cpu, mem = by.get("cpu_percent"), by.get("mem_used_bytes")
        total = {"sent": None, "recv": None}
        for metric, samples in by.items():
            found = _IFACE.match(metric)
            if found and found.group(1) != "lo" and len(samples):
                total[found.group(2)] = (total[found.group(2)] or 0.0) + float(samples[-1])
        job_cpu, job_rss = by.get("job_cpu_percent"), by.get("job_rss_bytes")
        rows.append(NodeRow(host, max(len(samples) for samples in by.values()),
                            float(cpu.mean()) if cpu is not None and len(cpu) else None,
                            float(mem.max()) if mem is not None and len(mem) else None, total["sent"], total["recv"],
                            float(job_cpu.mean()) if job_cpu is not None and len(job_cpu) else None,
                            float(job_rss.max()) if job_rss is not None and len(job_rss) else None))
    return rows
