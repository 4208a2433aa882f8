"""Reading quantities with units ("10Gbit/s", "12GiB", "500ms", "0.1x") and hardware profiles.

All parsers return SI base units: bytes, seconds, bytes per second. A bare number is taken in the base unit.
Bad text raises :class:`~ddltrace.errors.DdltraceError` naming what was being read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddltrace.errors import DdltraceError
from ddltrace.options import LARGEST, MAX_COUNT

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"

_BYTES = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_BITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8}
_SECONDS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}


def _split(text: str, what: str) -> tuple[float, str]:
    match = re.fullmatch(_NUMBER + r"\s*([A-Za-z/]*)", str(text).strip())
    if not match:
        raise DdltraceError(f"{what}: cannot read {text!r} as a number with a unit")
    value = float(match.group(1))
    if not math.isfinite(value):
        raise DdltraceError(f"{what}: {text!r} is not a finite number")
    if value and not 1 / LARGEST <= abs(value) <= LARGEST:
        raise DdltraceError(f"{what}: {text!r} is out of range (0, or {1 / LARGEST:g} to {LARGEST:g} of its unit)")
    return value, match.group(2).lower()


def parse_bytes(text: str | float, what: str = "size") -> float:
    """'250MB', '12GiB', '4096' (bytes) -> bytes."""
    if isinstance(text, int | float):
        return float(text)
    value, unit = _split(text, what)
    if unit in _BYTES:
        return value * _BYTES[unit]
    if unit in _BITS:
        return value * _BITS[unit]
    raise DdltraceError(f"{what}: unknown size unit {unit!r} in {text!r} (use B, KB, MB, GB, KiB, MiB, GiB)")


def parse_seconds(text: str | float, what: str = "duration") -> float:
    """'0.5s', '500ms', '20us', '2' (seconds) -> seconds."""
    if isinstance(text, int | float):
        return float(text)
    value, unit = _split(text, what)
    if unit not in _SECONDS:
        raise DdltraceError(f"{what}: unknown time unit {unit!r} in {text!r} (use s, ms, us, ns, min, h)")
    return value * _SECONDS[unit]


def parse_bandwidth(text: str | float, what: str = "bandwidth") -> float:
    """'10Gbit/s', '1.25GB/s', '10Gbps', '1e9' (bytes/s) -> bytes per second."""
    if isinstance(text, int | float):
        return float(text)
    value, unit = _split(text, what)
    unit = unit.replace("ps", "it/s") if unit.endswith("bps") else unit
    unit = unit.removesuffix("/s")
    if unit in _BYTES:
        return value * _BYTES[unit]
    if unit in _BITS:
        return value * _BITS[unit]
    raise DdltraceError(f"{what}: unknown bandwidth unit in {text!r} (use Gbit/s, Gbps, GB/s, MB/s)")


def parse_int_list(text: str, what: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]; every item a positive integer, at most MPI's largest count (2**31 - 1)."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise DdltraceError(f"{what}: empty list")
    if not all(items):
        raise DdltraceError(f"{what}: {text!r} has an empty item (expected e.g. 1,2,4,8)")
    out = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise DdltraceError(f"{what}: {item!r} is not an integer (expected e.g. 1,2,4,8)") from None
        if not 1 <= value <= MAX_COUNT:
            raise DdltraceError(f"{what}: {value} must be a whole number from 1 to {MAX_COUNT}")
        out.append(value)
    return out


def parse_what_if(items: list[str] | None) -> dict[str, tuple[str, float]]:
    """['r_net=0.1x', 'c_u=2e-5'] -> {'r_net': ('scale', 0.1), 'c_u': ('set', 2e-5)}."""
    out: dict[str, tuple[str, float]] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name or not value.strip():
            raise DdltraceError(f"--what-if {item!r}: expected NAME=VALUE or NAME=FACTORx (e.g. r_net=0.1x)")
        value = value.strip()
        if name in out:  # a second change of one constant would replace the first unsaid
            raise DdltraceError(f"--what-if {item!r}: {name} is changed twice; give one value or factor for it")
        try:
            if value.lower().endswith("x"):
                out[name] = ("scale", float(value[:-1]))
            else:
                out[name] = ("set", float(value))
        except ValueError:
            raise DdltraceError(f"--what-if {item!r}: {value!r} is not a number") from None
        if not math.isfinite(out[name][1]) or out[name][1] < 0:
            raise DdltraceError(f"--what-if {item!r}: the value must be a finite number >= 0")
    return out


def load_json(path: str | Path, what: str) -> Any:
    """Read a JSON file; a missing or malformed file is a DdltraceError naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DdltraceError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DdltraceError(f"{path}: cannot read {what} ({exc})") from None
    except json.JSONDecodeError as exc:
        raise DdltraceError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


#: What ``ddltrace calibrate`` writes (``collectors.microbench.profile`` takes them from here, so that reading a
#: profile does not import the benchmarks).
PROFILE_FORMAT, PROFILE_FORMAT_VERSION = "ddltrace-hardware-profile", 1


def format_version_problem(version: Any) -> str | None:
    """What is wrong with a hardware profile's ``format_version`` for this ddltrace, or None."""
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= PROFILE_FORMAT_VERSION:
        return (f"format_version {version!r}: this ddltrace reads version {PROFILE_FORMAT_VERSION} (a later one needs "
                "a later ddltrace)")
    return None


def check_profile_format(profile: Mapping[str, Any], source: str) -> None:
    """Refuse a profile that says it is something else, or a later version of the format than this ddltrace
    reads; a hand-written profile that names no format is read as it is, but not a fitted model."""
    if profile.get("model") == "hashemi-asgd":  # model fit's output has "constants" too, in other units
        raise DdltraceError(f"{source}: a fitted model ('ddltrace model fit --out'), not a hardware profile (written "
                            "by 'ddltrace calibrate')")
    if "format" in profile and profile["format"] != PROFILE_FORMAT:
        raise DdltraceError(f"{source}: format is {profile['format']!r}, not a hardware profile ({PROFILE_FORMAT!r}, "
                            "written by 'ddltrace calibrate')")
    problem = format_version_problem(profile.get("format_version", PROFILE_FORMAT_VERSION))
    if problem:
        raise DdltraceError(f"{source}: hardware profile {problem}")


#: The compute constants calibrate measures in single and double precision; each names the one the models take by
#: default (``alias_of``, e.g. ``C_muladd_gemm_f32``).
PRECISION_CONSTANTS = ("C_muladd", "C_act", "C_err")


def precision_name(table: Mapping[str, Any], name: str, bytes_per_value: float | None) -> str:
    """The profile constant (and curve) that ``name`` stands for at the job's precision: for C_muladd, C_act and
    C_err aliased to a calibrate constant ending ``_f32`` / ``_f64``, its sibling at ``bytes_per_value`` (4: f32,
    8: f64) where the profile has it; else ``name`` (another precision, a hand-written profile, none given)."""
    entry = table.get(name)
    alias = entry.get("alias_of") if isinstance(entry, Mapping) else None
    if (name not in PRECISION_CONSTANTS or not isinstance(alias, str) or alias[-4:] not in ("_f32", "_f64")
            or bytes_per_value not in (4, 8)):
        return name
    sibling = alias[:-4] + ("_f32" if bytes_per_value == 4 else "_f64")
    return sibling if sibling in table else name


def profile_constants(profile: Mapping[str, Any], source: str = "profile",
                      bytes_per_value: float | None = None) -> dict[str, Any]:
    """The constants of a hardware profile as plain numbers (or curves), keyed by the papers' names, in seconds,
    bytes and bytes per second.

    Reads what ``ddltrace calibrate`` writes (``{"format": "ddltrace-hardware-profile", "constants": {name:
    {"value", "uncertainty", "unit", ...}}, "curves": {name: {"points": [{"x", "y"}]}}, "machine": {...}}``):
    a constant in ``bit/s`` is turned into bytes per second; ``C_muladd`` becomes its curve against segment
    bytes (the curve of the constant it is an alias of) and ``C_interf`` the curve against H (``C_interf_cache``,
    else ``C_interf_mem``); ``cores`` comes from the machine's physical cores; r_net, where the profile gives only
    C_nbw, is ``1 / C_nbw`` (seconds per byte: 8 / C_nbw in bit/s). With ``bytes_per_value`` (the
    DNN's precision) C_muladd, C_act and C_err are those measured at it (:func:`precision_name`: the f64 siblings
    for 8). A hand-written profile may give plain numbers at the top level or under ``"constants"``, and curves as
    lists of ``[x, y]`` pairs.
    """
    if not isinstance(profile, Mapping):
        raise DdltraceError(f"{source}: a hardware profile must be a JSON object")
    check_profile_format(profile, source)
    table = profile.get("constants", profile)
    if not isinstance(table, Mapping):
        raise DdltraceError(f"{source}: 'constants' must be an object")
    curves = profile.get("curves") if isinstance(profile.get("curves"), Mapping) else {}
    out: dict[str, Any] = {}
    for name, raw in table.items():
        value, unit = raw, ""
        if isinstance(raw, Mapping):
            value, unit = raw.get("value", raw.get("curve")), str(raw.get("unit", ""))
            spread = raw.get("uncertainty")
            if spread is not None and (isinstance(spread, bool) or not isinstance(spread, int | float)
                                       or not math.isfinite(spread) or spread < 0):
                raise DdltraceError(f"{source}: constant {name}'s uncertainty = {spread!r} must be a finite number "
                                    ">= 0")
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            if not math.isfinite(value) or not 0 <= value <= LARGEST:
                raise DdltraceError(f"{source}: constant {name} = {value} must be a finite number from 0 to "
                                    f"{LARGEST:g}")
            out[name] = float(value) / 8 if unit in ("bit/s", "b/s", "bps") else float(value)
        elif isinstance(value, list | Mapping):
            out[name] = value
    for name in PRECISION_CONSTANTS:
        measured = precision_name(table, name, bytes_per_value)
        if measured != name and measured in out:
            out[name] = out[measured]
    alias = table.get("C_muladd", {}).get("alias_of") if isinstance(table.get("C_muladd"), Mapping) else None
    if precision_name(table, "C_muladd", bytes_per_value) != "C_muladd":
        alias = precision_name(table, "C_muladd", bytes_per_value)
    for curve_name, key in ((alias, "C_muladd"), ("C_interf_cache", "C_interf"), ("C_interf_mem", "C_interf")):
        curve = curves.get(curve_name) if curve_name else None
        if curve is None or isinstance(out.get(key), list):  # no such curve, or a curve is already there
            continue
        try:
            points = [[float(pt["x"]), float(pt["y"])] for pt in curve["points"]]
        except (KeyError, TypeError, ValueError):
            raise DdltraceError(f"{source}: curve {curve_name} has malformed points") from None
        bad = [i for i, (x, y) in enumerate(points) if not (math.isfinite(x) and x >= 0 and math.isfinite(y) and y > 0)]
        if bad:
            raise DdltraceError(f"{source}: curve {curve_name} point {bad[0]} = {points[bad[0]]}: x must be a finite "
                                "number >= 0 and y a finite number > 0")
        if key == "C_interf" and points and points[0][0] > 1:
            points.insert(0, [1.0, 1.0])
        if points:
            out[key] = points
    if "r_net" not in out and out.get("C_nbw", 0) > 0:  # (a profile with the bandwidth alone: Yan's C_nbw)
        out["r_net"] = 1.0 / out["C_nbw"]
    machine = profile.get("machine") if isinstance(profile.get("machine"), Mapping) else {}
    if "cores" not in out and (machine.get("physical_cores") or machine.get("logical_cpus")):
        out["cores"] = float(machine.get("physical_cores") or machine.get("logical_cpus"))
    return out
