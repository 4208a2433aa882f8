"""Findings and the detector registry.

A *finding* says in plain words what holds a job back, with the numbers that prove it: an ``id`` (stable, for
machines), a ``title`` a person understands, a ``severity`` (info < warning < error), the ``evidence`` (each
number with its unit), the ``ranks`` and ``phase`` it concerns, ``advice`` (what to try), and its ``cost_ns``: the
wall-clock time the job loses to it (ns), with ``cost_basis`` saying how that was measured (each detector's
definition is in docs/ANALYSES.md). Findings are ordered by cost, the costliest first.

A *detector* is a function ``detect(runs, thresholds) -> list[Finding | Skipped]`` registered with :func:`detector`,
which also declares what its input must hold (:class:`~ddltrace.analyses.requirements.Requirement`): it is called
only with the stores that hold it, and :func:`detect` says which it could not be made from and why. Where a store
holds what the detector declares but too little of it to judge by a threshold (fewer ranks than a fit needs, no
message large enough to time a link), the detector returns a :class:`Skipped` for it (made with :func:`short_of`)
among its findings, and :func:`detect` lists it with the others not made: no detector passes over a store in
silence. ``runs`` is a list of :class:`~ddltrace.analyses.run_analysis.RunAnalysis` (one per store; several for a
scaling or batch-size series). Detectors live in the ``detect_*`` modules of this package; :func:`load_detectors`
imports them all, so a new detector is a new module and nothing else.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ddltrace.analyses.requirements import Requirement, Skipped, check
from ddltrace.units import format_bytes, format_ns, format_percent, three_digits

SEVERITIES: tuple[str, ...] = ("info", "warning", "error")


def severity_rank(severity: str) -> int:
    """0 for info, 1 for warning, 2 for error."""
    return SEVERITIES.index(severity)


@dataclass(frozen=True)
class Quantity:
    """A number and its unit ("ns", "fraction", "bytes", "ns/rank", "1", ...)."""

    value: float
    unit: str

    def __str__(self) -> str:
        return format_quantity(self.value, self.unit)


def format_quantity(value: float, unit: str) -> str:
    """'12.5 ms' for ns, '37.0 %' for fractions, '1.5 MiB' for bytes, 'rank 3' for a rank, else '3.2 <unit>'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "ns":
        return format_ns(value)
    if unit.startswith("ns/"):
        return f"{format_ns(value)}/{unit[3:]}"
    if unit == "fraction":
        return format_percent(value)
    if unit == "bytes":
        return format_bytes(value)
    if unit in ("1", ""):
        return three_digits(value)
    if unit == "rank":  # a rank's number, not a count of ranks ("ranks"): 'rank 3', not '3 rank'
        return f"rank {int(value)}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value)} {_singular(unit) if value == 1 else unit}"
    return f"{three_digits(value)} {unit}"


def _singular(unit: str) -> str:
    """A count's plural noun for one of it: 'device' for 'devices', 'launch' for 'launches'; a unit that is not
    a plural noun (MB/s, ratio) as it is."""
    if not unit.isalpha() or not unit.endswith("s") or unit.endswith("ss"):
        return unit
    return unit[:-2] if unit.endswith(("ches", "shes", "sses", "xes")) else unit[:-1]


@dataclass
class Finding:
    """What holds the job back, in plain words, with its evidence. See the module docstring."""

    id: str
    title: str
    severity: str
    evidence: dict[str, Quantity] = field(default_factory=dict)
    ranks: list[int] = field(default_factory=list)
    phase: str = "all"
    advice: str = ""
    store: str = ""
    cost_ns: float = 0.0
    cost_basis: str = ""

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"finding {self.id}: severity {self.severity!r} not in {SEVERITIES}")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["evidence"] = {k: {"value": _plain(q.value), "unit": q.unit} for k, q in self.evidence.items()}
        out["cost_ns"] = _plain(float(self.cost_ns))
        return out

    @property
    def cost(self) -> Quantity:
        """The time the job loses to this finding (ns)."""
        return Quantity(float(self.cost_ns), "ns")


def _plain(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    return float(value) if not isinstance(value, int) else value


Detector = Callable[[list, Any], list[Finding | Skipped]]
#: Registered detectors, by id, in registration order (see :func:`load_detectors` for theirs).
DETECTORS: dict[str, Detector] = {}
#: What each registered detector needs from its input, by id.
REQUIREMENTS: dict[str, Requirement] = {}


def detector(name: str, title: str, needs: frozenset[str] | set[str] = frozenset(), min_stores: int = 1,
             series: str = "") -> Callable[[Detector], Detector]:
    """Register ``fn(runs, thresholds) -> list[Finding]`` under ``name``: ``title`` in a person's words, ``needs``
    the capabilities every store it reads must hold, ``min_stores`` and ``series`` for a comparison of runs
    (see :mod:`ddltrace.analyses.requirements`)."""

    def register(fn: Detector) -> Detector:
        DETECTORS[name] = fn
        REQUIREMENTS[name] = Requirement(title, frozenset(needs), min_stores, series)
        return fn

    return register


def load_detectors() -> dict[str, Detector]:
    """Import every ``detect_*`` module of this package (which registers its detectors) and return the registry in
    the order of the modules' names, each module's own detectors in the order it registers them.

    Not in the registry's order: that is the order in which the process first imported the modules (a test module,
    :mod:`~ddltrace.analyses.run_analysis` or the report importing one beforehand puts it first), and the order of
    the findings of equal cost and of the analyses not made must be the same in every process (a local run, a
    cluster's client).
    """
    package = importlib.import_module(__name__.rpartition(".")[0])
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("detect_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    # sorted() is stable: a module's detectors keep the order it registers them in
    return dict(sorted(DETECTORS.items(), key=lambda item: item[1].__module__))


#: Ids (prefixes) of findings that are symptoms: the time they measure is lost to a cause another detector names
#: (a saturated server, a straggler, input) when there is one.
SYMPTOMS = ("low_overlap", "wait_state_", "gpu_exposed_comm")
#: A symptom ranks after a cause that costs at least this share of the symptom's cost (the same time, explained).
SYMPTOM_DISCOUNT = 0.9


def by_cost(findings: list[Finding]) -> list[Finding]:
    """The costliest first; a symptom (:data:`SYMPTOMS`) after a cause that costs at least
    :data:`SYMPTOM_DISCOUNT` of it; equal costs, the most severe first."""

    def key(f: Finding):
        cost = f.cost_ns if f.cost_ns == f.cost_ns else 0.0
        if f.id.startswith(SYMPTOMS):
            cost *= SYMPTOM_DISCOUNT
        return -cost, -severity_rank(f.severity)

    return sorted(findings, key=key)


def short_of(name: str, store: str, needs: str, holds: str, part: str = "") -> Skipped:
    """What a detector returns for a store (or a series: ``store`` names them) that holds what it declares but too
    little of it to judge: the detector ``name`` (``part``: which of its analyses, e.g. "across runs", in its
    title and as ``name_part`` in its key), what it ``needs`` (with the threshold's name) and what the store
    ``holds``, in words."""
    title = REQUIREMENTS[name].title
    key = name if not part else f"{name}_{part.replace(' ', '_')}"
    return Skipped(key, f"{title} {part}" if part else title, store, needs, holds)


def detect(runs: list, thresholds) -> tuple[list[Finding], list[Skipped]]:
    """Every registered detector on the runs that hold what it needs: the findings, costliest first, and the
    detectors that could not be made from some store (or from the series), with the reason: the stores that lack
    a capability it declares, then those it returned a :class:`Skipped` for (see the module docstring)."""
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    for name, fn in load_detectors().items():
        usable, missed = check(name, REQUIREMENTS[name], runs)
        skipped.extend(missed)
        if usable:
            for out in fn(usable, thresholds):
                (skipped if isinstance(out, Skipped) else findings).append(out)
    _say_damaged(findings, runs)
    return by_cost(findings), skipped


def _say_damaged(findings: list[Finding], runs: list) -> None:
    """A finding about ranks read from a damaged file says so in its title (QA: a rank whose file was cut had its
    GPU's host wait at 84 % against 41 % intact, a finding like any other)."""
    from ddltrace.store import rank_ranges

    damaged = {run.name: set(run.store.problem_ranks) for run in runs}
    for finding in findings:
        hit = sorted(damaged.get(finding.store, set()) & set(finding.ranks))
        if hit:
            finding.title += (f" (rank{'s' if len(hit) > 1 else ''} {rank_ranges(hit)} read from a damaged file: "
                              "the figures are of what could be read; the import problems say what is missing)")


def run_detectors(runs: list, thresholds) -> list[Finding]:
    """The findings of :func:`detect`, costliest first."""
    return detect(runs, thresholds)[0]
