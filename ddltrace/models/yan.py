"""Yan et al. (paper 000): the layer-wise model of distributed DNN training and the scalability optimiser.

Per layer l and segment p (MODELS.md section 2), times in seconds per sample::

    U_f = C_interf(H) * (C_muladd * W(l,p)  + C_act * N(l,p))
    U_b = C_interf(H) * (C_muladd * W'(l,p) + C_err * N(l,p))
    U_w = C_interf(H) *  C_muladd * W(l,p)
    M_f = C_ncost(H) + A(l,p) * C_bits / C_nbw(H)        (0 when every input is local)
    M_b = C_ncost(H) + E(l,p) * C_bits / C_nbw(H)
    M_w_max = sum_l C_ncost(H) + N_mr * W(l) * C_bits / C_nbw(H)
    M_w_min = sum_l C_ncost(H) + W(l) * C_bits / (C_nbw(H) * min(N_ps, N_wr))
    T_epoch = M_w * N_sample / N_read + sum_l (U_f + M_f + U_b + M_b + U_w) * N_sample / Q(l)

with ``C_nbw(H) = C_nbw / H`` (threads share the NIC), ``Q(l) = H * R(l) * N_mr``, W(l,p) the connections
(multiply-adds) of the segment and W(l) the weight bytes of the layer. Here ``C_bits / C_nbw`` is written
``bytes_per_value / C_nbw`` with C_nbw in bytes per second.

Partitioning is by stripes: segment p of a layer with P partitions holds the fraction [p/P, (p+1)/P) of its
neurons. A fully connected layer needs all of the layer below; a locally connected one (conv, pool) needs
the matching stripe plus a halo of ``kernel // 2`` rows. With R replicas of a layer, sample i goes to
replica ``i mod R``, so replica r of layer l reads from replica r' of layer l-1 for the r' that agree with r
modulo gcd(R(l), R(l-1)), each equally often. A(l,p) counts the inputs not held by the segment's own worker.

Cache effects enter through ``C_muladd``, which may be a curve of seconds per multiply-add against the
working-set bytes of one segment (weights of the segment plus the activations of H threads).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ddltrace.errors import DdltraceError
from ddltrace.models.dnn import DNN

READ_BOUNDS = ("min", "max", "mean")


def _curve(raw, name: str) -> tuple[tuple[float, float], ...] | float:
    if isinstance(raw, int | float):
        return float(raw)
    pairs = list(raw.items()) if isinstance(raw, Mapping) else list(raw)
    try:
        points = sorted((float(x), float(y)) for x, y in pairs)
    except (TypeError, ValueError):
        raise DdltraceError(f"hardware profile: {name} must be a number or a list of [x, y] pairs") from None
    if not points:
        raise DdltraceError(f"hardware profile: {name} is an empty curve")
    return tuple(points)


def _interp(curve, x: float) -> float:
    if isinstance(curve, float):
        return curve
    xs = [p[0] for p in curve]
    ys = [p[1] for p in curve]
    return float(np.interp(x, xs, ys))


@dataclass(frozen=True)
class Hardware:
    """One machine's constants (seconds, bytes, bytes per second), measured by the canonical computation.

    ``C_muladd``: seconds per multiply-add of one thread, a number or a curve ``[[working_set_bytes, s], ...]``.
    ``C_act`` / ``C_err``: seconds of the activation function / its derivative per neuron.
    ``C_ncost``: network latency in seconds (``C_ncost_per_thread`` added per extra thread: C_ncost(H)).
    ``C_nbw``: NIC bandwidth in bytes per second. ``C_interf``: slowdown with H threads, a number or a curve
    ``[[H, factor], ...]`` (1 at H = 1). ``cores``: cores per machine (the bound on H).
    """

    C_muladd: float | tuple = 1e-9
    C_act: float = 0.0
    C_err: float = 0.0
    C_ncost: float = 0.0
    C_ncost_per_thread: float = 0.0
    C_nbw: float = 1.25e9
    C_interf: float | tuple = 1.0
    cores: int = 1

    @classmethod
    def from_profile(cls, constants: Mapping, source: str = "profile") -> Hardware:
        """Build from a hardware profile's constants (see :func:`ddltrace.models.quantities.profile_constants`)."""
        known = {k: constants[k] for k in cls.__dataclass_fields__ if k in constants}
        if "C_nbw" not in known and "r_net" in constants and constants["r_net"] > 0:
            known["C_nbw"] = 1.0 / constants["r_net"]
        if "C_ncost" not in known and "lat_net" in constants:
            known["C_ncost"] = constants["lat_net"]
        missing = [k for k in ("C_muladd", "C_nbw") if k not in known]
        if missing:
            raise DdltraceError(f"{source}: the hardware profile lacks {', '.join(missing)} (needed by Yan's model)")
        known["C_muladd"] = _curve(known["C_muladd"], "C_muladd")
        if "C_interf" in known:
            known["C_interf"] = _curve(known["C_interf"], "C_interf")
        if "cores" in known:
            known["cores"] = int(known["cores"])
        if not known["C_nbw"] > 0:
            raise DdltraceError(f"{source}: C_nbw must be > 0 bytes/s")
        return cls(**known)

    def scaled(self, changes: Mapping[str, tuple[str, float]]) -> Hardware:
        """A what-if copy: ``{'C_nbw': ('scale', 10), 'C_ncost': ('set', 1e-6)}``; a curve is scaled point by
        point (set replaces it by the number). Unknown names raise KeyError."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        for name, (how, value) in changes.items():
            if name not in values or name == "cores" and how == "scale":
                raise KeyError(name)
            current = values[name]
            if how == "set":
                values[name] = int(value) if name == "cores" else float(value)
            elif isinstance(current, tuple):
                values[name] = tuple((x, y * value) for x, y in current)
            else:
                values[name] = current * value
        return Hardware(**values)

    def interf(self, threads: int) -> float:
        """C_interf(H): the H-thread time of the canonical loop over its one-thread time."""
        return max(1.0, _interp(self.C_interf, threads)) if not isinstance(self.C_interf, float) else self.C_interf

    def muladd(self, working_set: float) -> float:
        """C_muladd at a segment working set of ``working_set`` bytes (seconds per multiply-add)."""
        return _interp(self.C_muladd, working_set)

    def ncost(self, threads: int) -> float:
        """C_ncost(H), seconds."""
        return self.C_ncost + self.C_ncost_per_thread * (threads - 1)

    def nbw(self, threads: int) -> float:
        """C_nbw(H) = C_nbw / H, bytes per second."""
        return self.C_nbw / threads


# -- the model's terms ------------------------------------------------------------------------------------

def u_f(W: float, N: float, hw: Hardware, H: int = 1, working_set: float = 0.0) -> float:
    """Feed-forward computation of a segment with W connections and N neurons, seconds per sample (eq. 5, 9)."""
    return hw.interf(H) * (hw.muladd(working_set) * W + hw.C_act * N)


def u_b(W_back: float, N: float, hw: Hardware, H: int = 1, working_set: float = 0.0) -> float:
    """Back-propagation computation: W' connections from the layer above, N neurons (eq. 7, 9)."""
    return hw.interf(H) * (hw.muladd(working_set) * W_back + hw.C_err * N)


def u_w(W: float, hw: Hardware, H: int = 1, working_set: float = 0.0) -> float:
    """Weight-update computation of a segment with W connections (eq. 8, 9)."""
    return hw.interf(H) * hw.muladd(working_set) * W


def m_comm(values: float, hw: Hardware, H: int = 1, bytes_per_value: int = 4) -> float:
    """M_f or M_b: receiving ``values`` remote activations / error terms, seconds (eq. 6); 0 when none."""
    if values <= 0:
        return 0.0
    return hw.ncost(H) + values * bytes_per_value / hw.nbw(H)


def m_w_max(layer_weight_bytes: Iterable[float], N_mr: int, hw: Hardware, H: int = 1) -> float:
    """Parameter-server read time, all replicas reading from one server at once (eq. 10), seconds.

    A layer replicated R times inside a model replica reads R copies: pass ``R * W(l)`` for it."""
    return sum(hw.ncost(H) + N_mr * w / hw.nbw(H) for w in layer_weight_bytes)


def m_w_min(layer_weight_bytes: Iterable[float], N_ps: int, N_wr: int, hw: Hardware, H: int = 1) -> float:
    """Parameter-server read time, one replica reading from all servers in parallel (eq. 11), seconds."""
    return sum(hw.ncost(H) + w / (hw.nbw(H) * min(N_ps, N_wr)) for w in layer_weight_bytes)


def m_w(layer_weight_bytes: Sequence[float], N_ps: int, N_mr: int, N_wr: int, hw: Hardware, H: int,
        bound: str = "mean") -> float:
    """M_w between its bounds: 'min', 'max', or 'mean' (their arithmetic mean), seconds."""
    lo = m_w_min(layer_weight_bytes, N_ps, N_wr, hw, H)
    hi = m_w_max(layer_weight_bytes, N_mr, hw, H)
    if bound == "min":
        return lo
    if bound == "max":
        return hi
    if bound == "mean":
        return (lo + hi) / 2
    raise ValueError(f"read bound must be one of {', '.join(READ_BOUNDS)}, got {bound!r}")


# -- layouts: which worker holds which stripe of which replica ----------------------------------------

State = tuple[int, int]  # (P partitions, R replicas) of one layer


@dataclass(frozen=True)
class Layout:
    """Segments of one layer: ``workers[r][p]`` is the worker holding partition p of replica r."""

    P: int
    R: int
    workers: tuple[tuple[int, ...], ...]

    @classmethod
    def canonical(cls, state: State) -> Layout:
        P, R = state
        return cls(P, R, tuple(tuple(r * P + p for p in range(P)) for r in range(R)))

    def interval(self, p: int) -> tuple[float, float]:
        return p / self.P, (p + 1) / self.P


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def _need(layout: Layout, p: int, local: bool, halo: float) -> tuple[float, float]:
    if not local:
        return 0.0, 1.0
    lo, hi = layout.interval(p)
    return max(0.0, lo - halo), min(1.0, hi + halo)


def _partners(r: int, R: int, R_other: int) -> list[int]:
    g = math.gcd(R, R_other)
    return [q for q in range(R_other) if q % g == r % g]


def local_fraction(needer: Layout, p: int, r: int, holder: Layout, worker: int, local: bool,
                   halo: float) -> float:
    """Fraction of the holder layer that segment (p, r) of the needer layer finds on ``worker``, averaged over
    the holder replicas its samples come from."""
    need = _need(needer, p, local, halo)
    partners = _partners(r, needer.R, holder.R)
    total = 0.0
    for q in partners:
        for pp, w in enumerate(holder.workers[q]):
            if w == worker:
                total += _overlap(need, holder.interval(pp))
    return total / len(partners)


def greedy_layout(prev: Layout, state: State, local: bool, halo: float, n_workers: int) -> Layout:
    """Map the segments of a layer with ``state`` to workers: each to the worker holding most of its inputs
    (section 5.3's greedy); when two segments want the same worker, the maximum-weight bipartite matching
    (scipy's linear_sum_assignment) settles it, as the paper prescribes."""
    P, R = state
    segments = [(r, p) for r in range(R) for p in range(P)]
    weight = np.zeros((len(segments), n_workers))
    for i, (r, p) in enumerate(segments):
        for w in range(n_workers):
            weight[i, w] = local_fraction(Layout(P, R, ((0,) * P,) * R), p, r, prev, w, local, halo)
    best = weight.argmax(axis=1)
    if len(set(best.tolist())) == len(segments):
        chosen = best.tolist()
    else:
        from scipy.optimize import linear_sum_assignment  # scipy loads only when a tie must be settled

        rows, cols = linear_sum_assignment(weight, maximize=True)
        chosen = [0] * len(segments)
        for i, w in zip(rows, cols, strict=True):
            chosen[i] = int(w)
    workers = [[0] * P for _ in range(R)]
    for (r, p), w in zip(segments, chosen, strict=True):
        workers[r][p] = int(w)
    return Layout(P, R, tuple(tuple(row) for row in workers))


# -- the cost of a configuration ------------------------------------------------------------------------

@dataclass(frozen=True)
class Resources:
    """The resource triple and the machine settings: parameter servers, model replicas, workers per replica,
    threads per worker, samples per epoch, samples between weight reads, and the read bound."""

    N_ps: int
    N_mr: int
    N_wr: int
    H: int = 1
    N_sample: float = 1.0
    N_read: float = 1.0
    read_bound: str = "min"


def _working_set(dnn: DNN, index: int, state: State, H: int) -> float:
    layer = dnn.layers[index]
    below = dnn.layers[index - 1].neurons if index else dnn.input_neurons
    P = state[0]
    return dnn.bytes_per_value * (layer.weights / P + H * (layer.neurons + below) / P)


def layer_compute(dnn: DNN, index: int, state: State, hw: Hardware, H: int) -> float:
    """U_f + U_b + U_w of layer ``index`` with ``state`` = (P, R), seconds per sample on its slowest segment."""
    layer = dnn.layers[index]
    P = state[0]
    above = dnn.layers[index + 1].connections if index + 1 < len(dnn.layers) else 0
    ws = _working_set(dnn, index, state, H)
    W, N = layer.connections / P, layer.neurons / P
    return u_f(W, N, hw, H, ws) + u_b(above / P, N, hw, H, ws) + u_w(W, hw, H, ws)


def boundary_comm(dnn: DNN, index: int, prev: Layout, cur: Layout, hw: Hardware, H: int) -> tuple[float, float]:
    """(M_f of layer ``index``, M_b of layer ``index - 1``), seconds per sample on the slowest segment, for the
    given layouts of the two layers."""
    layer, below = dnn.layers[index], dnn.layers[index - 1]
    halo = dnn.halo_fraction(index)
    m_f = 0.0
    for r in range(cur.R):
        for p in range(cur.P):
            need = _need(cur, p, layer.local, halo)
            here = local_fraction(cur, p, r, prev, cur.workers[r][p], layer.local, halo)
            m_f = max(m_f, m_comm(below.neurons * (need[1] - need[0] - here), hw, H, dnn.bytes_per_value))
    m_b = 0.0
    for r in range(prev.R):
        for p in range(prev.P):
            need = _need(prev, p, layer.local, halo)
            here = local_fraction(prev, p, r, cur, prev.workers[r][p], layer.local, halo)
            m_b = max(m_b, m_comm(layer.neurons * (need[1] - need[0] - here), hw, H, dnn.bytes_per_value))
    return m_f, m_b


def _q(res: Resources, state: State) -> float:
    return res.H * state[1] * res.N_mr


def layer_weight_bytes(dnn: DNN) -> list[float]:
    """W(l) of eq. 10 / 11: bytes of each layer's parameters."""
    return [layer.parameters * dnn.bytes_per_value for layer in dnn.layers]


@dataclass
class Breakdown:
    """T_epoch of one configuration and its terms, seconds per epoch."""

    t_epoch: float
    compute: float
    activations: float
    weights: float
    states: tuple[State, ...] = ()
    terms: dict[str, float] = field(default_factory=dict)

    @property
    def bottleneck(self) -> str:
        """The largest term: 'compute (U)', 'activations (M_f + M_b)' or 'weight reads (M_w)'."""
        parts = {"compute (U)": self.compute, "activations (M_f + M_b)": self.activations,
                 "weight reads (M_w)": self.weights}
        return max(parts, key=parts.get)


def layer_reads(dnn: DNN, index: int, state: State, res: Resources, hw: Hardware) -> float:
    """Layer ``index``'s share of M_w * N_sample / N_read, seconds per epoch; its R replicas read R copies."""
    weight = dnn.layers[index].parameters * dnn.bytes_per_value * state[1]
    return m_w([weight], res.N_ps, res.N_mr, res.N_wr, hw, res.H, res.read_bound) * res.N_sample / res.N_read


def evaluate(dnn: DNN, res: Resources, hw: Hardware, layouts: Sequence[Layout]) -> Breakdown:
    """T_epoch for explicit per-layer layouts (any mapping of segments to workers), seconds."""
    scale = res.N_sample
    compute = activations = weights = 0.0
    for i, lay in enumerate(layouts):
        compute += layer_compute(dnn, i, (lay.P, lay.R), hw, res.H) * scale / _q(res, (lay.P, lay.R))
        weights += layer_reads(dnn, i, (lay.P, lay.R), res, hw)
        if i:
            mf, mb = boundary_comm(dnn, i, layouts[i - 1], lay, hw, res.H)
            activations += mf * scale / _q(res, (lay.P, lay.R))
            activations += mb * scale / _q(res, (layouts[i - 1].P, layouts[i - 1].R))
    return Breakdown(compute + activations + weights, compute, activations, weights,
                     tuple((lay.P, lay.R) for lay in layouts))


def layer_states(N_wr: int) -> list[State]:
    """Every (P, R) with P * R <= N_wr (constraint C3: distinct segments on distinct workers)."""
    return [(P, R) for P in range(1, N_wr + 1) for R in range(1, N_wr // P + 1)]


def _link(dnn: DNN, i: int, sp: State, s: State, hw: Hardware, H: int, n_workers: int,
          cache: dict | None) -> tuple[float, float]:
    """(M_f, M_b) per sample of the boundary below layer i, previous layer canonical, this one greedy."""
    key = ("link", i, sp, s, H, n_workers)
    if cache is not None and key in cache:
        return cache[key]
    prev = Layout.canonical(sp)
    cur = greedy_layout(prev, s, dnn.layers[i].local, dnn.halo_fraction(i), n_workers)
    value = boundary_comm(dnn, i, prev, cur, hw, H)
    if cache is not None:
        cache[key] = value
    return value


def optimise_layers(dnn: DNN, res: Resources, hw: Hardware, cache: dict | None = None) -> Breakdown:
    """The dynamic program over layers (section 5.3) for one resource triple and thread count.

    ``T([1,l], s_l) = min_{s_{l-1}} T([1,l-1], s_{l-1}) + U(l, s_l) + M(l, l-1, s_l, s_{l-1})`` over layer states
    s = (P, R), with the previous layer in canonical layout and this layer mapped by :func:`greedy_layout`;
    the cost of a boundary depends only on the two states (workers are interchangeable), so the DP is exact
    for the greedy mapping and costs O(L * S^2) boundary evaluations for S states. ``cache`` (a dict) keeps the
    per-sample boundary costs between calls for the same DNN and hardware (they do not depend on N_ps, N_mr).
    """
    states = layer_states(res.N_wr)
    scale = res.N_sample

    def unit(i, s):
        return layer_compute(dnn, i, s, hw, res.H) * scale / _q(res, s), layer_reads(dnn, i, s, res, hw)

    # state -> (total, compute, activations, weight reads, path)
    table = {s: (sum(unit(0, s)), *unit(0, s), 0.0, (s,)) for s in states}
    table = {s: (total, comp, 0.0, reads, path) for s, (total, comp, reads, _, path) in table.items()}
    for i in range(1, len(dnn.layers)):
        new = {}
        for s in states:
            comp_here, reads_here = unit(i, s)
            best = None
            for sp, (total, comp, comm, reads, path) in table.items():
                mf, mb = _link(dnn, i, sp, s, hw, res.H, res.N_wr, cache)
                link = mf * scale / _q(res, s) + mb * scale / _q(res, sp)
                cand = (total + comp_here + reads_here + link, comp + comp_here, comm + link, reads + reads_here,
                        path + (s,))
                if best is None or cand[0] < best[0]:
                    best = cand
            new[s] = best
        table = new
    total, comp, comm, reads, path = min(table.values(), key=lambda v: v[0])
    return Breakdown(total, comp, comm, reads, path)


def brute_force_layers(dnn: DNN, res: Resources, hw: Hardware) -> Breakdown:
    """Exhaustive search over every layer state and every mapping of segments to workers (tests only:
    exponential in layers and workers)."""
    per_layer = []
    for i in range(len(dnn.layers)):
        options = []
        for P, R in layer_states(res.N_wr):
            if i == 0:  # workers are interchangeable: fix the first layer's mapping
                options.append(Layout.canonical((P, R)))
                continue
            for perm in itertools.permutations(range(res.N_wr), P * R):
                options.append(Layout(P, R, tuple(tuple(perm[r * P:(r + 1) * P]) for r in range(R))))
        per_layer.append(options)
    best = None
    for combo in itertools.product(*per_layer):
        result = evaluate(dnn, res, hw, combo)
        if best is None or result.t_epoch < best.t_epoch - 1e-15:
            best = result
    return best


@dataclass
class RankedConfiguration:
    """One resource configuration with its best per-layer states and predicted epoch time."""

    N_ps: int
    N_mr: int
    N_wr: int
    H: int
    breakdown: Breakdown

    @property
    def t_epoch(self) -> float:
        return self.breakdown.t_epoch

    @property
    def label(self) -> str:
        """#W/#R/#PS, as in the paper's Table 1."""
        return f"{self.N_wr}/{self.N_mr}/{self.N_ps}"


#: The most configurations :func:`optimise` searches (1,000 machines at --max-workers 1 are 499,500: 47 s, 1.1 GiB
#: on the development machine; 100,000 machines would be 5e9, and ran it out of memory).
MAX_CONFIGURATIONS = 500_000


def optimise(dnn: DNN, hw: Hardware, machines: int, *, N_sample: float, N_read: float, threads: Iterable[int] | None
             = None, read_bound: str = "min", configurations: Iterable[tuple[int, int, int]] | None = None,
             max_workers: int | None = None, progress: Callable[[int, int], None] | None = None
             ) -> list[RankedConfiguration]:
    """Minimise T_epoch over N_ps, N_mr, N_wr (N_ps + N_mr * N_wr <= machines), threads H <= cores and the
    per-layer partitions and replicas; returns every configuration ranked, fastest first.

    ``threads`` restricts H to the given counts (default: every H from 1 to the cores: more threads divide the
    NIC, C_nbw(H) = C_nbw / H, so the most threads are not always the fastest); ``configurations`` restricts the
    search to given (N_wr, N_mr, N_ps) triples; ``max_workers`` bounds N_wr (the DNN's useful model parallelism).
    ``progress(done, total)`` is called after each (triple, H) is solved.
    """
    if machines < 2:
        raise DdltraceError(f"machines: {machines}: need at least 2 (a parameter server and a worker)")
    if read_bound not in READ_BOUNDS:
        raise DdltraceError(f"read bound {read_bound!r}: use one of {', '.join(READ_BOUNDS)}")
    thread_counts = sorted(set(threads or range(1, max(1, hw.cores) + 1)))
    if any(h < 1 or h > max(1, hw.cores) for h in thread_counts):
        raise DdltraceError(f"threads {thread_counts}: each must be between 1 and the {hw.cores} cores (C2)")
    if configurations is None:
        wr_cap = min(machines - 1, max_workers or machines)
        count = sum(machines - mr * wr for wr in range(1, wr_cap + 1) for mr in range(1, (machines - 1) // wr + 1))
        if count * len(thread_counts) > MAX_CONFIGURATIONS:
            raise DdltraceError(f"machines: {machines}: {count:,} configurations (N_ps + N_mr N_wr <= {machines}) at "
                                f"{len(thread_counts)} thread count(s) H to search, each a dynamic program over the "
                                f"layers; at most {MAX_CONFIGURATIONS:,} (about a minute and a GiB): give fewer "
                                "machines, a lower --max-workers or fewer --threads")
        configurations = [(wr, mr, ps) for wr in range(1, wr_cap + 1) for mr in range(1, machines)
                          for ps in range(1, machines) if ps + mr * wr <= machines]
    configurations = list(configurations)
    for wr, mr, ps in configurations:
        if ps + mr * wr > machines or min(wr, mr, ps) < 1:
            raise DdltraceError(f"configuration {wr}/{mr}/{ps} (#W/#R/#PS) does not fit {machines} machines (C1)")
    ranked = []
    cache: dict = {}
    total = len(configurations) * len(thread_counts)
    for wr, mr, ps in configurations:
        for H in thread_counts:
            res = Resources(ps, mr, wr, H, N_sample, N_read, read_bound)
            ranked.append(RankedConfiguration(ps, mr, wr, H, optimise_layers(dnn, res, hw, cache)))
            if progress:
                progress(len(ranked), total)
    ranked.sort(key=lambda c: c.t_epoch)
    return ranked
