"""Hashemi et al. (paper 002): the per-worker ASGD model with one parameter server (MODELS.md section 1).

Every time is in seconds; "per byte" constants are seconds per byte (1 / bandwidth). With ``n = d / w``
samples per worker::

    T_processing(n) = c_p * n                    T_update(n) = c_b * n / b
    T_comp(n)       = T_processing + T_update     T_disk(n)   = r_d * s * n_f * n
    T_mem(n)        = s * n * (r_m * n_f + (r_m + w_m) * n_w / b)
    T_send(n)       = r_net * s * n_w * n / b + lat_net * n / b
    T_net(n, w)     = 2 * T_send(n) + w * c_u * n / b
    T_phase(d, w)   = max(T_net(d/w, w), T_comp(d/w) + T_mem(d/w), T_phase_min)   (the floor is a max)
    T_total(d, w)   = T_init(w) + E * T_phase(d, w)

Workers that do not overlap (``Workload.serial``: pull the weights, compute, push the gradient, one after
another, as the reference ps-sgd job does) are a closed loop, not Hashemi's max: each of the w workers spends
``Z = b (c_p + c_b / b + mem per sample)`` on its own per batch, then waits for and holds the server, which
sends the weights and takes the push over its link (``t = r_net s n_w + lat_net`` per message) and applies
it (``c_u``): :func:`server_service`. Mean value analysis (Reiser and Lavenberg, J. ACM 27(2), 1980, with the
service time at each population) gives the cycle per batch at w workers, and ``T_phase = (d / b) cycle(w) / w``:
at w = 1 everything in a row, ``Z + c_u + 2 t``; at large w ``(d / b)`` times the server's service time. The knee
is the saturation point ``w* = (Z + S(1)) / S(w -> inf)``.

The initialisation term follows the updated model of section 5.3: every worker reads the whole file and keeps
1/w of it, so ``T_init = w * T_disk(d)`` on shared storage read one worker after another ("shared"),
``T_disk(d)`` on local disks read in parallel ("local"), and ``T_disk(d / w)`` for the original model's
partitioned read ("partitioned").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

STORAGE_KINDS = ("shared", "local", "partitioned")


@dataclass(frozen=True)
class Workload:
    """What is trained: ``d`` samples, batch size ``b``, ``n_f`` features per sample, ``n_w`` weights,
    ``epochs`` passes over the data, ``s`` bytes per value (8 for double); ``serial``: the workers pull, compute
    and push one after another (the closed-loop model) instead of overlapping their transfers (Hashemi's max);
    ``cpu_shares``: c_p and c_b are CPU seconds of a whole core, and a rank's wall-time constants at its share of
    a core come from :func:`at_share` (the caller applies it: ``model fit --cpu-shares``)."""

    d: float
    b: float
    n_f: float = 0.0
    n_w: float = 0.0
    epochs: float = 1.0
    s: float = 8.0
    serial: bool = False
    cpu_shares: bool = False

    def __post_init__(self):
        for name in ("d", "b"):
            if not getattr(self, name) > 0:
                raise ValueError(f"workload {name} must be > 0, got {getattr(self, name)!r}")
        for name in ("n_f", "n_w", "epochs", "s"):
            if getattr(self, name) < 0:
                raise ValueError(f"workload {name} must be >= 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class Constants:
    """The model's constants (seconds, seconds per byte). ``kappa`` is the described contention extension:
    past the knee the phase time is multiplied by ``1 + kappa * (w - w*)``; zero is the paper's model. ``t_slice``
    (seconds) is not the paper's: the length of the scheduler's round as the runs saw it, for models whose ranks
    share cores (:func:`at_share`). ``net_duplex`` (0..1) is not the paper's either: the share of its bandwidth a
    direction of the network keeps while the other is busy (calibrate's ``net_duplex``), which the closed loop's
    server uses (:func:`server_service`); 0, the directions taking turns, unless a profile measured it."""

    c_p: float = 0.0
    c_b: float = 0.0
    c_u: float = 0.0
    r_d: float = 0.0
    r_m: float = 0.0
    w_m: float = 0.0
    r_net: float = 0.0
    lat_net: float = 0.0
    t_phase_min: float = 0.0
    kappa: float = 0.0
    t_slice: float = 0.0
    net_duplex: float = 0.0

    def scaled(self, changes: dict[str, tuple[str, float]]) -> Constants:
        """A what-if copy: ``{'r_net': ('scale', 0.1), 'c_u': ('set', 2e-5)}``."""
        values = {}
        for name, (how, value) in changes.items():
            if name not in self.__dataclass_fields__:
                raise KeyError(name)
            values[name] = getattr(self, name) * value if how == "scale" else value
        return replace(self, **values)


NAMES = tuple(Constants.__dataclass_fields__)
#: The unit of each constant (model.json's ``unit``, the fit's report).
UNITS = {"c_p": "s/sample", "c_b": "s/batch", "c_u": "s/update", "r_d": "s/B", "r_m": "s/B", "w_m": "s/B",
         "r_net": "s/B", "lat_net": "s", "t_phase_min": "s", "kappa": "1/worker", "t_slice": "s", "net_duplex": "1"}


def t_processing(n: float, c_p: float) -> float:
    """Seconds to process n samples once (eq. 1)."""
    return c_p * n


def t_update(n: float, b: float, c_b: float) -> float:
    """Seconds to form and send the n / b updates (eq. 2, with c_b kept apart from c_p)."""
    return c_b * n / b


def t_comp(n: float, wl: Workload, k: Constants) -> float:
    """Computation of n samples: processing plus update overhead (eq. 3)."""
    return t_processing(n, k.c_p) + t_update(n, wl.b, k.c_b)


def t_disk(n: float, wl: Workload, k: Constants) -> float:
    """Seconds to read n samples from disk (eq. 5)."""
    return k.r_d * wl.s * wl.n_f * n


def t_mem(n: float, wl: Workload, k: Constants) -> float:
    """Seconds of memory traffic for n samples: the samples once, the weights read and written per batch (eq. 6)."""
    return wl.s * n * (k.r_m * wl.n_f + (k.r_m + k.w_m) * wl.n_w / wl.b)


def t_send(n: float, wl: Workload, k: Constants) -> float:
    """Seconds to send the n / b updates, latency kept (eq. 7)."""
    return (k.r_net * wl.s * wl.n_w + k.lat_net) * n / wl.b


def t_net(n: float, w: float, wl: Workload, k: Constants) -> float:
    """Network side of n samples on one of w workers: send and receive, plus the server's work (eq. 8)."""
    return 2 * t_send(n, wl, k) + w * k.c_u * n / wl.b


def reads(w: float, storage: str = "shared") -> float:
    """m(w) of T_init = m(w) T_disk(d), the updated model of section 5.3: w on shared storage (the workers read the
    whole file one after another), 1 on local disks (in parallel), 1 / w for the original partitioned read."""
    if storage not in STORAGE_KINDS:
        raise ValueError(f"storage must be one of {', '.join(STORAGE_KINDS)}, got {storage!r}")
    return {"shared": w, "local": 1.0, "partitioned": 1.0 / w}[storage]


def t_init(w: float, wl: Workload, k: Constants, storage: str = "shared") -> float:
    """Initialisation (reading the data) on w workers, per the updated model of section 5.3: :func:`reads`
    times a worker's read of the whole data set."""
    return reads(w, storage) * t_disk(wl.d, wl, k)


def off_core_wait(share: float, period: float) -> float:
    """Mean seconds a message waits for a receiver that has ``share`` (0-1] of a core: the receiver polls while it
    waits (MPI ranks do), so it would use a whole core, and it is off its core ``1 - share`` of the time in
    stretches of ``(1 - share) period`` (``period``: the scheduler's round among ranks sharing cores, or a CFS
    quota's period); a message arriving then waits half a stretch: ``(1 - share)^2 period / 2``."""
    share = min(1.0, max(share, 0.0))
    return (1.0 - share) ** 2 * period / 2.0


def at_share(k: Constants, share: float, messages: float = 0.0) -> Constants:
    """The wall-time constants of a rank with ``share`` (0-1] of a core, from constants whose c_p and c_b are CPU
    seconds of a whole core: its work per sample and per batch takes ``1 / share`` as long, and each of the
    ``messages`` it takes part in per batch waits :func:`off_core_wait` for a receiver off its core, with the
    rounds of ``k.t_slice`` seconds, added to c_b."""
    share = min(1.0, share) if share > 0 else 1.0
    wait = messages * off_core_wait(share, k.t_slice)
    return replace(k, c_p=k.c_p / share, c_b=k.c_b / share + wait, t_slice=0.0)


def serial_stations(wl: Workload, k: Constants) -> tuple[float, float]:
    """The closed loop of workers that do not overlap: (Z, each worker's own seconds per batch; t, seconds of one
    message of n_w values on a link)."""
    think = t_comp(wl.b, wl, k) + t_mem(wl.b, wl, k)
    return think, k.r_net * wl.s * wl.n_w + k.lat_net


def larger(a, b):
    """max(a, b): of numbers Python's (``a`` where they tie), of arrays of draws NumPy's, draw by draw."""
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)


def smaller(a, b):
    """min(a, b): of numbers Python's (``a`` where they tie), of arrays of draws NumPy's, draw by draw."""
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


def positive_part(x):
    """``max(0.0, x)``: x where it is > 0, else 0.0 (never -0.0), of a number or of each draw of an array."""
    return np.where(x > 0.0, x, 0.0) if isinstance(x, np.ndarray) else max(0.0, x)


def pick(holds, a, b):
    """``a`` where ``holds``, else ``b``: of numbers, or draw by draw where ``holds`` is an array."""
    return np.where(holds, a, b) if isinstance(holds, np.ndarray) else (a if holds else b)


def divided(num, den, otherwise):
    """``num / den`` where ``den > 0``, else ``otherwise``: of numbers, or draw by draw of arrays (with no warning
    where a draw's ``den`` is 0)."""
    if isinstance(num, np.ndarray) or isinstance(den, np.ndarray):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, num / den, otherwise)
    return num / den if den > 0 else otherwise


def _plain(x):
    """A result of numbers as a Python float (what a caller of numbers formats and writes), an array as it is."""
    return float(x) if np.ndim(x) == 0 else x


def server_service(n: int, c_u, message, duplex=0.0):
    """Seconds the server is held per update with ``n`` workers in the loop: it sends the weights with a send that
    blocks for a message's time on its link, then receives a push and applies it. Alone (n = 1) the push comes only
    after the worker's compute: ``c_u + 2 t``. With other workers, the next push flows in while the server sends:
    at the share ``duplex`` of the link's bandwidth that the incoming direction keeps with the outgoing one busy
    (:class:`Constants`' ``net_duplex``), from a point of the send that is, on average, its middle, so ``t (1 -
    duplex / 2)`` of it is left once the send ends; and that rest flows while the server applies the previous push:
    ``t + max(c_u, t (1 - duplex / 2))``. With ``duplex`` 0 (the directions taking turns; no profile measured it)
    ``t + max(c_u, t)``, the model before the constant was measured; on a full-duplex link ``t + max(c_u, t / 2)``
    (the net B's 200 Mbit/s links measure 0.98: docs/MODELS.md). ``c_u``, ``message``, ``duplex``: numbers, or
    arrays of draws."""
    return c_u + 2 * message if n <= 1 else message + larger(c_u, message * (1.0 - duplex / 2.0))


def _mva_cycle(n: int, think, c_u, message, duplex=0.0):
    """Seconds of one worker's cycle (its own time, then its wait and service at the server) with ``n`` workers:
    mean value analysis of the closed loop (one queue, its service time at each population from
    :func:`server_service`), n steps; numbers, or arrays of draws (a queue of 0 where a draw's cycle is 0)."""
    queue, cycle = 0.0, think + server_service(1, c_u, message)
    for m in range(1, n + 1):
        residence = server_service(m, c_u, message, duplex) * (1.0 + queue)
        cycle = think + residence
        queue = divided(m * residence, cycle, 0.0)
    return cycle


def serial_cycle(w: float, wl: Workload, k: Constants):
    """Seconds of one worker's cycle per batch at w workers (linear between the integers around a fractional w), for
    constants that are numbers or arrays of draws."""
    think, message = serial_stations(wl, k)
    lo = max(1, math.floor(w))
    low = _mva_cycle(lo, think, k.c_u, message, k.net_duplex)
    if w <= lo:
        return low
    return low + (w - lo) * (_mva_cycle(lo + 1, think, k.c_u, message, k.net_duplex) - low)


def phase_terms(w: float, wl: Workload, k: Constants) -> dict[str, float]:
    """The competing terms of one pass over the data on w workers, in seconds: net, comp, mem, worker
    (comp + mem) and floor (numbers, or arrays of the draws of constants that are arrays). With ``wl.serial``,
    'net' is the rest of the closed loop's cycle (the transfers and the waits at the server and its link) and the
    phase is worker + net, not their max."""
    n = wl.d / w
    comp, mem = t_comp(n, wl, k), t_mem(n, wl, k)
    if wl.serial:
        net = wl.d / wl.b * serial_cycle(w, wl, k) / w - (comp + mem)
        return {"net": positive_part(net), "comp": comp, "mem": mem, "worker": comp + mem,
                "floor": k.t_phase_min, "serial": True, "past_knee": w > w_star(wl, k)}
    return {"net": t_net(n, w, wl, k), "comp": comp, "mem": mem, "worker": comp + mem, "floor": k.t_phase_min}


def bound_by(terms: dict[str, float]) -> str:
    """Which term sets the phase time: 'server/network', 'worker' or 'floor' (for the closed loop: the server and
    its link past the knee, else the worker)."""
    if terms.get("serial"):
        if terms["floor"] >= terms["worker"] + terms["net"]:
            return "floor"
        return "server/network" if terms["past_knee"] else "worker"
    best = max(("net", "worker", "floor"), key=lambda name: terms[name])
    return {"net": "server/network", "worker": "worker", "floor": "floor"}[best]


def _knee_bounds(wl: Workload, k: Constants) -> tuple:
    """(w_server, w_floor, message): the workers (numbers, or arrays of draws) at which the server term overtakes the
    worker's and at which the floor binds, inf where it never does; message: seconds of one message (:func:`knee`)."""
    per_sample = k.c_p + k.c_b / wl.b + wl.s * (k.r_m * wl.n_f + (k.r_m + k.w_m) * wl.n_w / wl.b)
    if wl.serial:  # the closed loop saturates at (Z + S(1)) / S(inf)
        think, message = serial_stations(wl, k)
        w_server = divided(think + server_service(1, k.c_u, message),
                           server_service(2, k.c_u, message, k.net_duplex), math.inf)
    else:
        message = None
        send_per_batch = 2 * k.r_net * wl.s * wl.n_w + 2 * k.lat_net
        w_server = divided(wl.b * per_sample - send_per_batch, k.c_u, math.inf)
    w_floor = divided(wl.d * per_sample, k.t_phase_min, math.inf)
    return w_server, w_floor, message


def w_star(wl: Workload, k: Constants):
    """The knee w* (workers) of :func:`knee`, without its cause: a float for constants that are numbers, an array
    for constants that are arrays of draws (each draw's own w*)."""
    w_server, w_floor, _ = _knee_bounds(wl, k)
    return pick(w_server <= w_floor, w_server, w_floor)


def knee(wl: Workload, k: Constants) -> tuple[float, str]:
    """The knee w* (workers) past which the phase time stops falling, and why (constants that are numbers).

    The server term overtakes the worker's compute where (d/b) c_u + (d/w)(2 r_net s n_w + lat_net)/b equals
    (d/w)(c_p + c_b/b + mem per sample): ``w* = (b A - (2 r_net s n_w + lat_net)) / c_u`` with A the worker's
    time per sample; the floor is reached at ``w = d A / T_phase_min``. Returns the smaller (:func:`w_star`), with
    its cause ('server' or 'floor'); ``inf`` when neither ever binds. w* is continuous: under 1 (0 or negative where
    the transfers alone outlast the worker's batch) that term is the larger already at one worker. For the closed
    loop (``wl.serial``): the saturation point ``(Z + S(1)) / S(inf)`` of :func:`server_service` ('server', or
    'network' when a message takes longer than the update).
    """
    w_server, w_floor, message = _knee_bounds(wl, k)
    if math.isinf(w_server) and math.isinf(w_floor):
        return math.inf, "none"
    if w_server > w_floor:
        return w_floor, "floor"
    return w_server, ("network" if wl.serial and k.c_u < message * (1.0 - k.net_duplex / 2.0) else "server")


def _serial_phase(w: float, wl: Workload, k: Constants):
    """The closed loop's T_phase (seconds) at w workers, with the floor: (d / b) cycle(w) / w."""
    return np.maximum(wl.d / wl.b * serial_cycle(w, wl, k) / float(w), k.t_phase_min)


def _contended_from(wl: Workload, k: Constants):
    """The worker count from which the contention extension adds: w*, or 1 where w* is under one worker (one worker
    contends with no other)."""
    return np.maximum(w_star(wl, k), 1.0)


def t_phase(w, wl: Workload, k: Constants):
    """Seconds of one pass over the data (the computation phase, one epoch) on w workers, with the floor and, when
    ``kappa > 0``, the contention extension past the knee: at a number w (a float), at an array of w (an array), or
    at one w for constants whose fields are arrays of draws (:mod:`ddltrace.models.drawn_knees`: each draw's)."""
    if wl.serial:
        base = np.array([_serial_phase(x, wl, k) for x in np.asarray(w, dtype=float)]) if np.ndim(w) else \
            _serial_phase(w, wl, k)
    else:
        terms = phase_terms(w, wl, k)
        base = np.maximum(np.maximum(terms["net"], terms["worker"]), terms["floor"])
    if isinstance(k.kappa, np.ndarray):  # draws: the extension only in those with kappa > 0
        if np.any(k.kappa > 0):
            contended = base * (1 + k.kappa * np.maximum(0.0, np.asarray(w, dtype=float) - _contended_from(wl, k)))
            base = np.where(k.kappa > 0, contended, base)
    elif k.kappa > 0:
        base = base * (1 + k.kappa * np.maximum(0.0, np.asarray(w, dtype=float) - _contended_from(wl, k)))
    return _plain(base)


def t_total(w, wl: Workload, k: Constants, storage: str = "shared"):
    """Seconds of the whole run on w workers: initialisation plus E passes (eq. 9 with section 5.3's updates)."""
    return t_init(w, wl, k, storage) + wl.epochs * t_phase(w, wl, k)


def working_set_bytes(b: float, n_f: float, n_w: float, s: float = 8.0, labels: float = 1.0) -> float:
    """Bytes a worker touches per batch (section 4.4): the batch of samples with labels plus the weights."""
    return b * (n_f + labels) * s + n_w * s


def fits_cache(b: float, n_f: float, n_w: float, llc_bytes: float, s: float = 8.0, labels: float = 1.0) -> bool:
    """Whether the batch plus weights fit in the last-level cache (below the cache cliff)."""
    return working_set_bytes(b, n_f, n_w, s, labels) <= llc_bytes
