"""GPU idle because of the host: the devices wait, with nothing queued, for the host to launch their work.

It measures, per device, the idle time waiting for the host (:mod:`~ddltrace.analyses.gpu_idle`: each idle gap up
to the end of the launch call of the work that ends it) as a share of the device's window. A finding when the
median over the devices of every rank reaches ``gpu.host_wait_min`` (20 %). It says which kind of host-bound:
**launch-bound** when ``gpu.launch_short_share_min`` (half) or more of the devices' host wait is in gaps whose
host wait is under 1 ms (:data:`~ddltrace.analyses.gpu_idle.SHORT_GAP_NS`: the host's overhead between one launch
and the next, which fusing kernels or CUDA graphs remove), else the host is away between launches for longer (the
input pipeline, a collective on the host, a synchronisation). Then the host's own lanes say where it was in those
long waits (:mod:`~ddltrace.analyses.gpu_idle`'s ``long_in_*``, summed over the devices): the largest of in its
collectives, synchronising, in the framework's CPU ops (the op that overlaps them most is named: Kineto's
TensorBoard ResNet-50 worker, ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``, 284 of its 287 ms)
or outside them (Python, a sleep, an input pipeline in another process) is in the title, and the advice is that
case's. The median kernel
against its launch call (:mod:`~ddltrace.analyses.gpu_launch`) is evidence, not the test: on Kineto's TensorBoard
ResNet-50 worker the kernels are shorter than their launches, yet 76 % of its host wait is in gaps over 1 ms (its
DataLoader, the tutorial's diagnosis), and on sample_traces/h100-ddp/hostbound 95 % (a 30 ms sleep a step).
Needs the correlation ids that link launches to their kernels (Kineto; a CUDA graph's launch to the graph's kernels:
JAX's XPlane).

Cost: the median over the devices of each device's host-wait time (the device time the job gets back if the host
keeps it fed). The share and the time are each a median over the devices: with an even count, or devices of
unequal windows, they are not one device's pair.
"""

from __future__ import annotations

import numpy as np

from ddltrace.analyses.findings import Finding, Quantity, detector

LAUNCH_ADVICE = ("Launch-bound: the device waits for the host's overhead between launches. Fuse kernels "
                 "(torch.compile, fused optimizers), capture the step in CUDA graphs, use larger batches per "
                 "kernel, and keep Python off the launch path.")
WHERE = {"comm": "in its collectives", "sync": "synchronising", "ops": "in {op}", "outside": "outside the "
         "framework's ops"}
ADVICE = {
    "comm": ("The devices wait while the host runs its collectives: a host backend (gloo) moves the tensors through "
             "host memory and blocks the step on the slowest rank. Use NCCL, which keeps them on the devices and "
             "overlaps the backward pass, and look for a rank the others wait for (the straggler at the host "
             "collectives)."),
    "sync": ("The host waits for the devices (cudaStreamSynchronize, .item(), .cpu(), printing a loss) and then has "
             "nothing queued: remove the synchronisations from the step or queue the next work before them."),
    "ops": ("The host is busy in {op} between launches: if it is the input pipeline, feed it ahead (DataLoader "
            "num_workers, pin_memory, prefetching); otherwise move that CPU work off the training step."),
}
HOST_ADVICE = ("The host is busy between launches: look at its lanes in the gaps. Feed the input pipeline ahead "
               "(DataLoader num_workers, pin_memory, prefetching), remove synchronisations (.item(), .cpu(), "
               "printing a loss every step), and move host-side work off the training loop.")


@detector("gpu_host_bound", "GPU idle waiting for the host", {"device", "launch_links"})
def detect(runs, th) -> list[Finding]:
    """Median device idle share waiting for the host at or above gpu.host_wait_min (see the module docstring)."""
    findings = []
    for run in runs:
        idle = run.gpu.idle_table()
        idle = idle[idle["window_ns"] > 0]
        if not len(idle):
            continue
        share = idle["share_host_wait"].to_numpy(float)
        median = float(np.median(share))
        if median < th["gpu.host_wait_min"]:
            continue
        launches = run.gpu.launch_table()
        launches = launches[launches["launches"] > 0]  # (a rank of graph launches only: 0 launches, no medians)
        cpu = float(launches["cpu_duration_median_ns"].median())
        gpu = float(launches["gpu_duration_median_ns"].median())
        short = float(idle["host_wait_short_ns"].sum()) / max(1.0, float(idle["host_wait_ns"].sum()))
        launch_bound = short >= th["gpu.launch_short_share_min"]
        lost = float(np.median(idle["host_wait_ns"]))
        where, parts, op = _where(idle)
        worst = idle.iloc[int(np.argmax(share))]
        findings.append(Finding(
            id="gpu_host_bound",
            title=f"GPU idle waiting for the host ({'launch-bound' if launch_bound else f'the host {where}'}): "
                  f"{Quantity(median, 'fraction')} of a device's window with nothing queued (the median over "
                  f"{len(idle)} device{'s' if len(idle) > 1 else ''})",
            severity="warning",
            evidence={"host_wait_share_median": Quantity(median, "fraction"),
                      "host_wait_share_max": Quantity(float(worst["share_host_wait"]), "fraction"),
                      "host_wait_max_rank": Quantity(int(worst["rank"]), "rank"),
                      "host_wait_median": Quantity(lost, "ns"),
                      "idle_median": Quantity(float(np.median(idle["idle_ns"])), "ns"),
                      "gaps_with_host_wait": Quantity(int(idle["host_wait_gaps"].sum()), "gaps"),
                      "host_wait_in_short_gaps": Quantity(short, "fraction"),
                      **{f"long_waits_{k}": Quantity(v, "fraction") for k, v in parts.items() if any(parts.values())},
                      **({"launch_cpu_duration_median": Quantity(cpu, "ns"),
                          "kernel_gpu_duration_median": Quantity(gpu, "ns"),
                          "short_kernels": Quantity(int(launches["short_kernels"].sum()), "kernels"),
                          "launches": Quantity(int(launches["launches"].sum()), "launches")}
                         if len(launches) else {})},  # (HTA's launch set: none where every launch is a graph's)
            ranks=sorted({int(r) for r in idle["rank"][share >= th["gpu.host_wait_min"]]}),
            phase="all",
            advice=LAUNCH_ADVICE if launch_bound else ADVICE.get(where_key(parts), HOST_ADVICE).format(op=op),
            store=run.name, cost_ns=lost,
            cost_basis="the median over the devices of each device's idle time waiting for the host, each idle gap "
                       "up to the end of the launch call of the work that ends it"))
    return findings


def where_key(parts: dict[str, float]) -> str:
    """Which of the long waits' parts is the largest ("comm", "sync", "ops", "outside"); "outside" where none."""
    return max(parts, key=parts.get) if any(parts.values()) else "outside"


def _where(idle) -> tuple[str, dict[str, float], str]:
    """(where the host was in the devices' long host waits, in words; each part's share of them; the CPU op that
    overlaps them most)."""
    columns = {"comm": "long_in_comm_ns", "sync": "long_in_sync_ns", "ops": "long_in_ops_ns",
               "outside": "long_outside_ns"}
    total = sum(float(idle[c].sum()) for c in columns.values())
    parts = {k: float(idle[c].sum()) / total if total else 0.0 for k, c in columns.items()}
    top = idle.sort_values("long_top_op_ns", ascending=False).iloc[0]
    op = str(top["long_top_op"]) if top["long_top_op_ns"] > 0 else "the framework's CPU ops"
    return WHERE[where_key(parts)].format(op=op), parts, op
