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

The initialisation term follows the updated model of section 5.3: every worker reads the whole file and keeps
1/w of it, so ``T_init = w * T_disk(d)`` on shared storage read one worker after another ("shared"),
``T_disk(d)`` on local disks read in parallel ("local"), and ``T_disk(d / w)`` for the original model's
partitioned read ("partitioned").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

STORAGE_KINDS = ("shared", "local", "partitioned")


@dataclass(frozen=True)
class Workload:
    """What is trained: ``d`` samples, batch size ``b``, ``n_f`` features per sample, ``n_w`` weights,
    ``epochs`` passes over the data, ``s`` bytes per value (8 for double)."""

    d: float
    b: float
    n_f: float = 0.0
    n_w: float = 0.0
    epochs: float = 1.0
    s: float = 8.0

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
    past the knee the phase time is multiplied by ``1 + kappa * (w - w*)``; zero is the paper's model."""

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

    def scaled(self, changes: dict[str, tuple[str, float]]) -> Constants:
        """A what-if copy: ``{'r_net': ('scale', 0.1), 'c_u': ('set', 2e-5)}``."""
        values = asdict(self)
        for name, (how, value) in changes.items():
            if name not in values:
                raise KeyError(name)
            values[name] = values[name] * value if how == "scale" else value
        return replace(self, **values)


NAMES = tuple(Constants.__dataclass_fields__)


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


def t_init(w: float, wl: Workload, k: Constants, storage: str = "shared") -> float:
    """Initialisation (reading the data) on w workers, per the updated model of section 5.3."""
    if storage == "shared":
        return w * t_disk(wl.d, wl, k)
    if storage == "local":
        return t_disk(wl.d, wl, k)
    if storage == "partitioned":
        return t_disk(wl.d / w, wl, k)
    raise ValueError(f"storage must be one of {', '.join(STORAGE_KINDS)}, got {storage!r}")


def phase_terms(w: float, wl: Workload, k: Constants) -> dict[str, float]:
    """The competing terms of one pass over the data on w workers, in seconds: net, comp, mem, worker
    (comp + mem) and floor."""
    n = wl.d / w
    comp, mem = t_comp(n, wl, k), t_mem(n, wl, k)
    return {"net": t_net(n, w, wl, k), "comp": comp, "mem": mem, "worker": comp + mem, "floor": k.t_phase_min}


def bound_by(terms: dict[str, float]) -> str:
    """Which term sets the phase time: 'server/network', 'worker' or 'floor'."""
    best = max(("net", "worker", "floor"), key=lambda name: terms[name])
    return {"net": "server/network", "worker": "worker", "floor": "floor"}[best]


def knee(wl: Workload, k: Constants) -> tuple[float, str]:
    """The knee w* (workers) past which the phase time stops falling, and why.

    The server term overtakes the worker's compute where (d/b) c_u + (d/w)(2 r_net s n_w + lat_net)/b equals
    (d/w)(c_p + c_b/b + mem per sample): ``w* = (b A - (2 r_net s n_w + lat_net)) / c_u`` with A the worker's
    time per sample; the floor is reached at ``w = d A / T_phase_min``. Returns the smaller, with its cause
    ('server' or 'floor'); ``inf`` when neither ever binds.
    """
    per_sample = k.c_p + k.c_b / wl.b + wl.s * (k.r_m * wl.n_f + (k.r_m + k.w_m) * wl.n_w / wl.b)
    send_per_batch = 2 * k.r_net * wl.s * wl.n_w + 2 * k.lat_net
    w_server = (wl.b * per_sample - send_per_batch) / k.c_u if k.c_u > 0 else math.inf
    if w_server <= 0:
        w_server = 1.0 if k.c_u > 0 else math.inf
    w_floor = wl.d * per_sample / k.t_phase_min if k.t_phase_min > 0 else math.inf
    if math.isinf(w_server) and math.isinf(w_floor):
        return math.inf, "none"
    return (w_server, "server") if w_server <= w_floor else (w_floor, "floor")


def t_phase(w, wl: Workload, k: Constants):
    """Seconds of one pass over the data (the computation phase, one epoch) on w workers (a number or an
    array), with the floor and, when ``kappa > 0``, the contention extension past the knee."""
    terms = phase_terms(w, wl, k)
    base = np.maximum(np.maximum(terms["net"], terms["worker"]), terms["floor"])
    if k.kappa > 0:
        w_star, _ = knee(wl, k)
        base = base * (1 + k.kappa * np.maximum(0.0, np.asarray(w, dtype=float) - w_star))
    return float(base) if np.ndim(base) == 0 else base


def t_total(w, wl: Workload, k: Constants, storage: str = "shared"):
    """Seconds of the whole run on w workers: initialisation plus E passes (eq. 9 with section 5.3's updates)."""
    return t_init(w, wl, k, storage) + wl.epochs * t_phase(w, wl, k)


def working_set_bytes(b: float, n_f: float, n_w: float, s: float = 8.0, labels: float = 1.0) -> float:
    """Bytes a worker touches per batch (section 4.4): the batch of samples with labels plus the weights."""
    return b * (n_f + labels) * s + n_w * s


def fits_cache(b: float, n_f: float, n_w: float, llc_bytes: float, s: float = 8.0, labels: float = 1.0) -> bool:
    """Whether the batch plus weights fit in the last-level cache (below the cache cliff)."""
    return working_set_bytes(b, n_f, n_w, s, labels) <= llc_bytes
