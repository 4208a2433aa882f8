"""What each analysis needs from its input, what a store holds, and which analyses cannot be made from it.

A store's *capabilities* (:data:`CAPABILITIES`) come from its manifest and its MPI calls:

* ``timeline``: every rank holds real time-ordered intervals (a collector's or a tracer's records). A rank whose
  manifest entry says ``aggregate: true`` (IPM's XML profile, CNTK's summary) holds per-call totals that the
  importer laid end to end: their sums per category are the file's, their order and start times are invented.
* ``aggregates``: every rank holds per-call totals only.
* ``totals``: time per category per rank over the whole run (a timeline or aggregates both give it).
* ``messages``: point-to-point calls (MPI_Sendrecv among them, :data:`~ddltrace.analyses.wait_states.P2P`) with a
  partner rank on two or more ranks of a timeline (Late Sender, Late Receiver, a parameter server's star).
* ``collectives``: collective calls on two or more ranks of a timeline (Wait at Barrier, Wait at N x N, ...).
* ``mpi_calls``: ``messages`` or ``collectives``.
* ``p2p_partners``: the partner of every point-to-point call: a timeline's calls (a call not there was not made),
  or per-call totals that name the partner rank (IPM's hash entries, MPI_Sendrecv's too), on at least one rank.
* ``hosts``: ranks on two or more hosts (the manifest's ``host`` of each rank), for the analyses across nodes.
* ``open_calls``: a rank stopped inside an MPI call (the manifest's ``open_calls`` of a rank, which the PMPI
  collector's records give when the job was interrupted or killed).
* ``staleness_log``: the staleness of each applied gradient (the workload's gradients.csv, or counters named
  ``staleness``).
* ``host_comm``, ``host_bytes``: a host backend's collective spans (PyTorch's ``gloo:all_reduce``, ...), and their
  payload bytes (:mod:`~ddltrace.analyses.host_collectives`).

Each analysis declares the capabilities it needs (:class:`Requirement`): the detectors with
:func:`~ddltrace.analyses.findings.detector`, the other analyses in :data:`ANALYSES`. An analysis runs only on the
stores that hold all of them; for the others, :class:`Skipped` says which analysis was not made, for which store,
and why, in words.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

#: Every capability, with what it means in the words a report uses.
CAPABILITIES: dict[str, str] = {
    "timeline": "a real timeline (calls with their own start times)",
    "aggregates": "per-call totals per rank only",
    "totals": "time per category per rank",
    "communication": "communication between ranks (two or more ranks, or communication time on a rank)",
    "two_workers": "two or more workers (a worker is slow only beside another)",
    "one_run": "ranks of one run (the import found the ranks' times in groups that do not overlap: files of "
               "separate runs)",
    "messages": "point-to-point calls with their partner ranks, on two or more ranks",
    "collectives": "collective calls on two or more ranks",
    "mpi_calls": "MPI point-to-point or collective calls on two or more ranks",
    "p2p_partners": "the partner rank of each point-to-point call (a timeline's calls, or totals per partner)",
    "staleness_log": "a staleness log (the staleness of each applied gradient)",
    "open_calls": "calls still open when the job was stopped (ranks stopped inside an MPI call: the records of a "
                  "`ddltrace run` whose job was interrupted or killed)",
    "hosts": "ranks on two or more hosts",
    "device": "device work (kernels, copies or collectives on a device lane)",
    "streams": "stream ids on every device lane (its kernels' CUDA/HIP stream)",
    "device_comm": "communication kernels on a device",
    "device_ranks": "device work on two or more ranks",
    "correlation": "correlation ids linking each CPU launch to its kernel",
    "launch_links": "correlation ids linking a CPU launch (a runtime call, or a CUDA graph's launch) to its kernels",
    "device_copies": "memory copies or fills on a device",
    "nvml": "the NVML sampler's GPU counters (ddltrace run on a machine with an NVIDIA driver)",
    "allocator": "the framework allocator's events (PyTorch's [memory] events: a profile with profile_memory=True)",
    "link_profile": "the network's calibrated bandwidth (a hardware profile's r_net, --profile)",
    "device_bytes": "payload bytes of the device's collectives or copies (the timeline's bytes column)",
    "host_comm": "collective spans of a host backend (PyTorch's gloo: gloo:all_reduce, ...)",
    "host_bytes": "payload bytes of the host backend's collectives (the timeline's bytes column; PyTorch: a profile "
                  "with record_shapes, ddltrace run --framework pytorch --record-shapes)",
}


@dataclass(frozen=True)
class Requirement:
    """An analysis (``title``, in a person's words) and the capabilities every store it reads must hold.

    ``min_stores``: how many stores it compares (a scaling study needs runs at two or more worker counts);
    ``series``: what those stores must differ in, in words; ``part_of``: the analysis it is a part of (a column
    group of its table), judged only on the stores that one is made from.
    """

    title: str
    needs: frozenset[str] = frozenset()
    min_stores: int = 1
    series: str = ""
    part_of: str = ""


@dataclass(frozen=True)
class Skipped:
    """An analysis that could not be made from this input: its ``analysis`` key, ``title``, the ``store`` (or the
    series), what it ``needs`` that the input lacks and what the input ``holds``, in words."""

    analysis: str
    title: str
    store: str
    needs: str
    holds: str

    @property
    def reason(self) -> str:
        return f"needs {self.needs}; the input holds {self.holds}"

    def to_dict(self) -> dict:
        return {**asdict(self), "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.title}: {self.reason}"


#: The analyses that are not detectors (the detectors declare theirs when they register).
ANALYSES: dict[str, Requirement] = {
    "phases": Requirement("phases and steps (initialisation, steady state, finalisation)", frozenset({"timeline"})),
    "breakdown": Requirement("time per category per rank", frozenset({"totals"})),
    "breakdown_by_phase": Requirement("time per category per rank in each phase", frozenset({"timeline"})),
    "wait_states": Requirement("wait-state times per rank (Scalasca's patterns)",
                               frozenset({"timeline", "mpi_calls"})),
    "timeline_figures": Requirement("per-rank timeline figures", frozenset({"timeline"})),
    "node_traffic": Requirement("per-node view (time and traffic of each node)", frozenset({"totals", "hosts"})),
    "node_p2p": Requirement("point-to-point traffic within and between nodes, per node",
                            frozenset({"p2p_partners", "hosts"}), part_of="node_traffic"),
    "node_collectives": Requirement("collectives within and spanning nodes, and the bandwidth of the messages "
                                    "between nodes, per node (instances and transfers matched in time)",
                                    frozenset({"timeline", "hosts"}), part_of="node_traffic"),
    "scaling": Requirement("scaling study (Chang's Lemma 3.1)", frozenset({"timeline"}), min_stores=2,
                           series="runs of one job at two or more worker counts"),
}


#: The GPU analyses (:mod:`ddltrace.analyses.gpu_analysis`), with HTA's definitions.
GPU_ANALYSES: dict[str, Requirement] = {
    "gpu_temporal": Requirement("GPU temporal breakdown per device (idle / compute / non-compute)",
                                frozenset({"device"})),
    "gpu_temporal_streams": Requirement("GPU temporal breakdown per stream", frozenset({"device", "streams"})),
    "gpu_kernels": Requirement("GPU kernel breakdown (time by class and by kernel, top kernels per rank)",
                               frozenset({"device"})),
    "gpu_kernels_across_ranks": Requirement("GPU kernel time across ranks (per-rank distribution)",
                                            frozenset({"device", "device_ranks"})),
    "gpu_overlap": Requirement("communication-computation overlap per rank (HTA's definition)",
                               frozenset({"device", "device_comm"})),
    "gpu_launches": Requirement("launch statistics (CUDA's or HIP's) and queue length per stream",
                                frozenset({"device", "correlation"})),
    "gpu_idle": Requirement("GPU idle time waiting for the host (host wait, other)",
                            frozenset({"device", "launch_links"})),
    "gpu_stream_idle": Requirement("GPU idle time per stream (HTA's: host wait, kernel wait, other)",
                                   frozenset({"device", "streams", "correlation"})),
    "gpu_collectives": Requirement("collective instances (collective, algorithm, duration)",
                                   frozenset({"device", "device_comm"})),
    "gpu_collective_skew": Requirement("collectives matched across ranks (start skew, the late rank)",
                                       frozenset({"device", "device_comm", "device_ranks"})),
    "gpu_collective_bandwidth": Requirement("collectives' bus bandwidth (nccl-tests' definitions)",
                                            frozenset({"device", "device_comm", "device_bytes"})),
    "gpu_nvml": Requirement("NVML counters joined with the trace (utilisation, memory, power, clocks, PCIe)",
                            frozenset({"device", "nvml"})),
    "gpu_operators": Requirement("device time by the host operator that launched it (self and total)",
                                 frozenset({"device", "correlation"})),
    "gpu_allocator": Requirement("memory the framework's allocator held per device (peak, when, growth)",
                                 frozenset({"device", "allocator"})),
    "gpu_memcpy": Requirement("memory copies per direction (H2D, D2H, D2D: count, time)",
                              frozenset({"device", "device_copies"})),
    "gpu_memcpy_bandwidth": Requirement("memory-copy bandwidth per direction, in total and over time",
                                        frozenset({"device", "device_copies", "device_bytes"})),
}
#: The analyses of a host backend's collectives (:mod:`ddltrace.analyses.host_collectives`), listed as not made only
#: on a store that holds such collectives.
HOST_ANALYSES: dict[str, Requirement] = {
    "host_collectives": Requirement("host backend's collectives (gloo: instances, duration, skew across ranks)",
                                    frozenset({"host_comm"})),
    "host_collective_bandwidth": Requirement("host backend's collectives' bus bandwidth (nccl-tests' definitions)",
                                             frozenset({"host_comm", "host_bytes"})),
}
#: On a store with no device work, the GPU analyses are listed as this one line (its key: :data:`NO_DEVICE`); the
#: text and the report name the GPU findings not made for the same reason in it (:func:`said_once`).
GPU_ALL = Requirement("GPU analyses (temporal, kernel, overlap and launch breakdowns)", frozenset({"device"}))
NO_DEVICE = "gpu"


#: ``ddltrace model fit`` (:mod:`~ddltrace.analyses.fit_hashemi`): each worker's phases, on a series of runs.
FIT = Requirement("Hashemi model fit", frozenset({"timeline"}), min_stores=2,
                  series="runs of one job at two or more worker counts")


def capabilities(store, message_ranks: int = 0, collective_ranks: int = 0) -> tuple[frozenset[str], str]:
    """(capabilities, what the store holds in words) of ``store``; ``message_ranks`` and ``collective_ranks``
    count its ranks with point-to-point calls that name a partner, and with collective calls (from each rank's
    :func:`~ddltrace.analyses.wait_states.mpi_calls`)."""
    ranks = list(store.ranks)
    aggregate = [r for r in ranks if store.rank_info(r).get("aggregate")]
    have: set[str] = set()
    if ranks:
        have.add("totals")
    if len({str(store.rank_info(r).get("host") or "") for r in ranks} - {""}) >= 2:
        have.add("hosts")
    if any(open_calls(store, r) for r in ranks):
        have.add("open_calls")
    if ranks and not aggregate:
        have.update({"timeline", "p2p_partners"})
        if message_ranks >= 2:
            have.add("messages")
        if collective_ranks >= 2:
            have.add("collectives")
        if have & {"messages", "collectives"}:
            have.add("mpi_calls")
    elif aggregate and len(aggregate) == len(ranks):
        have.add("aggregates")
        if message_ranks:
            have.add("p2p_partners")
    return frozenset(have), describe_holding(store, aggregate)


def open_calls(store, rank: int) -> list[str]:
    """The names of the calls rank ``rank`` was inside when it stopped (its manifest entry's ``open_calls``)."""
    calls = store.rank_info(rank).get("open_calls")
    return [c for c in calls if isinstance(c, str)] if isinstance(calls, list) else []


def describe_holding(store, aggregate: list[int]) -> str:
    """What the store holds, in words, for a reason why an analysis was not made."""
    ranks = list(store.ranks)
    if not ranks:
        return "no ranks"
    if not aggregate:
        return f"a timeline of {len(ranks)} rank{'s' if len(ranks) != 1 else ''}"
    formats = sorted({str(store.rank_info(r).get("format", "") or "") for r in aggregate} - {""})
    source = f" ({', '.join(formats)})" if formats else ""
    if len(aggregate) == len(ranks):
        return (f"per-call totals per rank{source}, laid end to end by the importer: their sums per category are "
                f"the file's, their order and start times are not")
    shown = ", ".join(map(str, aggregate[:8])) + (f", ... ({len(aggregate)} ranks)" if len(aggregate) > 8 else "")
    return f"per-call totals{source} on rank(s) {shown}, a timeline on the others"


def missing(requirement: Requirement, have: frozenset[str]) -> str | None:
    """What one store lacks to feed ``requirement``, in words (None when it has it all)."""
    lacking = [what for c, what in CAPABILITIES.items() if c in requirement.needs and c not in have]
    return "; ".join(lacking) if lacking else None


def check(key: str, requirement: Requirement, runs: list) -> tuple[list, list[Skipped]]:
    """The runs ``requirement`` can be made from, and a :class:`Skipped` for each store (or the series) it cannot."""
    usable, skipped = [], []
    for run in runs:
        lacking = missing(requirement, run.capabilities)
        if lacking is None:
            usable.append(run)
        else:
            skipped.append(Skipped(key, requirement.title, run.name, lacking, run.holding))
    if requirement.min_stores > 1 and len(usable) < requirement.min_stores:
        if skipped:  # each store already says why
            return [], skipped
        given = f"{len(runs)} store{'s' if len(runs) != 1 else ''}"
        skipped.append(Skipped(key, requirement.title, ", ".join(r.name for r in runs),
                               f"{requirement.series} ({requirement.min_stores} or more stores)", given))
        usable = []
    return usable, skipped


@dataclass(frozen=True)
class NotMade:
    """One analysis not made, said once for every store it was not made from (:func:`group`): its ``title``,
    what it ``needs``, the ``stores`` (or series) in the order given, and ``holds``: what the input holds where
    that is not the store's own description (a count short of a threshold, no device work), with its stores."""

    title: str
    needs: str
    stores: tuple[str, ...]
    holds: tuple[tuple[str, tuple[str, ...]], ...]

    def line(self, several: bool, every: tuple[str, ...] = ()) -> str:
        """'title (store, ...): needs ...; store holds ...' (the stores named when ``several`` stores are
        reported; else 'title: needs ...; the input holds ...'; 'each holds' when all its stores hold the same)."""
        return self.title + self.rest(several, every)

    def rest(self, several: bool, every: tuple[str, ...] = ()) -> str:
        """The line after the title: ' (store, ...): needs ...; ...'; ' (every store)' when its stores are all of
        ``every`` (the stores reported)."""
        where = ""
        if several:
            where = " (every store)" if set(self.stores) == set(every) else f" ({', '.join(self.stores)})"
        held = f"; {self.held()}" if self.holds else ""
        return f"{where}: needs {self.needs}{held}"

    def held(self, named: bool = False) -> str:
        """What the input holds where that is not a store's own description: 'the input holds ...', 'each holds
        ...', 'STORE holds ...' ('; '-joined); ``named``: each store named ('STORE, STORE hold ...'), for a line
        that does not name them after the title."""
        return "; ".join(f"{self._who(stores, named)} {holds}" for holds, stores in self.holds)

    def _who(self, stores: tuple[str, ...], named: bool = False) -> str:
        if stores == self.stores and not named:
            return "the input holds" if len(stores) == 1 else "each holds"
        return f"{', '.join(stores)} hold{'s' if len(stores) == 1 else ''}"


def for_want_of_device(skipped: list[Skipped]) -> list[Skipped]:
    """The entries of ``skipped`` (the GPU detectors') not made for want of device work on a store whose GPU
    analyses line (:data:`NO_DEVICE`) already says it holds none."""
    no_device = {s.store for s in skipped if s.analysis == NO_DEVICE}
    device = CAPABILITIES["device"]
    return [s for s in skipped
            if s.store in no_device and s.analysis != NO_DEVICE and device in s.needs.split("; ")]


def said_once(skipped: list[Skipped]) -> list[Skipped]:
    """``skipped`` as the text and the report say it: on a store with no device work, the GPU findings not made
    (:func:`for_want_of_device`) are named in its GPU analyses line, "GPU analyses (...) and GPU findings (...):
    needs device work", and not listed again each with the same reason."""
    folded = for_want_of_device(skipped)
    findings: dict[str, list[str]] = {}
    for s in folded:
        findings.setdefault(s.store, []).append(s.title)
    out = []
    for s in skipped:
        if s in folded:
            continue
        if s.analysis == NO_DEVICE and s.store in findings:
            s = replace(s, title=f"{s.title} and GPU findings ({', '.join(findings[s.store])})")
        out.append(s)
    return out


def not_made_json(skipped: list[Skipped]) -> list[dict]:
    """``skipped`` for ``analyze --json`` and the report's findings.json: one entry per store and analysis, for
    machines; one that the text and the report say in its store's GPU analyses line (:func:`said_once`) has
    ``said_with``: that line's key."""
    folded = for_want_of_device(skipped)
    return [{**s.to_dict(), **({"said_with": NO_DEVICE} if s in folded else {})} for s in skipped]


def group(skipped: list[Skipped], holdings: dict[str, str]) -> list[NotMade]:
    """The analyses not made (:func:`said_once`), each once with the stores it was not made from (in the order
    first listed): the same title and needs on several stores is one :class:`NotMade`. ``holdings``: what each
    store holds in words (:attr:`~ddltrace.analyses.run_analysis.RunAnalysis.holding`), said once per store beside
    the list; a reason's ``holds`` other than that (or of a series) is kept with the stores it is of."""
    groups: dict[tuple[str, str], dict] = {}
    for s in said_once(skipped):
        entry = groups.setdefault((s.title, s.needs), {"stores": [], "holds": {}})
        if s.store not in entry["stores"]:
            entry["stores"].append(s.store)
        if holdings.get(s.store) != s.holds:
            named = entry["holds"].setdefault(s.holds, [])
            if s.store not in named:
                named.append(s.store)
    return [NotMade(title, needs, tuple(e["stores"]), tuple((h, tuple(st)) for h, st in e["holds"].items()))
            for (title, needs), e in groups.items()]


@dataclass(frozen=True)
class SaidOnce:
    """What the input holds (``held``: :meth:`NotMade.held`), said once for the ``analyses`` it stops, whose lines
    then say only what each needs: a one-rank GPU trace's "device work on 1 rank, no communication kernel, ..."
    stops several GPU analyses."""

    held: str
    analyses: tuple[NotMade, ...]


def by_holding(groups: list[NotMade], several: bool = False) -> tuple[list[NotMade], list[SaidOnce]]:
    """``groups`` (:func:`group`) as the text and the report say them: those whose ``holds`` (with their stores)
    no other shares, and, for a ``holds`` two or more share, one :class:`SaidOnce` (in the order first listed),
    naming its stores where ``several`` stores are reported."""
    shared: dict[tuple, list[NotMade]] = {}
    for g in groups:
        if g.holds:
            shared.setdefault((g.holds, g.stores), []).append(g)
    shared = {key: members for key, members in shared.items() if len(members) > 1}
    alone = [g for g in groups if (g.holds, g.stores) not in shared]
    return alone, [SaidOnce(members[0].held(named=several), tuple(replace(g, holds=()) for g in members))
                   for members in shared.values()]


def holdings_lines(skipped: list[Skipped], holdings: dict[str, str]) -> list[str]:
    """'STORE holds ...' once for each store whose own description is the ``holds`` of one of ``skipped`` (in the
    order of ``holdings``): what the lines of :func:`group` leave unsaid."""
    named = {s.store for s in skipped if holdings.get(s.store) == s.holds}
    return [f"{store} holds {holds}" for store, holds in holdings.items() if store in named]
