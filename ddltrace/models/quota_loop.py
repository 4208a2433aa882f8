"""The closed loop of w workers and one parameter server when every rank runs under a CFS quota (docs/MODELS.md).

A CFS quota gives a rank ``q`` of a core in each period ``P`` of its cgroup's own timer: the rank runs while it has
budget left in the period and is throttled until the period ends once it has used ``q P`` seconds. A rank that
polls while it waits (MPI's do) spends its budget polling; one that sleeps (the server-bound shape's server)
does not. So a rank is not a core ``q`` times as fast: a worker whose compute of a batch fits in what is left of
its budget runs it at full speed, a message waits for a throttled receiver until its period ends, and the whole
loop locks onto the periods. How long a batch takes then depends on where each rank's period starts (its timer
is armed when the cgroup first runs), which differs from run to run: the reference job's w = 1 batch on the quota
B took 10.9-21.3 ms over ten runs with the same shares. This module plays the loop out, step by step of
``P / 100``, for random period starts, and gives the mean cycle and its spread over them.

Per batch a worker sends a pull request (a small message: put in the server's queue when the worker runs), waits
for the weights, receives them (``message`` seconds during which both ranks run), computes (``compute`` seconds
of CPU) and pushes its gradient (``message`` seconds with both running, once the server takes it). The server
takes its queue in order: a pull is answered with the weights, a push is received, applied (``server_cpu``
seconds of CPU) and followed by ``server_sleep`` seconds asleep. The cores are not contended (the ranks' quotas
add up to no more than the cores): each rank runs whenever its quota lets it.

A message needs both ranks running, so two polling ranks whose periods start half a period apart at a quota of
half a core run in turns and never together: the loop locks. The real ranks do not (the kernel's socket buffers
carry a message between their turns), so a start that locks the loop is one this model cannot play out: it is
left out of the mean and counted (:func:`cycle` gives NaN for it).
"""

from __future__ import annotations

import math

import numpy as np

#: Random starts of the ranks' periods the loop is played out for, by default.
STARTS = 12


def cycle(w: int, compute: float, message: float, server_cpu: float, server_sleep: float, quota: float,
          period: float, starts: np.ndarray, batches: int = 24) -> float:
    """Seconds per batch of one worker (the mean over the workers, after the first two batches) with the ranks'
    periods starting at ``starts`` (seconds, the server's first, then each worker's); NaN where the loop locks
    (nothing moves for two periods: a message whose two ranks never run together)."""
    dt = period / 100.0
    n = w + 1
    full = quota * period
    budget = [full] * n
    reset = [float(x) for x in starts]
    state = [["server", 0.0, 0]] + [["pull", 0.0] for _ in range(w)]
    server = ["idle", 0.0, 0]
    queue: list[tuple[str, int]] = []
    done = [0] * n
    t, t0, done0 = 0.0, None, 0
    moved_at = 0.0  # when a rank last moved on: a message, compute, the server's update or sleep, a request queued
    limit = 10 * batches * (compute + server_cpu + server_sleep + 2 * message + period) * max(1, w) / quota
    while t < limit:
        for r in range(n):
            if t >= reset[r]:
                budget[r], reset[r] = full, reset[r] + period
        running = [budget[r] > 0 for r in range(n)]
        if server[0] == "sleep":
            running[0] = False
        if server[0] == "idle" and running[0] and queue:
            kind, who = queue.pop(0)
            server[:] = ["send" if kind == "pull" else "recv", message, who]
        if server[0] in ("send", "recv"):
            who = server[2]
            if running[0] and running[who] and (server[0] == "recv" or state[who][0] == "wait"):
                server[1] -= dt
                moved_at = t
                if server[1] <= 0:
                    if server[0] == "send":
                        state[who][:] = ["cpu", compute]
                        server[:] = ["idle", 0.0, 0]
                    else:
                        state[who][:] = ["pull", 0.0]
                        done[who] += 1
                        server[:] = ["cpu", server_cpu, 0]
        elif server[0] == "cpu":
            if running[0]:
                server[1] -= dt
                moved_at = t
            if server[1] <= 0:
                server[:] = ["sleep", server_sleep, 0] if server_sleep > 0 else ["idle", 0.0, 0]
        elif server[0] == "sleep":
            server[1] -= dt
            moved_at = t
            if server[1] <= 0:
                server[:] = ["idle", 0.0, 0]
        for r in range(1, n):
            if not running[r]:
                continue
            if state[r][0] == "pull":
                queue.append(("pull", r))
                state[r][0] = "wait"
                moved_at = t
            elif state[r][0] == "cpu":
                state[r][1] -= dt
                moved_at = t
                if state[r][1] <= 0:
                    state[r][:] = ["push", 0.0]
                    queue.append(("push", r))
        for r in range(n):
            if running[r]:  # polling, computing or sending: a sleeping server is not running
                budget[r] -= dt
        t += dt
        least = min(done[1:])
        if t0 is None and least >= 2:
            t0, done0 = t, sum(done[1:])
        if least >= batches:
            return w * (t - t0) / (sum(done[1:]) - done0)
        if t - moved_at > 2 * period:
            return math.nan
    raise RuntimeError("the quota loop did not finish its batches: a rank never runs (quota 0?)")


def cycles(w: int, compute: float, message: float, server_cpu: float, server_sleep: float, quota: float,
           period: float, draws: int = STARTS, seed: int = 0) -> np.ndarray:
    """Seconds per batch of a worker for ``draws`` random starts of the ranks' periods (uniform in a period); NaN
    for a start that locks the loop (:func:`cycle`)."""
    rng = np.random.default_rng(seed)
    return np.array([cycle(w, compute, message, server_cpu, server_sleep, quota, period,
                           rng.uniform(0.0, period, w + 1)) for _ in range(draws)])
