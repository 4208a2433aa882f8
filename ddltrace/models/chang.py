"""Chang et al. (paper 001): Lemma 3.1 (GPUs), Lemma 3.2 (parameter servers) and the mini-batch program.

The paper's math symbols were lost in extraction; MODELS.md section 3 restores them:

    S(N) = 1 / (R_O + (1 - R_O) / N)                 speedup on N GPUs with overhead ratio R_O = T_O / T
    E(N) = S(N) / N = 1 / (1 + (N - 1) R_O)           efficiency
    R_O <= (1/E - 1) / (N - 1)                        the largest overhead ratio that keeps efficiency E
    N = S (1 - R_O) / (1 - S R_O)                      GPUs for a target speedup S (needs S R_O < 1)
    N_ps >= 2 S_p N_w / (B T_C)                        Lemma 3.2: servers that hide pull + push behind compute

Mini-batch choice: memory ``M(b) = b * (input + feature maps) * s + 3 * (weights + biases) * s`` bytes (s the
DNN's bytes per value, the paper's 4 for single precision); per
layer one convolution algorithm ``a`` (time t(l,a,b) seconds, workspace m(l,a,b) bytes); minimise the time
subject to ``M(b) + sum x(l,a) m(l,a,b) <= M_gpu`` with x binary (scipy.optimize.milp), then take the b with
the most samples per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ddltrace.errors import DdltraceError
from ddltrace.models.dnn import DNN
from ddltrace.units import format_bytes


def _check_ratio(r_o: float) -> None:
    if not 0 <= r_o <= 1:
        raise DdltraceError(f"overhead ratio R_O = {r_o}: must be between 0 and 1 (T_O / T)")


def _check_gpus(n: float) -> None:
    if not n >= 1:
        raise DdltraceError(f"number of GPUs N = {n}: must be >= 1")


def speedup(n_gpus: float, r_o: float) -> float:
    """S(N) = 1 / (R_O + (1 - R_O) / N): Amdahl's speedup with overhead ratio R_O (Lemma 3.1)."""
    _check_ratio(r_o)
    _check_gpus(n_gpus)
    return 1.0 / (r_o + (1.0 - r_o) / n_gpus)


def efficiency(n_gpus: float, r_o: float) -> float:
    """E(N) = S(N) / N = 1 / (1 + (N - 1) R_O), between 0 and 1."""
    _check_ratio(r_o)
    _check_gpus(n_gpus)
    return 1.0 / (1.0 + (n_gpus - 1.0) * r_o)


def max_overhead_ratio(n_gpus: float, target_efficiency: float) -> float:
    """The largest R_O that still reaches efficiency E on N GPUs: (1/E - 1) / (N - 1)."""
    if not 0 < target_efficiency <= 1:
        raise DdltraceError(f"target efficiency E = {target_efficiency}: must be in (0, 1]")
    _check_gpus(n_gpus)
    if n_gpus == 1:
        return 1.0
    return min(1.0, (1.0 / target_efficiency - 1.0) / (n_gpus - 1.0))


def gpus_for_speedup(target_speedup: float, r_o: float) -> float:
    """N = S (1 - R_O) / (1 - S R_O): GPUs that reach speedup S (a real number; round it up).

    Raises when S R_O >= 1: no number of GPUs gets there (the speedup is bounded by 1 / R_O)."""
    _check_ratio(r_o)
    if target_speedup < 1:
        raise DdltraceError(f"target speedup S = {target_speedup}: must be >= 1")
    if target_speedup * r_o >= 1:
        bound = math.inf if r_o == 0 else 1 / r_o
        raise DdltraceError(f"target speedup {target_speedup:g}x is out of reach: with overhead ratio "
                            f"{100 * r_o:.1f} % the speedup is bounded by {bound:.3g}x")
    return target_speedup * (1.0 - r_o) / (1.0 - target_speedup * r_o)


def parameter_servers(param_bytes: float, n_workers: int, bandwidth: float, compute_time: float) -> float:
    """Lemma 3.2: the fewest servers that hide one round's pull and push (2 S_p N_w bytes) behind the
    workers' compute time T_C, each server with ``bandwidth`` bytes per second: 2 S_p N_w / (B T_C)."""
    for name, value in (("parameter size", param_bytes), ("bandwidth", bandwidth), ("compute time", compute_time)):
        if not value > 0:
            raise DdltraceError(f"{name} must be > 0, got {value}")
    if n_workers < 1:
        raise DdltraceError(f"workers must be >= 1, got {n_workers}")
    return 2.0 * param_bytes * n_workers / (bandwidth * compute_time)


def memory_bytes(dnn: DNN, batch: int, value_bytes: int | None = None) -> float:
    """M(b): the batch's input and every layer's output (feature maps), plus weights and biases with two
    copies of gradients, in bytes. A value takes the DNN description's ``bytes_per_value`` (the paper's 4 is
    single precision) unless ``value_bytes`` says otherwise."""
    value_bytes = dnn.bytes_per_value if value_bytes is None else value_bytes
    activations = dnn.input_neurons + sum(layer.neurons for layer in dnn.layers)
    return batch * activations * value_bytes + 3 * dnn.parameters * value_bytes


@dataclass
class BatchChoice:
    """The mini-batch program's answer for one batch size: feasible or not, time, algorithm per layer."""

    batch: int
    feasible: bool
    time_s: float = math.inf
    memory_bytes: float = 0.0
    workspace_bytes: float = 0.0
    algorithms: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.time_s if self.feasible and self.time_s > 0 else 0.0


def choose_algorithms(dnn: DNN, batch: int, gpu_memory: float) -> BatchChoice:
    """Solve the integer program for one batch size: one algorithm per layer with a table, minimum total
    time, within the GPU memory. Layers without a table add neither time nor workspace."""
    base = memory_bytes(dnn, batch)
    if base > gpu_memory:
        return BatchChoice(batch, False, memory_bytes=base,
                           reason=f"activations and parameters alone need {format_bytes(base)}, more than the "
                                  f"{format_bytes(gpu_memory)} of the GPU")
    variables: list[tuple[str, str]] = []
    times, spaces = [], []
    timed: set[str] = set()
    for layer in dnn.layers:
        for algo, per_batch in layer.algorithms.items():
            if batch not in per_batch:
                continue
            timed.add(layer.name)
            # an algorithm whose workspace alone is more than the memory left cannot be chosen: left out of the
            # program (a workspace of 1e15 B beside 1e9 B of memory made the solver find no mix where one fitted)
            if per_batch[batch].workspace_bytes <= gpu_memory - base:
                variables.append((layer.name, algo))
                times.append(per_batch[batch].time_s)
                spaces.append(per_batch[batch].workspace_bytes)
    missing = [layer.name for layer in dnn.layers if layer.algorithms and layer.name not in timed]
    if missing:
        raise DdltraceError(f"{dnn.name}: no algorithm of layer(s) {', '.join(missing)} has a time for "
                            f"mini-batch {batch}")
    if not timed:
        raise DdltraceError(f"{dnn.name}: no layer has an algorithm table (needed by the mini-batch program)")
    tabled = sorted({name for name, _ in variables})
    too_big = sorted(timed - set(tabled))
    if too_big:
        return BatchChoice(batch, False, memory_bytes=base,
                           reason=f"every algorithm of layer(s) {', '.join(too_big)} needs more workspace than the "
                                  f"{format_bytes(gpu_memory - base)} the activations and parameters leave")
    n = len(variables)
    one_each = np.zeros((len(tabled), n))
    for j, (name, _) in enumerate(variables):
        one_each[tabled.index(name), j] = 1.0
    from scipy.optimize import Bounds, LinearConstraint, milp  # loaded when the program is solved

    constraints = [LinearConstraint(one_each, 1, 1),
                   LinearConstraint(np.array([spaces]), -np.inf, gpu_memory - base)]
    result = milp(np.array(times), constraints=constraints, integrality=np.ones(n), bounds=Bounds(0, 1))
    if not result.success or result.x is None:
        return BatchChoice(batch, False, memory_bytes=base,
                           reason="no algorithm mix fits the GPU memory")
    chosen = [variables[j] for j in range(n) if result.x[j] > 0.5]
    workspace = float(sum(spaces[j] for j in range(n) if result.x[j] > 0.5))
    return BatchChoice(batch, True, float(result.fun), base, workspace, dict(chosen))


def choose_batch(dnn: DNN, batches: list[int], gpu_memory: float) -> tuple[BatchChoice | None, list[BatchChoice]]:
    """Solve the program for every candidate batch size; the best is the feasible one with the most samples
    per second (None when none fits). Returns (best, all choices)."""
    if not gpu_memory > 0:
        raise DdltraceError(f"GPU memory must be > 0 bytes, got {gpu_memory}")
    choices = [choose_algorithms(dnn, b, gpu_memory) for b in batches]
    feasible = [c for c in choices if c.feasible]
    best = max(feasible, key=lambda c: c.samples_per_s) if feasible else None
    return best, choices
