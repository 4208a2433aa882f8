"""The knee of every draw of its interval at once: what is about the draws, around the model's own functions.

:func:`ddltrace.analyses.fit_hashemi.knee_interval` draws the fitted constants 2,000 times
(:func:`~ddltrace.analyses.fit_hashemi.knee_draws`: a :class:`~ddltrace.models.hashemi.Constants` whose fitted fields
are arrays of the draws) and takes the central share of their knees w* (workers). Hashemi's formulas take such
constants as they take numbers (:func:`ddltrace.models.hashemi.w_star`, :func:`~ddltrace.models.hashemi.t_phase`:
each draw's, the same numbers as one draw at a time); what is left here is what is about the draws:

- :func:`one_draw`: the i-th draw as numbers;
- :func:`phases_at`: :func:`~ddltrace.models.transfer.phase_at`'s phase at w (seconds, all epochs) of every draw, on
  A or carried to B by :func:`~ddltrace.models.transfer.carry` (which takes draws as it takes numbers) from the
  profiles' :func:`~ddltrace.models.transfer.profile_ratios`, drawn once for every w searched; None at a w where B's
  quota loop is played
  (:func:`~ddltrace.models.transfer.quota_holds`), which stays one draw at a time;
- :func:`searched_knees`: :func:`~ddltrace.models.transfer.knee_search`'s w of every draw, each w's phases computed
  once for all draws (one draw at a time at a w where :func:`phases_at` gives None).

``tests/test_model_knee_on_b.py`` checks each against the functions of numbers, draw by draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ddltrace.models import hashemi, transfer
from ddltrace.models.hashemi import Constants, Workload


def one_draw(drawn: Constants, i: int) -> Constants:
    """The ``i``-th draw of ``drawn`` (fields arrays of draws, or numbers every draw shares) as plain numbers."""
    return Constants(**{name: (float(value[i]) if np.ndim(value) else value)
                        for name, value in ((name, getattr(drawn, name)) for name in hashemi.NAMES)})


def phases_at(k: Constants, wl: Workload, w: int, a: Mapping, runs: Sequence[Mapping], b: Mapping | None = None,
              serial: bool = False, ratios: Mapping | None = None, server: Mapping | None = None,
              what_if: Mapping | None = None) -> np.ndarray | None:
    """:func:`ddltrace.models.transfer.phase_at`'s ``phase_s`` (seconds, all epochs) at ``w`` workers for each draw
    of ``k``: on A (``b`` None), or carried to B (``ratios``: :func:`ddltrace.models.transfer.profile_ratios` of the
    profiles' draws; ``server``: :func:`ddltrace.models.transfer.server_measured`); with ``what_if``'s changes, made to
    the constants at w as ``phase_at`` makes them (a ``t_slice`` before the messages' waits are drawn from it). None
    where B's quota holds every rank at w (a ``--cpu-shares`` model): there the phase is the quota loop played out,
    one draw at a time."""
    change = dict(what_if or {})
    t_slice = change.pop("t_slice", None)
    k = k.scaled({"t_slice": t_slice}) if t_slice else k
    if b is None:
        at = k
        if wl.cpu_shares:
            at = hashemi.at_share(at, transfer.share_on_a(a, runs, w)[0], transfer.messages_per_batch(runs, w))
    else:
        if wl.cpu_shares and transfer.quota_holds(wl, b, runs, transfer.cpu_shares(a, b, runs, w), w):
            return None
        at = transfer.carry(k, wl, a, b, ratios, serial, w, runs, server, change)[0]
    return wl.epochs * hashemi.t_phase(w, wl, at.scaled(change) if change else at)


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
