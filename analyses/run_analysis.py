"""One pass over a trace store, rank by rank: phases, steps, breakdowns and wait states, for the detectors.

:func:`analyze_store` reads the store with :meth:`~ddltrace.store.TraceStore.iter_timeline`, so memory holds one
rank's events plus the MPI calls that wait-state matching needs across ranks. The result, a :class:`RunAnalysis`,
is what every detector takes (a list of them for a series of runs). Its ``capabilities`` say what the store holds
(:mod:`ddltrace.analyses.requirements`): on per-call aggregates (IPM) no phases are sought (method "aggregate":
the whole run is one phase, shown as such) and no wait states are matched, since the times are not a timeline.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace.analyses.breakdown import average_and_slowest, breakdown_table, with_wait_at_nxn
from ddltrace.analyses.gpu_analysis import GpuAnalysis
from ddltrace.analyses.host_collectives import SPAN_COLUMNS, instances
from ddltrace.analyses.phases import AFTER_STOP, RankPhases, gradient_steps
from ddltrace.analyses.requirements import (
    ANALYSES,
    GPU_ALL,
    GPU_ANALYSES,
    HOST_ANALYSES,
    NO_DEVICE,
    Skipped,
    capabilities,
    check,
)
from ddltrace.analyses.wait_states import mpi_calls, summarize, wait_states
from ddltrace.errors import DamagedStoreWarning, StoreError
from ddltrace.store import SEPARATE_RUNS, TraceStore, _shown
from ddltrace.timeline import CATEGORIES, empty_timeline

#: Keys of the run metadata that may hold the batch size (samples per worker and step).
BATCH_KEYS = ("batch_size", "batch", "minibatch_size")


@dataclass
class RunAnalysis:
    """Everything the detectors need about one store. Times in ns on the run's common clock."""

    store: TraceStore
    phases: dict[int, RankPhases]
    breakdown: pd.DataFrame
    #: wait-state time and instances per rank, pattern, partner and phase (:mod:`~ddltrace.analyses.wait_exchange`)
    wait_state_summary: pd.DataFrame
    roles: dict[int, str] = field(default_factory=dict)
    #: where ``roles`` come from (:func:`_roles`): said by the manifest or the workload, inferred, or unknown
    roles_basis: str = ""
    host_breakdown: pd.DataFrame | None = None
    device_breakdown: pd.DataFrame | None = None
    gpu: GpuAnalysis = field(default_factory=GpuAnalysis)
    #: how many ranks hold point-to-point calls with a partner, and collective calls
    mpi_ranks: tuple[int, int] = (0, 0)
    #: the network's calibrated payload bandwidth (bytes/s, 1 / r_net of a hardware profile), when one is given
    link_bytes_per_s: float | None = None
    #: the calibrated host-device copy bandwidths (bytes/s) by direction ("H2D", "D2H") of a hardware profile
    copy_bytes_per_s: dict[str, float] | None = None
    #: every rank's host backend's collective spans (:func:`~ddltrace.analyses.host_collectives.rank_collectives`)
    host_collective_spans: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SPAN_COLUMNS))
    _tables: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @cached_property
    def calls(self) -> pd.DataFrame:
        """The MPI calls of every rank (:func:`~ddltrace.analyses.wait_states.mpi_calls`), read again from the store
        when asked for: memory in proportion to the job's calls (the per-node traffic reads them)."""
        parts = [mpi_calls(frame) for _, frame in self.store.iter_timeline(self.ranks)]
        return pd.concat(parts, ignore_index=True) if parts else mpi_calls(empty_timeline())

    def rank_calls(self, rank: int) -> pd.DataFrame:
        """The MPI calls of one rank, read again from the store (once)."""
        key = f"calls:{rank}"
        if key not in self._tables:
            self._tables[key] = mpi_calls(self.store.timeline([rank]))
        return self._tables[key]

    @cached_property
    def _capabilities(self) -> tuple[frozenset[str], str]:
        have, holding = capabilities(self.store, *self.mpi_ranks)
        from ddltrace.analyses.detect_staleness import staleness_log

        log = staleness_log(self)
        if log is not None and len(log):
            have = have | {"staleness_log"}
        if len(self.nvml):
            have = have | {"nvml"}
        if len(self.allocator):
            have = have | {"allocator"}
        if self.store.world_size >= 2 or (self.breakdown["comm"] > 0).any():
            have = have | {"communication"}  # (one rank's waits alone are on its own devices, not on other ranks)
        if len(self.worker_ranks) >= 2:
            have = have | {"two_workers"}
        if not any(p.startswith(SEPARATE_RUNS) for p in self.store.import_problems):
            have = have | {"one_run"}  # (files of separate runs read as ranks: comparing them says nothing)
        spans = self.host_collective_spans
        if len(spans):
            sized = spans["bytes"].notna().any() or spans["share_bytes"].notna().any()
            have = have | {"host_comm"} | ({"host_bytes"} if sized else set())
        return have | self.gpu.capabilities(), holding

    @cached_property
    def nvml(self) -> pd.DataFrame:
        """The NVML sampler's GPU counters of the machine (:func:`~ddltrace.analyses.gpu_counters.nvml_series`),
        empty when the store has none."""
        from ddltrace.analyses.gpu_counters import SERIES_COLUMNS, nvml_series

        if -1 not in self.store.counter_ranks:
            return pd.DataFrame(columns=SERIES_COLUMNS)
        return nvml_series(self.store.counters([-1]))

    @cached_property
    def allocator(self) -> pd.DataFrame:
        """The memory the framework's allocator held per rank and device (:mod:`~ddltrace.analyses.allocator_memory`,
        from its ``[memory]`` events kept as counters), empty when the store has none. Only the ranks whose
        importer kept allocator events (their ``allocator_events``) or that have device work (stores imported before
        the count was kept) are read: a large CPU run's ranks hold only the samplers' counters, and reading them all
        would cost its analysis."""
        from ddltrace.analyses.allocator_memory import COLUMNS, allocator_memory

        ranks = self.store.manifest["ranks"]
        info = {r: ranks.get(str(r)) if isinstance(ranks.get(str(r)), dict) else {} for r in self.store.counter_ranks}
        held = {r for r, i in info.items() if i.get("allocator_events")}
        parts = []
        for rank in sorted((held | set(self.gpu.device_ranks)) & set(info)):
            parts.append(allocator_memory(rank, self.store.counters([rank]), info[rank].get("device_memory_bytes")))
        parts = [p for p in parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)

    def allocator_series(self) -> pd.DataFrame:
        """The bytes the allocator held after each of its events, per rank and device
        (:func:`~ddltrace.analyses.allocator_memory.held_series`), for the report's figure (its ranks' counters read
        again: ``analyze`` needs no series)."""
        from ddltrace.analyses.allocator_memory import SERIES_COLUMNS, held_series

        parts = [held_series(r, self.store.counters([r])) for r in sorted(set(self.allocator["rank"]))]
        parts = [p for p in parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SERIES_COLUMNS)

    @property
    def capabilities(self) -> frozenset[str]:
        """What the store holds (see :data:`~ddltrace.analyses.requirements.CAPABILITIES`), and ``link_profile``
        when a hardware profile gave the network's bandwidth."""
        return self._capabilities[0] | ({"link_profile"} if self.link_bytes_per_s else set())

    @property
    def holding(self) -> str:
        """What the store holds, in words."""
        return self._capabilities[1]

    def collectives(self) -> pd.DataFrame:
        """The GPU collective instances across ranks (:mod:`~ddltrace.analyses.gpu_collectives`), bus bandwidth
        for the store's world size and against the calibrated link where one is given; computed once."""
        key = f"gpu_collectives:{self.link_bytes_per_s}"
        if key not in self._tables:
            self._tables[key] = self.gpu.collectives(self.store.world_size, self.link_bytes_per_s)
        return self._tables[key]

    def host_collectives(self) -> pd.DataFrame:
        """The host backend's (gloo's) collective instances across ranks (:mod:`~ddltrace.analyses.
        host_collectives`), with the bus bandwidth of :meth:`collectives`; computed once."""
        key = f"host_collectives:{self.link_bytes_per_s}"
        if key not in self._tables:
            self._tables[key] = instances(self.host_collective_spans, self.store.world_size, self.host_group_sizes,
                                          self.link_bytes_per_s)
        return self._tables[key]

    @cached_property
    def host_group_sizes(self) -> list[int] | None:
        """The sizes of the process groups the ranks' files list (the Kineto importer's ``group_sizes`` of each
        rank, from ``distributedInfo.pg_config``), ascending; None where no rank's file lists any."""
        listed = [self.store.rank_info(r).get("group_sizes") for r in self.ranks]
        listed = [sizes for sizes in listed if isinstance(sizes, list)]
        return sorted({size for sizes in listed for size in sizes}) if listed else None

    def can(self, analysis: str) -> bool:
        """Whether the analysis ``analysis`` (a key of :data:`~ddltrace.analyses.requirements.ANALYSES`) can be
        made from this store."""
        return ANALYSES[analysis].needs <= self.capabilities

    @property
    def main_phase(self) -> str:
        """The phase the detectors measure: the steady state on a timeline, the whole run on aggregates."""
        return "steady" if "timeline" in self.capabilities else "all"

    @property
    def name(self) -> str:
        """The run's name in the output: its store's path, or the trace a temporary store holds."""
        return self.store.label or str(self.store.path)

    @cached_property
    def config(self) -> dict:
        """The run metadata with the workload's own configuration over it (see :func:`job_config`)."""
        return job_config(self.store)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.phases)

    @property
    def server_ranks(self) -> list[int]:
        return [r for r in self.ranks if self.roles.get(r) == "server"]

    @property
    def worker_ranks(self) -> list[int]:
        """Ranks that train: not parameter servers, schedulers or evaluators (all ranks in an all-reduce job)."""
        return [r for r in self.ranks if self.roles.get(r, "worker") == "worker"]

    @property
    def workers(self) -> int:
        """w: the number of workers (run metadata 'workers', else the ranks that are not servers)."""
        given = self.config.get("workers")
        return int(given) if given else len(self.worker_ranks)

    @property
    def workers_inferred(self) -> str | None:
        """How w was got when the job did not say it (no ``workers`` in its configuration, no roles in the
        manifest), in words; None when it did."""
        if self.config.get("workers") or self.roles_basis.startswith("said"):
            return None
        return f"w and roles {self.roles_basis}"

    @property
    def batch_size(self) -> int | None:
        for key in BATCH_KEYS:
            if self.config.get(key):
                return int(self.config[key])
        return None

    @cached_property
    def phase_table(self) -> pd.DataFrame:
        """One row per rank: start_ns, init_end_ns, steady_end_ns, end_ns, init_work_end_ns, durations, steps."""
        frame = pd.DataFrame([p.to_record() for p in self.phases.values()])
        if not len(frame):
            return frame
        frame = frame.set_index("rank").sort_index()
        frame["role"] = [self.roles.get(r, "") for r in frame.index]
        init = self.table("init")
        frame["init_sync_ns"] = (init["barrier"] + init["wait"]).reindex(frame.index, fill_value=0)
        frame["init_trailing_sync_ns"] = frame["init_end_ns"] - frame["init_work_end_ns"]
        return frame

    @cached_property
    def steps(self) -> pd.DataFrame:
        """Every step of every rank: rank, step, start_ns, end_ns, dur_ns."""
        parts = [p.steps.assign(rank=r) for r, p in self.phases.items() if len(p.steps)]
        if not parts:
            return pd.DataFrame(columns=["rank", "step", "start_ns", "end_ns", "dur_ns"])
        return pd.concat(parts, ignore_index=True)

    def table(self, phase: str = "all") -> pd.DataFrame:
        """Breakdown per rank in a phase (see :func:`~ddltrace.analyses.breakdown.breakdown_table`); computed once.
        The overlap is NaN where the input holds no communication between ranks (one rank whose waits are on its own
        devices: MXNet's ``WaitAll``, the host waiting for its GPU, read 34.7 % "communication overlap")."""
        if phase not in self._tables:
            table = breakdown_table(self.breakdown, phase)
            if "communication" not in self.capabilities:
                table["overlap"] = np.nan
            self._tables[phase] = table
        return self._tables[phase]

    def average_and_slowest(self, phase: str = "steady") -> pd.DataFrame:
        return average_and_slowest(self.table(phase), self.worker_ranks)

    def lanes_table(self, lanes: str, phase: str = "all") -> pd.DataFrame:
        """Like :meth:`table`, over the ``"host"`` lanes or the ``"device"`` lanes (``gpu:...``) alone, of the ranks
        that have a device (empty when none has). A device's time not covered by a device row is idle."""
        key = f"{lanes}:{phase}"
        if key not in self._tables:
            rows = self.host_breakdown if lanes == "host" else self.device_breakdown
            empty = rows is None or not len(rows)
            self._tables[key] = breakdown_table(self.breakdown.iloc[0:0] if empty else rows, phase)
        return self._tables[key]

    @cached_property
    def wait_states(self) -> pd.DataFrame:
        """Every wait-state instance, with the phase of the waiting rank it falls in (none when the store does not
        hold the MPI calls on a timeline that matching needs). Made from :attr:`calls`, all ranks in memory at
        once: the analyses use :attr:`wait_state_summary`, its sums made rank by rank."""
        states = wait_states(self.calls if self.can("wait_states") else self.calls.iloc[0:0])
        phase = np.empty(len(states), dtype=object)
        for rank, idx in states.groupby("rank").groups.items():
            if int(rank) in self.phases:
                phase[states.index.get_indexer(idx)] = self.phases[int(rank)].phase_of(states.loc[idx, "enter_ns"])
        return states.assign(phase=phase)

    def wait_state_table(self, phase: str | None = None) -> pd.DataFrame:
        """Wait-state time (ns) per rank and pattern, optionally in one phase; the whole run's (None) leaves out the
        waits entered after the stop of a stopped job, as the breakdown's whole run does (:data:`~ddltrace.analyses.
        phases.AFTER_STOP`)."""
        states = self.wait_state_summary
        return summarize(states[states["phase"] != AFTER_STOP] if phase is None else states[states["phase"] == phase],
                         self.ranks)

    @property
    def run_span_ns(self) -> int:
        """From the first event of any rank to the last (ns); of a stopped job, to the stop at the latest (each rank's
        :attr:`~ddltrace.analyses.phases.RankPhases.final_end_ns`: the time after the stop is no part of the run)."""
        if not self.phases:
            return 0
        return max(p.final_end_ns for p in self.phases.values()) - min(p.start_ns for p in self.phases.values())


def analyze_store(store: TraceStore | str | os.PathLike, mapper: Callable = map,
                  progress: Callable[[int, int, int], None] | None = None,
                  matching: Callable[[int, int], None] | None = None) -> RunAnalysis:
    """Phases, breakdown (all lanes; for a rank with a device, also its host lanes and its device lanes, each on
    their own) and MPI calls of every rank, reading one rank at a time. A rank of per-call aggregates gets no
    phases (:func:`~ddltrace.analyses.phases.whole_run`).

    Map and reduce: ``mapper(function, ranks)`` (``builtins.map``, a process pool's ``imap``, or one that runs
    tasks on a cluster) applies :func:`~ddltrace.analyses.rank_summary.summarise_rank`, bound to the store's path,
    to every rank and yields the :class:`~ddltrace.analyses.rank_summary.RankSummary` of each (in any order);
    :func:`reduce_summaries` folds them as they come. ``progress(done, total, events)`` is called after each rank
    is read, ``matching(done, total)`` as the ranks' wait states are matched (ranks matched, ranks to match).
    """
    from ddltrace.analyses import rank_summary

    if not isinstance(store, TraceStore):
        store = TraceStore.open(store)
    rank_summary.keep_open(store)
    ranks = store.ranks
    # the absolute path: a mapper's workers may run in another folder (a Dask cluster's)
    summaries = mapper(partial(rank_summary.summarise_rank, os.path.abspath(store.path)), ranks)
    return reduce_summaries(store, summaries, total=len(ranks), progress=progress, matching=matching)


def reduce_summaries(store: TraceStore, summaries: Iterable, total: int | None = None,
                     progress: Callable[[int, int, int], None] | None = None,
                     matching: Callable[[int, int], None] | None = None) -> RunAnalysis:
    """The :class:`RunAnalysis` of ``store`` from its ranks' summaries (an iterable, consumed once, in any order):
    the reduce step of :func:`analyze_store`. A damaged rank is recorded in ``store.damaged`` and named in a
    :class:`~ddltrace.errors.DamagedStoreWarning`; when no rank could be read the :class:`StoreError` names them."""
    from ddltrace.analyses.wait_exchange import WaitStateExchange, empty_summary

    phases: dict[int, RankPhases] = {}
    breakdowns, host, device, gpus, peers, damaged, received = {}, {}, {}, {}, {}, [], {}
    spans: dict[int, pd.DataFrame] = {}
    comm: dict[int, tuple] = {}  # the stretches filed as comm at the host backend's collectives, per rank
    host_comm: dict[int, tuple] = {}
    message_ranks = collective_ranks = 0
    done = events = 0
    with WaitStateExchange() as exchange:
        for summary in summaries:
            done += 1
            events += summary.events
            if summary.damaged is not None:
                damaged.append((summary.rank, summary.damaged))
            elif summary.phases is not None:
                rank = summary.rank
                phases[rank] = summary.phases
                breakdowns[rank] = summary.breakdown
                if summary.device_breakdown is not None:
                    host[rank], device[rank] = summary.host_breakdown, summary.device_breakdown
                gpus[rank] = summary.gpu
                if summary.host_collectives is not None:
                    spans[rank], comm[rank] = summary.host_collectives, summary.collective_comm
                    if summary.host_collective_comm is not None:
                        host_comm[rank] = summary.host_collective_comm
                if summary.steady_peers:
                    peers[rank] = summary.steady_peers
                received[rank] = summary.largest_receive_ends
                message_ranks += summary.has_messages
                collective_ranks += summary.has_collectives
                exchange.add(rank, summary.calls)
                summary.calls = None  # in the scratch folder now
            if progress is not None:
                progress(done, total if total is not None else done, events)
        # a rank read by another process named the store by its absolute path: named here as it was given, so that
        # the parallel and the serial analyses say the same
        given, absolute = str(store.path), os.path.abspath(store.path)
        damaged = [(rank, why.replace(absolute, given) if absolute != given else why) for rank, why in damaged]
        for rank, why in sorted(damaged):
            store.damaged[rank] = why
        if damaged and not store.ranks:
            held = [why for _, why in sorted(damaged)]
            raise StoreError(f"{store.path}: no rank can be read ({held[0]}" +
                             (f"; and {len(held) - 1} more)" if len(held) > 1 else ")"))
        for _, why in sorted(damaged):
            warnings.warn(why, DamagedStoreWarning, stacklevel=2)
        phases = dict(sorted(phases.items()))
        matched = ANALYSES["wait_states"].needs <= capabilities(store, message_ranks, collective_ranks)[0]
        waits = exchange.summary(phases, matching) if matched else empty_summary()
    gpu = GpuAnalysis()
    for rank in sorted(gpus):
        gpu.merge(gpus[rank])
    columns = ["rank", "phase", *CATEGORIES]

    def joined(parts: dict[int, pd.DataFrame]) -> pd.DataFrame:
        return pd.concat([parts[r] for r in sorted(parts)], ignore_index=True) if parts else \
            pd.DataFrame(columns=columns)

    roles, basis = _roles(store, dict(sorted(peers.items())))
    for rank in [r for r in phases if roles.get(r) == "server"]:  # a server's steps are the gradients it receives
        phases[rank] = gradient_steps(phases[rank], received[rank])
    run = RunAnalysis(store, phases, joined(breakdowns), waits, roles, basis, joined(host), joined(device), gpu,
                      (message_ranks, collective_ranks))
    if spans:
        run.host_collective_spans = pd.concat([spans[r] for r in sorted(spans)], ignore_index=True)
        # Wait at N x N: a rank's comm at those collectives until the last rank entered is wait
        run.breakdown = with_wait_at_nxn(run.breakdown, comm, run.host_collective_spans, phases)
        if host_comm:
            run.host_breakdown = with_wait_at_nxn(run.host_breakdown, host_comm, run.host_collective_spans, phases)
    return run


def not_made(runs: list[RunAnalysis]) -> list[Skipped]:
    """The analyses other than the detectors that could not be made from ``runs``, with the reason (a part of an
    analysis only where the analysis is made: the per-node view's columns on a store with ranks on two hosts)."""
    out = []
    for key, requirement in ANALYSES.items():
        judged = [r for r in runs if r.can(requirement.part_of)] if requirement.part_of else runs
        out.extend(check(key, requirement, judged)[1])
    return out + gpu_not_made(runs) + host_not_made(runs)


def host_not_made(runs: list[RunAnalysis]) -> list[Skipped]:
    """The analyses of a host backend's collectives that could not be made, on the stores that hold such
    collectives (a store with none has nothing to say here)."""
    out = []
    for run in runs:
        if "host_comm" not in run.capabilities:
            continue
        ranks = run.host_collective_spans["rank"].nunique()
        holds = (f"gloo's collective spans on {ranks} rank{'s' if ranks != 1 else ''}, none with their payload bytes "
                 f"(a profile without record_shapes)")
        for key, requirement in HOST_ANALYSES.items():
            out.extend(Skipped(s.analysis, s.title, s.store, s.needs, holds) for s in check(key, requirement, [run])[1])
    return out


def gpu_not_made(runs: list[RunAnalysis]) -> list[Skipped]:
    """The GPU analyses that could not be made, with the reason in the words of the device side: one line for a
    store with no device work at all, one per analysis otherwise."""
    out = []
    for run in runs:
        if "device" not in run.capabilities:
            out.append(Skipped(NO_DEVICE, GPU_ALL.title, run.name, "device work on a device lane", run.gpu.holding()))
            continue
        for key, requirement in GPU_ANALYSES.items():
            for skip in check(key, requirement, [run])[1]:
                out.append(Skipped(skip.analysis, skip.title, skip.store, skip.needs, run.gpu.holding()))
    return out


_SAID_ROLES = {"worker": "worker", "chief": "worker", "server": "server", "ps": "server",
               "parameter server": "server", "scheduler": "helper", "evaluator": "helper"}


def _roles(store: TraceStore, peers: dict[int, set[int]]) -> tuple[dict[int, str], str]:
    """'server' / 'worker' / 'helper' per rank: from the manifest when the collector or job said so, else inferred;
    and how they were got, in words (starting 'said' when the manifest or the workload said them).

    Said: a rank's role "server" / "ps" / "worker" / "chief" (TensorFlow's first worker), "scheduler" (MXNet's)
    or "evaluator" (helpers, neither training nor serving), or the workload's ``server_rank``. Inferred: in the steady
    state, a star of point-to-point messages (every rank but one talks only to that one, and there are at least
    two others) has the parameter server at its centre. ``peers``: each rank's partners in point-to-point calls
    within its steady state (:attr:`~ddltrace.analyses.rank_summary.RankSummary.steady_peers`; ranks with none
    left out).
    """
    roles = {}
    for rank in store.ranks:
        role = str(store.rank_info(rank).get("role", "") or "").lower()
        if role in _SAID_ROLES:
            roles[rank] = _SAID_ROLES[role]
    if roles:
        return roles, "said by the ranks' roles in the manifest"
    config = job_config(store)
    if config.get("server_rank") is not None and len(store.ranks) > 1:
        server = int(config["server_rank"])
        return ({r: ("server" if r == server else "worker") for r in store.ranks},
                f"said by the workload's server_rank ({server})")
    unsaid = "no job configuration or roles in the manifest"
    if len(peers) >= 3:
        centres = {next(iter(s)) for s in peers.values() if len(s) == 1}
        if len(centres) == 1:
            centre = centres.pop()
            others = [r for r in peers if r != centre]
            if centre in peers and all(peers[r] == {centre} for r in others) and set(others) <= peers[centre]:
                return ({r: ("server" if r == centre else "worker") for r in store.ranks},
                        f"inferred: the ranks other than the server, rank {centre}, the centre of a star of "
                        f"steady-state messages ({unsaid})")
    why = ("fewer than three ranks exchange point-to-point messages in their steady states: no star to see"
           if len(peers) < 3 else "no star of steady-state messages")
    return {}, f"unknown: every rank counted as a worker ({unsaid}; {why})"


#: Keys of the job's configuration the detectors read as counts (integers from 0 to 2**53) or as positive finite
#: numbers, and as text: a value of another type in the manifest is named in a warning and left out.
CONFIG_COUNTS = ("workers", *BATCH_KEYS, "softsync_n", "server_rank", "n_w", "n_f", "features", "bytes_per_value",
                 "llc_bytes", "epochs", "samples", "gradients_per_update")
CONFIG_NUMBERS = ("alpha", "alpha0", "sample_time", "lr")
CONFIG_TEXTS = ("sync", "init", "compute", "job")


def _config_problem(key: str, value) -> str | None:
    """What is wrong with one value of the job's configuration (None when nothing, or a key not checked)."""
    if value is None:
        return None
    if key in CONFIG_COUNTS and not (type(value) is int and 0 <= value <= 2**53):
        return "is not a count (an integer from 0)"
    if key in CONFIG_NUMBERS and not (type(value) in (int, float) and math.isfinite(value) and value >= 0):
        return "is not a non-negative number"
    if key in CONFIG_TEXTS and not isinstance(value, str):
        return "is not text"
    return None


def _workload(store: TraceStore) -> dict:
    workload = store.manifest.get("workload")
    if workload is not None and not isinstance(workload, dict):
        warnings.warn(f"{store.path / 'manifest.json'}: workload {_shown(workload)} is not a table; left out",
                      DamagedStoreWarning, stacklevel=3)
        return {}
    return workload or {}


def job_config(store: TraceStore) -> dict:
    """What the job said about itself: the run metadata, overlaid with the workload's configuration if any
    (``ddltrace workload`` records it in the manifest: workers, batch, sync, softsync_n, server_rank, ...). A value
    the detectors cannot use (see :data:`CONFIG_COUNTS`) is named in a :class:`DamagedStoreWarning` and left out."""
    config = dict(store.run)
    given = _workload(store).get("config") or {}
    if isinstance(given, dict):
        config.update(given)
    else:
        warnings.warn(f"{store.path / 'manifest.json'}: workload.config {_shown(given)} is not a table; left out",
                      DamagedStoreWarning, stacklevel=2)
    for key in list(config):
        problem = _config_problem(key, config[key])
        if problem:
            warnings.warn(f"{store.path / 'manifest.json'}: the job's {key} {_shown(config.pop(key))} {problem}; "
                          "left out", DamagedStoreWarning, stacklevel=2)
    return config


def ground_truth_path(store: TraceStore) -> Path | None:
    """The job's own ground_truth.json, when the workload recorded where it is."""
    relative = _workload(store).get("ground_truth")
    if not relative or not isinstance(relative, str) or "\0" in relative:
        return None
    try:
        path = (store.path / relative).resolve()
        return path if path.is_file() else None
    except OSError:  # a name too long for the file system, a loop of links: no ground truth to read
        return None
