"""The parameter server's state and Rudra's update rules (paper 004, section 3), without any messaging.

The server holds the weights and their timestamp ts (a scalar clock: each weight update advances it by 1).
A gradient computed on weights ts_i and pushed when the server is at ts_j has staleness sigma = j - i.
Protocols (lambda = number of workers, the paper's learners):

- ``hardsync``: an update waits for exactly one gradient from every active worker, and a worker gets new
  weights only after the update its gradient joined; sigma = 0 always. Learning rate alpha_0 * sqrt(lambda)
  (Rudra's alpha_0 * sqrt(mu * lambda / B) with the single-worker batch as the reference B = mu).
- ``softsync`` n: an update follows every c = floor(lambda / n) gradients, whoever sent them; <sigma> ~ n.
  Learning rate alpha_0 / n (Rudra's alpha_0 / <sigma>).
- ``async``: lambda-softsync (c = 1).

An update applies weights -= alpha * mean(pending gradients). The extra server cost per gradient (a slower
server) is a sleep while the gradient is aggregated: the server does nothing else meanwhile.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Protocol:
    """A synchronisation protocol: ``name`` in hardsync, softsync, async; ``n`` the softsync splitting."""

    name: str
    n: int = 1

    @classmethod
    def parse(cls, words: list[str] | str) -> Protocol:
        """From ``async``, ``hardsync``, ``softsync N`` (also ``softsync:N``); ValueError on anything else."""
        if isinstance(words, str):
            words = words.replace(":", " ").replace("=", " ").split()
        if words == ["async"] or words == ["hardsync"]:
            return cls(words[0])
        if len(words) == 2 and words[0] == "softsync" and words[1].isdigit() and int(words[1]) >= 1:
            return cls("softsync", int(words[1]))
        raise ValueError(f"--sync {' '.join(words)}: expected async, hardsync or softsync N (N >= 1)")

    def label(self) -> str:
        return f"softsync {self.n}" if self.name == "softsync" else self.name

    def splitting(self, workers: int) -> int:
        """n of n-softsync for ``workers`` learners (async = lambda-softsync; hardsync: 0)."""
        return {"hardsync": 0, "async": workers}.get(self.name, self.n)

    def gradients_per_update(self, workers: int) -> int:
        """c: gradients aggregated per weight update (hardsync: one per worker)."""
        if self.name == "hardsync":
            return workers
        return max(1, workers // self.splitting(workers))

    def learning_rate(self, alpha0: float, workers: int) -> float:
        """The rate the server applies (Rudra's modulation, see the module docstring)."""
        if self.name == "hardsync":
            return alpha0 * math.sqrt(workers)
        return alpha0 / self.splitting(workers)


@dataclass
class GradientRecord:
    """One received gradient: who sent it, its and the server's timestamps, and the server's busy time.

    ``t_ns`` is the wall clock (ns since the epoch) when it arrived; ``busy_ns`` the server's time spent on it
    (aggregation, extra cost, and the weight update when this gradient completed one); ``applied`` is the
    timestamp the update it joined produced (-1 until then).
    """

    t_ns: int
    worker: int
    grad_ts: int
    server_ts: int
    busy_ns: int = 0
    update_ts: int = -1

    @property
    def staleness(self) -> int:
        return self.server_ts - self.grad_ts


@dataclass
class UpdateRecord:
    """One weight update ts-1 -> ts: when (wall clock ns), how many gradients, their mean staleness <sigma>."""

    ts: int
    t_ns: int
    gradients: int
    mean_staleness: float
    apply_ns: int


@dataclass
class ParameterServer:
    """Weights, timestamp and the protocol's rule; ``push``/``retire`` return True when weights advanced."""

    weights: np.ndarray
    protocol: Protocol
    workers: list[int]
    alpha0: float
    extra_cost_s: float = 0.0
    ts: int = 0
    gradients: list[GradientRecord] = field(default_factory=list)
    updates: list[UpdateRecord] = field(default_factory=list)

    def __post_init__(self):
        self.active = set(self.workers)
        self.c = self.protocol.gradients_per_update(len(self.workers))
        self.alpha = self.protocol.learning_rate(self.alpha0, len(self.workers))
        self._sum = np.zeros_like(self.weights)
        self._pending: list[GradientRecord] = []

    def may_serve_pull(self, worker: int) -> bool:
        """Whether ``worker`` may get weights now (hardsync holds it until its gradient has been applied)."""
        return self.protocol.name != "hardsync" or all(g.worker != worker for g in self._pending)

    def push(self, worker: int, gradient: np.ndarray, grad_ts: int) -> bool:
        """Aggregate one gradient computed on weights ``grad_ts``; apply an update when the rule says so."""
        t0 = time.time_ns()
        record = GradientRecord(t0, worker, grad_ts, self.ts)
        self._sum += gradient
        if self.extra_cost_s > 0:
            time.sleep(self.extra_cost_s)
        self._pending.append(record)
        self.gradients.append(record)
        applied = self._maybe_apply()
        record.busy_ns = time.time_ns() - t0
        return applied

    def retire(self, worker: int) -> bool:
        """``worker`` has finished: stop waiting for it (hardsync), apply what is pending if nobody is left."""
        self.active.discard(worker)
        return self._maybe_apply()

    def _maybe_apply(self) -> bool:
        if not self._pending:
            return False
        if self.protocol.name == "hardsync":
            ready = self.active <= {g.worker for g in self._pending}
        else:
            ready = len(self._pending) >= self.c or not self.active
        if not ready:
            return False
        t0 = time.time_ns()
        self.weights -= (self.alpha / len(self._pending)) * self._sum
        self._sum[:] = 0.0
        self.ts += 1
        for g in self._pending:
            g.update_ts = self.ts
        staleness = [g.staleness for g in self._pending]
        self.updates.append(UpdateRecord(self.ts, t0, len(staleness), float(np.mean(staleness)),
                                         time.time_ns() - t0))
        self._pending = []
        return True
