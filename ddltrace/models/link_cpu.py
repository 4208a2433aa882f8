"""The CPU a machine's network costs the job's ranks: the kernel's packet work on the cores they share.

Each byte a rank sends or receives costs CPU in the kernel (the bridge, veth, TCP at the link's packet size), which
this kernel charges to whatever task runs when it happens (``CONFIG_IRQ_TIME_ACCOUNTING`` unset). ``calibrate``
measures it as ``net_cpu_per_byte`` (seconds of CPU per byte sent one way, send and receive together). Over
loopback it is 0.3-0.5 ns; between two simulated nodes on 200 Mbit/s links, 11-16 ns: the net B's ranks share the
machine's cores with that work (docs/MODELS.md, "What the net B's link costs in CPU").

The model: the job moves ``2 s n_w`` bytes per update (the weights out, the gradient back), ``d / b`` updates an
epoch, whatever w (:func:`bytes_per_epoch`). Spread over the phase, that is ``L = bytes x net_cpu_per_byte /
T_phase`` cores of packet work (:func:`load`). Where the workers pull, compute and push one after another (the
closed loop, ``--serial-comm``), a worker's compute never overlaps its own transfers, only the other workers'. With
the link busy ``u = bytes x r_net / T_phase`` of the phase (at most 1), the other workers' transfers fill
``u (w - 1) / w`` of it and the worker computes in the other ``1 - u / w``, so the packet work its compute meets
is ``L (w - 1) / (w - u)`` cores: none at w = 1 (the net B's w = 1 compute per sample was A's: 71 against 71 µs),
L where the link is always busy. Where the transfers overlap compute (Hashemi's max), all of L.

That work is taken from the cores the ranks share (:func:`ddltrace.models.transfer.cpu_shares`: a rank's share
scales by ``(cores - L_B) / (cores - L_A)``), and since B's phase sets L_B, the prediction is the fixed point
:func:`fixed_point` finds (:func:`ddltrace.models.transfer.carry`, which leaves it out where B's quota holds every
rank). The constant's own uncertainty is not drawn: it is held at its value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ddltrace.models.hashemi import Workload

NAME = "net_cpu_per_byte"
#: The fixed point is looked for to this many cores of packet work, in at most :data:`STEPS` halvings.
TOLERANCE_CORES = 1e-4
STEPS = 24
#: The packet work is taken at most this share of a machine's cores (above it the ranks would have none left).
MOST = 0.95


def per_byte(record: Mapping) -> float | None:
    """The profile's CPU seconds per byte sent (send and receive together), None where its calibration did not
    measure it."""
    entry = (record.get("constants") or {}).get(NAME)
    return None if entry is None else float(entry["value"])


def bytes_per_epoch(wl: Workload) -> float:
    """Bytes the job's messages move in an epoch: ``2 s n_w`` per update (the weights to a worker, its gradient
    to the server), ``d / b`` updates."""
    return 2.0 * wl.s * wl.n_w * wl.d / wl.b


def load(wl: Workload, cpu_per_byte: float, r_net, phase_s, w: float, serial: bool):
    """Cores of packet work a worker's compute meets at ``w`` workers with an epoch's phase of ``phase_s`` seconds
    and ``r_net`` seconds per byte on the link (numbers, or arrays of draws): ``L (w - 1) / (w - u)`` for
    ``serial`` workers, else L (the module's docstring)."""
    moved = bytes_per_epoch(wl)
    phase = np.maximum(np.asarray(phase_s, dtype=float), 1e-12)
    cores = moved * cpu_per_byte / phase
    if serial and w <= 1:  # a lone worker's compute meets no transfer but its own, which it waits for
        cores = cores * 0.0
    elif serial:
        busy = np.minimum(1.0, moved * np.asarray(r_net, dtype=float) / phase)
        cores = cores * (w - 1.0) / (w - busy)
    return float(cores) if np.ndim(cores) == 0 else cores


def fixed_point(load_of: Callable[[float], float], cores: float) -> float:
    """The load L (cores, at most ``cores``) with ``L = load_of(L)``, where ``load_of`` is the packet work B's
    phase at load L leaves (it falls as L grows: more packet work, a slower phase, the bytes spread thinner), by
    halving the interval between 0 and ``load_of(0)``."""
    low, high = 0.0, min(float(load_of(0.0)), cores)
    for _ in range(STEPS):
        if high - low <= TOLERANCE_CORES:
            break
        mid = (low + high) / 2
        if load_of(mid) > mid:
            low = mid
        else:
            high = mid
    return (low + high) / 2
