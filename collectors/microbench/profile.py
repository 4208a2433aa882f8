"""The hardware profile: one JSON file of constants (each with its uncertainty and unit), curves, and the
machine's description. Written by ``ddltrace calibrate``, read by the models, compared across machines.

Layout::

    {"format": "ddltrace-hardware-profile", "format_version": 1, "ddltrace_version": ..., "created_utc": ...,
     "quick": bool, "sections": [...], "machine": {...},
     "constants": {name: {"value", "uncertainty", "unit", "description", "method", "busy_runs", "other_cpu_s"}},
     "curves": {name: {"x": ..., "x_unit": ..., "y_unit": ..., "points": [{"x", "y", "spread"}]}},
     "notes": [...]}

``uncertainty`` is, for a repeated measurement, the robust spread of the repeats (1.4826 x MAD, floored at
0.1 % of the value), and for a fitted constant (lat_net, r_net, C_nbw, lat_mpi, r_mpi) the fit's standard error:
one standard uncertainty either way (profiles written before 2026-11-25 hold the fits' 95 % half-width).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from ddltrace.errors import DdltraceError
from ddltrace.models.quantities import (
    PROFILE_FORMAT,
    PROFILE_FORMAT_VERSION,
    check_profile_format,
    format_version_problem,
)

FORMAT, FORMAT_VERSION = PROFILE_FORMAT, PROFILE_FORMAT_VERSION


def new_profile(machine: dict, quick: bool, sections: list[str]) -> dict:
    import datetime

    from ddltrace import __version__

    return {"format": FORMAT, "format_version": FORMAT_VERSION, "ddltrace_version": __version__,
            "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "quick": quick, "sections": sections, "machine": machine, "constants": {}, "curves": {}, "notes": []}


def add_constant(profile: dict, name: str, value: float, uncertainty: float, unit: str, description: str,
                 method: str = "", busy_runs: int = 0, other_cpu_s: float | None = None) -> None:
    """Record constant ``name`` (``value`` ± ``uncertainty`` in ``unit``)."""
    entry = {"value": float(value), "uncertainty": float(uncertainty), "unit": unit, "description": description}
    if method:
        entry["method"] = method
    entry["busy_runs"] = int(busy_runs)
    if other_cpu_s is not None and math.isfinite(other_cpu_s):
        entry["other_cpu_s"] = round(float(other_cpu_s), 3)
    profile["constants"][name] = entry


def add_curve(profile: dict, name: str, x_name: str, x_unit: str, y_unit: str, points: list[dict],
              description: str = "") -> None:
    """Record curve ``name``: points are dicts with x, y and spread (y's unit)."""
    profile["curves"][name] = {"x": x_name, "x_unit": x_unit, "y_unit": y_unit, "description": description,
                               "points": points}


#: Constants that are shares of something (0..1), where 0 is a measured value.
SHARES = ("net_duplex",)


def problems(profile: dict) -> list[str]:
    """Every way ``profile`` breaks the format: constants must be positive and finite (a share of :data:`SHARES`
    0 to 1), uncertainties finite and not negative."""
    out = []
    if profile.get("format") != FORMAT:
        out.append(f"format is {profile.get('format')!r}, not {FORMAT!r}")
    problem = format_version_problem(profile.get("format_version"))
    if problem:
        out.append(problem)
    constants = profile.get("constants")
    if not isinstance(constants, dict):
        return out + ["no constants table"]
    for name, c in constants.items():
        try:
            value, unc = float(c["value"]), float(c["uncertainty"])
        except (KeyError, TypeError, ValueError):
            out.append(f"constant {name}: value or uncertainty missing")
            continue
        if name in SHARES:
            if not (math.isfinite(value) and 0 <= value <= 1):
                out.append(f"constant {name}: value {value} is not a share from 0 to 1")
        elif not (math.isfinite(value) and value > 0):
            out.append(f"constant {name}: value {value} is not positive and finite")
        if not (math.isfinite(unc) and unc >= 0):
            out.append(f"constant {name}: uncertainty {unc} is not finite and >= 0")
        if not c.get("unit"):
            out.append(f"constant {name}: no unit")
    return out


def save(profile: dict, path: str | os.PathLike) -> Path:
    """Write ``profile`` as JSON (atomically); where it cannot be written, DdltraceError naming the path and the
    file in the temporary folder that keeps the profile (:func:`ddltrace.outputs.save_measured`)."""
    from ddltrace.outputs import save_measured

    text = json.dumps(profile, indent=1, sort_keys=False, allow_nan=False) + "\n"
    return save_measured(path, text, "the profile")


def load(path: str | os.PathLike) -> dict:
    """Read a profile; DdltraceError naming the file if it is missing, not JSON or not a valid profile."""
    path = Path(path)
    try:
        profile = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise DdltraceError(f"{path}: no such profile") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DdltraceError(f"{path}: not a readable JSON profile ({exc})") from exc
    if not isinstance(profile, dict):
        raise DdltraceError(f"{path}: not a ddltrace hardware profile")
    if profile.get("model") == "hashemi-asgd":  # model fit's output: said as optimize and model predict say it
        check_profile_format(profile, str(path))
    bad = problems(profile)
    if bad:
        raise DdltraceError(f"{path}: invalid hardware profile: " + "; ".join(bad[:5]))
    return profile


# ------------------------------------------------------------------------------------------------ formatting

_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n"),
             (1e-12, "p"), (1e-15, "f"))


def si(value: float, unit: str, digits: int = 3) -> str:
    """``value`` with an SI prefix: si(7.6e-10, 's') -> '760 ps'."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if value == 0:
        return f"0 {unit}"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale * 0.9995:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def format_value(value: float, unit: str) -> str:
    """A constant in its unit, readable: seconds with SI prefixes, per-byte times also as bandwidth."""
    if unit.startswith("s/") or unit == "s":
        per = unit[2:] if unit.startswith("s/") else ""
        text = si(value, "s") + (f"/{per}" if per else "")
        if per == "B" and value > 0:
            text += f" ({si(1 / value, 'B/s')})"
        return text
    if unit == "B/s":
        return si(value, "B/s")
    if unit == "bit/s":
        return si(value, "bit/s")
    if unit == "Hz":
        return si(value, "Hz")
    if unit == "ratio":
        return f"{value:.3g} x"
    if unit == "muladd/s":
        return si(value, "muladd/s")
    if unit == "1/s":
        return f"{value:.4g} /s"
    return f"{value:.4g} {unit}"


SUMMARY_HEADER = ("constant", "value", "uncertainty", "note", "definition")
UNCERTAINTY_NOTE = ("uncertainty: one standard uncertainty, relative to the value: the repeats' spread (1.4826 x MAD, "
                    "at least 0.1 %),\n  or for a fitted constant (lat_net, r_net, C_nbw, lat_mpi, r_mpi) the fit's "
                    "standard error; derived ones (C_nbw = 8 / r_net,\n  peak_muladd, gemm_peak_fraction, C_interf "
                    "ratios) propagated to first order")


def _relative(value: float, uncertainty: float) -> str:
    return f"± {100 * uncertainty / value:.2g} %" if value else "± n/a"


def summary_rows(profile: dict) -> list[tuple[str, str, str, str, str]]:
    """(constant, value, ± relative uncertainty, note, definition) for each constant (:data:`SUMMARY_HEADER`)."""
    rows = []
    for name, c in profile["constants"].items():
        note = f"busy in {c['busy_runs']} run(s)" if c.get("busy_runs") else ""
        rows.append((name, format_value(c["value"], c["unit"]), _relative(c["value"], c["uncertainty"]), note,
                     c.get("description", "")))
    return rows


def table(rows: list[tuple], header: tuple) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _differ(ca: dict, cb: dict) -> bool:
    """Whether two measurements of one constant differ by more than twice their combined standard uncertainty (on the
    log scale where both are > 0: see :func:`compare_constants`)."""
    va, vb = ca["value"], cb["value"]
    if va > 0 and vb > 0:
        return abs(math.log(vb / va)) > 2 * math.hypot(ca["uncertainty"] / va, cb["uncertainty"] / vb)
    return abs(vb - va) > 2 * math.hypot(ca["uncertainty"], cb["uncertainty"])


def compare_constants(a: dict, b: dict) -> list[dict]:
    """Per constant of either profile: its ``unit``, A's and B's ``value`` and ``uncertainty`` (``None`` where that
    profile lacks it), ``ratio`` B / A, and the ``verdict``: ``differs`` where the difference exceeds twice the
    combined uncertainty, else ``same within 2 sigma``: for values > 0 on the log scale (|ln(B / A)| against the two
    relative uncertainties in quadrature), so that a constant and its reciprocal (r_net and C_nbw = 8 / r_net)
    get one verdict; else the two standard uncertainties in quadrature against B - A;
    ``only in A`` / ``only in B``; ``units differ`` (no ratio: A's and B's ``unit`` are both given) where the two
    profiles record it in different units."""
    records = []
    names = list(a["constants"]) + [n for n in b["constants"] if n not in a["constants"]]
    for name in names:
        ca, cb = a["constants"].get(name), b["constants"].get(name)
        record = {"constant": name, "unit": (ca or cb)["unit"],
                  "a": ca["value"] if ca else None, "a_uncertainty": ca["uncertainty"] if ca else None,
                  "b": cb["value"] if cb else None, "b_uncertainty": cb["uncertainty"] if cb else None}
        if ca is None or cb is None:
            record.update(ratio=None, verdict="only in A" if cb is None else "only in B")
        elif ca["unit"] != cb["unit"]:
            record.update(b_unit=cb["unit"], ratio=None, verdict="units differ")
        else:
            record.update(ratio=cb["value"] / ca["value"] if ca["value"] else None,
                          verdict="differs" if _differ(ca, cb) else "same within 2 sigma")
        records.append(record)
    return records


COMPARE_HEADER = ("constant", "A", "± A", "B", "± B", "B / A", "verdict")


def compare(a: dict, b: dict) -> list[tuple[str, ...]]:
    """Rows (constant, A, ± A, B, ± B, B / A, verdict) for the constants of two profiles (:func:`compare_constants`;
    the uncertainties relative, one standard uncertainty each)."""
    rows = []
    for r in compare_constants(a, b):
        unit_b = r.get("b_unit", r["unit"])
        rows.append((r["constant"], "-" if r["a"] is None else format_value(r["a"], r["unit"]),
                     "" if r["a"] is None else _relative(r["a"], r["a_uncertainty"]),
                     "-" if r["b"] is None else format_value(r["b"], unit_b),
                     "" if r["b"] is None else _relative(r["b"], r["b_uncertainty"]),
                     "" if r["ratio"] is None else f"{r['ratio']:.3g} x",
                     r["verdict"] + (f" ({r['unit']} vs {unit_b})" if r["verdict"] == "units differ" else "")))
    return rows


COMPUTE_PREFIXES = ("C_muladd", "C_act", "C_err")
"""The compute curves and constants :func:`merge_rounds` takes the median of (the feed-forward constants)."""


def _median_of(values: list[float], within: list[float]) -> tuple[float, float]:
    """The median of one quantity measured in several rounds, and its uncertainty: the larger of the rounds' own
    spreads (their median) and the standard error of a median of n rounds, 1.2533 x their standard deviation /
    sqrt(n), what the rounds disagree by."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    between = 1.2533 * float(np.std(arr, ddof=1)) / math.sqrt(arr.size) if arr.size > 1 else 0.0
    return float(np.median(arr)), max(between, float(np.median(within)) if within else 0.0)


def merge_rounds(profiles: list[dict]) -> dict:
    """One profile from several calibrations of one machine (rounds): the first round's profile with every compute
    curve point (C_muladd_*, C_act_*, C_err_*: ``y``, ``cpu_y``, ``cpu_share``) and compute constant the median of
    the rounds that have it at the same x, its spread what the rounds disagree by (:func:`_median_of`) when that
    exceeds the rounds' own. The rounds of each point are kept (``rounds``: their cpu_y, else y)."""
    import copy

    if not profiles:
        raise DdltraceError("merge_rounds: no profile to merge")
    out = copy.deepcopy(profiles[0])
    for name, curve in out.get("curves", {}).items():
        if not name.startswith(COMPUTE_PREFIXES):
            continue
        for i, point in enumerate(curve["points"]):
            same = [p["curves"][name]["points"][i] for p in profiles
                    if name in p.get("curves", {}) and len(p["curves"][name]["points"]) > i
                    and p["curves"][name]["points"][i]["x"] == point["x"]]
            point["y"], point["spread"] = _median_of([pt["y"] for pt in same], [pt["spread"] for pt in same])
            if all("cpu_y" in pt for pt in same):
                point["cpu_y"], point["cpu_spread"] = _median_of([pt["cpu_y"] for pt in same],
                                                                 [pt.get("cpu_spread", 0.0) for pt in same])
            if all("cpu_share" in pt for pt in same):
                point["cpu_share"] = _median_of([pt["cpu_share"] for pt in same], [])[0]
            point["rounds"] = [pt.get("cpu_y", pt["y"]) for pt in same]
    for name, entry in out.get("constants", {}).items():
        if not name.startswith(COMPUTE_PREFIXES):
            continue
        same = [p["constants"][name] for p in profiles if name in p.get("constants", {})]
        entry["value"], entry["uncertainty"] = _median_of([c["value"] for c in same],
                                                          [c["uncertainty"] for c in same])
    out.setdefault("notes", []).append(
        f"compute curves and constants: the median of {len(profiles)} calibrations (rounds), each point's spread "
        "at least what the rounds disagree by")
    return out
