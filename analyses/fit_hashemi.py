"""Fitting Hashemi et al.'s ASGD model to measured runs: constants with intervals, held-out errors, the knee.

Input: one record per run of the same job, with ``w`` (workers), ``b`` (batch size), ``phase_s`` (seconds of
the computation phase: all epochs of the steady state) and optionally ``init_s`` (seconds of initialisation),
``d`` (samples), ``epochs``, ``label`` (where the run came from). Records come from a DataFrame, a list of
dicts, or trace stores through :func:`measurements_from_stores`.

:class:`HashemiFit` follows scikit-learn's conventions: settings in the constructor, ``fit(measurements)``
returns self, what was learnt ends in ``_``:

- ``constants_`` (:class:`~ddltrace.models.hashemi.Constants`), ``params_`` / ``stderr_`` / ``ci_``: each
  fitted constant with its standard error and confidence interval (seconds, or seconds per byte for r_d);
- ``loo_``: leave-one-out prediction of every run (absolute percentage error of the held-out point);
- ``knee_`` / ``knee_cause_``: the predicted saturation point w* and what causes it (server or floor);
- ``divergence_``: every run against the model, by term, with the term that bounds it and a flag when the
  measurement is off by more than ``divergence_threshold``;
- ``notes_``: what the data could not pin down (a constant no run constrains, too few runs for intervals).

The fit is bounded least squares (scipy.optimize.least_squares, constants >= 0) on relative residuals, so
runs of 1 s and 100 s weigh alike; it restarts from several server costs because ``max()`` hides c_u from
runs that are not server-bound. Intervals come from the Jacobian at the optimum (Student t). Constants a
hardware profile measured (r_m, w_m, r_net, lat_net, r_d, net_duplex) are held fixed; others can be fixed with
``fixed``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from scipy.optimize import least_squares

from ddltrace.errors import DdltraceError
from ddltrace.models import drawn_knees, hashemi, transfer
from ddltrace.models.hashemi import Constants, Workload
from ddltrace.options import LARGEST

FITTABLE = ("c_p", "c_b", "c_u", "t_phase_min", "kappa", "t_slice")
#: Terms that only act past a knee: kept only when leave-one-out errors say the runs support them.
KNEE_TERMS = ("c_u", "t_phase_min", "kappa")
PROFILE_CONSTANTS = ("r_d", "r_m", "w_m", "r_net", "lat_net", "net_duplex")
SERVER_ROLES = ("server", "ps", "parameter_server", "parameter-server")
#: A rank with at least this share of a core (sampled) had a core of its own: nothing contended for it.
ALONE_SHARE = 0.9


def _records(measurements: Any, source: str | None = None) -> pd.DataFrame:
    """The runs as a frame, checked; ``source``: the file they were read from, whose line numbers ``measurements``'
    index holds (a run out of range is named by its line there), else runs are named by their position."""
    frame = measurements.copy() if isinstance(measurements, pd.DataFrame) else pd.DataFrame(list(measurements))
    where = source or "measurements"
    missing = [c for c in ("w", "b", "phase_s") if c not in frame.columns]
    if missing:
        raise DdltraceError(f"{where}: missing column(s) {', '.join(missing)} (need w, b, phase_s per run)")
    for col in ("w", "b", "phase_s", "init_s", "d", "epochs"):
        if col in frame.columns:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    numbers = [c for c in ("w", "b", "phase_s", "init_s", "d", "epochs") if c in frame.columns]
    bad = frame.index[~((frame["w"] >= 1) & (frame["w"] % 1 == 0) & (frame["b"] > 0) & (frame["phase_s"] > 0)
                        & (frame[numbers].abs().fillna(0) <= LARGEST).all(axis=1))].tolist()
    if bad:
        raise DdltraceError(f"{where}: {'line(s)' if source else 'run(s)'} {bad} need w a whole number of workers "
                            f">= 1, b > 0 and phase_s > 0 s, and every number at most {LARGEST:g}")
    if "label" not in frame.columns:
        frame["label"] = [f"w={int(w)} b={b:g}" for w, b in zip(frame["w"], frame["b"], strict=True)]
    return frame.reset_index(drop=True)


class HashemiFit:
    """Fit c_p, c_b, c_u (and optionally the phase floor and the contention kappa) to measured runs.

    Parameters: ``d`` samples, ``n_f`` features per sample, ``n_w`` weights, ``s`` bytes per value, ``epochs``
    (defaults for runs whose records lack them); ``storage`` ('shared', 'local', 'partitioned') for the
    initialisation term; ``profile``: measured constants (r_m, w_m, r_net, lat_net, r_d, net_duplex) held fixed;
    ``free``: which of c_p, c_b, c_u, t_phase_min, kappa to fit (c_b is dropped when all runs share one
    batch size, as c_p and c_b cannot then be told apart); ``fixed``: values to hold fixed instead;
    ``confidence`` of the intervals; ``divergence_threshold``: relative error that flags a run;
    ``c_u_from_trace``: hold c_u at the server's measured busy time per update (``server_busy_s`` of the runs
    over their d E / b updates, the median over the runs) instead of fitting it; ``serial``: the workers do not
    overlap their transfers with compute (the closed-loop model of :mod:`ddltrace.models.hashemi`);
    ``cpu_shares``: each run's workers had their sampled share of a core (``cpu_share``; ranks polling for their
    messages, as MPI's do, use all they get): c_p and c_b are fitted as CPU seconds of a whole core, a run's
    worker taking ``1 / share`` as long, each message of a batch waits for a receiver off its core
    (:func:`ddltrace.models.hashemi.at_share`, its round ``t_slice`` fitted), and c_u is the server's measured
    busy time per update (``c_u_from_trace``): on fewer cores than ranks the runs' plateau is the ranks' wait for
    the cores, which a free c_u takes whole, leaving c_p at 0. Its knee is that of the phases predicted at the
    ranks' share at each w (:func:`ddltrace.models.transfer.knee_over_w`, as ``model predict`` gives it), with
    ``machine``, A's profile record (:func:`ddltrace.models.transfer.profile_record`: the cores of its CPU
    allowance), for the share at a w the runs did not measure.
    """

    def __init__(self, *, d: float | None = None, n_f: float = 0.0, n_w: float = 0.0, s: float = 8.0,
                 epochs: float = 1.0, storage: str = "shared", profile: Mapping[str, float] | None = None,
                 free: Sequence[str] = ("c_p", "c_b", "c_u"), fixed: Mapping[str, float] | None = None,
                 confidence: float = 0.95, divergence_threshold: float = 0.10, c_u_from_trace: bool = False,
                 serial: bool = False, cpu_shares: bool = False, machine: Mapping[str, Any] | None = None):
        self.d = d
        self.n_f = n_f
        self.n_w = n_w
        self.s = s
        self.epochs = epochs
        self.storage = storage
        self.profile = profile
        self.free = tuple(free)
        self.fixed = fixed
        self.confidence = confidence
        self.divergence_threshold = divergence_threshold
        self.c_u_from_trace = c_u_from_trace
        self.serial = serial
        self.cpu_shares = cpu_shares
        self.machine = machine

    # -- the model of one run ----------------------------------------------------------------------------

    def _workload(self, row: Mapping[str, Any]) -> Workload:
        d = row.get("d")
        d = self.d if d is None or (isinstance(d, float) and math.isnan(d)) else d
        if d is None:
            raise DdltraceError("measurements: the number of samples d is unknown (give --samples or a 'd' column)")
        epochs = row.get("epochs")
        epochs = self.epochs if epochs is None or (isinstance(epochs, float) and math.isnan(epochs)) else epochs
        return Workload(d=float(d), b=float(row["b"]), n_f=self.n_f, n_w=self.n_w, epochs=float(epochs), s=self.s,
                        serial=self.serial, cpu_shares=self.cpu_shares)

    def _groups(self, frame: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray, Workload]]:
        """Rows grouped by workload (same b, d, epochs): (row positions, workers, workload)."""
        keys = [self._workload(row) for row in frame.to_dict("records")]
        groups = []
        for wl in dict.fromkeys(keys):
            pos = np.array([i for i, key in enumerate(keys) if key == wl])
            groups.append((pos, frame["w"].to_numpy()[pos], wl))
        return groups

    def _predict_rows(self, frame: pd.DataFrame, k: Constants, groups: list | None = None) -> np.ndarray:
        out = np.empty(len(frame))
        runs = frame.to_dict("records") if self.cpu_shares else []
        for pos, w, wl in groups or self._groups(frame):
            if self.cpu_shares:
                for i, x in zip(pos, w, strict=True):
                    out[i] = wl.epochs * hashemi.t_phase(x, wl, self._row_constants(runs[i], k, runs))
            else:
                out[pos] = wl.epochs * np.asarray(hashemi.t_phase(w, wl, k))
        return out

    def _row_constants(self, row: Mapping[str, Any], k: Constants, runs: Sequence[Mapping[str, Any]]) -> Constants:
        """The constants of one run: with ``cpu_shares``, at its workers' share of a core and the messages per batch
        at its w among ``runs`` (:func:`ddltrace.models.transfer.messages_per_batch`, as the prediction at w takes
        them; :func:`ddltrace.models.hashemi.at_share`); else ``k``."""
        if not self.cpu_shares:
            return k
        return hashemi.at_share(k, float(row["cpu_share"]), transfer.messages_per_batch(runs, float(row["w"])))

    def _measured_c_u(self, frame: pd.DataFrame, notes: list[str]) -> float:
        """c_u from the server's trace: busy seconds over the run's d E / b updates, median over the runs. With
        ``cpu_shares``, over the runs whose ranks each had a core (workers' and server's sampled share at least
        :data:`ALONE_SHARE`) where there are some: beyond the cores the server's blocking sends wait for workers
        off their cores (A's compute shape: 0.15 ms per update at w = 1, 0.68 and 1.6 ms at w = 2 and 4 on 2
        cores), a wait the shares model charges itself (the ranks' shares, their messages' off-core waits)."""
        if "server_busy_s" not in frame.columns or frame["server_busy_s"].isna().all():
            raise DdltraceError("c_u from the trace: the runs carry no server busy time (no server rank found; "
                                "give --servers)")
        rows = frame.dropna(subset=["server_busy_s"])
        per_update = pd.Series([self._busy_per_update(row) for row in rows.to_dict("records")], index=rows.index)
        alone = pd.Series(False, index=rows.index)
        if self.cpu_shares:
            server = rows["server_cpu_share"] if "server_cpu_share" in rows.columns else rows["cpu_share"]
            alone = (rows["cpu_share"] >= ALONE_SHARE) & (server.fillna(rows["cpu_share"]) >= ALONE_SHARE)
        kept = per_update[alone] if alone.any() else per_update
        value = float(kept.median())
        # the runs' own figures: the intervals draw c_u as one of them (docs/MODELS.md, "c_u from the trace")
        self.measured_runs_ = {"c_u": [float(x) for x in kept]}
        if alone.any():
            others = per_update[~alone]
            tail = (f"; the other runs' {others.min():.3g} to {others.max():.3g} s hold the server's waits for ranks "
                    "off their cores, which the shares charge apart") if len(others) else ""
            which = "the run" if len(kept) == 1 else f"the median of the {len(kept)} runs"
            notes.append(f"c_u measured from the server's trace: {value:.3g} s per update ({which} whose ranks had "
                         f"a core each, a share of {ALONE_SHARE:g} or more{tail})")
        else:
            notes.append(f"c_u measured from the server's trace: {value:.3g} s per update (median of {len(kept)} "
                         f"runs, {kept.min():.3g} to {kept.max():.3g} s)")
        return value

    def _check_c_u(self, frame: pd.DataFrame, notes: list[str]) -> None:
        """Where c_u was fitted and the runs carry their server's busy time, a note when the server's own busy time
        per update lies outside c_u's interval: the runs' plateau is then not the server's work alone (QA: ps-sgd's
        par-w1..8 on 2 cores fitted 4.21 ms [3.19, 5.23], the server busy 2.50 ms per update at w = 8, its 9 ranks
        waiting for the cores)."""
        low, high = self.ci_.get("c_u", (math.nan, math.nan))
        if "server_busy_s" not in frame.columns or frame["server_busy_s"].isna().all() or not low <= high:
            return
        rows = frame.dropna(subset=["server_busy_s"])
        per_update = np.array([self._busy_per_update(row) for row in rows.to_dict("records")])
        measured = float(np.median(per_update))
        if low <= measured <= high:
            return
        notes.append(f"c_u fitted {self.params_['c_u']:.3g} s per update [{low:.3g}, {high:.3g}], but the server's "
                     f"own trace says {measured:.3g} s busy per update (the median over {len(per_update)} runs, "
                     f"{per_update.min():.3g} to {per_update.max():.3g} s): what flattens the runs is not the "
                     "server's work alone (ranks sharing cores, the network); --c-u-from-trace holds c_u at the "
                     "trace's figure")

    def _busy_per_update(self, row: Mapping[str, Any]) -> float:
        """A run's server busy seconds per update: over its d E / b updates."""
        wl = self._workload(row)
        return row["server_busy_s"] / (wl.d * wl.epochs / wl.b)

    def _base_constants(self, extra: Mapping[str, float] | None = None) -> Constants:
        values = {name: 0.0 for name in hashemi.NAMES}
        for name, value in (self.profile or {}).items():
            if name in values:
                values[name] = float(value)
        for name, value in {**(self.fixed or {}), **(extra or {})}.items():
            if name not in values:
                raise DdltraceError(f"fixed constant {name!r}: not a constant of the model "
                                    f"({', '.join(hashemi.NAMES)})")
            values[name] = float(value)
        return Constants(**values)

    # -- fitting -------------------------------------------------------------------------------------------

    def _solve(self, frame: pd.DataFrame, names: list[str], base: Constants,
               start: np.ndarray | None = None) -> tuple[np.ndarray, Any]:
        """Bounded least squares from ``start``, or from several server costs when none is given."""
        measured = frame["phase_s"].to_numpy()
        groups = self._groups(frame)

        def residuals(theta):
            k = replace(base, **dict(zip(names, theta, strict=True)))
            return self._predict_rows(frame, k, groups) / measured - 1.0

        samples = float(np.median([self._workload(r).d * self._workload(r).epochs for r in frame.to_dict("records")]))
        per_sample = float(np.median(frame["phase_s"] * frame["w"])) / samples
        batch = float(np.median(frame["b"]))
        guess = {"c_p": per_sample * 0.7, "c_b": per_sample * batch * 0.1, "t_phase_min": float(measured.min()) * 0.5,
                 "kappa": 0.01, "t_slice": 0.01}
        server_guesses = [per_sample * batch / w for w in (1.0, 4.0, 16.0, 64.0, 256.0)] if "c_u" in names else [0]
        starts = [np.maximum(np.asarray(start, dtype=float), 1e-30)] if start is not None else [
            np.array([c_u if n == "c_u" else guess[n] for n in names]) for c_u in server_guesses]
        best = None
        for x0 in starts:
            result = least_squares(residuals, x0, bounds=(0.0, np.inf), x_scale=np.maximum(x0, 1e-30),
                                   method="trf", xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=500)
            if best is None or result.cost < best.cost:
                best = result
        return best.x, best

    def _only_bounded(self, frame: pd.DataFrame, names: list[str], theta: np.ndarray, j: int, base: Constants,
                      sse: float) -> float | None:
        """When setting constant j to 0 fits the runs as well as the optimum, it is only bounded from above:
        return that upper bound (bisection on the cost), else None."""
        measured = frame["phase_s"].to_numpy()
        groups = self._groups(frame)

        def cost(value):
            trial = theta.copy()
            trial[j] = value
            k = replace(base, **dict(zip(names, trial, strict=True)))
            return float(np.sum((self._predict_rows(frame, k, groups) / measured - 1.0) ** 2))

        tolerance = sse * 1.01 + 1e-12 * len(frame)
        if cost(0.0) > tolerance:
            return None
        lo, hi = max(theta[j], 1e-300), max(theta[j], 1e-300) * 2
        while cost(hi) <= tolerance and hi < 1e300:
            lo, hi = hi, hi * 2
        for _ in range(40):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if cost(mid) <= tolerance else (lo, mid)
        return lo

    def fit(self, measurements: Any, source: str | None = None) -> HashemiFit:
        """Fit the constants to the runs (DataFrame or records: w, b, phase_s [, init_s, d, epochs, label];
        ``source``: the file they were read from, its line numbers their index, to name a bad one)."""
        frame = _records(measurements, source)
        if len(frame) < 2:
            raise DdltraceError(f"measurements: {len(frame)} run(s); fitting needs runs at 2 or more configurations")
        if frame[["w", "b"]].drop_duplicates().shape[0] < 2:
            raise DdltraceError("measurements: every run has the same workers and batch size; fitting needs runs "
                                "at different w (or b)")
        unknown = [n for n in self.free if n not in FITTABLE]
        if unknown:
            raise DdltraceError(f"cannot fit {', '.join(unknown)}: fittable constants are {', '.join(FITTABLE)}")
        notes: list[str] = []
        if "workers_read" in frame.columns:  # a store with a worker's timeline damaged or missing
            notes += [f"{label}: the phase is the slowest of the {read:g} of its {w:g} workers whose timelines "
                      "could be read" for label, w, read in zip(frame["label"], frame["w"], frame["workers_read"],
                                                                strict=True) if read < w]
        if self.cpu_shares:
            lacking = [] if "cpu_share" not in frame.columns else frame.index[~(frame["cpu_share"] > 0)].tolist()
            if "cpu_share" not in frame.columns or lacking:
                which = "the runs carry" if "cpu_share" not in frame.columns else f"run(s) {lacking} carry"
                raise DdltraceError(f"--cpu-shares: {which} no workers' CPU share (the stores have no sampled "
                                    "cpu_percent: record the run with the process counters)")
            if frame["cpu_share"].max() < 0.5:
                notes.append(f"--cpu-shares: the workers used at most {frame['cpu_share'].max():.2f} of a core in "
                             "every run: if they sleep or wait on something else rather than poll, their share "
                             "is not what held them, and c_p is not their CPU time")
        self.measured_runs_ = {}
        measured = {"c_u": self._measured_c_u(frame, notes)} if self.c_u_from_trace or self.cpu_shares else {}
        base = self._base_constants(measured)
        self.measured_ = measured
        names = [n for n in self.free if n not in {**(self.fixed or {}), **measured}]
        if self.cpu_shares and "t_slice" not in names and "t_slice" not in (self.fixed or {}):
            names.append("t_slice")
        if "c_b" in names and frame["b"].nunique() < 2:
            names.remove("c_b")
            notes.append(f"c_b held at {base.c_b:g} s: every run has batch size {frame['b'].iloc[0]:g}, so the "
                         "per-batch cost cannot be told from the per-sample cost (c_p absorbs it)")
        if not names:
            raise DdltraceError("nothing to fit: every constant is fixed")
        theta, result = self._solve(frame, names, base)
        self.unsupported_ = {}
        for term in KNEE_TERMS:
            if term not in names or len(names) < 2:
                continue
            reduced = [n for n in names if n != term]
            with_term = self._loo_frame(frame, names, base)
            without = self._loo_frame(frame, reduced, replace(base, **{term: 0.0}))
            if with_term is None or without is None:
                continue
            err_with, err_without = with_term["abs_pct_error"].mean(), without["abs_pct_error"].mean()
            if err_without <= err_with:
                self.unsupported_[term] = float(theta[names.index(term)])
                notes.append(f"{term} is not supported by these runs: leave-one-out errors are "
                             f"{_compared(err_without, err_with)}, so it is held at 0 (fitted, it would be "
                             f"{self.unsupported_[term]:.3g})")
                names = reduced
                base = replace(base, **{term: 0.0})
                theta, result = self._solve(frame, names, base)
        self.constants_ = replace(base, **dict(zip(names, theta, strict=True)))
        self.fitted_names_ = names
        self.n_runs_ = len(frame)
        self.measurements_ = frame
        dof = len(frame) - len(names)
        jac = np.asarray(result.jac)
        self.params_, self.stderr_, self.ci_ = {}, {}, {}
        sse = float(np.sum(result.fun**2))
        tval = stats.t.ppf(0.5 + self.confidence / 2, dof) if dof > 0 else math.nan
        cov = None
        if dof > 0:
            jtj = jac.T @ jac
            cov = np.linalg.pinv(jtj) * (sse / dof)
        else:
            notes.append(f"{len(frame)} runs for {len(names)} constants: no degrees of freedom left, no intervals")
        self.unconstrained_ = {}
        theta = np.array(theta, dtype=float)
        for j, name in enumerate(names):
            value = float(theta[j])
            self.params_[name] = value
            upper = self._only_bounded(frame, names, theta, j, base, sse)
            if upper is not None:
                self.unconstrained_[name] = upper
                self.params_[name] = 0.0
                theta[j] = 0.0
                self.stderr_[name] = math.nan
                self.ci_[name] = (math.nan, math.nan)
                notes.append(f"{name} is not constrained by these runs (no run is bound by its term): any value "
                             f"from 0 up to about {upper:.3g} fits them as well; predictions use 0")
                continue
            if cov is None:
                self.stderr_[name] = math.nan
                self.ci_[name] = (math.nan, math.nan)
                continue
            se = float(math.sqrt(max(cov[j, j], 0.0)))
            self.stderr_[name] = se
            self.ci_[name] = (max(0.0, value - tval * se), value + tval * se)
        self.constants_ = replace(base, **dict(zip(names, theta, strict=True)))
        self.rms_relative_error_ = float(math.sqrt(np.mean(result.fun**2)))
        self._check_c_u(frame, notes)
        self._fit_init(frame, notes)
        self.divergence_ = self.divergence(frame)
        if "init_s" in frame.columns and (frame["init_s"] > 0).any() and "init" not in set(self.divergence_["term"]):
            notes.append("initialisation was measured but not checked against the model: it has no r_d (give a "
                         "profile with r_d, or n_f and runs at 2+ worker counts to fit it)")
        wl = self._workload(frame.iloc[int(np.argmax(frame["b"].map(frame["b"].value_counts())))].to_dict())
        self.workload_ = wl
        if self.cpu_shares:  # the constants at w depend on the ranks' shares there: the knee of the predicted phases
            runs = frame.to_dict("records")
            self.knee_, self.knee_cause_ = transfer.knee_over_w(
                lambda w: transfer.phase_at(self.constants_, wl, w, self.machine or {}, runs), wl)
        else:
            self.knee_, self.knee_cause_ = hashemi.knee(wl, self.constants_)
        fitted = [j for j, name in enumerate(names) if name not in self.unconstrained_]
        self.covariance_ = ({"names": [names[j] for j in fitted], "matrix": cov[np.ix_(fitted, fitted)].tolist(),
                             "dof": dof} if cov is not None and fitted else None)
        self.knee_ci_ = (self._knee_interval(wl, self.covariance_, frame.to_dict("records"))
                         if self.covariance_ and not (self.cpu_shares and math.isinf(self.knee_))  # (a scan to 1024 w)
                         else (math.nan, math.nan))
        self.knee_batch_ = wl.b
        bound = self.unconstrained_.get("c_u", self.unsupported_.get("c_u"))
        if bound:
            at_least, _ = hashemi.knee(wl, replace(self.constants_, c_u=bound))
            self.knee_min_ = at_least
            notes.append(f"the knee is at w* >= {at_least:.3g} workers: no run shows the server's limit")
        self.loo_ = self._leave_one_out(frame, names, base, notes)
        self.notes_ = notes
        return self

    def _fit_init(self, frame: pd.DataFrame, notes: list[str]) -> None:
        """r_d from the initialisation times, when the runs have them and the profile did not measure r_d."""
        self.r_d_ = (self.profile or {}).get("r_d")
        self.r_d_ci_ = (math.nan, math.nan)
        self.r_d_fitted_ = False
        if "init_s" not in frame.columns or frame["init_s"].isna().all():
            return
        if self.r_d_ is not None or self.n_f <= 0:
            return
        rows = frame.dropna(subset=["init_s"])
        unit = Constants(r_d=1.0)
        x = np.array([hashemi.t_init(r["w"], self._workload(r), unit, self.storage) for r in rows.to_dict("records")])
        y = rows["init_s"].to_numpy()
        if len(rows) < 2 or not (x > 0).all():
            return
        r_d = float((x @ y) / (x @ x))
        resid = y - r_d * x
        se = math.sqrt(float(resid @ resid) / (len(y) - 1) / float(x @ x))
        t = stats.t.ppf(0.5 + self.confidence / 2, len(y) - 1)
        self.r_d_ = r_d
        self.r_d_ci_ = (max(0.0, r_d - t * se), r_d + t * se)
        self.constants_ = replace(self.constants_, r_d=r_d)
        self.r_d_fitted_ = True
        notes.append(f"r_d fitted from {len(y)} initialisation times with storage={self.storage!r}")

    def _knee_interval(self, wl: Workload, covariance: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]
                       ) -> tuple[float, float]:
        """The knee's ``confidence`` interval (workers) over the fit's uncertainty (:func:`knee_interval`): each
        draw's w* as the fit's own, Hashemi's (:func:`ddltrace.models.hashemi.w_star` of the arrays of the draws)
        or, with ``cpu_shares``, that of the phases predicted at the ranks' shares
        (:func:`ddltrace.models.transfer.knee_search`), all draws at once (:mod:`ddltrace.models.drawn_knees`)."""
        if self.cpu_shares:
            return knee_interval(lambda drawn: drawn_knees.searched_knees(
                lambda w: drawn_knees.phases_at(drawn, wl, w, self.machine or {}, runs), KNEE_DRAWS,
                transfer.KNEE_MOST), self.constants_, covariance, self.confidence, measured=self.measured_runs_)
        return knee_interval(lambda drawn: hashemi.w_star(wl, drawn), self.constants_, covariance, self.confidence,
                             measured=self.measured_runs_)

    def _leave_one_out(self, frame: pd.DataFrame, names: list[str], base: Constants, notes: list[str]) -> pd.DataFrame:
        loo = self._loo_frame(frame, names, base)
        if loo is None:
            notes.append("too few runs for leave-one-out errors (need more runs than fitted constants)")
            return pd.DataFrame(columns=["label", "w", "b", "measured_s", "predicted_s", "abs_pct_error"])
        return loo

    def _loo_frame(self, frame: pd.DataFrame, names: list[str], base: Constants) -> pd.DataFrame | None:
        """Each run predicted by the model fitted to the others (None when there are too few runs)."""
        rows = []
        if len(frame) <= len(names):
            return None
        full, _ = self._solve(frame, names, base)
        for i in range(len(frame)):
            rest = frame.drop(index=i).reset_index(drop=True)
            theta, result = self._solve(rest, names, base, start=full)
            theta = np.array(theta, dtype=float)
            for j in range(len(names)):  # as in fit: a constant the runs do not constrain predicts with 0
                if self._only_bounded(rest, names, theta, j, base, float(np.sum(result.fun**2))) is not None:
                    theta[j] = 0.0
            k = replace(base, **dict(zip(names, theta, strict=True)))
            pred = float(self._predict_rows(frame.iloc[[i]], k)[0])
            meas = float(frame["phase_s"].iloc[i])
            rows.append({"label": frame["label"].iloc[i], "w": frame["w"].iloc[i], "b": frame["b"].iloc[i],
                         "measured_s": meas, "predicted_s": pred, "abs_pct_error": 100 * abs(pred - meas) / meas})
        return pd.DataFrame(rows)

    # -- using the fit ---------------------------------------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "constants_"):
            raise DdltraceError("this HashemiFit is not fitted yet: call fit(measurements) first")

    def predict(self, w: Iterable[float] | float, b: float | None = None, *,
                constants: Constants | None = None) -> np.ndarray:
        """Predicted computation-phase seconds (all epochs) at w workers (batch ``b``, default the knee's)."""
        self._check_fitted()
        k = constants or self.constants_
        ws = np.atleast_1d(np.asarray(w, dtype=float))
        wl = replace(self.workload_, b=float(b or self.workload_.b))
        return np.array([wl.epochs * hashemi.t_phase(x, wl, k) for x in ws])

    def divergence(self, measurements: Any, constants: Constants | None = None) -> pd.DataFrame:
        """Every measured term of every run against the model (seconds; the phase for all epochs).

        One row per run and term: ``term`` 'phase' (the computation phase, with the model's net, worker
        compute, memory and floor terms, the bounding term and whether the run is past the knee) and, where the
        run measured its initialisation and the model has r_d, 'init' (``T_init`` of the storage kind, bound by
        'disk'). ``divergence`` is (measured - model) / model; ``flagged`` when its size passes the threshold."""
        self._check_fitted()
        frame = _records(measurements)
        k = constants or self.constants_
        rows = []
        runs = frame.to_dict("records")
        for row in runs:
            wl = self._workload(row)
            at = self._row_constants(row, k, runs)
            terms = hashemi.phase_terms(row["w"], wl, at)
            pred = wl.epochs * hashemi.t_phase(row["w"], wl, at)
            w_star, _ = hashemi.knee(wl, at)
            rows.append({"label": row["label"], "term": "phase", "w": row["w"], "b": row["b"],
                         "measured_s": row["phase_s"], "predicted_s": pred, "net_s": wl.epochs * terms["net"],
                         "comp_s": wl.epochs * terms["comp"], "mem_s": wl.epochs * terms["mem"],
                         "floor_s": wl.epochs * terms["floor"], "bound_by": hashemi.bound_by(terms),
                         "past_knee": bool(row["w"] > w_star)})
            init = row.get("init_s")
            if init is not None and not math.isnan(init) and init > 0 and k.r_d > 0 and wl.n_f > 0:
                rows.append({"label": row["label"], "term": "init", "w": row["w"], "b": row["b"],
                             "measured_s": init, "predicted_s": hashemi.t_init(row["w"], wl, k, self.storage),
                             "bound_by": "disk", "past_knee": False})
        out = pd.DataFrame(rows)
        out["divergence"] = [(m - p) / p if p > 0 else math.inf
                             for m, p in zip(out["measured_s"], out["predicted_s"], strict=True)]
        out["flagged"] = out["divergence"].abs() > self.divergence_threshold
        return out

    def to_dict(self) -> dict:
        """The fitted model as plain JSON-able data (what ``ddltrace model fit --out`` writes)."""
        self._check_fitted()
        constants = {}
        for name, value in asdict(self.constants_).items():
            entry = {"value": value, "unit": hashemi.UNITS[name]}
            if name in self.unsupported_:
                entry.update(source="not supported by the runs (held at 0)", fitted_value=self.unsupported_[name])
            elif name in self.unconstrained_:
                entry.update(source="not constrained by the runs (predicts with 0)",
                             upper_bound=self.unconstrained_[name])
            elif name in self.params_:
                entry.update(stderr=_nan_none(self.stderr_[name]), ci=[_nan_none(x) for x in self.ci_[name]],
                             source="fitted")
            elif name == "r_d" and self.r_d_fitted_:
                entry.update(ci=[_nan_none(x) for x in self.r_d_ci_], source="fitted")
            elif name in self.measured_:
                runs = self.measured_runs_.get(name) or []
                entry.update(source="measured from the server's trace", runs=runs,
                             spread=[min(runs), max(runs)] if runs else None)
            elif name in (self.fixed or {}):
                entry["source"] = "fixed"
            elif name in (self.profile or {}):
                entry["source"] = "profile"
            else:
                entry["source"] = "default (0)"
            constants[name] = entry
        return {
            "model": "hashemi-asgd",
            "confidence": self.confidence,
            # d and epochs of the runs (of the knee's batch: workload_), not the defaults for runs lacking them
            "workload": {"d": self.workload_.d, "n_f": self.n_f, "n_w": self.n_w, "s": self.s,
                         "epochs": self.workload_.epochs,
                         "storage": self.storage, "serial": self.serial, "cpu_shares": self.cpu_shares},
            "constants": constants,
            "knee": {"w": _nan_none(self.knee_), "cause": self.knee_cause_, "batch": self.knee_batch_,
                     "ci": [_nan_none(x) for x in self.knee_ci_]},
            "covariance": self.covariance_,
            "rms_relative_error": self.rms_relative_error_,
            "measurements": _json_records(self.measurements_),
            "leave_one_out": _json_records(self.loo_),
            "divergence": _json_records(self.divergence_),
            "divergence_threshold": self.divergence_threshold,
            "notes": list(self.notes_),
        }


#: Draws of the fitted constants for the knee's interval (the fit's and the prediction's on B alike).
KNEE_DRAWS = 2000


def knee_draws(k: Constants, covariance: Mapping[str, Any], draws: int = KNEE_DRAWS,
               measured: Mapping[str, Sequence[float]] | None = None) -> Constants:
    """The fitted constants named in ``covariance`` (a model's ``covariance``: ``names``, ``matrix`` in their units
    squared, ``dof``) drawn ``draws`` times together from Student's t with that covariance and ``dof`` degrees of
    freedom around their values in ``k`` (as the constants' own intervals; a draw below 0 at 0; a constant the runs
    only bound is not among them and stays at 0): ``k`` with each of them an array of its draws (the same for the
    same covariance: seed 0, so the fit's and a prediction's match). ``measured``: a constant measured from the
    runs' traces (c_u from the server's, :func:`ddltrace.models.transfer.measured_runs`) and its runs' own figures,
    drawn as one of them (:func:`ddltrace.models.transfer.measured_draws`)."""
    names = list(covariance["names"])
    theta = np.array([getattr(k, name) for name in names], dtype=float)
    dof = int(covariance["dof"])
    rng = np.random.default_rng(0)
    normal = rng.multivariate_normal(np.zeros(len(names)), np.asarray(covariance["matrix"], dtype=float),
                                     size=draws, method="eigh")
    drawn = theta + normal * np.sqrt(dof / rng.chisquare(dof, size=draws))[:, None]
    fitted = replace(k, **{name: np.where(drawn[:, j] > 0.0, drawn[:, j], 0.0) for j, name in enumerate(names)})
    return transfer.measured_draws(fitted, measured, draws)


def knee_interval(knees_of: Callable[[Constants], np.ndarray], k: Constants, covariance: Mapping[str, Any],
                  confidence: float, draws: int = KNEE_DRAWS,
                  measured: Mapping[str, Sequence[float]] | None = None) -> tuple[float, float]:
    """The knee's ``confidence`` interval (workers): ``knees_of(drawn)``, w* of each of the fitted constants'
    draws (:func:`knee_draws`: ``drawn`` holds an array of them for each fitted constant; the functions of
    :mod:`ddltrace.models.drawn_knees` take them all at once), and their central ``confidence`` share. inf where
    the upper end never binds."""
    knees = knees_of(knee_draws(k, covariance, draws, measured))
    tail = 50.0 * (1.0 - confidence)
    low, high = np.percentile(knees, [tail, 100.0 - tail], method="inverted_cdf")  # (no inf - inf between draws)
    return float(low), float(high)


def _compared(without: float, with_term: float, most: int = 4) -> str:
    """Two mean leave-one-out errors (percent), the term's left out and kept, in words: 'lower without it (4.37 % vs
    4.41 %)' with the fewest decimals (1 to ``most``) that tell them apart, else 'the same without it as with it
    (4.4 % both, to ``most`` decimals)' (the simpler model is kept where they tie)."""
    for digits in range(1, most + 1):
        a, b = f"{without:.{digits}f}", f"{with_term:.{digits}f}"
        if a != b:
            return f"{'lower' if without < with_term else 'higher'} without it ({a} % vs {b} %)"
    return f"the same without it as with it ({without:.1f} % both, equal to {most} decimals)"


def _nan_none(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) else float(x)


def _json_records(frame: pd.DataFrame) -> list[dict]:
    out = []
    for row in frame.to_dict("records"):
        out.append({k: (_nan_none(v) if isinstance(v, float) else (v.item() if hasattr(v, "item") else v))
                    for k, v in row.items()})
    return out


#: The numbers of a run's record that predictions read back from a model file (a --csv run may carry more columns).
#: The bytes per value s a model may have: those of the DNN format (``ddltrace.models.dnn``).
BYTES_PER_VALUE = (1, 2, 4, 8)
RUN_NUMBERS = ("w", "b", "d", "epochs", "phase_s", "init_s", "workers_read", "server_busy_s", "server_update_wait_s",
               "ranks", "cpu_share", "server_cpu_share", "sent_per_batch", "received_per_batch")


def constants_from_model(model: Mapping[str, Any], source: str = "model") -> tuple[Constants, dict]:
    """Read back (Constants, workload dict) from a saved model (``HashemiFit.to_dict``)."""
    if not isinstance(model, Mapping) or model.get("model") != "hashemi-asgd":
        raise DdltraceError(f"{source}: not a fitted ASGD model (expected \"model\": \"hashemi-asgd\"; "
                            "make one with 'ddltrace model fit')")
    for key in ("constants", "workload"):
        if key not in model:
            raise DdltraceError(f"{source}: malformed model file (no '{key}')")
        if not isinstance(model[key], Mapping):
            raise DdltraceError(f"{source}: '{key}' must be an object")
    entries, workload = dict(model["constants"]), dict(model["workload"])
    missing = [name for name in ("c_p", "c_b", "c_u") if name not in entries]
    if missing:
        raise DdltraceError(f"{source}: malformed model file (no constant {', '.join(missing)})")
    values = {}
    for name, entry in entries.items():
        if name not in hashemi.NAMES:
            continue
        if not isinstance(entry, Mapping):
            raise DdltraceError(f"{source}: constant {name} must be an object with a value")
        values[name] = _model_number(entry.get("value"), f"{source}: constant {name}")
        for key in ("stderr", "upper_bound", "fitted_value"):
            if entry.get(key) is not None:
                _model_number(entry[key], f"{source}: constant {name}'s {key}")
        if entry.get("runs") is not None:  # a measured constant's runs' own figures (the intervals draw from them)
            if not isinstance(entry["runs"], list):
                raise DdltraceError(f"{source}: constant {name}'s runs must be a list of numbers")
            for i, x in enumerate(entry["runs"]):
                _model_number(x, f"{source}: constant {name}'s runs[{i}]")
    for key in ("d", "n_f", "n_w", "s", "epochs"):
        if workload.get(key) is not None:
            value = _model_number(workload[key], f"{source}: workload {key}")
            if key in ("d", "epochs") and value == 0:
                raise DdltraceError(f"{source}: workload {key} = 0: must be > 0")
            if key == "s" and value not in BYTES_PER_VALUE:
                raise DdltraceError(f"{source}: workload s = {workload[key]!r}: the bytes per value must be one of "
                                    f"{', '.join(map(str, BYTES_PER_VALUE))}")
    knee = model.get("knee")
    if knee is not None and not isinstance(knee, Mapping):
        raise DdltraceError(f"{source}: 'knee' must be an object")
    if (knee or {}).get("batch") is not None and not _model_number(knee["batch"], f"{source}: knee batch") > 0:
        raise DdltraceError(f"{source}: knee batch = {knee['batch']!r}: must be > 0 (the batch of the fit)")
    for key, value in (model.get("work_per_sample") or {}).items():
        if key != "dnn":
            _model_number(value, f"{source}: work_per_sample {key}")
    confidence = model.get("confidence")
    if confidence is not None and not (isinstance(confidence, int | float) and 0 < confidence < 1):
        raise DdltraceError(f"{source}: confidence = {confidence!r}: must be a number between 0 and 1")
    runs = model.get("measurements") or []
    if not isinstance(runs, list) or not all(isinstance(run, Mapping) for run in runs):
        raise DdltraceError(f"{source}: 'measurements' must be a list of objects")
    for i, run in enumerate(runs):
        for key, value in run.items():
            if key in RUN_NUMBERS and value is not None:
                number = _model_number(value, f"{source}: measurements[{i}].{key}", finite=False)
                if key in ("w", "b", "d", "epochs") and not number > 0 and not math.isnan(number):
                    raise DdltraceError(f"{source}: measurements[{i}].{key} = {value!r}: must be > 0")
    if model.get("profile") is not None:
        from ddltrace.models import transfer

        transfer.check_record(model["profile"], f"{source}: profile")
    if model.get("covariance") is not None:
        _check_covariance(model["covariance"], f"{source}: covariance")
    return Constants(**values), workload


def _check_covariance(covariance: Any, where: str) -> None:
    """A model's ``covariance`` as the draws read it: ``names`` distinct constants of the model, ``matrix`` a square
    of finite numbers of that size, symmetric with variances >= 0, ``dof`` a whole number >= 1."""
    if not isinstance(covariance, Mapping):
        raise DdltraceError(f"{where} must be an object with names, matrix and dof")
    names, matrix, dof = covariance.get("names"), covariance.get("matrix"), covariance.get("dof")
    if (not isinstance(names, list) or not names or len(set(map(str, names))) != len(names)
            or any(name not in hashemi.NAMES for name in names)):
        raise DdltraceError(f"{where}: names {names!r} must be distinct constants of the model "
                            f"({', '.join(hashemi.NAMES)})")
    try:
        values = np.array(matrix, dtype=float)
    except (TypeError, ValueError):
        values = np.array([])
    if values.shape != (len(names), len(names)) or not np.isfinite(values).all():
        raise DdltraceError(f"{where}: matrix must be {len(names)} x {len(names)} finite numbers (one row and column "
                            "per name)")
    if (np.diag(values) < 0).any() or not np.allclose(values, values.T, rtol=1e-9, atol=0.0):
        raise DdltraceError(f"{where}: matrix must be symmetric with variances >= 0 on its diagonal")
    if isinstance(dof, bool) or not isinstance(dof, int | float) or not float(dof).is_integer() or dof < 1:
        raise DdltraceError(f"{where}: dof = {dof!r} must be a whole number >= 1")


def _model_number(raw: Any, where: str, finite: bool = True) -> float:
    """A number of a model file: a real number (not a bool), >= 0 and finite where ``finite`` (a NaN stands for
    'not measured' in a run's record)."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise DdltraceError(f"{where} must be a number, got {raw!r}")
    if finite and not (math.isfinite(raw) and 0 <= raw <= LARGEST):
        raise DdltraceError(f"{where} = {raw!r}: must be a finite number from 0 to {LARGEST:g}")
    return float(raw)


# -- measurements from trace stores ------------------------------------------------------------------------

_LAUNCHERS = {"mpiexec", "mpirun", "srun", "torchrun", "python", "python3", "ddltrace", "run", "env", "horovodrun"}


def job_identity(run: Mapping[str, Any]) -> str:
    """What job a store ran, for checking that a scaling series is one job: the run's ``job`` or ``model``
    key, else the program in its command (the first ``*.py`` or non-launcher word)."""
    for key in ("job", "model"):
        if run.get(key):
            return str(run[key])
    command = run.get("command") or ""
    words = command.split() if isinstance(command, str) else [str(w) for w in command]
    for word in words:
        if word.endswith(".py"):
            return Path(word).name
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
            continue
        if word in ("-n", "-np", "--np", "-N", "--nproc_per_node", "-H", "--hosts"):
            skip_next = True
            continue
        if word.startswith("-") or word.replace(".", "").isdigit() or Path(word).name in _LAUNCHERS:
            continue
        return Path(word).name
    return ""


def _first(run: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if run.get(key) is not None:
            return run[key]
    return None


def _from_command(run: Mapping[str, Any], flags: Sequence[str]) -> float | None:
    """The value of the first of ``flags`` in the run's command ('--batch 64' or '--batch=64'), if numeric."""
    command = run.get("command") or ""
    words = command.split() if isinstance(command, str) else [str(w) for w in command]
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in flags:
            value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            try:
                return float(value)
            except ValueError:
                return None
    return None


def star_center(store, share: float = 0.9) -> int | None:
    """The parameter server of a star-shaped job: the rank that exchanges messages with every other rank while
    at least ``share`` of every other rank's messages go to it (a few between workers, such as a token passed
    during initialisation, are allowed). None when the traffic is not a star, or there is one rank only."""
    if len(store.ranks) < 2:
        return None
    counts: dict[int, pd.Series] = {}
    for rank, frame in store.iter_timeline():
        known = frame["peer"].dropna().astype(int)
        counts[rank] = known[(known != rank) & (known >= 0)].value_counts()
    for rank, mine in counts.items():
        others = set(counts) - {rank}
        if not others <= set(mine.index):
            continue
        if all(counts[o].sum() > 0 and counts[o].get(rank, 0) >= share * counts[o].sum() for o in others):
            return rank
    return None


def measurements_from_store(path: str | Path, *, batch: float | None = None, samples: float | None = None,
                            epochs: float | None = None, servers: int | None = None) -> dict:
    """One run's measurements from a trace store.

    - ``w``: the ranks of the run (its world size) that are not servers: ranks 0..servers-1 are servers when
      ``servers`` is given, else the ranks whose manifest role is 'server' or 'ps', else the workload's
      ``server_rank`` (the ps-sgd job's configuration, :func:`~ddltrace.analyses.run_analysis.job_config`), else the
      center of a star
      (:func:`star_center`: the rank every other rank, and only it, exchanges messages with), else none. A worker
      whose timeline is damaged or missing still counts (each worker did its d / w samples); the phases come from
      the workers read (``workers_read``). Where the lost ranks could have been the server (no roles, no star
      among the ranks read) the store is refused: give ``servers``. ``w_by``: how, in words ('given', 'said by ...',
      'inferred: ...' or 'unknown: ...');
    - ``b``, ``d``, ``epochs``: given here, else from the run metadata (``batch_size``/``batch``, ``samples``/
      ``dataset_size``/``d``, ``epochs``), else from the run's command line (``--batch``/``--batch-size``,
      ``--samples``, ``--epochs``);
    - the phases of each worker come from :func:`ddltrace.analyses.phases.segment_rank` (step markers, else
      the repeating communication pattern, else the collectives around point-to-point traffic); ``phase_s`` is
      the longest steady state over the workers (the slowest worker ends the epoch), ``init_s`` the longest
      initialisation of the job (``RankPhases.job_init_ns``: from the end of MPI_Init, the PMPI collector's clock
      synchronisation inside it included, or from the first event, to the first step). A worker whose phases
      could only be bounded by MPI_Init/Finalize is refused: its steady state would include initialisation.
      A store of per-call totals (IPM) is refused: it has no phases (``requirements.FIT``).
    """
    from ddltrace.analyses.phases import segment_rank
    from ddltrace.analyses.rank_summary import stopped_at
    from ddltrace.analyses.requirements import FIT, describe_holding
    from ddltrace.store import TraceStore

    store = TraceStore.open(path)
    aggregate = [r for r in store.ranks if store.rank_info(r).get("aggregate")]
    if aggregate:
        raise DdltraceError(f"{path}: the {FIT.title} needs a real timeline (the phases of each "
                            f"worker); this store holds {describe_holding(store, aggregate)}")
    run = store.run
    entries = store.manifest["ranks"]
    listed = {int(key) for key in entries if key.isascii() and key.isdigit()}
    roles = {r: str(entries[str(r)].get("role", "")).lower() if isinstance(entries.get(str(r)), dict) else None
             for r in sorted(listed | set(range(store.world_size)))}
    from ddltrace.analyses.run_analysis import job_config

    config = job_config(store)
    said = config.get("server_rank")
    if servers is not None:
        is_server, w_by = {r: r < servers for r in roles}, f"given: ranks 0..{servers - 1} are servers"
    elif any(role in SERVER_ROLES for role in roles.values()):
        is_server = {r: None if role is None else role in SERVER_ROLES for r, role in roles.items()}
        w_by = "said by the ranks' roles in the manifest"
    elif said is not None and len(roles) > 1:
        is_server, w_by = {r: r == said for r in roles}, f"said by the workload's server_rank ({said})"
    else:
        hub = star_center(store)
        is_server = {r: r == hub if hub is not None or r in store.ranks else None for r in roles}
        w_by = (f"inferred: rank {hub} is the server, the centre of a star of messages" if hub is not None else
                "unknown: no server found, every rank counted as a worker") + \
            " (no job configuration or roles in the manifest; give --servers N)"

    def setting(given, keys, flags):
        if given is not None:
            return given
        found = _first(run, keys)
        return found if found is not None else _from_command(run, flags)

    b = setting(batch, ("batch_size", "batch", "b"), ("--batch", "--batch-size", "--batch_size"))
    if b is None:
        raise DdltraceError(f"{path}: the run metadata has no batch_size; give it (--batch) or record it in the run")
    d = setting(samples, ("samples", "dataset_size", "d"), ("--samples", "--dataset-size"))
    e = setting(epochs, ("epochs",), ("--epochs",))
    n_w = _first(config, ("n_w",))  # the weights the job said it has (ps-sgd's configuration records them)
    phase, init, methods = 0.0, 0.0, set()
    window = [None, None]
    messages, workers, server_frames = [], [], []
    for rank, frame in store.iter_timeline():  # every rank: a damaged one is named, left out and counted below
        if is_server.get(rank) is not False:
            server_frames.append(frame)
            continue
        workers.append(rank)
        phases = segment_rank(frame, stopped_at(store))
        if phases is None:
            continue
        messages.append(_messages(frame, phases.init_end_ns, phases.steady_end_ns))
        if phases.method in ("mpi", "ends"):
            raise DdltraceError(f"{path}: rank {rank} shows no steps and no repeating pattern; the computation "
                                "phase cannot be told from initialisation (the collector must mark steps)")
        methods.add(phases.method)
        phase = max(phase, phases.steady_ns / 1e9)
        init = max(init, phases.job_init_ns / 1e9)
        window[0] = phases.init_end_ns if window[0] is None else min(window[0], phases.init_end_ns)
        window[1] = phases.steady_end_ns if window[1] is None else max(window[1], phases.steady_end_ns)
    lost = [r for r in roles if r not in store.ranks]
    unknown = [r for r in lost if is_server[r] is None]
    if unknown:
        raise DdltraceError(f"{path}: rank(s) {', '.join(map(str, unknown))} left out (damaged or missing), and "
                            "without them the workers cannot be counted (no roles, no star of messages among the "
                            "ranks read); give the number of servers (--servers N)")
    w = len(workers) + sum(not is_server[r] for r in lost)
    if not workers:
        why = f"their timelines are damaged or missing: rank(s) {', '.join(map(str, lost))}" if w else \
            "every rank is a server, or the store is empty"
        raise DdltraceError(f"{path}: no worker rank can be read ({why})")
    if phase <= 0:
        raise DdltraceError(f"{path}: the workers' computation phase spans no time")
    servers_busy = [server_busy_s(frame, window[0], window[1]) for frame in server_frames]
    servers_wait = [server_update_wait_s(frame, window[0], window[1]) for frame in server_frames]
    return {"label": str(path), "job": job_identity(run), "w": float(w), "w_by": w_by,
            "workers_read": float(len(workers)),
            "b": float(b),
            "d": None if d is None else float(d), "epochs": None if e is None else float(e),
            "n_w": None if n_w is None else float(n_w),
            "phase_s": phase, "init_s": init, "phases_by": ",".join(sorted(methods)),
            "server_busy_s": max(servers_busy) if servers_busy else math.nan,
            "server_update_wait_s": max(servers_wait, default=math.nan),
            "ranks": float(len(roles)), "cpu_share": cpu_share(store, workers, window[0], window[1]),
            "server_cpu_share": cpu_share(store, [r for r in store.ranks if r not in workers], window[0], window[1]),
            "sent_per_batch": _per_batch([m[0] for m in messages], d, e, b, w),
            "received_per_batch": _per_batch([m[1] for m in messages], d, e, b, w),
            "settings": job_settings(config)}


#: The settings of the job's recorded configuration (the ps-sgd job's, docs/WORKLOAD.md) that make it another job,
#: not another point of one job's scaling series: what a sample, an update and the server cost, and how updates are
#: applied. The series' own variables (workers, batch, samples, epochs, initialisation) and what follows from them
#: (softsync_n, gradients_per_update, alpha, ranks) are not among them.
JOB_SETTINGS = ("sync", "compute", "sample_time", "hidden", "n_w", "server_cost", "server_receive", "straggler")


def job_settings(config: Mapping[str, Any]) -> dict:
    """The :data:`JOB_SETTINGS` a run's configuration records (the straggler's slowdown with a straggler)."""
    settings = {key: config[key] for key in JOB_SETTINGS if key in config}
    if settings.get("straggler") is not None and "slowdown" in config:
        settings["slowdown"] = config["slowdown"]
    return settings


def _messages(frame: pd.DataFrame, start_ns: int, end_ns: int) -> tuple[int, int]:
    """Messages a rank sent and received point to point in its steady state (MPI_Send, MPI_Recv and their kin)."""
    from ddltrace.analyses import wait_states as ws

    names = frame[(frame["start_ns"] >= start_ns) & (frame["start_ns"] < end_ns)]["name"].astype(str).map(ws.base_name)
    sends = names.isin(ws.SEND_BLOCKING | ws.SEND_NONBLOCKING).sum()
    return int(sends), int(names.isin(ws.RECV_BLOCKING | ws.RECV_NONBLOCKING).sum())


def _per_batch(messages: list[int], d: float | None, epochs: float | None, b: float, workers: int) -> float:
    """The median worker's point-to-point calls per batch (its d E / (w b) batches), NaN when d is unknown."""
    if not messages or not d:
        return math.nan
    return float(np.median(messages)) / (float(d) * float(epochs or 1.0) / (float(b) * workers))


def cpu_share(store, ranks: Sequence[int], start_ns: int, end_ns: int) -> float:
    """The share of a core (0-1) the ``ranks`` had in the steady state: the mean of their processes' sampled
    ``cpu_percent`` (100 = one core; each sample is the share since the one before) over the samples taken
    between ``start_ns`` and ``end_ns``, divided by 100; NaN when the store has no such samples. A rank that
    never blocks (MPI ranks polling for messages) uses all of its allowance, so this is the share it got."""
    if start_ns is None or end_ns is None:
        return math.nan
    counters = store.counters([r for r in ranks if r >= 0])
    taken = counters[(counters["name"] == "cpu_percent") & (counters["t_ns"] > start_ns)
                     & (counters["t_ns"] <= end_ns)]
    return float(taken["value"].mean()) / 100.0 if len(taken) else math.nan


#: Categories in which a server is not working: blocked on a peer, synchronising, or nothing recorded.
IDLE_CATEGORIES = ("wait", "barrier", "idle")


def server_busy_s(frame: pd.DataFrame, start_ns: int, end_ns: int) -> float:
    """Seconds a server rank spends working (anything but wait, barrier, idle) between the workers' first
    step and last step: its own cost of the updates, c_u times their number."""
    busy = frame[~frame["category"].astype(str).isin(IDLE_CATEGORIES)]
    starts = busy["start_ns"].to_numpy(np.int64)
    ends = starts + busy["dur_ns"].to_numpy(np.int64)
    clipped = np.clip(np.minimum(ends, end_ns) - np.maximum(starts, start_ns), 0, None)
    return float(clipped.sum()) / 1e9


def server_update_wait_s(frame: pd.DataFrame, start_ns: int, end_ns: int) -> float:
    """Mean seconds a server rank spends in each blocking receive of an update (a message of at least half the size
    of the largest it receives) that starts between the workers' first and last step; NaN where it has none. About
    a message's time on the link where each update flows in only once the server asks for it, near 0 where it came
    in while the server sent or applied others: the reference job's runs on 200 Mbit/s links did either at w = 4,
    and the closed loop models the first (docs/MODELS.md, "The net B's w = 4, measured")."""
    from ddltrace.analyses import wait_states as ws

    inside = frame[(frame["start_ns"] >= start_ns) & (frame["start_ns"] < end_ns)]
    received = inside[inside["name"].astype(str).map(ws.base_name).isin(ws.RECV_BLOCKING)]
    size = received["bytes"].astype("Float64").to_numpy(float, na_value=math.nan)
    if not np.isfinite(size).any():
        return math.nan
    updates = size >= 0.5 * np.nanmax(size)
    return float(received["dur_ns"].to_numpy(np.int64)[updates].mean()) / 1e9


def measurements_from_stores(paths: Sequence[str | Path], **overrides: Any) -> pd.DataFrame:
    """Measurements of a scaling series: one row per store, checked to be one job at 2+ configurations."""
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise DdltraceError(f"{missing[0]}: no such trace store")
    if len(paths) < 2:
        raise DdltraceError(f"{len(paths)} store given: fitting needs a series of runs of one job at 2 or more "
                            "worker counts")
    rows = [measurements_from_store(p, **overrides) for p in paths]
    jobs = {r["job"] for r in rows}
    if len(jobs) > 1:
        listing = ", ".join(f"{r['label']} ({r['job'] or 'unknown'})" for r in rows)
        raise DdltraceError(f"the stores are of different jobs: {listing}")
    settings = [r.pop("settings") for r in rows]
    for key in dict.fromkeys(k for s in settings for k in s):  # a setting no store records is not compared
        said = [(r["label"], s[key]) for r, s in zip(rows, settings, strict=True) if key in s]
        if len({json.dumps(value) for _, value in said}) > 1:
            listing = ", ".join(f"{label}: {'none' if value is None else value}" for label, value in said)
            raise DdltraceError(f"the stores are of different jobs: their recorded {key} differs ({listing}); a fit "
                                "needs one job at several worker counts or batch sizes")
    frame = pd.DataFrame(rows)
    if frame[["w", "b"]].drop_duplicates().shape[0] < 2:
        raise DdltraceError("every store has the same workers and batch size: fitting needs runs at different w")
    frame.attrs["job_settings"] = {k: v for s in settings for k, v in s.items()}  # (equal where recorded: above)
    return frame


def store_job(store) -> dict:
    """What a store records of its job, as ``model fit`` reads it (:func:`measurements_from_store`) without its
    timelines: ``job`` (:func:`job_identity`), ``settings`` (:func:`job_settings` of its configuration), and ``b``,
    ``d``, ``epochs`` from the run metadata or its command line (None where it does not say)."""
    from ddltrace.analyses.run_analysis import job_config

    run = store.run

    def said(keys, flags):
        found = _first(run, keys)
        found = found if found is not None else _from_command(run, flags)
        try:
            return None if found is None else float(found)
        except (TypeError, ValueError):
            return None

    return {"job": job_identity(run), "settings": job_settings(job_config(store)),
            "b": said(("batch_size", "batch", "b"), ("--batch", "--batch-size", "--batch_size")),
            "d": said(("samples", "dataset_size", "d"), ("--samples", "--dataset-size")),
            "epochs": said(("epochs",), ("--epochs",))}


def model_job_differences(model: Mapping[str, Any], job: Mapping[str, Any]) -> list[str]:
    """What tells the job a fitted model (``HashemiFit.to_dict`` with ``model fit``'s ``job`` and ``job_settings``)
    was fitted to from a store's (:func:`store_job`), as ``model fit`` refuses stores of different jobs
    (:func:`measurements_from_stores`: the job's identity and its recorded :data:`JOB_SETTINGS`), and the series'
    own variables the model's phase depends on (its batch, samples d and epochs: the model predicts all epochs of
    its d at its batch): 'compute real (the model's) vs emulated', one per difference; none where they agree or
    one side does not say."""
    out = []
    mine = model.get("job")
    if mine and job.get("job") and str(mine) != str(job["job"]):
        out.append(f"job {mine} (the model's) vs {job['job']}")
    settings = model.get("job_settings")
    for key, value in (settings.items() if isinstance(settings, Mapping) else ()):
        theirs = (job.get("settings") or {}).get(key, value)
        if json.dumps(theirs) != json.dumps(value):
            out.append(f"{key} {'none' if value is None else value} (the model's) vs "
                       f"{'none' if theirs is None else theirs}")
    workload = model.get("workload") if isinstance(model.get("workload"), Mapping) else {}
    batch = (model.get("knee") or {}).get("batch") if isinstance(model.get("knee"), Mapping) else None
    for key, value, name in (("b", batch, "batch"), ("d", workload.get("d"), "samples d"),
                             ("epochs", workload.get("epochs"), "epochs")):
        if isinstance(value, int | float) and job.get(key) is not None and float(value) != float(job[key]):
            out.append(f"{name} {float(value):g} (the model's) vs {float(job[key]):g}")
    return out
