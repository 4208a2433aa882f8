"""A device's memory nearly full: the framework's allocator reserved almost all of it.

It measures, per rank and device, the most the allocator reserved from the device (PyTorch's ``Total Reserved``,
:mod:`~ddltrace.analyses.allocator_memory`) over the device's memory (Kineto's ``deviceProperties``). A finding when
a device's share reaches ``gpu.reserved_share_max`` (90 %): there PyTorch's caching allocator, when ``cudaMalloc``
fails, frees its cached blocks and tries again, which synchronises the device and costs time each step
(``torch.cuda.memory_stats()['num_alloc_retries']`` counts them), and a larger batch or model fails with an
out-of-memory error. It says how much of the reserve was never allocated at once: the reserve's peak less the peak
allocated, its share of the reserve ``cached_share`` (cached blocks that did not fit later requests: fragmentation,
which ``expandable_segments`` removes). Needs the allocator's totals (PyTorch 1.10 and later) and the device's
memory; a store without them is listed as not made.

Cost: none given (0 ns): the trace does not show the allocator's retries; the finding is a risk, with its margin.
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.findings import Finding, Quantity, detector, short_of
from ddltrace.analyses.requirements import Skipped
from ddltrace.units import counted, format_bytes

CACHED_ADVICE = ("Much of the reserve was never allocated at once: cached blocks that did not fit later requests. "
                 "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch 2.1 and later) so the allocator "
                 "grows segments instead of caching new ones, and watch torch.cuda.memory_stats()"
                 "['num_alloc_retries'].")
FULL_ADVICE = ("The job itself uses the device's memory. Free room with activation checkpointing, a smaller "
               "micro-batch with gradient accumulation, mixed precision, or sharded optimizer state and weights "
               "(ZeRO, FSDP) before growing the batch or the model.")
#: A reserve whose cached share reaches this is said to be fragmented (the advice on expandable segments).
CACHED_SHARE_ADVICE = 0.25


@detector("gpu_memory_full", "a device's memory nearly full", {"device", "allocator"})
def detect(runs, th) -> list[Finding | Skipped]:
    """The most reserved at or above gpu.reserved_share_max of a device's memory (see the module docstring)."""
    findings = []
    for run in runs:
        table = run.allocator
        known = table[table["reserved_share_of_device"].notna()]
        if not len(known):
            findings.append(short_of("gpu_memory_full", run.name, "the allocator's reserved bytes (PyTorch 1.10 "
                                     "and later) and the device's memory (Kineto's deviceProperties)",
                                     counted(len(table), "device") + " with allocator events, none with both"))
            continue
        share = known["reserved_share_of_device"].to_numpy(float)
        full = known[share >= th["gpu.reserved_share_max"]]
        if not len(full):
            continue
        worst = full.iloc[int(np.argmax(full["reserved_share_of_device"].to_numpy(float)))]
        reserved, peak = float(worst["reserved_peak_bytes"]), float(worst["peak_bytes"])
        cached = max(reserved - peak, 0.0)
        memory = float(worst["device_memory_bytes"])
        cached_share = cached / reserved if reserved > 0 else 0.0
        where = f"rank {int(worst['rank'])} {worst['device']}"
        findings.append(Finding(
            id="gpu_memory_full",
            title=f"A device's memory nearly full: the allocator reserved "
                  f"{Quantity(float(worst['reserved_share_of_device']), 'fraction')} of {where}'s "
                  f"{format_bytes(memory)} ({counted(len(full), 'device')} at "
                  f"{Quantity(th['gpu.reserved_share_max'], 'fraction')} or more)",
            severity="warning",
            evidence={"reserved_share_of_device": Quantity(float(worst["reserved_share_of_device"]), "fraction"),
                      "reserved_peak": Quantity(reserved, "bytes"),
                      "allocated_peak": Quantity(peak, "bytes"),
                      "device_memory": Quantity(memory, "bytes"),
                      "headroom": Quantity(max(memory - reserved, 0.0), "bytes"),
                      "cached_never_allocated_at_once": Quantity(cached, "bytes"),
                      "cached_share": Quantity(cached_share, "fraction"),
                      "worst_rank": Quantity(int(worst["rank"]), "rank"),
                      "devices_full": Quantity(len(full), "devices"),
                      "devices_known": Quantity(len(known), "devices")},
            ranks=sorted({int(r) for r in full["rank"]}), phase="all",
            advice=CACHED_ADVICE if cached_share >= CACHED_SHARE_ADVICE else FULL_ADVICE, store=run.name,
            cost_ns=0.0, cost_basis="none: the trace does not show the allocator's retries (a risk, not a time)"))
    return findings
