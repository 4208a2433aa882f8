"""The knee of every draw of its interval at once: what is about the draws, around the model's own functions.

:func:`ddltrace.analyses.fit_hashemi.knee_interval` draws the fitted constants 2,000 times
(:func:`~ddltrace.analyses.fit_hashemi.knee_draws`: a :class:`~ddltrace.models.hashemi.Constants` whose fitted fields
are arrays of the draws) and takes the central share of their knees w* (workers). Hashemi's formulas take such
constants as they take numbers (:func:`ddltrace.models.hashemi.w_star`, :func:`~ddltrace.models.hashemi.t_phase`:
each draw's, the same numbers as one draw at a time); what is left here is what is about the draws:

- :func:`one_draw`: the i-th draw as numbers;
- :func:`profile_ratios`: what :func:`ddltrace.models.transfer.transfer` carries each draw by that does not depend on
  w, both profiles' constants drawn, computed once for every w searched;
- :func:`carried`, :func:`phases_at`: :func:`~ddltrace.models.transfer.transfer`'s constants on B and
  :func:`~ddltrace.models.transfer.phase_at`'s phase at w (seconds, all epochs) of every draw, on A or carried to B
  from :func:`profile_ratios`; None at a w where B's quota loop is played
  (:func:`~ddltrace.models.transfer.quota_holds`), which stays one draw at a time;
- :func:`searched_knees`: :func:`~ddltrace.models.transfer.knee_search`'s w of every draw, each w's phases computed
  once for all draws (one draw at a time at a w where :func:`phases_at` gives None).

``tests/test_model_knee_on_b.py`` checks each against the functions of numbers, draw by draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from ddltrace.models import hashemi, transfer
from ddltrace.models.hashemi import Constants, Workload


def one_draw(drawn: Constants, i: int) -> Constants:
    """The ``i``-th draw of ``drawn`` (fields arrays of draws, or numbers every draw shares) as plain numbers."""
    return Constants(**{name: (float(value[i]) if np.ndim(value) else value)
                        for name, value in ((name, getattr(drawn, name)) for name in hashemi.NAMES)})


def profile_ratios(wl: Workload, counts: Mapping, a: Mapping, b: Mapping, z_a: Mapping, z_b: Mapping) -> dict:
    """What :func:`ddltrace.models.transfer.transfer` carries each draw by that does not depend on w, for arrays of
    the profiles' draws ``z_a``, ``z_b`` (standard deviations off, by constant): ``sample`` and ``update`` (B's work
    per sample at the job's working set and per pass over the weights, over A's) and ``held`` (B's value over A's
    of each held constant both profiles have)."""
    job_set = hashemi.working_set_bytes(wl.b, wl.n_f, wl.n_w, wl.s)
    weights_set = max(wl.n_w * wl.s, 1.0)
    one = {"muladds": 1.0}
    held = {}
    for name in transfer.HELD:
        va, vb = transfer.held_value(a, name, z_a.get(name, 0.0)), transfer.held_value(b, name, z_b.get(name, 0.0))
        if va is not None and vb is not None:
            held[name] = vb / va
    return {"sample": (transfer.per_sample_work(b, counts, job_set, z_b)
                       / transfer.per_sample_work(a, counts, job_set, z_a)),
            "update": (transfer.per_sample_work(b, one, weights_set, z_b)
                       / transfer.per_sample_work(a, one, weights_set, z_a)),
            "held": held}


def _server_split(c_u, measured: Mapping) -> tuple:
    """:func:`ddltrace.models.transfer.server_split`'s (server_s, rest_s, cpu_fraction) over arrays of c_u."""
    if measured["busy_s"] is None:
        return c_u, 0.0, 1.0
    on = c_u > 0
    server = np.minimum(c_u, measured["busy_s"])
    return np.where(on, server, c_u), np.where(on, c_u - server, 0.0), np.where(on, measured["cpu_fraction"], 1.0)


def carried(k: Constants, wl: Workload, a: Mapping, b: Mapping, ratios: Mapping, serial: bool, w: float,
            runs: Sequence[Mapping], server: Mapping) -> Constants:
    """:func:`ddltrace.models.transfer.transfer`'s constants on B at ``w`` for each draw (``ratios``:
    :func:`profile_ratios` of the draws; ``server``: :func:`ddltrace.models.transfer.server_measured`)."""
    t_slice = k.t_slice
    if wl.cpu_shares:
        k = hashemi.at_share(k, transfer.share_on_a(a, runs, w)[0])
    sample, update = ratios["sample"], ratios["update"]
    shares = transfer.cpu_shares(a, b, runs, w)
    m = shares["multiplier"]
    factors = dict.fromkeys(transfer.PER_SAMPLE, sample * m)
    factors["c_b"] = update * m
    server_s, rest_s, f = _server_split(k.c_u, server)
    with np.errstate(divide="ignore", invalid="ignore"):
        c_u_b = server_s * (f * update * m + 1.0 - f) + rest_s * sample * m
        factors["c_u"] = np.where(k.c_u > 0, c_u_b / k.c_u, update * m)
    for name in transfer.HELD:
        factors[name] = np.where(getattr(k, name) == 0, 1.0, ratios["held"][name]) if name in ratios["held"] else 1.0
    values = {name: getattr(k, name) * factors.get(name, 1.0) for name in hashemi.NAMES}
    if wl.cpu_shares:
        period, _ = transfer.off_core_period(b, shares, t_slice)
        values["c_b"] = values["c_b"] + transfer.messages_per_batch(runs, w) * hashemi.off_core_wait(
            shares["share_b"], period)
    else:
        values["c_b"] = hashemi.positive_part(values["c_b"] + transfer.quota_wait_per_batch(a, b, runs, shares))
    if serial and not wl.serial:
        d_r_net, d_lat = values["r_net"] - k.r_net, values["lat_net"] - k.lat_net
        values["c_p"] = hashemi.positive_part(values["c_p"] + (2 * wl.s * wl.n_w * d_r_net + 2 * d_lat) / wl.b)
    return replace(k, **values)


def phases_at(k: Constants, wl: Workload, w: int, a: Mapping, runs: Sequence[Mapping], b: Mapping | None = None,
              serial: bool = False, ratios: Mapping | None = None, server: Mapping | None = None
              ) -> np.ndarray | None:
    """:func:`ddltrace.models.transfer.phase_at`'s ``phase_s`` (seconds, all epochs) at ``w`` workers for each draw
    of ``k``: on A (``b`` None), or carried to B (``ratios``: :func:`profile_ratios` of the profiles' draws;
    ``server``: :func:`ddltrace.models.transfer.server_measured`). None where B's quota holds every rank at w (a
    ``--cpu-shares`` model): there the phase is the quota loop played out, one draw at a time."""
    if b is None:
        at = k
        if wl.cpu_shares:
            at = hashemi.at_share(k, transfer.share_on_a(a, runs, w)[0], transfer.messages_per_batch(runs, w))
    else:
        if wl.cpu_shares and transfer.quota_holds(wl, b, runs, transfer.cpu_shares(a, b, runs, w), w):
            return None
        at = carried(k, wl, a, b, ratios, serial, w, runs, server)
    return wl.epochs * hashemi.t_phase(w, wl, at)


def searched_knees(phases: Callable[[int], np.ndarray | None], draws: int, most: int,
                   one: Callable[[int, int], float] | None = None) -> np.ndarray:
    """:func:`ddltrace.models.transfer.knee_search`'s knee (workers; inf where none below ``most``) of each of
    ``draws`` draws: ``phases(w)`` the phase at w of every draw (:func:`phases_at`), each w once; where it gives
    None, ``one(w, i)`` the i-th draw's."""
    columns: dict[int, np.ndarray] = {}
    rules: dict[int, np.ndarray] = {}

    def column(w: int) -> np.ndarray:
        if w not in columns:
            got = phases(w)
            columns[w] = (np.broadcast_to(got, (draws,)) if got is not None
                          else np.array([one(w, i) for i in range(draws)], dtype=float))
        return columns[w]

    def rule(w: int) -> np.ndarray:
        if w not in rules:
            rules[w] = transfer.gains_little(column(w), column(w + 1), w)
        return rules[w]

    def knee_of(i: int) -> float:
        w = transfer.searched_knee(lambda w: bool(rule(w)[i]), most)
        return math.inf if w is None else float(w)

    return np.array([knee_of(i) for i in range(draws)], dtype=float)
