"""Park et al. (paper 003), RALP: parameter skewness, the split point and the traffic of each placement.

MODELS.md section 4::

    S   = mean((P - mean P)^3) / mean((P - mean P)^2)^1.5       Fisher-Pearson, population moments
    i*  = argmin_i ( O_i + sum_{x<=i} P_x )                      never between two convolution layers
    PS traffic per step and worker   = 2 * model bytes
    ring all-reduce                  = 2 * (W - 1) / W * model bytes
    RALP                             = 2 * (O_{i*} + sum_{x<=i*} P_x)

A note on the sign. The paper offloads when S < K with K = -0.5 and reports negative S for every CNN
(Table 1: AlexNet -2.27, VGG11 -3.62), "left-skewed: data concentrated on the latter layers". The moment
formula applied to the list of sizes P_i is positive for those networks (a few huge layers make a right tail:
AlexNet +2.16, VGG11 +3.47), so with it the rule would never offload. The paper's numbers are the skewness
of where the parameters sit: the distribution of layer positions 1..n weighted by parameter size, over every
layer pooling included (:func:`position_skewness`). On the bundled tf_cnn_benchmarks AlexNet and VGG11 it
gives -2.268 and -3.616, the paper's Table 1 to its last digit. :func:`should_offload` therefore uses the
position skewness by default; :func:`skewness` is the formula exactly as MODELS.md writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ddltrace.errors import DdltraceError
from ddltrace.models.dnn import DNN

DEFAULT_K = -0.5


def _sizes(p: Sequence[float]) -> np.ndarray:
    arr = np.asarray(p, dtype=float)
    if arr.ndim != 1 or len(arr) < 2:
        raise DdltraceError("skewness needs the parameter sizes of at least 2 layers")
    if (arr < 0).any() or not np.isfinite(arr).all():
        raise DdltraceError("parameter sizes must be finite numbers >= 0")
    return arr


def skewness(p: Sequence[float]) -> float:
    """Fisher-Pearson skewness of the per-layer parameter sizes (population moments; paper's eq. 1).
    0 when every layer has the same size."""
    arr = _sizes(p)
    d = arr - arr.mean()
    m2 = float((d**2).mean())
    return 0.0 if m2 == 0 else float((d**3).mean() / m2**1.5)


def position_skewness(p: Sequence[float]) -> float:
    """Skewness of the layer position (1..n) weighted by parameter size: negative when the parameters sit in
    the latter layers. 0 when they sit in one layer."""
    arr = _sizes(p)
    if arr.sum() == 0:
        raise DdltraceError("every parameter size is 0")
    x = np.arange(1, len(arr) + 1, dtype=float)
    weight = arr / arr.sum()
    d = x - (weight * x).sum()
    m2 = float((weight * d**2).sum())
    return 0.0 if m2 == 0 else float((weight * d**3).sum() / m2**1.5)


def should_offload(p: Sequence[float], k: float = DEFAULT_K, method: str = "position") -> bool:
    """RALP's step 2: offload the latter layers to the parameter server when S < K."""
    if method == "position":
        return position_skewness(p) < k
    if method == "moments":
        return skewness(p) < k
    raise DdltraceError(f"skewness method {method!r}: use 'position' or 'moments'")


@dataclass(frozen=True)
class Split:
    """The split after layer ``index`` (0-based; its name), with its cost O_i + sum P_x in bytes per step."""

    index: int
    name: str
    cost_bytes: float


def split_point(param_bytes: Sequence[float], output_bytes: Sequence[float], types: Sequence[str] | None = None,
                names: Sequence[str] | None = None) -> Split:
    """RALP's step 3: the layer i* minimising O_i + sum_{x<=i} P_x (bytes), skipping splits between two
    convolution layers (layer i and layer i + 1 both 'conv')."""
    n = len(param_bytes)
    if n == 0 or len(output_bytes) != n or (types is not None and len(types) != n):
        raise DdltraceError("split point: parameter sizes, output sizes (and types) need one entry per layer")
    names = list(names) if names is not None else [f"layer{i + 1}" for i in range(n)]
    cumulative = np.cumsum(np.asarray(param_bytes, dtype=float))
    best = None
    for i in range(n):
        if types is not None and i + 1 < n and types[i] == "conv" and types[i + 1] == "conv":
            continue
        cost = float(output_bytes[i] + cumulative[i])
        if best is None or cost < best.cost_bytes:
            best = Split(i, names[i], cost)
    if best is None:
        raise DdltraceError("split point: every boundary lies between two convolution layers")
    return best


def ps_traffic(model_bytes: float) -> float:
    """Bytes per step and worker with a parameter server: pull and push the whole model."""
    return 2.0 * model_bytes


def ring_allreduce_traffic(model_bytes: float, participants: int) -> float:
    """Bytes per step and worker of ring all-reduce among W participants: 2 (W - 1) / W * model bytes."""
    if participants < 1:
        raise DdltraceError(f"ring all-reduce needs >= 1 participant, got {participants}")
    return 2.0 * (participants - 1) / participants * model_bytes


def ralp_traffic(split: Split) -> float:
    """Bytes per step and worker with RALP's placement: 2 (O_{i*} + sum_{x<=i*} P_x)."""
    return 2.0 * split.cost_bytes


@dataclass(frozen=True)
class Placement:
    """RALP's decision for a DNN at a batch size: skewness, offload or not, split and traffic per placement."""

    skewness: float
    position_skewness: float
    offload: bool
    split: Split
    ps_bytes: float
    ring_bytes: float
    ralp_bytes: float


def plan_placement(dnn: DNN, batch: int, participants: int, k: float = DEFAULT_K) -> Placement:
    """Apply RALP's three steps to a DNN description: per-layer parameter bytes, output bytes x batch."""
    params = [layer.parameters * dnn.bytes_per_value for layer in dnn.layers]
    outputs = [layer.output_bytes * batch for layer in dnn.layers]
    split = split_point(params, outputs, [layer.type for layer in dnn.layers], [layer.name for layer in dnn.layers])
    return Placement(skewness(params), position_skewness(params), should_offload(params, k), split,
                     ps_traffic(dnn.model_bytes), ring_allreduce_traffic(dnn.model_bytes, participants),
                     ralp_traffic(split))
