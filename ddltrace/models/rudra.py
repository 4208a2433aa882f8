"""Gupta et al. (paper 004), Rudra: gradient staleness and the learning-rate rules (MODELS.md section 5).

The server's weights advance ts_i -> ts_{i+1} on each update. A gradient computed on ts_i and applied when the
server is at ts_j has staleness sigma = j - i. For the gradients that advanced ts_{i-1} -> ts_i (computed on
timestamps i_1..i_n): <sigma> = (i - 1) - mean(i_1..i_n).

Protocols with lambda learners: hardsync (sigma = 0), n-softsync (update after c = floor(lambda / n)
gradients; <sigma> ~ n, sigma_max <= 2n with high probability), async = lambda-softsync.
Learning rate: alpha = alpha_0 / <sigma> (softsync), alpha_0 * sqrt(mu * lambda / B_ref) (hardsync).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ddltrace.errors import DdltraceError


def staleness(computed_on: Sequence[int], applied_at: Sequence[int]) -> np.ndarray:
    """sigma = j - i for each gradient computed on timestamp i and applied when the server was at j."""
    i = np.asarray(computed_on, dtype=np.int64)
    j = np.asarray(applied_at, dtype=np.int64)
    if i.shape != j.shape:
        raise DdltraceError("staleness: one 'computed on' timestamp per 'applied at' timestamp")
    sigma = j - i
    if (sigma < 0).any():
        raise DdltraceError("staleness: a gradient applied before the weights it was computed on (j < i)")
    return sigma


def average_staleness(update_index: int, gradient_timestamps: Sequence[int]) -> float:
    """<sigma> of the update that advanced ts_{i-1} -> ts_i: (i - 1) - mean of its gradients' timestamps."""
    if len(gradient_timestamps) == 0:
        raise DdltraceError("average staleness: the update has no gradients")
    return float((update_index - 1) - np.mean(gradient_timestamps))


def gradients_per_update(learners: int, n: int) -> int:
    """n-softsync: the server updates after c = floor(lambda / n) gradients (at least 1)."""
    if learners < 1 or n < 1 or n > learners:
        raise DdltraceError(f"n-softsync needs 1 <= n <= lambda learners, got n={n}, lambda={learners}")
    return max(1, learners // n)


def expected_staleness(protocol: str, learners: int, n: int = 1) -> tuple[float, float]:
    """(<sigma>, sigma_max bound) of a protocol: 'hardsync' (0, 0), 'softsync' (n, 2n), 'async' (lambda, 2 lambda)."""
    if protocol == "hardsync":
        return 0.0, 0.0
    if protocol == "softsync":
        gradients_per_update(learners, n)
        return float(n), 2.0 * n
    if protocol == "async":
        return float(learners), 2.0 * learners
    raise DdltraceError(f"protocol {protocol!r}: use hardsync, softsync or async")


def learning_rate(alpha_0: float, protocol: str, *, mean_staleness: float | None = None, mu: float | None = None,
                  learners: int | None = None, batch_ref: float | None = None) -> float:
    """Rudra's learning-rate rules: alpha_0 / <sigma> for softsync/async (eq. 6), alpha_0 * sqrt(mu * lambda /
    B_ref) for hardsync (mu the mini-batch per learner).

    Eq. 6 is written for n-softsync, where <sigma> = n >= 1, and alpha_0 is the rate of the baseline run with one
    learner (staleness 0). A *measured* <sigma> can be below 1 (a single learner: 0); dividing by it would raise
    the rate above that baseline, or divide by zero, which the paper never does: the divisor is max(1, <sigma>),
    identical to eq. 6 wherever the paper applies it."""
    if protocol == "hardsync":
        if not (mu and learners and batch_ref):
            raise DdltraceError("hardsync learning rate needs mu, learners and batch_ref")
        return alpha_0 * math.sqrt(mu * learners / batch_ref)
    if protocol in ("softsync", "async"):
        if mean_staleness is None or mean_staleness < 0:
            raise DdltraceError("softsync learning rate needs the mean staleness <sigma> >= 0")
        return alpha_0 / max(1.0, mean_staleness)
    raise DdltraceError(f"protocol {protocol!r}: use hardsync, softsync or async")


def minibatch_for_learners(mu_lambda: float, learners: int) -> float:
    """Keep mu * lambda constant when adding learners: the per-learner mini-batch mu for lambda learners."""
    if learners < 1 or mu_lambda <= 0:
        raise DdltraceError("mu * lambda must be > 0 and learners >= 1")
    return mu_lambda / learners


def communication_overlap(compute_s: float, exposed_comm_s: float) -> float:
    """Table 1's overlap: computation time / (computation + exposed communication time), 0..1."""
    total = compute_s + exposed_comm_s
    if total <= 0:
        raise DdltraceError("communication overlap: computation plus exposed communication must be > 0 s")
    return compute_s / total
