"""Carrying a fitted Hashemi model from the machine it was fitted on (A) to another machine's profile (B).

The fit on A learns the per-sample, per-batch and per-update costs c_p, c_b, c_u (seconds) with A's
calibrated constants held (r_m, w_m, r_net, lat_net, r_d). On B each cost is carried through the calibrated
constants it depends on (docs/MODELS.md, "Predicting another machine", states each assumption):

- c_p and the phase floor t_phase_min: the job's feed-forward work per sample,
  ``U = 3 F C_muladd(ws) + N (C_act(ws) + C_err(ws))`` (Yan et al.'s U_f + U_b + U_w with W' ~ W: F
  multiply-adds and N neurons per sample from the DNN description; without one, ``U = C_muladd(ws)``), the
  cache curves evaluated at the job's working set ``ws = b (n_f + 1) s + n_w s`` (Hashemi et al. 4.4):
  ``c_p(B) = c_p(A) U(B) / U(A)``;
- c_b and c_u: forming or applying one update is a pass over the n_w weights, so they scale as C_muladd at
  ``ws = n_w s``;
- r_m, w_m, r_net, lat_net, r_d: the model's value times B's over A's (B's own value where the fit held A's);
- kappa (the contention extension) is a ratio and is kept;
- with ``serial`` (workers that do not overlap their transfers with compute), c_p also gains the time B's network
  adds to the transfers A's fit absorbed in it (:func:`transfer`).

The interval is a Monte Carlo over the fit's standard errors (a constant the runs only bound is drawn uniformly
between 0 and its bound) and both profiles' uncertainties, each taken as one standard deviation of the log of the
constant (log-normal: uncertainty over value); a curve moves as a whole by its interpolated spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ddltrace.errors import DdltraceError
from ddltrace.models import hashemi, link_cpu
from ddltrace.models.hashemi import Constants, Workload
from ddltrace.models.quantities import check_profile_format, profile_constants
from ddltrace.units import format_count

#: The feed-forward constants (seconds per multiply-add, per neuron): curves against segment bytes.
CPU = ("C_muladd", "C_act", "C_err")
#: The constants the fit holds at the profile's value (seconds per byte, seconds).
HELD = ("r_m", "w_m", "r_net", "lat_net", "r_d")
#: Profile constants B's profile gives as they are (a share, not a cost: no ratio to A's); A's kept without one.
TAKEN = ("net_duplex",)
#: Profile constants kept for the transfer's own use (:mod:`ddltrace.models.link_cpu`), no model constant's.
KEPT = (link_cpu.NAME,)
#: Costs carried by the per-sample work (c_p) and by a pass over the weights (c_b, c_u).
PER_SAMPLE = ("c_p", "t_phase_min")
PER_UPDATE = ("c_b", "c_u")
DRAWS = 2000
#: The knee is looked for below this many workers (inf, 'none' where one more worker still gains there).
KNEE_MOST = 1024
#: knee_search goes w by w up to here (each w one prediction more), then doubles.
KNEE_STEPS = 8


def _number(raw: Any, where: str, *, zero: bool = False) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise DdltraceError(f"{where} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise DdltraceError(f"{where} = {raw!r}: must be a finite number {'>=' if zero else '>'} 0")
    return value


def _constant(raw: Any, where: str, name: str) -> float:
    """A profile constant's value: a finite number > 0, for one of :data:`KEPT` >= 0, for a share of :data:`TAKEN`
    one from 0 to 1."""
    value = _number(raw, where, zero=name in TAKEN or name in KEPT)
    if name in TAKEN and value > 1:
        raise DdltraceError(f"{where} = {raw!r}: a share, must be at most 1")
    return value


def _points(raw: Any, where: str, cpu: bool = False) -> list[list[float]]:
    """[[x, y, spread], ...] sorted by x from calibrate's ``{"points": [{"x", "y", "spread"}]}`` or [[x, y], ...]."""
    items = raw.get("points") if isinstance(raw, Mapping) else raw
    if not isinstance(items, list) or not items:
        raise DdltraceError(f"{where}: a curve needs a non-empty list of points")
    out = []
    for i, pt in enumerate(items):
        if isinstance(pt, Mapping):
            x, y, spread = pt.get("x"), pt.get("y"), pt.get("spread", 0.0)
            if cpu and is_finite(pt.get("cpu_y")):  # seconds of CPU per operation, each run's own: the core's speed
                y, spread = pt["cpu_y"], pt.get("cpu_spread", 0.0)
            elif cpu:  # a profile before cpu_y: the runs' wall time x the point's share
                y, spread = float(y) * float(pt["cpu_share"]), float(spread) * float(pt["cpu_share"])
        elif isinstance(pt, list | tuple) and len(pt) in (2, 3):
            x, y, spread = pt[0], pt[1], (pt[2] if len(pt) == 3 else 0.0)
        else:
            raise DdltraceError(f"{where}: point {i} must be {{x, y[, spread]}} or [x, y]")
        out.append([_number(x, f"{where} point {i} x", zero=True), _number(y, f"{where} point {i} y"),
                    _number(spread, f"{where} point {i} spread", zero=True)])
    return sorted(out)


def check_record(record: Any, where: str) -> None:
    """Check a profile's record as a model file keeps it (:func:`profile_record`'s output, read back): every
    constant a finite value > 0 with an uncertainty >= 0, every curve's points, the CPU allowance's numbers."""
    if not isinstance(record, Mapping):
        raise DdltraceError(f"{where} must be an object")
    constants, curves = record.get("constants", {}), record.get("curves", {})
    if not isinstance(constants, Mapping) or not isinstance(curves, Mapping):
        raise DdltraceError(f"{where}: 'constants' and 'curves' must be objects")
    for name, entry in constants.items():
        if not isinstance(entry, Mapping):
            raise DdltraceError(f"{where}: constant {name} must be an object with a value")
        _constant(entry.get("value"), f"{where}: constant {name}", name)
        _number(entry.get("uncertainty", 0.0), f"{where}: {name}'s uncertainty", zero=True)
    for name, curve in curves.items():
        _points(curve.get("points") if isinstance(curve, Mapping) else curve, f"{where}: curve {name}")
    allowance = record.get("allowance") or {}
    if not isinstance(allowance, Mapping):
        raise DdltraceError(f"{where}: 'allowance' must be an object")
    for key, value in allowance.items():
        if value is not None:
            _number(value, f"{where}: allowance {key}")


def _cpu_timed(raw: Any) -> bool:
    """Whether every point of a calibrate curve carries the CPU share its runs had (``cpu_share``)."""
    items = raw.get("points") if isinstance(raw, Mapping) else None
    return bool(items) and all(isinstance(pt, Mapping) and is_finite(pt.get("cpu_share")) and
                               float(pt["cpu_share"]) > 0 for pt in items)


def profile_record(profile: Any, source: str, s: float) -> dict:
    """What the transfer needs from a hardware profile (``ddltrace calibrate``'s, or hand-written), kept in the
    model: ``{"source", "machine", "constants": {name: {"value", "uncertainty"}}, "curves": {name: {"curve",
    "points"}}}`` for C_muladd, C_act, C_err (their curves at the job's precision: ``s`` bytes per value picks
    the ``_f32`` / ``_f64`` sibling of the curve the constant is an alias of) and r_m, w_m, r_net, lat_net, r_d
    (r_net, where the profile gives only C_nbw, ``1 / C_nbw`` with its relative uncertainty, first order)."""
    if not isinstance(profile, Mapping):
        raise DdltraceError(f"{source}: a hardware profile must be a JSON object")
    check_profile_format(profile, source)
    table = profile.get("constants", profile)
    curves = profile.get("curves") if isinstance(profile.get("curves"), Mapping) else {}
    if not isinstance(table, Mapping):
        raise DdltraceError(f"{source}: 'constants' must be an object")
    record: dict[str, Any] = {"source": str(source), "constants": {}, "curves": {}}
    machine = profile.get("machine")
    if isinstance(machine, Mapping):
        record["machine"] = " ".join(str(machine[k]) for k in ("hostname", "cpu_model") if machine.get(k))
        record["allowance"] = _allowance(machine, source)
    for name in (*CPU, *HELD, *TAKEN, *KEPT):
        entry = table.get(name)
        if entry is None:
            continue
        value = entry.get("value", entry.get("curve")) if isinstance(entry, Mapping) else entry
        uncertainty = entry.get("uncertainty", 0.0) if isinstance(entry, Mapping) else 0.0
        if name in CPU and isinstance(value, list):  # a hand-written curve: [[segment bytes, seconds], ...]
            points = _points(value, f"{source}: constant {name}")
            record["curves"][name] = {"curve": name, "points": points}
            value = float(np.median([pt[1] for pt in points]))
        record["constants"][name] = {"value": _constant(value, f"{source}: constant {name}", name),
                                     "uncertainty": _number(uncertainty, f"{source}: {name}'s uncertainty",
                                                            zero=True)}
        alias = entry.get("alias_of") if isinstance(entry, Mapping) else None
        if name in CPU and alias:
            precision = f"_f{int(8 * s)}"
            wanted = alias[:-4] + precision if alias[-4:] in ("_f32", "_f64") else alias
            chosen = wanted if wanted in curves else (alias if alias in curves else None)
            if chosen:
                record["curves"][name] = {"curve": chosen, "raw": curves[chosen]}
    if "r_net" not in record["constants"] and table.get("C_nbw") is not None:  # the bandwidth alone: 1 / C_nbw
        entry = table["C_nbw"] if isinstance(table["C_nbw"], Mapping) else {"value": table["C_nbw"]}
        relative = (_number(entry.get("uncertainty", 0.0), f"{source}: C_nbw's uncertainty", zero=True)
                    / _constant(entry.get("value"), f"{source}: constant C_nbw", "C_nbw"))
        value = profile_constants(profile, source)["C_nbw"]  # bytes per second, whatever unit the profile gave
        record["constants"]["r_net"] = {"value": 1.0 / value, "uncertainty": relative / value}
    # curves whose points carry their runs' CPU share become seconds of CPU per operation (the core's speed), with
    # calibrate's own share of a core divided out: only when all of the job's compute curves do
    timed = [name for name in CPU if name in record["constants"]]
    record["cpu_seconds"] = bool(timed) and all(name in record["curves"] and "raw" in record["curves"][name]
                                                and _cpu_timed(record["curves"][name]["raw"]) for name in timed)
    for curve in record["curves"].values():
        if "raw" in curve:
            curve["points"] = _points(curve.pop("raw"), f"{source}: curve {curve['curve']}", record["cpu_seconds"])
    return record


def _allowance(machine: Mapping, source: str) -> dict:
    """The CPU calibrate ran under (``machine.cpu_allowance``: cores of its affinity, CFS quota in cores), else
    the profile's usable cores and no quota (a profile made before calibrate recorded its allowance)."""
    raw = machine.get("cpu_allowance") if isinstance(machine.get("cpu_allowance"), Mapping) else {}
    cores = raw.get("cores", machine.get("usable_cores"))
    quota, period, seen = raw.get("quota_cores"), raw.get("quota_period_s"), raw.get("share_seen")
    return {"cores": None if cores is None else _number(cores, f"{source}: machine cpu_allowance cores"),
            "share_seen": None if seen is None else _number(seen, f"{source}: machine cpu_allowance share_seen"),
            "quota_cores": None if quota is None else _number(quota, f"{source}: machine cpu_allowance quota"),
            "quota_period_s": None if period is None else _number(period, f"{source}: machine cpu_allowance "
                                                                            "quota_period_s")}


def work_counts(dnn) -> dict:
    """Per-sample counts of a DNN description for the compute transfer: multiply-adds of forward, backward and
    weight update (3 F) and neurons with an activation and an error term (N)."""
    return {"muladds": 3.0 * dnn.connections, "neurons": float(sum(layer.neurons for layer in dnn.layers)),
            "dnn": dnn.name}


def cpu_cost(record: Mapping, name: str, working_set: float, z: float = 0.0) -> float | None:
    """Seconds per multiply-add (C_muladd) or per neuron (C_act, C_err) at ``working_set`` bytes: the curve
    interpolated there (clamped at its ends), else the plain constant; ``z`` standard deviations off."""
    curve = record["curves"].get(name)
    if curve:
        pts = np.asarray(curve["points"], dtype=float)
        y = float(np.interp(working_set, pts[:, 0], pts[:, 1]))
        spread = float(np.interp(working_set, pts[:, 0], pts[:, 2]))
    elif name in record["constants"]:
        y, spread = record["constants"][name]["value"], record["constants"][name]["uncertainty"]
    else:
        return None
    return _drawn(y, spread, z)


def _drawn(value: float, uncertainty: float, z: float) -> float:
    """``value`` ``z`` standard deviations off, log-normally (uncertainty / value the deviation of its log): a
    time stays positive, and a ratio of two drawn times has no tail from a divisor drawn near 0. ``z`` an array:
    an array of the values each of its draws gives."""
    if np.ndim(z):
        return np.array([value * math.exp(x * uncertainty / value) if x and value > 0 else value for x in z.tolist()])
    return value * math.exp(z * uncertainty / value) if z and value > 0 else value


def held_value(record: Mapping, name: str, z: float = 0.0) -> float | None:
    """The profile's value of a held constant (r_m, w_m, r_net, lat_net, r_d) ``z`` standard deviations off
    (:func:`_drawn`), None where it has none."""
    entry = record["constants"].get(name)
    if entry is None:
        return None
    return _drawn(entry["value"], entry["uncertainty"], z)


def per_sample_work(record: Mapping, counts: Mapping, working_set: float, z: Mapping | None = None) -> float:
    """U: seconds of feed-forward work per sample on the profile's machine (``counts`` from work_counts, or
    one multiply-add when the DNN is unknown: then only the ratio U(B) / U(A) means anything)."""
    z = z or {}
    muladd = cpu_cost(record, "C_muladd", working_set, z.get("C_muladd", 0.0))
    if muladd is None:
        raise DdltraceError(f"{record['source']}: the profile has no C_muladd (run 'ddltrace calibrate' with the "
                            "cpu section): the compute costs cannot be carried")
    work = counts.get("muladds", 1.0) * muladd
    if counts.get("neurons"):
        act = cpu_cost(record, "C_act", working_set, z.get("C_act", 0.0))
        err = cpu_cost(record, "C_err", working_set, z.get("C_err", 0.0))
        if act is None or err is None:
            raise DdltraceError(f"{record['source']}: the profile lacks C_act or C_err, which the DNN's "
                                f"{format_count(counts['neurons'])} neurons per sample need")
        work += counts["neurons"] * (act + err)
    return work


def at_batch(k: Constants, wl: Workload, fit_b: float, a: Mapping, counts: Mapping) -> tuple[Constants, float]:
    """The constants on A at the batch ``wl.b`` of a model fitted at batch ``fit_b``: (constants, factor). The
    per-sample costs (c_p, t_phase_min) take A's feed-forward work per sample at the job's working set at ``wl.b``
    over that at ``fit_b`` (:func:`per_sample_work` on A's curves: the cache cliff of Hashemi's section 4.4; 1
    where A's profile has plain constants, no curves); c_b, c_u and the transfers are per batch or per update, so
    a batch changes how many there are per epoch, which the model counts, not their cost. A profile without C_muladd
    moves nothing (factor 1)."""
    if wl.b == fit_b or cpu_cost(a, "C_muladd", 0.0) is None:  # no compute section: nothing to move it by
        return k, 1.0
    now, fitted = (hashemi.working_set_bytes(x, wl.n_f, wl.n_w, wl.s) for x in (wl.b, fit_b))
    factor = per_sample_work(a, counts, now) / per_sample_work(a, counts, fitted)
    return replace(k, **{name: getattr(k, name) * factor for name in PER_SAMPLE}), factor


def _cap(record: Mapping) -> float:
    """The most of a core a rank may have on the profile's machine: min(1, its quota in cores)."""
    quota = (record.get("allowance") or {}).get("quota_cores")
    return min(1.0, quota) if quota else 1.0


def _alone(record: Mapping) -> float:
    """The share of a core calibrate's one thread had on the profile's machine: 1 where its curves are in CPU
    seconds (each point's ``cpu_share``), else the CPU time of its one-thread compute curves over their wall time
    (``share_seen``) where it measured it, else min(1, its quota in cores)."""
    if record.get("cpu_seconds"):
        return 1.0
    seen = (record.get("allowance") or {}).get("share_seen")
    return min(1.0, seen) if seen else _cap(record)


def _servers(runs: Sequence[Mapping]) -> float:
    extra = [float(r["ranks"]) - float(r["w"]) for r in runs if is_finite(r.get("ranks")) and is_finite(r.get("w"))]
    return statistics.median(extra) if extra else 1.0


def is_finite(x: Any) -> bool:
    """Whether ``x`` is a finite number or reads as one (None, NaN, infinities and non-numbers are not)."""
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def share_on_a(a: Mapping, runs: Sequence[Mapping], w: float) -> tuple[float, str]:
    """The share of a core (0-1) a rank had on A at ``w`` workers, and how it is known: the runs' sampled
    ``cpu_share`` at that w (median), else ``min(alone, cores / (w + servers))`` with A's cores and every rank
    busy (MPI ranks poll for their messages), capped by A's quota."""
    alone = _cap(a)
    shares = [float(r["cpu_share"]) for r in runs
              if is_finite(r.get("cpu_share")) and is_finite(r.get("w")) and float(r["w"]) == float(w)]
    if shares:
        return min(alone, statistics.median(shares)), "measured"
    cores = (a.get("allowance") or {}).get("cores")
    if not cores:
        cores = _cores_seen(runs)
        if not cores:
            return alone, "assumed (A's cores unknown)"
        return (min(alone, cores / (w + _servers(runs))),
                f"estimated ({cores:.3g} cores, as the runs' shares showed them, w + {_servers(runs):g} ranks)")
    return min(alone, cores / (w + _servers(runs))), f"estimated ({cores:g} cores, w + {_servers(runs):g} ranks)"


def _cores_seen(runs: Sequence[Mapping]) -> float | None:
    """The cores A's runs shared, where their ranks had less than a core each: a rank's sampled share times the
    ranks (the median over those runs); None when every run's ranks had a core each, or no run says."""
    seen = [float(r["cpu_share"]) * float(r["ranks"]) for r in runs
            if is_finite(r.get("cpu_share")) and is_finite(r.get("ranks")) and float(r["cpu_share"]) < 0.9]
    return statistics.median(seen) if seen else None


def cpu_shares(a: Mapping, b: Mapping, runs: Sequence[Mapping], w: float,
               link: tuple[float, float] = (0.0, 0.0)) -> dict:
    """A rank's share of a core on A and on B at ``w`` workers, and what it does to a CPU-bound cost.

    On B a rank gets ``share_B = min(q_B, share_A * (cores_B - L_B) / (cores_A - L_A))``: B's quota (at most a
    core) caps it, and B's cores shared by the same ranks (and the same load beside them) as A's, less the cores of
    packet work ``link`` = (L_A, L_B) its compute meets on each (:mod:`ddltrace.models.link_cpu`; 0 where not
    known). The calibrated constants were measured by one thread with ``alone`` of a core (the CPU time of its
    one-thread curves over their wall time, else min(1, quota)), so a CPU-bound cost carries by the calibrated ratio
    times ``multiplier = (alone_B / alone_A) * share_A / share_B``: the cores' own speed ratio, and the share the
    rank has on each machine. Without quotas, with as many cores, no packet work and calibrations that had a core
    each, the multiplier is 1."""
    share_a, how = share_on_a(a, runs, w)
    cores_a, cores_b = link_cores(a, b)
    ratio = cores_b / cores_a if cores_a and cores_b else 1.0
    packets = (cores_b - link[1]) / cores_b / ((cores_a - link[0]) / cores_a) if cores_a and cores_b else 1.0
    share_b = min(_cap(b), share_a * ratio * packets)
    return {"w": float(w), "share_a": share_a, "share_a_from": how, "share_b": share_b, "cores_ratio": ratio,
            "alone_a": _alone(a), "alone_b": _alone(b), "link_cores_a": link[0], "link_cores_b": link[1],
            "multiplier": (_alone(b) / _alone(a)) * share_a / share_b if share_b > 0 else 1.0}


def link_cores(a: Mapping, b: Mapping) -> tuple[float | None, float | None]:
    """The cores A's and B's calibrations ran on (None where a profile does not say)."""
    return (a.get("allowance") or {}).get("cores"), (b.get("allowance") or {}).get("cores")


def quota_wait(record: Mapping, wanted: float) -> float:
    """Mean seconds a message waits for a receiver under the profile's CFS quota q (period P) when the receiver
    would use ``wanted`` of a core: it polls while it waits, so it spends its quota polling and is throttled for
    the rest of each period, ``1 - q / wanted`` of the time in stretches of that share of P; a message that arrives
    then waits for the next period, ``(1 - q / wanted)^2 P / 2`` on average. 0 when the quota does not bind."""
    allowance = record.get("allowance") or {}
    quota, period = allowance.get("quota_cores"), allowance.get("quota_period_s")
    if not quota or not period or wanted <= quota:
        return 0.0
    return hashemi.off_core_wait(quota / wanted, period)


def _median(runs: Sequence[Mapping], key: str, w: float | None = None) -> float | None:
    values = [float(r[key]) for r in runs if is_finite(r.get(key)) and (w is None or float(r["w"]) == float(w))]
    return statistics.median(values) if values else None


def quota_wait_per_batch(a: Mapping, b: Mapping, runs: Sequence[Mapping], shares: Mapping) -> float:
    """Seconds a batch gains on B over A from messages that find their receiver throttled (:func:`quota_wait`):
    the messages a worker receives per batch (A's trace) wait on the worker, wanting its share on A; those it
    sends wait on the server, wanting the server's sampled share on A (a server that sleeps wants less than its
    quota and is never throttled); each on B with B's cores, less the same on A."""
    received = messages_per_batch(runs, shares["w"], ("received_per_batch",))
    sent = messages_per_batch(runs, shares["w"], ("sent_per_batch",))
    server = _median(runs, "server_cpu_share", shares["w"])
    server = server if server is not None else shares["share_a"]
    extra = 0.0
    for count, share_a in ((received, shares["share_a"]), (sent, server)):
        if count:
            wanted = min(1.0, share_a * shares["cores_ratio"])
            extra += count * (quota_wait(b, wanted) - quota_wait(a, min(1.0, share_a)))
    return extra


def messages_per_batch(runs: Sequence[Mapping], w: float,
                       kinds: Sequence[str] = ("sent_per_batch", "received_per_batch")) -> float:
    """A worker's point-to-point messages per batch at ``w`` workers in A's runs (of ``kinds``, by default sent plus
    received; 0 unknown), the one count the fit of a run and the prediction at w both use: the median over the
    runs at that w, else over all runs. A run's count is what its workers did at its w, so the fit models each run
    with its own (one run at a w) and the prediction at a measured w is the fit's there; at a w no run measured, the
    job's protocol, which does not change with w (ps-sgd: a pull request and a gradient sent, the weights received),
    is the median over the runs."""
    total = 0.0
    for key in kinds:
        count = _median(runs, key, w)
        total += (count if count is not None else _median(runs, key)) or 0.0
    return total


def constants_at(k: Constants, wl: Workload, w: float, a: Mapping, runs: Sequence[Mapping], b: Mapping | None = None,
                 counts: Mapping | None = None, serial: bool = False, what_if: Mapping | None = None,
                 z_a: Mapping | None = None, z_b: Mapping | None = None,
                 server: Mapping | None = None) -> tuple[Constants, dict]:
    """The model's constants at ``w`` workers as every figure of a prediction uses them (the phase, the knee and the
    what-if alike): (constants, factors B / A, empty on A).

    On A (``b`` None) the fitted ``k``, for a model fitted in CPU seconds (``wl.cpu_shares``) at the share of a core
    A's ranks had there (:func:`share_on_a`) with its messages' waits for ranks off their cores
    (:func:`ddltrace.models.hashemi.at_share`); on B, ``k`` carried by :func:`transfer` at w (``counts``: the DNN's
    work per sample, :func:`work_counts`; ``z_a``, ``z_b``: the profiles' constants that many standard deviations
    off, as :func:`transfer` draws them; ``server``: :func:`server_measured` where the caller has it). ``what_if``
    (``Constants.scaled``: a factor or a value) then changes these
    constants at w, wall time at the ranks' share (seconds, seconds per byte); its ``t_slice``, the round the
    messages' waits for ranks off their cores are drawn from, changes the model's before the waits are."""
    what_if = dict(what_if or {})
    if "t_slice" in what_if:
        k = k.scaled({"t_slice": what_if.pop("t_slice")})
    if b is None:
        at, factors = k, {}
        if wl.cpu_shares:
            at = hashemi.at_share(k, share_on_a(a, runs, w)[0], messages_per_batch(runs, w))
    else:
        at, factors, _ = carry(k, wl, a, b, profile_ratios(wl, counts or {"muladds": 1.0}, a, b, z_a or {}, z_b or {}),
                               serial, w, runs, server, what_if)
    return (at.scaled(what_if) if what_if else at), factors


def phase_at(k: Constants, wl: Workload, w: int, a: Mapping, runs: Sequence[Mapping], b: Mapping | None = None,
             counts: Mapping | None = None, serial: bool = False, what_if: Mapping | None = None,
             z_a: Mapping | None = None, z_b: Mapping | None = None, server: Mapping | None = None) -> dict:
    """The predicted computation phase at ``w`` workers from :func:`constants_at` (same arguments): ``phase_s``
    (seconds, all epochs) is Hashemi's (``analytic_s``) or, on B where its quota holds every rank, the quota loop's
    mean (:func:`quota_loop`, a ``--cpu-shares`` model); with ``constants``, ``factors``, ``shares`` (on B,
    :func:`cpu_shares`) and ``loop`` (None where not played)."""
    k_w, factors = constants_at(k, wl, w, a, runs, b, counts, serial, what_if, z_a, z_b, server)
    analytic = wl.epochs * hashemi.t_phase(w, wl, k_w)
    shares = cpu_shares(a, b, runs, w, factors.get("link_cores", (0.0, 0.0))) if b is not None else None
    loop = None
    if b is not None and wl.cpu_shares and quota_holds(wl, b, runs, cpu_shares(a, b, runs, w), w):
        # (decided without the packet work, as carry and the knee draws decide it: carry left it out here)
        loop = quota_loop(k_w, wl, b, runs, shares, server_split(k.c_u, a, runs), w,
                          factors.get("c_b_quota_wait_s", 0.0))
    return {"phase_s": loop["phase_s"] if loop else analytic, "analytic_s": analytic, "constants": k_w,
            "factors": factors, "shares": shares, "loop": loop}


def off_core_period(b: Mapping, shares: Mapping, t_slice: float) -> tuple[float, str]:
    """The round (seconds) in which a rank on B is off its core, and why: B's CFS quota period where the quota
    is what holds the rank (its share on B is the quota's), else the scheduler's round among ranks sharing the
    cores, taken as A's (``t_slice``, fitted on A's runs)."""
    period = (b.get("allowance") or {}).get("quota_period_s")
    if period and _cap(b) < 1.0 and shares["share_b"] >= _cap(b) - 1e-9:
        return float(period), "B's quota period"
    return t_slice, "the scheduler's round fitted on A"


def quota_loop(k_b: Constants, wl: Workload, b: Mapping, runs: Sequence[Mapping], shares: Mapping,
               split: Mapping, w: int, wait_s: float = 0.0) -> dict | None:
    """The closed loop on B played out under B's CFS quota (:mod:`ddltrace.models.quota_loop`), where the quota is
    what holds every rank at ``w`` (their share on B is the quota's, and their quotas add up to no more than B's
    cores); None elsewhere (no quota, contended cores, or a model that is not the closed loop). For models fitted
    with ``--cpu-shares``, whose c_p is the workers' CPU and c_u the server's measured time (a free fit on fewer
    cores than ranks puts the workers' compute into c_u, which the loop would then play out as the server's).

    From the constants carried to B at w (``k_b``, wall time at B's share, with ``wait_s`` seconds per batch of
    waits for throttled receivers in c_b, which the loop plays out instead): a worker's CPU per batch
    ``(b c_p + c_b - wait_s + memory) share_B``, a message's time on B's link while both ranks run (the profile's
    ``(r_net s n_w + lat_net) share_B``: calibrate's probe ran under B's quota, throttled like any rank, and the
    loop throttles the transfers itself), and the server's update split as on A (:func:`server_split`): its sleep
    kept, the rest CPU ``(c_u - sleep) share_B``. Returns the phase (all epochs, seconds) over
    :data:`~ddltrace.models.quota_loop.STARTS` random starts of the ranks' quota periods, their mean and range,
    leaving out (``locked``: how many) the starts that lock the loop (:mod:`~ddltrace.models.quota_loop`); None
    where every start locks it."""
    from ddltrace.models import quota_loop

    if not quota_holds(wl, b, runs, shares, w):
        return None
    allowance = b["allowance"]
    quota, period = allowance["quota_cores"], allowance["quota_period_s"]
    share = shares["share_b"]
    compute = (wl.b * k_b.c_p + max(0.0, k_b.c_b - wait_s) + hashemi.t_mem(wl.b, wl, k_b)) * share
    message = (k_b.r_net * wl.s * wl.n_w + k_b.lat_net) * share
    sleep = min(k_b.c_u, split["server_s"] * (1.0 - split["cpu_fraction"]))
    cycles = quota_loop.cycles(int(w), compute, message, (k_b.c_u - sleep) * share, sleep, quota, period)
    played = cycles[np.isfinite(cycles)]  # a start that locks the loop is one it cannot play out
    if not len(played):
        return None
    phases = wl.epochs * wl.d / (wl.b * w) * played
    return {"phase_s": float(phases.mean()), "low_s": float(phases.min()), "high_s": float(phases.max()),
            "compute_cpu_s": compute, "message_s": message, "server_sleep_s": sleep, "draws": len(played),
            "locked": len(cycles) - len(played), "quota": quota, "period_s": period}


def quota_holds(wl: Workload, b: Mapping, runs: Sequence[Mapping], shares: Mapping, w: int) -> bool:
    """Whether B's CFS quota is what holds every rank of the closed loop at ``w`` (their share on B, ``shares``
    from :func:`cpu_shares`, is the quota's, and their quotas add up to no more than B's cores): where
    :func:`quota_loop` plays the loop out."""
    allowance = b.get("allowance") or {}
    quota, period, cores = allowance.get("quota_cores"), allowance.get("quota_period_s"), allowance.get("cores")
    if not (wl.serial and quota and period and quota < 1.0 and shares["share_b"] >= quota - 1e-9):
        return False
    return not (cores and (w + _servers(runs)) * quota > cores + 1e-9)


def server_split(c_u: float, a: Mapping, runs: Sequence[Mapping], measured: Mapping | None = None) -> dict:
    """What the fitted c_u (s/update) holds, from the server's trace on A: ``server_s``, the server's measured busy
    time per update (median over the runs, at most c_u), of which ``cpu_fraction`` is CPU, and ``rest_s`` =
    c_u - server_s, what the fit put in c_u beyond the server's work (the runs' plateau was not the server's: on
    a machine with fewer cores than ranks, the workers' contention for them), carried like the workers' compute.
    ``measured``: :func:`server_measured` of ``a`` and ``runs``, where the caller has it (it does not depend on
    c_u)."""
    m = measured or server_measured(a, runs)
    on = c_u > 0  # (of an array of draws of c_u: draw by draw)
    if m["busy_s"] is None:
        return {"server_s": c_u, "rest_s": 0.0, "cpu_fraction": 1.0,
                "how": "no server busy time in the runs: all of c_u is the server's, all CPU"}
    if not (isinstance(on, np.ndarray) or on):  # the model holds c_u at 0: none of the server's busy time is in it
        return {"server_s": c_u, "rest_s": 0.0, "cpu_fraction": 1.0, "zero": True,
                "how": f"c_u is 0 in the model, so none of the server's measured busy time is in it (the runs "
                       f"measured {_busy_range(runs)} per update, median {1e3 * m['busy_s']:.3g} ms)"}
    server = hashemi.smaller(c_u, m["busy_s"])
    return {"server_s": hashemi.pick(on, server, c_u), "rest_s": hashemi.pick(on, c_u - server, 0.0),
            "cpu_fraction": hashemi.pick(on, m["cpu_fraction"], 1.0), "how": m["how"]}


def _busy_range(runs: Sequence[Mapping]) -> str:
    """The runs' server busy time per update, '0.698 to 1.46 ms' (or one run's '1.46 ms')."""
    per_update = [float(r["server_busy_s"]) / (float(r["d"]) * float(r.get("epochs") or 1.0) / float(r["b"]))
                  for r in runs if all(is_finite(r.get(key)) for key in ("server_busy_s", "d", "b"))]
    low, high = 1e3 * min(per_update), 1e3 * max(per_update)
    return f"{low:.3g} ms" if f"{low:.3g}" == f"{high:.3g}" else f"{low:.3g} to {high:.3g} ms"


def server_measured(a: Mapping, runs: Sequence[Mapping]) -> dict:
    """The server's busy time per update on A (``busy_s``: the median over the runs, None where no run has it) and
    the share of it that is CPU (``cpu_fraction``, and ``how`` it was found).

    The CPU fraction comes from how the server's busy time per update grew as the ranks' share of a core fell
    across A's runs: busy = cpu / share + rest (least squares over the runs; where the rest comes out negative, the
    fit through the origin, rest 0); a sleep or a wait on a device does not grow. Without two runs at shares 20 %
    apart, all of it is taken for CPU."""
    per_update, inverse = [], []
    for r in runs:
        if not (is_finite(r.get("server_busy_s")) and is_finite(r.get("d")) and is_finite(r.get("b"))):
            continue
        updates = float(r["d"]) * float(r.get("epochs") or 1.0) / float(r["b"])
        per_update.append(float(r["server_busy_s"]) / updates)
        share, _ = share_on_a(a, runs, float(r["w"]))
        inverse.append(1.0 / share if share > 0 else math.nan)
    if not per_update:
        return {"busy_s": None, "cpu_fraction": 1.0, "how": ""}
    x, y = np.asarray(inverse), np.asarray(per_update)
    ok = np.isfinite(x)
    if ok.sum() >= 2 and x[ok].max() >= 1.2 * x[ok].min():
        slope, intercept = np.polyfit(x[ok], y[ok], 1)
        if intercept < 0:  # no time per update is negative: the fit again with none beside the CPU's
            slope, intercept = float(x[ok] @ y[ok]) / float(x[ok] @ x[ok]), 0.0
        cpu, off = max(0.0, float(slope)), max(0.0, float(intercept))
        fraction = cpu / (cpu + off) if cpu + off > 0 else 1.0
        how = (f"server busy {1e3 * cpu:.3g} ms / share + {1e3 * off:.3g} ms per update over {int(ok.sum())} runs")
    else:
        fraction, how = 1.0, "the runs' shares do not differ enough to tell CPU from waiting: all taken for CPU"
    return {"busy_s": statistics.median(per_update), "cpu_fraction": fraction, "how": how}


def transfer(k: Constants, wl: Workload, counts: Mapping, a: Mapping, b: Mapping,
             z_a: Mapping | None = None, z_b: Mapping | None = None,
             serial: bool = False, w: float | None = None,
             runs: Sequence[Mapping] = (), server: Mapping | None = None) -> tuple[Constants, dict, list[str]]:
    """The model's constants ``k`` (fitted on A) carried to B at ``w`` workers: (constants on B, factor of each
    constant B / A, notes on what could not be carried). ``server``: :func:`server_measured` of ``a`` and ``runs``
    where the caller has it (:func:`interval` carries thousands of draws with the same runs).

    The CPU-bound costs carry by the calibrated work ratio times :func:`cpu_shares`' multiplier at ``w`` (1 when
    ``w`` is None): c_p, t_phase_min by the per-sample work, c_b by a pass over the weights, and c_u split by
    :func:`server_split` (``runs``: the model's measurements on A): the server's CPU time by the weights pass,
    its other time kept, what the fit put in c_u beyond the server's work by the per-sample work.

    ``wl.cpu_shares`` (a model fitted with ``--cpu-shares``): c_p and c_b are CPU seconds of a whole core; at ``w``
    they are first put at A's share there, so the multiplier carries them to B's, and each message of a batch
    waits for a receiver off its core on B (:func:`off_core_period`: B's quota period where the quota holds the
    rank, else the scheduler's round fitted on A), instead of the quota's wait on B less A's.

    ``serial``: the workers pull the weights, compute and push the gradient one after another (no overlap, as the
    ps-sgd job does). Then the fit on A put the workers' exposed transfers into c_p, at A's network; on B c_p gains
    what B's network adds to the two transfers of n_w values per batch, ``(2 s n_w dr_net + 2 dlat_net) / b`` per
    sample, with dr_net = r_net(B) - r_net(A) in the model's terms. Hashemi's T_phase takes the max of the network
    and the worker's term, which holds only when they overlap. (c_u is not given the server link's time per
    update: T_net's 2 T_send already charges each transfer, and charging it again in w c_u predicted a server
    limit at w = 4 that runs on 200 Mbit/s links did not show: docs/MODELS.md.)"""
    return carry(k, wl, a, b, profile_ratios(wl, counts, a, b, z_a or {}, z_b or {}), serial, w, runs, server)


def profile_ratios(wl: Workload, counts: Mapping, a: Mapping, b: Mapping, z_a: Mapping, z_b: Mapping) -> dict:
    """What :func:`transfer` carries the constants by that does not depend on w, for the profiles' constants ``z_a``,
    ``z_b`` standard deviations off (by constant: numbers, or arrays of draws): ``sample`` and ``update`` (B's work
    per sample at the job's working set and per pass over the weights, over A's), ``held`` (B's value over A's of
    each held constant both profiles have) and ``missing`` (the profile, 'A' or 'B', that lacks each other one)."""
    job_set = hashemi.working_set_bytes(wl.b, wl.n_f, wl.n_w, wl.s)
    weights_set = max(wl.n_w * wl.s, 1.0)
    one = {"muladds": 1.0}
    held, missing = {}, {}
    for name in HELD:
        va, vb = held_value(a, name, z_a.get(name, 0.0)), held_value(b, name, z_b.get(name, 0.0))
        if va is None or vb is None:
            missing[name] = "A" if va is None else "B"
        else:
            held[name] = vb / va
    return {"sample": per_sample_work(b, counts, job_set, z_b) / per_sample_work(a, counts, job_set, z_a),
            "update": per_sample_work(b, one, weights_set, z_b) / per_sample_work(a, one, weights_set, z_a),
            "held": held, "missing": missing}


def carry(k: Constants, wl: Workload, a: Mapping, b: Mapping, ratios: Mapping, serial: bool = False,
          w: float | None = None, runs: Sequence[Mapping] = (), server: Mapping | None = None,
          what_if: Mapping | None = None) -> tuple[Constants, dict, list[str]]:
    """:func:`transfer` from the profiles' :func:`profile_ratios` (computed once for every w of a search): the
    same arguments and result. ``k``'s fields and the ratios may be arrays of draws (:mod:`ddltrace.models.
    drawn_knees`): then each draw's constants on B, the same numbers as one draw at a time but for the packet work
    below (the notes are of the constants that are numbers).

    Where both profiles measured ``net_cpu_per_byte`` and their cores, the packet work a worker's compute meets on
    each (:mod:`ddltrace.models.link_cpu`) is taken from the ranks' cores (:func:`cpu_shares`): A's at A's phase at
    w (as :func:`constants_at` makes it), B's the fixed point of B's own phase with ``what_if``'s changes (which the
    caller then makes to the constants returned); for draws, every draw takes the median of the draws' loads (so a
    draw's constants are then not quite those it would have carried alone; the constant's own uncertainty is not
    drawn). Not where B's quota holds every rank (:func:`quota_holds`, decided without the packet work, as
    :func:`phase_at` and the knee draws decide it): the quota loop plays the ranks' periods out and knows no
    packet work. ``factors["link_cores"]``: (A's, B's) cores of it at w, and ``factors["link_note"]``: why it is 0
    or capped at w (None where neither)."""
    t_slice, fitted = k.t_slice, k
    if wl.cpu_shares:  # c_p, c_b in CPU seconds: A's wall time at its share at w; the waits are B's own (below)
        k = hashemi.at_share(k, share_on_a(a, runs, w)[0] if w is not None else 1.0)
    per_byte = [link_cpu.per_byte(record) for record in (a, b)]
    cores_a, cores_b = link_cores(a, b)
    missing, held = _no_link_note(a, b, per_byte, (cores_a, cores_b)), None
    if missing is None and w is not None and wl.cpu_shares and quota_holds(wl, b, runs, cpu_shares(a, b, runs, w), w):
        held = "B's quota holds every rank: the quota loop plays its periods out, without packet work"
    if w is None or missing or held:
        on_b, factors, notes = _carried(k, t_slice, wl, a, b, ratios, serial, w, runs, server, (0.0, 0.0))
        if w is not None:
            factors.update(link_cores=(0.0, 0.0), link_note=held)
        return on_b, factors, notes + ([missing] if missing else [])
    workers_serial = serial or wl.serial
    on_a = fitted
    if wl.cpu_shares:  # A's phase at w as constants_at has it, the messages' waits for ranks off their cores in
        on_a = hashemi.at_share(fitted, share_on_a(a, runs, w)[0], messages_per_batch(runs, w))
    wanted_a = float(np.median(link_cpu.load(wl, per_byte[0], on_a.r_net, hashemi.t_phase(w, wl, on_a), w,
                                             workers_serial)))
    link_a = min(wanted_a, link_cpu.MOST * cores_a)

    def load_b(link_b: float) -> float:  # the packet work B's phase leaves with link_b cores of it
        on_b = _carried(k, t_slice, wl, a, b, ratios, serial, w, runs, server, (link_a, link_b))[0]
        on_b = on_b.scaled(what_if) if what_if else on_b
        return float(np.median(link_cpu.load(wl, per_byte[1], on_b.r_net, hashemi.t_phase(w, wl, on_b), w,
                                             workers_serial)))

    link_b = link_cpu.fixed_point(load_b, link_cpu.MOST * cores_b)
    on_b, factors, notes = _carried(k, t_slice, wl, a, b, ratios, serial, w, runs, server, (link_a, link_b))
    capped = [f"{name}'s packets would take {wanted():.3g} cores at its phase, more than {link_cpu.MOST:g} of its "
              f"{cores:g}: taken as {taken:.3g}, and its phase is then too short"
              for name, wanted, taken, cores in (("A", lambda: wanted_a, link_a, cores_a),
                                                 ("B", lambda: load_b(link_b), link_b, cores_b))
              if taken >= link_cpu.MOST * cores - 2 * link_cpu.TOLERANCE_CORES and wanted() > taken]
    factors.update(link_cores=(link_a, link_b), link_note="; ".join(capped) or None)
    return on_b, factors, notes


def _no_link_note(a: Mapping, b: Mapping, per_byte: Sequence[float | None],
                  cores: Sequence[float | None]) -> str | None:
    """Why :func:`carry` leaves out the CPU of the network's packets (:mod:`ddltrace.models.link_cpu`), None where
    both profiles have what it needs."""
    names = [record.get("source") or f"{label}'s profile" for record, label in ((a, "A"), (b, "B"))]
    lacking = [name for name, value in zip(names, per_byte, strict=True) if value is None]
    if lacking:
        return (f"{' and '.join(lacking)}: no {link_cpu.NAME} (calibrate's network section measures it): the CPU "
                "the network's packets cost the ranks is left out")
    lacking = [name for name, value in zip(names, cores, strict=True) if not value]
    if lacking:
        return (f"{' and '.join(lacking)}: the cores its calibration ran on are not recorded: the CPU the network's "
                "packets cost the ranks is left out")
    return None


def _carried(k: Constants, t_slice: float, wl: Workload, a: Mapping, b: Mapping, ratios: Mapping, serial: bool,
             w: float | None, runs: Sequence[Mapping], server: Mapping | None, link: tuple[float, float]
             ) -> tuple[Constants, dict, list[str]]:
    """:func:`carry` with A's constants at w (``k``; ``t_slice`` the fitted round) and ``link`` cores of packet
    work a worker's compute meets on A and on B (:func:`cpu_shares`)."""
    sample, update = ratios["sample"], ratios["update"]
    shares = cpu_shares(a, b, runs, w, link) if w is not None else None
    m = shares["multiplier"] if shares else 1.0
    factors = dict.fromkeys(PER_SAMPLE, sample * m)
    factors["c_b"] = update * m
    split = server_split(k.c_u, a, runs, server)
    f = split["cpu_fraction"]
    c_u_b = split["server_s"] * (f * update * m + 1.0 - f) + split["rest_s"] * sample * m
    factors["c_u"] = hashemi.divided(c_u_b, k.c_u, update * m)
    notes = []
    for name in HELD:
        value = getattr(k, name)
        if name in ratios["held"]:
            factors[name] = hashemi.pick(value == 0, 1.0, ratios["held"][name])
        else:
            factors[name] = 1.0
            if not isinstance(value, np.ndarray) and value != 0:
                notes.append(f"{name}: {ratios['missing'][name]}'s profile has no {name}; the model's "
                             f"{value:.3g} is kept on B")
    values = {name: getattr(k, name) * factors.get(name, 1.0) for name in hashemi.NAMES}
    for name in TAKEN:
        entry = (b.get("constants") or {}).get(name)
        if entry is not None:
            values[name] = float(entry["value"])
    if shares and wl.cpu_shares:  # each message waits for a receiver off its core on B, as the fit had it on A
        period, _ = off_core_period(b, shares, t_slice)
        extra = messages_per_batch(runs, w) * hashemi.off_core_wait(shares["share_b"], period)
        values["c_b"] = values["c_b"] + extra
        factors["c_b_quota_wait_s"] = extra
    elif shares:  # each message of a batch may find its receiver throttled by a quota: a per-batch cost
        extra = quota_wait_per_batch(a, b, runs, shares)
        values["c_b"] = hashemi.positive_part(values["c_b"] + extra)
        factors["c_b_quota_wait_s"] = extra
    if serial and not wl.serial:  # a closed-loop model (wl.serial) has the transfers in its cycle already
        d_r_net, d_lat = values["r_net"] - k.r_net, values["lat_net"] - k.lat_net
        values["c_p"] = hashemi.positive_part(values["c_p"] + (2 * wl.s * wl.n_w * d_r_net + 2 * d_lat) / wl.b)
        factors["c_p"] = hashemi.divided(values["c_p"], k.c_p, factors["c_p"])
    return replace(k, **values), factors, notes


def knee_over_w(phase: Callable[[int], Mapping], wl: Workload, most: int = KNEE_MOST) -> tuple[float, str]:
    """The knee (workers, cause) of a model whose constants depend on w (each rank's share of a core, on B or in CPU
    seconds): the first w = 1, 2, ... ``most`` from which one more worker gains less than half of its ideal share
    of the phase, ``T(w + 1) > T(w) (1 - 0.5 / (w + 1))``, with ``phase(w)`` the prediction at w
    (:func:`phase_at`: ``phase_s`` and the ``constants`` there); the cause is the term that binds at w + 1. For
    constants that do not depend on w it is Hashemi's w* rounded down (the phase falls ideally below it and not at
    all past it). inf, 'none' when every worker up to ``most`` still gains."""
    now = phase(1)["phase_s"]
    for w in range(1, most):
        nxt = phase(w + 1)
        if gains_little(now, nxt["phase_s"], w):
            return float(w), _cause(nxt, w + 1, wl)
        now = nxt["phase_s"]
    return math.inf, "none"


def knee_search(phase: Callable[[int], Mapping], wl: Workload, most: int = KNEE_MOST) -> tuple[float, str]:
    """:func:`knee_over_w`'s knee found w by w up to :data:`KNEE_STEPS` workers, then by doubling w until one more
    worker gains less than half of its ideal share and halving between the last w that still gained and there:
    about 4 log2(w*) predictions instead of w* + 1 for a far knee, for the thousands of draws of an interval. The
    same knee where the rule, once it holds, holds at every larger w (the gain of one more worker only falls); past
    the first w where it holds otherwise (inf, 'none' likewise)."""
    memo: dict[int, Mapping] = {}

    def at(w: int) -> Mapping:
        if w not in memo:
            memo[w] = phase(w)
        return memo[w]

    w = searched_knee(lambda w: gains_little(at(w)["phase_s"], at(w + 1)["phase_s"], w), most)
    return (math.inf, "none") if w is None else (float(w), _cause(at(w + 1), w + 1, wl))


def gains_little(now, nxt, w: int):
    """The knee's rule at ``w``: the phase ``nxt`` at w + 1 workers is more than ``now`` at w (1 - 0.5 / (w + 1)),
    one more worker gaining less than half of its ideal share (numbers, or arrays of draws)."""
    return nxt > now * (1 - 0.5 / (w + 1))


def searched_knee(holds: Callable[[int], bool], most: int) -> int | None:
    """:func:`knee_search`'s w: the rule ``holds(w)`` tried w by w up to :data:`KNEE_STEPS`, then doubling w (below
    ``most``), then halving between the last w where it did not hold and the first where it did; None where it
    holds nowhere tried."""
    gained, w = 0, 1
    while not holds(w):
        if w >= most - 1:
            return None
        gained, w = w, min(w + 1 if w < KNEE_STEPS else 2 * w, most - 1)
    while w - gained > 1:  # gained: the rule does not hold there (0: no w below); w: it does
        mid = (gained + w) // 2
        gained, w = (gained, mid) if holds(mid) else (mid, w)
    return w


def _cause(prediction: Mapping, w: int, wl: Workload) -> str:
    """The knee's cause: the term that binds at ``w`` (one past the knee) in ``prediction``'s constants."""
    bound = hashemi.bound_by(hashemi.phase_terms(w, wl, prediction["constants"]))
    return {"server/network": "server", "worker": "worker", "floor": "floor"}[bound]


def same_measurement(a: Mapping, b: Mapping) -> bool:
    """Whether B's profile record is A's own (the same calibrated numbers, whatever the file's name): then each of
    its constants is one measurement on both sides, drawn once, and its ratio B / A is exactly 1."""
    return {key: v for key, v in a.items() if key != "source"} == {key: v for key, v in b.items() if key != "source"}


def profile_draws(a: Mapping, b: Mapping, draws: int = DRAWS, seed: int = 1) -> tuple[dict, dict]:
    """``draws`` draws (z_a, z_b) of each profile constant's standard deviations off (:func:`transfer`'s ``z_a``,
    ``z_b``), an array of them by constant: independent standard normals for A and B, or B's the same as A's where
    B's record is A's own (:func:`same_measurement`); each draw's A then B, constant by constant, from one stream."""
    rng = np.random.default_rng(seed)
    names = (*CPU, *HELD)
    z = rng.standard_normal((draws, 2, len(names)))
    z_a, z_b = ({name: z[:, side, j] for j, name in enumerate(names)} for side in (0, 1))
    return z_a, (z_a if same_measurement(a, b) else z_b)


def stderr_draws(entries: Mapping, k: Constants, draws: int = DRAWS, seed: int = 0) -> Constants:
    """``k`` with each fitted constant of ``entries`` (a model's ``constants``) an array of ``draws`` draws, each
    constant on its own (for a model with no ``covariance``): normal on its standard error (a draw below 0 at 0),
    uniform below an only-bounded one."""
    rng = np.random.default_rng(seed)
    values = {}
    for name, entry in entries.items():
        if name not in hashemi.NAMES or not isinstance(entry, Mapping):
            continue
        if name in measured_runs(entries):
            continue  # drawn from the runs' own figures (measured_draws)
        if entry.get("stderr"):
            values[name] = np.maximum(0.0, getattr(k, name) + rng.standard_normal(draws) * float(entry["stderr"]))
        elif entry.get("upper_bound"):
            values[name] = rng.uniform(0.0, float(entry["upper_bound"]), draws)
    return measured_draws(replace(k, **values), measured_runs(entries), draws)


def bounded_draws(drawn: Constants, entries: Mapping, draws: int = DRAWS, seed: int = 1) -> Constants:
    """``drawn`` (:func:`ddltrace.analyses.fit_hashemi.knee_draws`: the fitted constants' draws, arrays) with each
    constant the runs only bound (``entries``' ``upper_bound``, a model's ``constants``) drawn uniformly below its
    bound, ``draws`` times: where the model predicts with 0, any value up to the bound fits the runs as well."""
    rng = np.random.default_rng(seed)
    return replace(drawn, **{name: rng.uniform(0.0, float(entry["upper_bound"]), draws)
                             for name, entry in entries.items()
                             if name in hashemi.NAMES and isinstance(entry, Mapping) and entry.get("upper_bound")})


def measured_runs(entries: Mapping) -> dict[str, list[float]]:
    """The constants a model measured from its runs' traces (c_u from the server's: ``model fit --c-u-from-trace``,
    ``--cpu-shares``) with the runs' own figures (``entries``' ``runs``, a model's ``constants``), where there are two
    or more: what :func:`measured_draws` draws them from."""
    return {name: [float(x) for x in entry["runs"]] for name, entry in entries.items()
            if name in hashemi.NAMES and isinstance(entry, Mapping) and isinstance(entry.get("runs"), list)
            and len(entry["runs"]) >= 2}


def measured_draws(drawn: Constants, measured: Mapping[str, Sequence[float]] | None, draws: int = DRAWS,
                   seed: int = 2) -> Constants:
    """``drawn`` with each constant of ``measured`` (:func:`measured_runs`: name -> the runs' own figures, two or more)
    an array of ``draws`` draws, each one of the runs' figures, all equally likely: the runs measured it at their w,
    the model holds one value at every w, so which of them a run at another w would see is not known within their
    spread (docs/MODELS.md, "c_u from the trace: its interval"). Its own stream (``seed``), so that the fitted
    constants' draws are those without it."""
    if not measured:
        return drawn
    rng = np.random.default_rng(seed)
    return replace(drawn, **{name: rng.choice(np.asarray(values, dtype=float), draws)
                             for name, values in measured.items() if len(values) >= 2})


def interval_on_a(drawn: Constants, wl: Workload, workers: Sequence[int], a: Mapping, runs: Sequence[Mapping],
                  confidence: float, what_if: Mapping | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) seconds of the computation phase (all epochs) on A at each worker count: the central
    ``confidence`` share of the phases of the draws ``drawn`` (:func:`bounded_draws`, arrays) at w, as
    :func:`phase_at` makes them on A (:func:`constants_at`: at the ranks' share of a core there for a
    ``--cpu-shares`` model, then ``what_if``), all draws at once (:func:`ddltrace.models.drawn_knees.phases_at`)."""
    from ddltrace.models.drawn_knees import phases_at

    draws = max(np.size(getattr(drawn, name)) for name in hashemi.NAMES)
    columns = [np.broadcast_to(phases_at(drawn, wl, w, a, runs, what_if=what_if), (draws,)) for w in workers]
    tail = 50.0 * (1.0 - confidence)
    low, high = np.percentile(np.column_stack(columns), [tail, 100.0 - tail], axis=0)
    return low, high


def interval(drawn: Constants, wl: Workload, counts: Mapping, a: Mapping, b: Mapping, workers: Sequence[float],
             confidence: float, what_ifs: Sequence[Mapping | None] = (None,), serial: bool = False,
             runs: Sequence[Mapping] = (), draws: int = DRAWS) -> list[tuple[np.ndarray, np.ndarray]]:
    """(low, high) seconds of the computation phase (all epochs) on B at each worker count, one pair per entry of
    ``what_ifs`` (None: the prediction itself; else ``Constants.scaled``'s changes, made to B's constants at w, a
    ``t_slice`` to the fitted one before the messages' waits are drawn from it): the central ``confidence`` share of
    the predictions of the fitted constants' ``draws`` draws ``drawn`` (arrays of them, or numbers all draws share:
    :func:`bounded_draws` of the covariance's, else :func:`stderr_draws`), each with both profiles' constants drawn
    (:func:`profile_draws`; B's as A's where B's record is A's own, :func:`same_measurement`) and carried to B by
    :func:`carry`, all draws at once; the same draws for every entry and every w."""
    z_a, z_b = profile_draws(a, b, draws)
    ratios = profile_ratios(wl, counts, a, b, z_a, z_b)
    server = server_measured(a, runs)
    changes = [dict(what_if or {}) for what_if in what_ifs]
    slices = [change.pop("t_slice", None) for change in changes]
    out = np.empty((len(what_ifs), draws, len(workers)))
    for j, w in enumerate(workers):
        for m, (change, t_slice) in enumerate(zip(changes, slices, strict=True)):
            start = drawn.scaled({"t_slice": t_slice}) if t_slice else drawn
            on_b = carry(start, wl, a, b, ratios, serial, w, runs, server, change)[0]
            on_b = on_b.scaled(change) if change else on_b
            out[m, :, j] = wl.epochs * hashemi.t_phase(w, wl, on_b)
    tail = 50.0 * (1.0 - confidence)
    return [tuple(np.percentile(phases, [tail, 100.0 - tail], axis=0)) for phases in out]


def onto_loop(end, analytic_s, loop_s, loop_end_s, outer: Callable):
    """An end of the phase's interval on B (seconds; numbers or arrays) where B's quota loop is played
    (:func:`phase_at`'s ``loop``): the analytic phase's end (:func:`interval`) moved onto the loop's mean
    (times ``loop_s / analytic_s``), widened to the loop's own end over its periods' starts (``loop_end_s``;
    ``outer``: ``min`` for the low end, ``max`` for the high, or NumPy's); ``end`` itself where the loop is not played
    (``loop_s`` None)."""
    if loop_s is None:
        return end
    return outer(end * (loop_s / analytic_s), loop_end_s)
