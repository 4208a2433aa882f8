"""How a store's ranks and nodes were put on one clock, read from its manifest's ``clock`` entry, for
``ddltrace info``, ``ddltrace analyze`` and ``ddltrace report`` (no pandas: the CLI reads it from the manifest alone).

The collectors and importers write the entry: collectors/clock.py (a PMPI run: each rank's ping-pong with rank 0
at MPI_Init and MPI_Finalize), collectors/node_clock.py (a run across nodes: each node agent's ping-pong with
the launching process at its start and end), collectors/launcher.py (a framework's profile: its mark on the
job's wall clock) and collectors/importers/align.py (an import: matched send/receive pairs). Per rank or node:

- ``offset_ns``: the reference clock minus the rank's (node's), the amount added to its times to put them on the
  reference's clock, in ns; measured at the start (MPI_Init, the agent's start), and ``end_offset_ns`` where it
  was measured again at the end (MPI_Finalize, the agent's end), the offset between the two interpolated;
- ``uncertainty_ns``: the most the offset can be wrong by, in ns: half the shortest round trip of the ping-pong
  (the one-way delays are not known to be equal), or half the gap between the bounds the matched messages give;
  None where the source gives none (a framework's wall clock without a mark);
- ``drift_ppm``: the change of the offset from the start to the end measurement per time between them, in ppm
  (ns per ms).

A store with no offsets (an imported trace without matched messages, a run on one clock) has its times as the
trace gave them: the ``method`` says which clock that is.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ddltrace.errors import one_line
from ddltrace.units import format_ns

#: Per kind of offset: (what is aligned, the manifest's keys of its method, offsets, uncertainties, end offsets,
#: end uncertainties, drift), as collectors/clock.py, node_clock.py and launcher.py write them.
_KINDS = (
    ("rank", "method", "offsets_ns", "uncertainty_ns", "finalize_offsets_ns", "finalize_uncertainty_ns",
     "drift_ppm"),
    ("node", "node_method", "node_offsets_ns", "node_uncertainty_ns", "node_end_offsets_ns",
     "node_end_uncertainty_ns", "node_drift_ppm"),
    ("framework rank", "framework_method", "framework_offsets_ns", "framework_uncertainty_ns", None, None, None),
)
#: Per-entry tables longer than this are summarised in the text (``info --json`` lists every entry).
MAX_ROWS_SHOWN = 32


@dataclass
class Offset:
    """One rank's or node's alignment (``who``: the rank number or host name); see the module for the fields."""

    who: str
    offset_ns: int
    uncertainty_ns: int | None = None
    end_offset_ns: int | None = None
    end_uncertainty_ns: int | None = None
    drift_ppm: float | None = None


@dataclass
class OffsetGroup:
    """The offsets of one kind (``kind``: rank, node or framework rank), how they were measured (``method``) and
    onto which clock (``reference``)."""

    kind: str
    method: str
    reference: str
    offsets: list[Offset]

    @property
    def max_abs_offset_ns(self) -> int:
        """The largest |offset| of the group, start and end measurements, in ns."""
        return max(abs(v) for o in self.offsets for v in (o.offset_ns, o.end_offset_ns) if v is not None)

    @property
    def max_uncertainty_ns(self) -> int | None:
        """The largest uncertainty of the group, start and end measurements, in ns (None: none given)."""
        found = [v for o in self.offsets for v in (o.uncertainty_ns, o.end_uncertainty_ns) if v is not None]
        return max(found) if found else None

    @property
    def max_abs_drift_ppm(self) -> float | None:
        """The largest |drift| of the group, in ppm (None: none given)."""
        found = [abs(o.drift_ppm) for o in self.offsets if o.drift_ppm is not None]
        return max(found) if found else None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "method": self.method, "reference": self.reference,
                "max_abs_offset_ns": self.max_abs_offset_ns, "max_uncertainty_ns": self.max_uncertainty_ns,
                "offsets": [asdict(o) for o in self.offsets]}


@dataclass
class ClockAlignment:
    """A store's clock entry: ``method``, how its times were taken (the manifest's words); ``groups``, the offsets
    applied, by kind (empty: the times are as the trace gave them); ``unaligned``: ranks an import could not
    align; ``problem``: what is wrong with a damaged entry (then nothing else is read from it)."""

    method: str
    groups: list[OffsetGroup] = field(default_factory=list)
    unaligned: list[int] = field(default_factory=list)
    matched_messages: int | None = None
    problem: str | None = None

    @property
    def max_uncertainty_ns(self) -> int | None:
        """The largest uncertainty of any offset, in ns (None: no offset gives one)."""
        found = [g.max_uncertainty_ns for g in self.groups if g.max_uncertainty_ns is not None]
        return max(found) if found else None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"method": self.method, "aligned": bool(self.groups),
                               "groups": [g.to_dict() for g in self.groups], "units": "offsets and uncertainties in "
                               "ns (offset: the reference clock minus the rank's or node's, added to its times); "
                               "drift in ppm"}
        if self.unaligned:
            out["unaligned_ranks"] = self.unaligned
        if self.matched_messages is not None:
            out["matched_messages"] = self.matched_messages
        if self.problem:
            out["problem"] = self.problem
        return out

    def summary(self) -> str:
        """One line: per kind, the largest |offset| and the largest uncertainty; or that the times are the trace's."""
        if self.problem:
            return f"not known ({self.problem})"
        if not self.groups:
            return f"taken as the trace gives them, no offsets applied ({one_line(self.method)})"
        parts = []
        for g in self.groups:
            bound = g.max_uncertainty_ns
            parts.append(f"{len(g.offsets)} {g.kind} offset(s) onto {g.reference}, max |offset| "
                         f"{format_ns(g.max_abs_offset_ns)}, max uncertainty "
                         + ("not given" if bound is None else f"±{format_ns(bound)}"))
        matched = f"; from {self.matched_messages} matched messages" if self.matched_messages is not None else ""
        unaligned = f"; ranks {self.unaligned} left as recorded" if self.unaligned else ""
        return "; ".join(parts) + matched + unaligned

    def lines(self) -> list[str]:
        """The text of ``ddltrace info``: the summary, then per kind its method and a table of its offsets."""
        out = [f"clocks      {self.summary()}"]
        if self.problem or not self.groups:
            return out
        for g in self.groups:
            out.append(f"  {g.kind} clocks: {one_line(g.method)}")
            if len(g.offsets) > MAX_ROWS_SHOWN:
                out.append(f"  ({len(g.offsets)} {g.kind}s: each one's offset in `ddltrace info --json`)")
                continue
            ended = any(o.end_offset_ns is not None for o in g.offsets)
            header = [g.kind.split()[-1], "offset", "± uncertainty"] + (
                ["offset at end", "± uncertainty", "drift"] if ended else [])
            rows = [[one_line(o.who), format_ns(o.offset_ns), _bound(o.uncertainty_ns)]
                    + ([format_ns(o.end_offset_ns) if o.end_offset_ns is not None else "-",
                        _bound(o.end_uncertainty_ns), "-" if o.drift_ppm is None else f"{o.drift_ppm:g} ppm"]
                       if ended else []) for o in g.offsets]
            widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
            out.extend("    " + "  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True))
                       for row in [header, *rows])
        out.append(f"  {self.legend()}")
        return out

    def legend(self) -> str:
        """What the offsets and uncertainties of :meth:`summary` and :meth:`lines` mean, with their units."""
        ended = any(o.end_offset_ns is not None for g in self.groups for o in g.offsets)
        return ("offset: added to the rank's (node's) times to put them on the reference clock; uncertainty: the "
                "most it can be wrong by (half the shortest round trip, or half the gap of the messages' bounds); "
                + ("at end: measured again when the run ended, the offset interpolated between the two (drift: its "
                   "change per time, ppm = ns per ms)" if ended else "measured once"))

    def methods(self) -> str:
        """How each kind of offset was measured: 'rank clocks: ...; node clocks: ...' ('' when none applied)."""
        return "; ".join(f"{g.kind} clocks: {one_line(g.method)}" for g in self.groups)


def _bound(ns: int | None) -> str:
    return "-" if ns is None else f"±{format_ns(ns)}"


def _integer(value: Any) -> bool:
    return type(value) is int


def _integer_at(table: dict, key: str) -> int | None:
    value = table.get(key)
    return value if _integer(value) else None


def _group(clock: dict, kind: str, method_key: str, keys: tuple[str | None, ...]) -> OffsetGroup | None:
    """The offsets of one kind in ``clock`` (None: it has none); entries that are not integers are left out."""
    tables = [clock.get(k) if k else None for k in keys]
    tables = [t if isinstance(t, dict) else {} for t in tables]
    offsets_ns, uncertainty, end_offsets, end_uncertainty, drift = tables
    rows = []
    whos = sorted((w for w, v in offsets_ns.items() if _integer(v)),
                  key=lambda w: (0, int(w), "") if w.isdigit() else (1, 0, w))
    for who in whos:
        rate = drift.get(who)
        rows.append(Offset(who, offsets_ns[who], _integer_at(uncertainty, who), _integer_at(end_offsets, who),
                           _integer_at(end_uncertainty, who),
                           float(rate) if type(rate) in (int, float) and math.isfinite(rate) else None))
    if not rows:
        return None
    method = clock.get(method_key)
    method = method if isinstance(method, str) else "not recorded"
    if kind == "rank":
        ref = clock.get("reference_rank")
        reference = f"rank {ref}'s clock" if _integer(ref) else "the reference rank's clock"
    elif kind == "node":
        reference = "the launching process's clock"
    else:
        reference = "the job's wall clock"
    return OffsetGroup(kind, method, reference, rows)


def clock_alignment(manifest: dict) -> ClockAlignment:
    """The manifest's clock entry read into a :class:`ClockAlignment` (a damaged entry: its ``problem``)."""
    clock = manifest.get("clock") if isinstance(manifest, dict) else None
    if clock is None:
        return ClockAlignment("not recorded", problem="the manifest has no clock entry")
    if not isinstance(clock, dict):
        return ClockAlignment("not recorded", problem=f"the manifest's clock entry is a {type(clock).__name__}, "
                                                      "not a table")
    method = clock.get("method") if isinstance(clock.get("method"), str) else "not recorded"
    groups = [g for kind, method_key, *keys in _KINDS if (g := _group(clock, kind, method_key, tuple(keys)))]
    unaligned = clock.get("unaligned_ranks")
    matched = clock.get("matched_messages")
    return ClockAlignment(method, groups,
                          [r for r in unaligned if _integer(r)] if isinstance(unaligned, list) else [],
                          matched if _integer(matched) else None)
