"""Phases and steps of one rank: initialisation, steady state, finalisation.

Paper 002 (section 5.2) splits a CNTK run into an *initialisation* (reading this rank's share of the data,
setting up, up to processing the first batch) and a *computation phase* of repeated compute-communicate
cycles, and ends with a short finalisation. ddltrace finds the same three phases on each rank by itself:

1. **Step markers.** When the source marks steps (the ``step`` column, e.g. PyTorch's ``ProfilerStep#N``), the
   steady state runs from the start of the first marked step to the end of the last; each step value is one step,
   from its rows' first start to their last end (its device work included) or to the next step's start, whichever
   comes first (:func:`_until_next`).
2. **The repeating pattern.** Otherwise the rank's communication calls (rows in the categories comm, wait and
   barrier, MPI_Init/Finalize excluded) are read as a sequence of name#tag. The period ``p`` is the smallest shift
   under which the sequence matches itself for nearly (95 %) as many positions as the best shift; the cycle is
   the most frequent run of ``p`` names that is not a shorter run repeated. The steady state runs from the first
   place where three cycles (any rotation of it) follow each other to the last such place. Its calls are the
   cycle's and any other that comes there at least once every two cycles (a server's gradients, received anywhere
   among the pull-reply pairs of its cycle); it is extended back over its calls, and forward to the last of its
   calls before which they outnumber the others since that place (a server's requests arrive in no fixed order,
   so three cycles in a row may last only part of its training, and each worker's end-of-work message is another
   call in the server's training, which goes on while the other workers still send): it starts where the call
   before it ends, so the computation of the first batch counts as steady state, and ends where its last call
   ends. Each cycle of ``p`` calls, cut just before the call that follows the longest gap (the compute), is one
   step: a step is compute then communicate; the calls after the last whole cycle, to the end of the steady state,
   are one more (a worker's last batch: its compute and gradient, and no pull after it).
3. **Collectives around point-to-point traffic.** With no regular pattern (a server answering workers in the order
   they come), initialisation ends where the last collective (MPI_Barrier, ...) that starts before the first 10 %
   of the rank's point-to-point calls ends, and finalisation starts at the first collective after the last 10 %.
4. **MPI_Init / MPI_Finalize only.** Otherwise initialisation ends where MPI_Init returns (or at the rank's first
   event) and finalisation starts where MPI_Finalize is entered (or at its last event).

A rank of per-call aggregates (IPM: totals laid end to end) has no phases to find: :func:`whole_run` makes the
whole rank one phase (method "aggregate"), which the breakdown and the detectors read as the whole run.

The initialisation phase runs from the rank's first event; inside it, ``startup_end_ns`` is where the rank's
start-up ended: the end of MPI_Init and of the clock synchronisation that the PMPI collector's MPI_Init runs
before returning (``ddltrace_clock_sync``), the rank's first event when it traced no MPI_Init. ``startup_ns``
(first event to there) is the MPI library's and the launcher's start-up; ``job_init_ns`` (from there to the end of
initialisation) is the job's own initialisation, paper 002's initialisation term (reading this rank's data,
setting up, up to the first batch; its model's T_disk).

**A parameter server's steps.** A server computes no step of its own: it answers its workers' pulls and receives
their gradients in whatever order they come, so one cycle of its repeating pattern is a count of calls with no
meaning in the job (straggler-w4's server repeats a pattern of 9 calls, 3 gradients, and read 171 "steps" for the
514 gradients it received). Once roles are known (:func:`~ddltrace.analyses.run_analysis.analyze_store`), a server
rank's steps are its gradients: :func:`gradient_steps` makes one step per gradient received in its steady state
(``step_unit`` "gradient"), each from the end of the previous gradient's receive (the first from the start of the
steady state) to the end of its own, so ``steps`` counts the gradients and ``step_median_ns`` is the median time
between two. A gradient is a receive of the largest message the server receives from a partner in its steady state
(:func:`largest_receive_ends`; the pulls' requests and the workers' end-of-work messages are small). Under asynchronous
SGD each gradient is one update; n-softsync and hardsync apply n gradients per update, outside MPI, so the trace shows
the gradients, not the updates. A server with step markers keeps them.

**A stopped job.** Where the job was stopped (Ctrl-C, SIGTERM, SIGHUP: the store's ``interrupted_ns``, which
``ddltrace run`` records) before a rank's last event, every phase of the rank ends at the stop at the latest, a step
the stop cut with it, and the rank's time from the stop to its last event (its wait for the stop, up to 5 s, then
its way out: Python's exit, MPI_Finalize) is its part *after the stop* (``stop_ns``, ``after_stop_ns``,
:data:`AFTER_STOP`): no phase of the run, the breakdown's last row, left out of the whole run's shares.

Times are nanoseconds on the run's common clock. ``init_work_end_ns`` is where the rank's own initialisation
work ended: the start of the trailing run of barrier/wait calls (no more than 100 us apart) that close its
initialisation (in a sequential initialisation this is a staircase over ranks, paper 002 figure 7).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ddltrace.analyses.wait_states import (
    COLLECTIVES,
    P2P,
    RECV_BLOCKING,
    RECV_NONBLOCKING,
    WAITS,
    base_name,
    completions,
)
from ddltrace.timeline import CATEGORIES, category_codes
from ddltrace.units import format_ns

INIT_NAMES = frozenset({"MPI_Init", "MPI_Init_thread"})
FINALIZE_NAMES = frozenset({"MPI_Finalize"})
#: The PMPI collector's clock synchronisation, run inside its MPI_Init (start-up) and its MPI_Finalize wrapper
#: (finalisation: every rank waits there for the last to arrive, category ``barrier`` in stores written since
#: session 16, ``other`` before).
CLOCK_SYNC = "ddltrace_clock_sync"
PATTERN_CATEGORIES = ("comm", "wait", "barrier")
SYNC_CATEGORIES = ("wait", "barrier")
PHASES = ("init", "steady", "final")
#: The part of a rank after its job was stopped (an interrupted run: ``RankPhases.stop_ns``): no phase of the run,
#: the breakdown's last row, left out of the whole run's shares (``phase="all"``).
AFTER_STOP = "after_stop"
#: The rows of a rank's breakdown, in order: the three phases, then the part after the stop (empty where none).
PARTS = (*PHASES, AFTER_STOP)
CODE = {c: i for i, c in enumerate(CATEGORIES)}

MAX_PERIOD = 32
MIN_CYCLES = 3
PERIOD_TOLERANCE = 0.95
#: A gap longer than this between two barrier/wait calls is work (reading, computing), not synchronisation.
SYNC_GAP_NS = 100_000


@dataclass
class RankPhases:
    """Phase boundaries of one rank (ns, common clock) and its steps.

    ``method`` says how they were found: "markers", "pattern", "collectives", "mpi" (MPI_Init / MPI_Finalize) or
    "ends" (neither: the rank's first and last event); "aggregate" when there are none to find (per-call totals:
    the whole rank is one phase).
    ``startup_end_ns``: the end of the rank's start-up, MPI_Init (see the module docstring), inside initialisation;
    ``startup_traced`` False where the rank traced no MPI_Init (a framework's profile): ``startup_ns`` is then 0,
    not measured, and shown as '-'.
    ``steps`` has columns step, start_ns, end_ns, dur_ns (one row per step; empty when none was found);
    ``step_unit`` says what one is: "step" (a marked step, or a cycle of the rank's pattern: compute then
    communicate), or "gradient" for a parameter server (:func:`gradient_steps`).
    ``notes``: what the steps' reading had to decide (a marked step whose devices ran it apart: :func:`_marked`).
    ``stop_ns``: where the job was stopped (an interrupted run, the store's ``interrupted_ns``) when that is before
    the rank's last event, else None: every phase ends there at the latest, finalisation with it, and the rank's
    time from there to its last event (``end_ns``) is its part after the stop (``after_stop_ns``), no phase of the
    run (:func:`segment_rank`).
    """

    rank: int
    start_ns: int
    init_end_ns: int
    steady_end_ns: int
    end_ns: int
    init_work_end_ns: int
    startup_end_ns: int
    method: str
    period: int = 0
    steps: pd.DataFrame = field(default_factory=lambda: _steps_frame([], [], []))
    step_unit: str = "step"
    startup_traced: bool = True
    notes: tuple[str, ...] = ()
    stop_ns: int | None = None

    @property
    def final_end_ns(self) -> int:
        """End of finalisation (ns): the stop where the job was stopped before the rank's last event, else that
        event's end."""
        return self.end_ns if self.stop_ns is None else self.stop_ns

    @property
    def init_ns(self) -> int:
        """Duration of initialisation (ns)."""
        return self.init_end_ns - self.start_ns

    @property
    def startup_ns(self) -> int:
        """Duration of the rank's start-up (ns): from its first event to the end of MPI_Init (and of the PMPI
        collector's clock synchronisation inside it)."""
        return self.startup_end_ns - self.start_ns

    @property
    def job_init_ns(self) -> int:
        """Duration of the job's own initialisation (ns): from the end of the rank's start-up (MPI_Init) to the
        end of initialisation; paper 002's initialisation term."""
        return self.init_end_ns - self.startup_end_ns

    @property
    def steady_ns(self) -> int:
        """Duration of the steady state (ns)."""
        return self.steady_end_ns - self.init_end_ns

    @property
    def final_ns(self) -> int:
        """Duration of finalisation (ns), to the stop where the job was stopped (:attr:`final_end_ns`)."""
        return self.final_end_ns - self.steady_end_ns

    @property
    def after_stop_ns(self) -> int:
        """Duration of the rank's part after the stop (ns): from where the job was stopped to its last event's end;
        0 where it was not stopped, or ended before the stop."""
        return self.end_ns - self.final_end_ns

    def edges(self) -> list[int]:
        """The bounds of the breakdown's parts (:data:`PARTS`), ns: start, end of init, of steady, of final, end."""
        return [self.start_ns, self.init_end_ns, self.steady_end_ns, self.final_end_ns, self.end_ns]

    def bounds(self) -> list[tuple[str, int, int]]:
        """[(part, start_ns, end_ns)] for init, steady, final and the part after the stop (:data:`PARTS`)."""
        edges = self.edges()
        return [(part, edges[k], edges[k + 1]) for k, part in enumerate(PARTS)]

    def part_of(self, t_ns) -> np.ndarray:
        """The index in :data:`PARTS` of each time in ``t_ns`` (array-like of ns): its phase, or the part after the
        stop (3) for a time at or after the stop of a stopped job."""
        edges = [self.init_end_ns, self.steady_end_ns] + ([self.stop_ns] if self.stop_ns is not None else [])
        return np.searchsorted(edges, np.asarray(t_ns, dtype=np.int64), side="right")

    def phase_of(self, t_ns) -> np.ndarray:
        """The part name (:data:`PARTS`) of each time in ``t_ns`` (array-like of ns): its phase, or ``after_stop``."""
        return np.asarray(PARTS, dtype=object)[self.part_of(t_ns)]

    def to_record(self) -> dict:
        return {"rank": self.rank, "start_ns": self.start_ns, "init_end_ns": self.init_end_ns,
                "steady_end_ns": self.steady_end_ns, "end_ns": self.end_ns,
                "init_work_end_ns": self.init_work_end_ns, "startup_end_ns": self.startup_end_ns,
                "init_ns": self.init_ns, "startup_ns": self.startup_ns, "job_init_ns": self.job_init_ns,
                "steady_ns": self.steady_ns,
                "final_ns": self.final_ns, "after_stop_ns": self.after_stop_ns, "steps": int(len(self.steps)),
                "step_median_ns": float(self.steps["dur_ns"].median()) if len(self.steps) else float("nan"),
                "step_unit": self.step_unit, "method": self.method, "period": self.period,
                "startup_traced": self.startup_traced}


def _until_next(start: pd.Series, end: pd.Series) -> np.ndarray:
    """Each marked step's end (ns), cut where the next step starts: a device that lags its host runs a step's work
    during the next ones (HTA's negative_queue_length_values_check: five ProfilerSteps of 210-217 ms whose kernels
    ended 377 ms after each step's start), and a step that ran to its last kernel's end overlapped the next; the
    last step keeps its own end, device work included."""
    start, end = start.to_numpy(np.int64), end.to_numpy(np.int64)
    order = np.argsort(start, kind="stable")
    cut = end.copy()
    cut[order[:-1]] = np.minimum(end[order[:-1]], np.maximum(start[order[1:]], start[order[:-1]]))
    return cut


def _device_of(lanes: pd.Series) -> np.ndarray:
    """The device of each row's lane (``gpu:4`` of ``gpu:4/stream:7``), "host" for a host lane; worked out once
    per distinct lane."""
    codes, names = pd.factorize(lanes.astype(str), use_na_sentinel=False)
    head = pd.Series(names, dtype=object).str.split("/", n=1).str[0]
    devices = head.where(head.str.match(r"(?:gpu|device|tpu|xpu):"), "host").to_numpy(dtype=object)
    return devices[codes]


def _marked(marked: pd.DataFrame) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The marked steps (columns step, start, end; ns; in order of start) from the rows that carry a step number,
    and notes. A step's rows on one device form one span; the spans of its devices that overlap or nearly (the gap
    after the ones before no longer than the longest of them) are one step, as the devices of a data-parallel step
    run it together. Device spans further apart are taken as a step of each (the TF2 multi-worker XPlane's step 0
    ran on gpu:4 and, 628 ms later, on gpu:6, about 20 ms each: one step over both read 669 ms), and a note says so;
    the host's rows of the step join its first (a device runs its host's step later, by as many steps as its queue
    holds: that is no step apart)."""
    spans = pd.DataFrame({"step": marked["step"].astype("int64"), "device": _device_of(marked["lane"]),
                          "start": marked["start_ns"], "end": marked["start_ns"] + marked["dur_ns"]}) \
        .groupby(["step", "device"], sort=False).agg(start=("start", "min"), end=("end", "max")).reset_index()
    on_host = spans["device"] == "host"
    devices = spans[~on_host].sort_values(["step", "start"], kind="stable")
    reach = devices.groupby("step", sort=False)["end"].cummax().groupby(devices["step"]).shift()  # the ends before
    longest = (devices["end"] - devices["start"]).groupby(devices["step"]).cummax()
    apart = (devices["start"] - reach > longest).fillna(False)
    spans["part"] = 0
    spans.loc[devices.index, "part"] = apart.astype("int64").groupby(devices["step"]).cumsum()
    spans = spans.sort_values(["step", "part", "start"], kind="stable")
    steps = spans.groupby(["step", "part"], sort=False).agg(start=("start", "min"), end=("end", "max"),
                                                            devices=("device", ", ".join)).reset_index()
    notes = []
    split = steps[steps.groupby("step")["part"].transform("max") > 0]
    for step, part in list(split.groupby("step", sort=True))[:NOTED_STEPS]:
        gap = int((part["start"].iloc[1:].to_numpy() - part["end"].cummax().iloc[:-1].to_numpy()).min())
        said = " and ".join(f"{d} ({format_ns(e - s)})" for d, s, e in part[["devices", "start", "end"]].itertuples(
            index=False))
        notes.append(f"step {step}: its rows on {said} lie {format_ns(gap)} apart: taken as {len(part)} "
                     "steps, one where each ran it")
    if split["step"].nunique() > NOTED_STEPS:
        notes.append(f"and {split['step'].nunique() - NOTED_STEPS} more steps so split")
    frame = steps[["step", "start", "end"]].sort_values("start", kind="stable").reset_index(drop=True)
    return frame, tuple(notes)


#: How many split steps (:func:`_marked`) a rank's notes name one by one.
NOTED_STEPS = 3


def _steps_frame(step, start, end) -> pd.DataFrame:
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    return pd.DataFrame({"step": np.asarray(step, dtype=np.int64), "start_ns": start, "end_ns": end,
                         "dur_ns": end - start})


def whole_run(timeline: pd.DataFrame) -> RankPhases | None:
    """One rank of per-call aggregates: no phases, no steps; the span from its first row to its last is kept as
    the steady state so that the whole-run tables hold all of it (method "aggregate"). None when empty."""
    if not len(timeline):
        return None
    start = int(timeline["start_ns"].min())
    end = int((timeline["start_ns"] + timeline["dur_ns"]).max())
    return RankPhases(int(timeline["rank"].iloc[0]), start, start, end, end, start, start, "aggregate",
                      startup_traced=False)


def segment_rank(timeline: pd.DataFrame, stopped_ns: int | None = None) -> RankPhases | None:
    """Phases and steps of one rank's timeline (rows of one rank); None when the rank has no events.
    ``stopped_ns``: where the job was interrupted (the store's ``interrupted_ns``). Where that is before the rank's
    last event, every phase ends there at the latest (a step with it) and ``stop_ns`` is set: the rank's time from
    the stop to its last event (its wait for the stop, up to 5 s after Ctrl-C, then its way out) is its part after
    the stop, no phase of the run. Counted as finalisation, it made a hung job's sleeping rank read 29.9 % compute
    and 69.2 % barrier over its whole run, where up to the Ctrl-C it read 96.9 % compute (5.13 s of its 7.29 s came
    after the stop, its way out waiting in MPI_Finalize's barrier).

    Vectorised: names, tags and categories are compared as integer codes (each distinct name looked at once),
    so the cost per row is a few numpy operations, not a Python call."""
    found = _segment(timeline)
    if found is None or stopped_ns is None or stopped_ns >= found.end_ns:
        return found
    stop = max(int(stopped_ns), found.start_ns)
    steps = found.steps[found.steps["start_ns"] < stop]
    ends = np.minimum(steps["end_ns"].to_numpy(np.int64), stop)
    return replace(found, init_end_ns=min(found.init_end_ns, stop), steady_end_ns=min(found.steady_end_ns, stop),
                   init_work_end_ns=min(found.init_work_end_ns, stop),
                   startup_end_ns=min(found.startup_end_ns, stop), stop_ns=stop,
                   steps=_steps_frame(steps["step"], steps["start_ns"], ends))


def _segment(timeline: pd.DataFrame) -> RankPhases | None:
    """:func:`segment_rank` without the stop."""
    if not len(timeline):
        return None
    rank = int(timeline["rank"].iloc[0])
    starts = timeline["start_ns"].to_numpy(np.int64)
    order = np.arange(len(starts)) if np.all(starts[1:] >= starts[:-1]) else np.argsort(starts, kind="stable")
    starts = starts[order]
    ends = starts + timeline["dur_ns"].to_numpy(np.int64)[order]
    name_codes, names = pd.factorize(timeline["name"], use_na_sentinel=False)
    name_codes, names = name_codes[order], np.asarray(names, dtype=object)
    categories = category_codes(timeline["category"])[order]
    start, end = int(starts.min()), int(ends.max())

    is_init = np.isin(names, list(INIT_NAMES))[name_codes]
    is_final = np.isin(names, list(FINALIZE_NAMES))[name_codes]
    is_sync = (names == CLOCK_SYNC)[name_codes]
    after_init = int(ends[is_init].max()) if is_init.any() else start
    before_final = int(starts[is_final].min()) if is_final.any() else end
    bounded = bool(is_init.any() or is_final.any())  # by MPI_Init / MPI_Finalize, else by the ends
    if before_final <= after_init:  # an aggregated profile laid out as a timeline: Init and Finalize say nothing
        after_init, before_final, bounded = start, end, False
    # the collector's clock synchronisations are no calls of the job's (a closing one is a barrier: see CLOCK_SYNC)
    pattern = np.isin(categories, [CODE[c] for c in PATTERN_CATEGORIES]) & ~is_init & ~is_final & ~is_sync
    # None: the rank traced no MPI_Init nor clock synchronisation (a framework's profile), so no start-up to measure
    startup = _startup_end(after_init, starts, ends, is_sync, pattern) if is_init.any() or is_sync.any() else None
    closing = is_sync & (starts > max(after_init, startup or after_init))
    if closing.any():  # finalisation begins where the collector's closing synchronisation does, inside MPI_Finalize
        before_final = max(min(before_final, int(starts[closing].min())), after_init)

    steps = timeline["step"]
    if steps.notna().any():
        grouped, notes = _marked(timeline[steps.notna()])
        init_end = max(int(grouped["start"].min()), start)
        steady_end = min(int(grouped["end"].max()), end)
        step_frame = _steps_frame(grouped["step"], grouped["start"], _until_next(grouped["start"], grouped["end"]))
        return replace(_finish(rank, start, startup, init_end, steady_end, end, starts, ends, categories, "markers",
                               0, step_frame), notes=notes)

    tags = timeline["tag"].to_numpy(dtype=np.float64, na_value=np.nan)[order]
    tag_codes = pd.factorize(tags, use_na_sentinel=False)[0]
    calls = pd.factorize(name_codes[pattern].astype(np.int64) * (int(tag_codes.max(initial=0)) + 1)
                         + tag_codes[pattern])[0]  # name#tag of each call, as a code in order of appearance
    found = _periodic_region(calls, starts[pattern], ends[pattern])
    if found is not None:
        a, b, p, offset = found
        t_end = ends[pattern]
        init_end = int(t_end[a - 1]) if a > 0 else after_init
        init_end = max(init_end, after_init)
        steady_end = int(t_end[b])
        first = a + offset
        cut = np.arange(first + p - 1, b + 1, p)  # index of each cycle's last call
        if len(cut) and b > cut[-1]:  # the last batch's compute and push, with no pull after it: a step too
            cut = np.append(cut, b)
        if len(cut) >= MIN_CYCLES:
            step_ends = t_end[cut]
            step_starts = np.concatenate([[t_end[first - 1] if first > 0 else init_end], step_ends[:-1]])
            step_starts = np.maximum(step_starts, init_end)
            step_frame = _steps_frame(np.arange(len(cut)), step_starts, step_ends)
            return _finish(rank, start, startup, init_end, steady_end, end, starts, ends, categories, "pattern", p,
                           step_frame)
    base = np.array([base_name(n) if isinstance(n, str) else n for n in names], dtype=object)
    p2p = np.isin(base, list(P2P))[name_codes] & ~is_init & ~is_final
    collective = (np.isin(base, list(COLLECTIVES))[name_codes] | (categories == CODE["barrier"])) \
        & ~is_init & ~is_final & ~is_sync
    if p2p.sum() >= MIN_CYCLES and collective.any():
        first, last = np.quantile(starts[p2p], [0.1, 0.9])
        opening, closing = collective & (starts <= first), collective & (starts >= last)
        init_end = max(int(ends[opening].max()) if opening.any() else after_init, after_init)
        steady_end = int(starts[closing].min()) if closing.any() else before_final
        if (opening.any() or closing.any()) and steady_end > init_end:
            return _finish(rank, start, startup, init_end, steady_end, end, starts, ends, categories, "collectives", 0,
                           _steps_frame([], [], []))
    steady_end = max(before_final, after_init)
    return _finish(rank, start, startup, after_init, steady_end, end, starts, ends, categories,
                   "mpi" if bounded else "ends", 0, _steps_frame([], [], []))


def largest_receive_ends(calls: pd.DataFrame, init_end_ns: int, steady_end_ns: int) -> np.ndarray:
    """End times (ns, ascending) of one rank's receives of the largest message it receives from a partner in its
    steady state (started at or after ``init_end_ns``, at or before ``steady_end_ns``): a parameter server's
    gradients. ``calls``: the rank's :func:`~ddltrace.analyses.wait_states.mpi_calls`. A blocking receive ends where
    it returns; a non-blocking one where the Wait* that completed it returns (where none did, it is left out)."""
    received = calls[calls["name"].isin(RECV_BLOCKING | RECV_NONBLOCKING) & (calls["peer"] >= 0)
                     & (calls["start_ns"] >= init_end_ns) & (calls["start_ns"] <= steady_end_ns)]
    if not len(received):
        return np.zeros(0, dtype=np.int64)
    largest = received[received["bytes"] == received["bytes"].max()]
    ends = largest["end_ns"].to_numpy(np.int64).copy()
    posted = largest["name"].isin(RECV_NONBLOCKING).to_numpy()
    if posted.any():  # matched to their Wait* among these posts and the waits only
        done = completions(calls[calls.index.isin(largest.index[posted]) | calls["name"].isin(WAITS)])
        known = largest.index[posted].isin(done.index)
        ends[np.flatnonzero(posted)[known]] = done.loc[largest.index[posted][known], "w_leave"].to_numpy(np.int64)
        ends = np.delete(ends, np.flatnonzero(posted)[~known])
    return np.sort(ends)


def gradient_steps(phases: RankPhases, gradient_ends: np.ndarray) -> RankPhases:
    """A parameter server's phases with one step per gradient received (see the module docstring): step k runs from
    the end of gradient k - 1's receive (step 0 from the start of the steady state) to the end of gradient k's.
    ``gradient_ends``: :func:`largest_receive_ends` of the rank. A rank with step markers is returned as it is."""
    if phases.method in ("markers", "aggregate"):
        return phases
    ends = np.asarray(gradient_ends, dtype=np.int64)
    starts = np.concatenate([[phases.init_end_ns], ends[:-1]]) if len(ends) else ends
    return replace(phases, steps=_steps_frame(np.arange(len(ends)), starts, ends), step_unit="gradient")


def _finish(rank, start, startup, init_end, steady_end, end, starts, ends, categories, method, period,
            steps) -> RankPhases:
    init_end = min(max(init_end, start), end)
    steady_end = min(max(steady_end, init_end), end)
    return RankPhases(rank, start, init_end, steady_end, end,
                      _init_work_end(start, init_end, starts, ends, categories),
                      start if startup is None else min(startup, init_end), method, period, steps,
                      startup_traced=startup is not None)


def _startup_end(after_init: int, starts, ends, is_sync, is_call) -> int:
    """End of the rank's start-up (ns): ``after_init`` (the end of MPI_Init, or the rank's first event), or the end
    of the PMPI collector's clock synchronisation (``is_sync`` rows) that follows it before the job's first MPI
    call (``is_call`` rows): the collector's MPI_Init runs it before returning to the job."""
    first_call = starts[is_call & (starts >= after_init)].min(initial=np.iinfo(np.int64).max)
    sync = np.flatnonzero(is_sync & (starts >= after_init) & (starts < first_call))
    return max(after_init, int(ends[sync].max())) if len(sync) else after_init


def _init_work_end(start: int, init_end: int, starts, ends, categories) -> int:
    """Start of the trailing run of barrier/wait rows that closes initialisation (ns). ``categories``: codes
    into CATEGORIES. Walking back from the end of initialisation, a row continues the run while it is a
    barrier/wait row ending no more than :data:`SYNC_GAP_NS` before the run's start so far."""
    inside = np.flatnonzero((ends <= init_end) & (starts >= start))[::-1]
    if not len(inside):
        return init_end
    reached = np.minimum.accumulate(np.concatenate([[init_end], starts[inside]]))  # the run's start after k rows
    sync = np.isin(categories[inside], [CODE[c] for c in SYNC_CATEGORIES])
    stop = ~sync | (reached[:-1] - ends[inside] > SYNC_GAP_NS)
    return int(reached[int(np.argmax(stop)) if stop.any() else len(inside)])


def _periodic_region(names: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """(first index, last index, period, offset of the step cut) of the repeating stretch, or None."""
    n = len(names)
    if n < 2 * MIN_CYCLES:
        return None
    codes = pd.factorize(names)[0]
    scores = {}
    for p in range(1, min(MAX_PERIOD, n // MIN_CYCLES) + 1):
        scores[p] = int(np.count_nonzero(codes[:-p] == codes[p:]))
    best = max(scores.values())
    if best < MIN_CYCLES:
        return None
    p = min(q for q, s in scores.items() if s >= PERIOD_TOLERANCE * best)
    windows = np.lib.stride_tricks.sliding_window_view(codes, p)
    base = int(codes.max()) + 1
    keys = _window_keys(codes, p, base)
    if keys is None:  # too many distinct calls to number each run of p calls by one integer
        grams, counts = np.unique(windows, axis=0, return_counts=True)
    else:  # the same runs in the same (lexicographic) order, counted on integers
        _, first, counts = np.unique(keys, return_index=True, return_counts=True)
        grams = windows[first]
    # the most frequent run of p names that does not repeat a shorter one (B B is a period-1 run, not a cycle of 2)
    primitive = (i for i in np.argsort(-counts, kind="stable")
                 if not any(np.array_equal(np.roll(grams[i], d), grams[i]) for d in range(1, p)))
    chosen = next(primitive, None)
    if chosen is None:
        return None
    cycle = grams[chosen]
    if keys is None:
        good = np.zeros(len(windows), dtype=bool)
        for k in range(p):  # a window is a cycle when it is a rotation of the most frequent one
            good |= np.all(windows == np.roll(cycle, k), axis=1)
    else:
        good = np.isin(keys, [_window_keys(np.roll(cycle, k), p, base)[0] for k in range(p)])
    span = (MIN_CYCLES - 1) * p
    if len(good) <= span:
        return None
    chain = good[:len(good) - span].copy()
    for k in range(1, MIN_CYCLES):
        chain &= good[k * p:len(good) - span + k * p]
    runs = np.flatnonzero(chain)
    if not len(runs):
        return None
    a, b = int(runs[0]), int(runs[-1]) + MIN_CYCLES * p - 1
    # the calls of the steady state: the cycle's, and any other that comes in the stretch found at least once every
    # two cycles (a server's gradients, received in no fixed place among the pull-reply pairs of its cycle)
    seen, counts = np.unique(codes[a:b + 1], return_counts=True)
    steady = np.union1d(cycle, seen[counts * 2 * p >= b + 1 - a])
    # the same calls in a less regular order still are steady state: back to the last call outside them
    outside = np.flatnonzero(~np.isin(codes[:a], steady))
    a = int(outside[-1]) + 1 if len(outside) else 0
    # and on over other calls while the steady state's outnumber them, to the last of its calls: a server's last
    # requests arrive in no fixed order either, and each worker's end-of-work message is another call in the
    # middle of the server's training, which goes on while the other workers still send
    b = _last_of_majority(np.isin(codes, steady), b)
    # cut each cycle before the call that follows the longest gap (the compute of a compute-communicate cycle)
    gaps = starts[a + 1:b + 1] - ends[a:b]
    offset = 0
    if p > 1 and len(gaps) >= p:
        per_slot = [np.median(gaps[(k - 1) % p::p]) for k in range(p)]  # gap before the k-th call of a cycle
        offset = int(np.argmax(per_slot))
    return a, b, p, offset


def _last_of_majority(steady: np.ndarray, b: int) -> int:
    """The last index ``j`` >= ``b`` of a steady-state call (``steady[j]``) such that the calls after ``b`` up to
    ``j`` hold more steady-state calls than others; ``b`` when there is none."""
    lead = np.cumsum(np.where(steady[b + 1:], 1, -1))
    ahead = np.flatnonzero((lead > 0) & steady[b + 1:])
    return b + 1 + int(ahead[-1]) if len(ahead) else b


def _window_keys(codes: np.ndarray, p: int, base: int) -> np.ndarray | None:
    """Each run of ``p`` consecutive codes (codes from 0 to ``base`` - 1) as one integer, ordered as the runs are
    ordered lexicographically; None when the numbers would not fit in 63 bits."""
    if p * np.log2(max(base, 2)) >= 62:
        return None
    keys = np.zeros(len(codes) - p + 1, dtype=np.int64)
    for j in range(p):
        keys = keys * base + codes[j:len(codes) - p + 1 + j]
    return keys
