"""The GPU analyses of one store, gathered rank by rank while :func:`~ddltrace.analyses.run_analysis.analyze_store`
reads it, and what the store holds for them (its device capabilities, :mod:`ddltrace.analyses.requirements`).

Each question has its module: :mod:`~ddltrace.analyses.gpu_temporal` (idle / compute / non-compute per device
and stream), :mod:`~ddltrace.analyses.gpu_launched` (the same and the overlap over the work launched in the
trace, HTA's set, where it is not all the work), :mod:`~ddltrace.analyses.gpu_kernels` (time by class and by
kernel, and across ranks), :mod:`~ddltrace.analyses.gpu_overlap` (communication-computation overlap),
:mod:`~ddltrace.analyses.gpu_launch` (launch statistics), :mod:`~ddltrace.analyses.gpu_operators` (device time
by launching operator),
:mod:`~ddltrace.analyses.gpu_queue` (queue length
per stream), :mod:`~ddltrace.analyses.gpu_idle` (idle time waiting for the host),
:mod:`~ddltrace.analyses.gpu_stream_idle` (idle time per stream, HTA's breakdown),
:mod:`~ddltrace.analyses.gpu_collectives` (collective instances across ranks) and
:mod:`~ddltrace.analyses.gpu_memcpy` (memory copies). Launches and queues need the correlation ids between a CPU
launch and its kernel (the timeline's ``correlation`` column, from Kineto): where no rank has them they are listed
as not made.

Each rank is read once (the map): the per-rank figures, and the small tables the cross-rank figures need (the
communication kernels; the copies per direction, and the copy-bandwidth series of the rank with the highest
peak). :meth:`GpuAnalysis.collectives` matches the ranks' kernels (the reduce).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pandas as pd

from ddltrace.analyses import (
    gpu_collectives,
    gpu_idle,
    gpu_kernels,
    gpu_launch,
    gpu_launched,
    gpu_memcpy,
    gpu_operators,
    gpu_overlap,
    gpu_queue,
    gpu_stream_idle,
    gpu_temporal,
)
from ddltrace.analyses.gpu_lanes import device_work, has_streams


@dataclass
class GpuAnalysis:
    """The GPU figures of one store (all ranks); DataFrames as the modules define them, times in ns."""

    temporal: list = field(default_factory=list)
    classes: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    overlap: list = field(default_factory=list)
    kernel_sums: list = field(default_factory=list)
    device_ranks: list[int] = field(default_factory=list)
    stream_ranks: list[int] = field(default_factory=list)
    comm_ranks: list[int] = field(default_factory=list)
    launches: list = field(default_factory=list)
    worst: list = field(default_factory=list)
    queues: list = field(default_factory=list)
    launch_ranks: list[int] = field(default_factory=list)
    #: ranks with some launch linked to its kernels, a CUDA graph's included (the idle analysis reads them)
    linked_ranks: list[int] = field(default_factory=list)
    #: (rank, its queue-length series) of the rank with the longest queue, for the report's figure
    queue_series: tuple[int, pd.DataFrame] | None = None
    #: per rank, its communication kernels (:func:`~ddltrace.analyses.gpu_collectives.rank_collectives`)
    collective_kernels: list = field(default_factory=list)
    #: per rank, its copies and fills per device and direction (:func:`~ddltrace.analyses.gpu_memcpy.copy_summary`)
    copies: list = field(default_factory=list)
    #: (rank, its copy-bandwidth series) of the rank with the highest peak, for the report's figure
    copy_series: tuple[int, pd.DataFrame] | None = None
    idle: list = field(default_factory=list)
    #: per rank, its idle time per stream by HTA's categories (:mod:`~ddltrace.analyses.gpu_stream_idle`), over all
    #: its device work and over the work launched in the trace (HTA's set) where that is not all of it
    stream_idle: list = field(default_factory=list)
    stream_idle_launched: list = field(default_factory=list)
    #: per rank, the breakdown and overlap of the work launched in the trace (:mod:`~ddltrace.analyses.gpu_launched`)
    launched: list = field(default_factory=list)
    #: per rank, its device time by the host operator that launched it (:mod:`~ddltrace.analyses.gpu_operators`)
    operators: list = field(default_factory=list)

    def add_rank(self, rank: int, timeline: pd.DataFrame) -> None:
        """Measure one rank's device work (nothing when it has none)."""
        work = device_work(timeline)
        if not len(work):
            return
        self.device_ranks.append(rank)
        streams = has_streams(work)
        if streams:
            self.stream_ranks.append(rank)
        if (work["category"] == "comm").any():
            self.comm_ranks.append(rank)
        self.temporal.append(gpu_temporal.temporal_breakdown(rank, work, per_stream=streams))
        self.classes.append(gpu_kernels.by_class(rank, work))
        self.kernels.append(gpu_kernels.top_kernels(rank, work))
        self.overlap.append(gpu_overlap.comm_comp_overlap(rank, work))
        keep = gpu_launched.launched(timeline, work)  # HTA's set: the work launched in the trace
        self.launched.append(gpu_launched.launched_breakdown(rank, work, keep))
        self.kernel_sums.append(work.groupby(["category", "name"])["dur_ns"].sum().rename(rank))
        self.collective_kernels.append(gpu_collectives.rank_collectives(rank, work, timeline))
        copies = gpu_memcpy.rank_copies(rank, work)
        series = gpu_memcpy.bandwidth_series(copies)
        self.copies.append(gpu_memcpy.copy_summary(copies, series=series))
        moved = series[series["direction"] != "fill"]  # a fill moves nothing: no bandwidth (as copy_summary)
        if len(moved) and (self.copy_series is None
                           or moved["bytes_per_s"].max() > self.copy_series[1]["bytes_per_s"].max()):
            self.copy_series = (rank, moved)
        with_graphs = gpu_launch.launch_pairs(timeline, work, graphs=True)  # a graph's kernels wait for its launch
        pairs = gpu_launch.without_graphs(with_graphs)  # HTA's set, for the launch statistics and queue length
        self.idle.append(gpu_idle.idle_breakdown(rank, work, with_graphs, timeline))
        if len(with_graphs):
            self.linked_ranks.append(rank)
            # every launch has an operator around it, a graph's and a blocking copy's too (HTA's list has neither)
            self.operators.append(gpu_operators.by_operator(rank, timeline, with_graphs))
            # HTA's set, and what it leaves out: a rank of graph launches only gets a row of 0 launches (JAX's)
            self.launches.append(gpu_launch.launch_stats(rank, pairs, gpu_launch.left_out(with_graphs), with_graphs))
        if streams:
            self.stream_idle.append(gpu_stream_idle.stream_idle(rank, work, timeline))
            if keep is not None and not keep.all():
                self.stream_idle_launched.append(gpu_stream_idle.stream_idle(rank, work[keep], timeline))
        if len(pairs):
            self.launch_ranks.append(rank)
            self.worst.append(gpu_launch.worst_launches(rank, pairs))
            window = int((timeline["start_ns"] + timeline["dur_ns"]).max() - timeline["start_ns"].min())
            series = gpu_queue.queue_length_series(pairs)
            self.queues.append(gpu_queue.queue_summary(rank, series, window))
            if self.queue_series is None or series["queue_length"].max() > self.queue_series[1]["queue_length"].max():
                self.queue_series = (rank, series)

    def merge(self, other: GpuAnalysis) -> None:
        """Add the figures of ``other`` (other ranks, e.g. one rank's from :func:`~ddltrace.analyses.rank_summary.
        summarise_rank`) after this one's; merged in rank order, the result is that of :meth:`add_rank` in rank
        order."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, list):
                mine.extend(theirs)
        if other.queue_series is not None and (
                self.queue_series is None
                or other.queue_series[1]["queue_length"].max() > self.queue_series[1]["queue_length"].max()):
            self.queue_series = other.queue_series
        if other.copy_series is not None and (
                self.copy_series is None
                or other.copy_series[1]["bytes_per_s"].max() > self.copy_series[1]["bytes_per_s"].max()):
            self.copy_series = other.copy_series

    @staticmethod
    def _frame(parts: list, columns: list[str]) -> pd.DataFrame:
        parts = [p for p in parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)

    def temporal_table(self, streams: bool = False) -> pd.DataFrame:
        """Temporal breakdown per device (``streams``: per stream) of every rank."""
        frame = self._frame(self.temporal, gpu_temporal.COLUMNS)
        return frame[(frame["stream"] != "") if streams else (frame["stream"] == "")].reset_index(drop=True)

    def class_table(self) -> pd.DataFrame:
        return self._frame(self.classes, gpu_kernels.CLASS_COLUMNS)

    def kernel_table(self) -> pd.DataFrame:
        return self._frame(self.kernels, gpu_kernels.KERNEL_COLUMNS)

    def overlap_table(self) -> pd.DataFrame:
        return self._frame(self.overlap, gpu_overlap.COLUMNS)

    def launched_table(self) -> pd.DataFrame:
        """Temporal breakdown and overlap per device over the work launched in the trace (HTA's set), on the
        devices where some work has no launch (:mod:`~ddltrace.analyses.gpu_launched`); empty where none."""
        return self._frame(self.launched, gpu_launched.COLUMNS)

    def launch_table(self) -> pd.DataFrame:
        """Launch statistics (CUDA's or HIP's), one row per rank with correlated launches, 0 launches where they are
        all graph launches or blocking copies (:mod:`~ddltrace.analyses.gpu_launch`)."""
        return self._frame(self.launches, gpu_launch.COLUMNS)

    def worst_launch_table(self) -> pd.DataFrame:
        """Per rank, the launches with the longest delay and CPU duration (:func:`~ddltrace.analyses.gpu_launch.
        worst_launches`)."""
        return self._frame(self.worst, gpu_launch.WORST_COLUMNS)

    def operator_table(self) -> pd.DataFrame:
        """Device time by launching operator, per rank with correlated launches (:mod:`~ddltrace.analyses.
        gpu_operators`)."""
        return self._frame(self.operators, gpu_operators.COLUMNS)

    def queue_table(self) -> pd.DataFrame:
        """Queue length per stream of every rank with correlated launches (:mod:`~ddltrace.analyses.gpu_queue`)."""
        return self._frame(self.queues, gpu_queue.COLUMNS)

    def idle_table(self) -> pd.DataFrame:
        """Idle time per device split into host wait and the rest (:mod:`~ddltrace.analyses.gpu_idle`)."""
        return self._frame(self.idle, gpu_idle.COLUMNS)

    def stream_idle_table(self) -> pd.DataFrame:
        """Idle time per stream by HTA's categories, host wait, kernel wait and other
        (:mod:`~ddltrace.analyses.gpu_stream_idle`); empty where no rank has streams and correlation ids."""
        return self._frame(self.stream_idle, gpu_stream_idle.COLUMNS)

    def stream_idle_launched_table(self) -> pd.DataFrame:
        """:meth:`stream_idle_table` over the work launched in the trace (HTA's set,
        :func:`~ddltrace.analyses.gpu_launched.launched`), for the ranks where that is not all their work."""
        return self._frame(self.stream_idle_launched, gpu_stream_idle.COLUMNS)

    def collective_kernel_table(self) -> pd.DataFrame:
        """The communication kernels of every rank (:data:`~ddltrace.analyses.gpu_collectives.RANK_COLUMNS`)."""
        return self._frame(self.collective_kernels, gpu_collectives.RANK_COLUMNS)

    def collectives(self, world_size: int, link_bytes_per_s: float | None = None) -> pd.DataFrame:
        """The collective instances matched across ranks (:func:`~ddltrace.analyses.gpu_collectives.
        match_instances`); ``world_size``: the job's ranks, for the bus-bandwidth factor."""
        return gpu_collectives.match_instances(self.collective_kernel_table(), world_size, link_bytes_per_s)

    def copy_table(self, calibrated: dict[str, float] | None = None) -> pd.DataFrame:
        """Copies per rank, device and direction (:func:`~ddltrace.analyses.gpu_memcpy.copy_summary`), against
        the ``calibrated`` bandwidths by direction (bytes/s) where given."""
        return gpu_memcpy.against(self._frame(self.copies, gpu_memcpy.COLUMNS), calibrated)

    def across_ranks(self, k: int = gpu_kernels.TOP_K) -> pd.DataFrame:
        """See :func:`~ddltrace.analyses.gpu_kernels.across_ranks`."""
        return gpu_kernels.across_ranks(self.kernel_sums, k)

    def capabilities(self) -> frozenset[str]:
        """The device capabilities of the store (see :data:`~ddltrace.analyses.requirements.CAPABILITIES`)."""
        have = set()
        if self.device_ranks:
            have.add("device")
        if self.device_ranks and len(self.stream_ranks) == len(self.device_ranks):
            have.add("streams")
        if self.comm_ranks:
            have.add("device_comm")
        if len(self.device_ranks) >= 2:
            have.add("device_ranks")
        if self.launch_ranks:
            have.add("correlation")
        if self.linked_ranks:
            have.add("launch_links")
        if any(len(c) for c in self.copies):
            have.add("device_copies")
        if any(c["bytes"].notna().any() for c in self.collective_kernels + self.copies):
            have.add("device_bytes")
        return frozenset(have)

    def holding(self) -> str:
        """What the store holds on its devices, in words (for the reason an analysis was not made)."""
        if not self.device_ranks:
            return "no device work (no kernel, copy or collective on a device lane)"
        n = len(self.device_ranks)
        said = [f"device work on {n} rank{'s' if n != 1 else ''}"]
        if len(self.stream_ranks) < n:
            said.append("device lanes that are not streams (no stream ids)" if not self.stream_ranks else
                        f"stream ids on {len(self.stream_ranks)} of them only")
        said.append("communication kernels" if self.comm_ranks else "no communication kernel")
        said.append("memory copies" if any(len(c) for c in self.copies) else "no memory copy")
        if not any(c["bytes"].notna().any() for c in self.collective_kernels + self.copies):
            said.append("no payload bytes on its collectives or copies")
        if not self.launch_ranks:
            said.append("no correlation ids linking a CPU launch (cudaLaunchKernel, ...) to its kernel"
                        + (" (only CUDA graphs' launches to theirs)" if self.linked_ranks else ""))
        elif len(self.launch_ranks) < n:
            said.append(f"correlated launches on {len(self.launch_ranks)} of them only")
        return ", ".join(said)
