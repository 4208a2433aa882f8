"""Findings and the detector registry.

A *finding* says in plain words what holds a job back, with the numbers that prove it: an ``id`` (stable, for
machines), a ``title`` a person understands, a ``severity`` (info < warning < error), the ``evidence`` (each
number with its unit), the ``ranks`` and ``phase`` it concerns, and ``advice`` (what to try).

A *detector* is a function ``detect(runs, thresholds) -> list[Finding]`` registered with :func:`detector`;
``runs`` is a list of :class:`~ddltrace.analyses.run_analysis.RunAnalysis` (one per store; several for a scaling
or batch-size series). Detectors live in the ``detect_*`` modules of this package; :func:`load_detectors` imports
them all, so a new detector is a new module and nothing else.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ddltrace.units import format_bytes, format_ns, format_percent

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
    """'12.5 ms' for ns, '37.0 %' for fractions, '1.5 MiB' for bytes, else '3.2 <unit>'."""
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
        return f"{value:.3g}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value)} {unit}"
    return f"{value:.3g} {unit}"


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

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"finding {self.id}: severity {self.severity!r} not in {SEVERITIES}")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["evidence"] = {k: {"value": _plain(q.value), "unit": q.unit} for k, q in self.evidence.items()}
        return out


def _plain(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    return float(value) if not isinstance(value, int) else value


Detector = Callable[[list, Any], list[Finding]]
#: Registered detectors, by id, in registration order.
DETECTORS: dict[str, Detector] = {}


def detector(name: str) -> Callable[[Detector], Detector]:
    """Register ``fn(runs, thresholds) -> list[Finding]`` under ``name``."""

    def register(fn: Detector) -> Detector:
        DETECTORS[name] = fn
        return fn

    return register


def load_detectors() -> dict[str, Detector]:
    """Import every ``detect_*`` module of this package (which registers its detectors) and return the registry."""
    package = importlib.import_module(__name__.rpartition(".")[0])
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("detect_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    return DETECTORS


def run_detectors(runs: list, thresholds) -> list[Finding]:
    """Every registered detector on ``runs``; findings most severe first (stable within a severity)."""
    findings: list[Finding] = []
    for fn in load_detectors().values():
        findings.extend(fn(runs, thresholds))
    findings.sort(key=lambda f: -severity_rank(f.severity))
    return findings
