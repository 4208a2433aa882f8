"""Collectives far below the link's bandwidth: the GPUs' collectives move their data much slower than the
network's calibrated bandwidth allows.

It measures, over the collective instances (:mod:`~ddltrace.analyses.gpu_collectives`) of at least
``gpu.busbw_min_bytes`` (1 MiB; smaller ones are latency-bound) with a known size, their bus bandwidth
(nccl-tests' definition, so that it compares with a link's bandwidth whatever the collective) against the
calibrated payload bandwidth of the network, 1 / r_net of a hardware profile (``--profile``). An instance is slow
below ``gpu.busbw_ratio`` (0.5) of it; a finding when the median large instance is slow. Needs the payload bytes
in the store and the profile; a store with no collective that large is listed as not made.

Cost: over the slow instances, their duration minus the time their bytes take at the calibrated bandwidth
(bytes x the collective's bus factor / bandwidth).
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.gpu_collectives import BUS_FACTORS
from ddltrace.analyses.requirements import Skipped
from ddltrace.units import counted, format_bytes, three_digits

ADVICE = ("Check how NCCL runs: NCCL_DEBUG=INFO shows the transport (a fall-back to sockets instead of InfiniBand "
          "or NVLink, NCCL_IB_DISABLE, NCCL_P2P_DISABLE) and the algorithm; check the topology (GPU and NIC on "
          "one PCIe switch, GPUDirect RDMA), other traffic on the link, and run nccl-tests on the same nodes to "
          "see what the link gives.")


@detector("gpu_slow_collectives", "GPU collectives far below the link's bandwidth",
          {"device", "device_comm", "device_bytes", "link_profile"})
def detect(runs, th) -> list[Finding | Skipped]:
    """The median large collective's bus bandwidth below gpu.busbw_ratio of 1 / r_net (see the module
    docstring)."""
    findings = []
    for run in runs:
        link = run.link_bytes_per_s
        instances = run.collectives()
        sized = instances[instances["bytes"].notna() & instances["busbw"].notna()]
        large = sized[sized["bytes"].astype(float) >= th["gpu.busbw_min_bytes"]]
        if not len(large):
            most = f", the largest {format_bytes(float(sized['bytes'].astype(float).max()))}" if len(sized) else ""
            findings.append(short_of("gpu_slow_collectives", run.name, f"collectives of "
                                     f"{format_bytes(th['gpu.busbw_min_bytes'])} or more with a known size "
                                     "(gpu.busbw_min_bytes)", counted(len(sized), "collective") + " with a known "
                                     f"size{most}"))
            continue
        busbw = large["busbw"].astype(float)
        median = float(busbw.median())
        if median >= th["gpu.busbw_ratio"] * link:
            continue
        slow = large[busbw < th["gpu.busbw_ratio"] * link]
        factor = np.array([BUS_FACTORS[c](run.store.world_size) for c in slow["collective"]])
        at_link = slow["bytes"].astype(float).to_numpy() * factor / link * 1e9
        lost = float(np.clip(slow["duration_ns"].astype(float).to_numpy() - at_link, 0, None).sum())
        kinds = ", ".join(sorted(set(slow["collective"])))
        findings.append(Finding(
            id="gpu_slow_collectives",
            title=f"GPU collectives far below the link's bandwidth: median bus bandwidth "
                  f"{three_digits(median / 1e9)} GB/s, {Quantity(median / link, 'fraction')} of the calibrated "
                  f"{three_digits(link / 1e9)} GB/s ({kinds})",
            severity="warning",
            evidence={"busbw_median": Quantity(median / 1e9, "GB/s"),
                      "busbw_max": Quantity(float(busbw.max()) / 1e9, "GB/s"),
                      "calibrated_bandwidth": Quantity(link / 1e9, "GB/s"),
                      "busbw_vs_link_median": Quantity(median / link, "fraction"),
                      "large_collectives": Quantity(len(large), "collectives"),
                      "slow_collectives": Quantity(len(slow), "collectives"),
                      "slow_bytes": Quantity(float(slow["bytes"].astype(float).sum()), "bytes"),
                      "slow_time": Quantity(float(slow["duration_ns"].sum()), "ns"),
                      "time_lost": Quantity(lost, "ns")},
            ranks=list(run.gpu.comm_ranks), phase="all", advice=ADVICE, store=run.name, cost_ns=lost,
            cost_basis="the slow collectives' durations minus the time their bytes take at the calibrated bandwidth "
                       "(bytes x bus factor / (1 / r_net))"))
    return findings
