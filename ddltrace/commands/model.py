"""``ddltrace model fit|predict``: fit Hashemi et al.'s ASGD model to a scaling series, then ask it questions.

``model fit STORE...`` reads one run of the same job per store (different worker counts or batch sizes), fits
c_p, c_b, c_u by bounded least squares with the hardware profile's r_m, w_m, r_net held fixed, and prints
each constant with its confidence interval, the knee w*, every run's leave-one-out prediction error and the
runs that diverge from the model (named by the term that bounds them). ``--out`` keeps the model as JSON.

``model predict MODEL --workers 1,2,4,...`` prints (and plots) the predicted computation-phase time against the
measured runs, with ``--what-if r_net=0.1x`` (a factor) or ``c_u=2e-5`` (a value) beside it. ``--profile B.json``
carries the fitted costs from the profile the model was fitted with to machine B's (ddltrace.models.transfer):
B's predicted time with its interval, the term that binds there, the knee on B and the best worker count.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ddltrace.errors import DdltraceError
from ddltrace.models.dnn import load_dnn
from ddltrace.models.quantities import load_json, parse_int_list, parse_what_if, profile_constants
from ddltrace.options import finite, integer, positive
from ddltrace.units import format_ns, format_percent

if TYPE_CHECKING:  # pandas and the model are imported where used: the CLI starts without them
    import pandas as pd

#: ``--storage``'s choices: models/hashemi.py's STORAGE_KINDS, named here so that the CLI starts without numpy
#: (tests/test_cli_startup.py checks that the two agree).
STORAGE_KINDS = ("shared", "local", "partitioned")
#: The profile's constants the fit holds, by the calibrate section that measures them, and the model's term each
#: section feeds (r_d, the disk section, is fitted to the initialisations where the profile has none).
PROFILE_SECTIONS = {"mem": ("r_m", "w_m"), "net": ("r_net", "lat_net")}
TERM_OF = {"mem": "memory", "net": "network"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "model", help="fit the ASGD model to a scaling series and predict other configurations",
        description="Hashemi et al.'s per-worker ASGD model (MODELS.md section 1): 'fit' learns its constants "
                    "from runs of one job at several worker counts, 'predict' answers how long the computation "
                    "phase takes on w workers and what if the network or the server were faster.")
    sub = p.add_subparsers(dest="model_verb", metavar="fit|predict")
    sub.required = True

    f = sub.add_parser("fit", help="fit c_p, c_b, c_u (with intervals) to runs of one job",
                       description="Fit the model to a scaling series: one store per run of the same job. Prints "
                                   "the constants with confidence intervals, the knee w*, leave-one-out errors and "
                                   "the runs that diverge from the model.")
    f.add_argument("stores", nargs="*", metavar="STORE", help="trace stores of one job at different w")
    f.add_argument("--csv", metavar="FILE", help="measurements instead of stores: columns w, b, phase_s "
                                                 "[, init_s, d, epochs, label]")
    f.add_argument("--profile", metavar="FILE", help="hardware profile from 'ddltrace calibrate' (r_m, w_m, r_net, "
                                                     "lat_net, r_d and net_duplex are held fixed)")
    f.add_argument("--disk-profile", metavar="A-disk.json",
                   help="A's disk section apart ('ddltrace calibrate --only disk'; --profile then without r_d, so "
                        "that the fit learns A's whole read from the initialisations): kept in the model, with the "
                        "bytes A's workers fetched from the device, to carry the initialisation to B's disk")
    f.add_argument("--dnn", metavar="DNN", help="DNN description (file or bundled name) for n_w, n_f and s")
    f.add_argument("--n-w", type=positive(), metavar="N",
                   help="weights n_w, a count (default: the DNN's parameters, or the run's n_w)")
    f.add_argument("--n-f", type=positive(), metavar="N",
                   help="features per sample n_f, a count (default: the DNN's input neurons, else 0)")
    f.add_argument("--bytes-per-value", type=positive("B"), metavar="B",
                   help="s, bytes per value (default 8, or the DNN's)")
    f.add_argument("--batch", type=positive(), metavar="SAMPLES",
                   help="batch size b in samples per worker, when the stores do not record it")
    f.add_argument("--samples", type=positive(), metavar="N",
                   help="data set size d in samples, when the stores do not record it")
    f.add_argument("--epochs", type=positive(), metavar="E", help="epochs E, when the stores do not record it")
    f.add_argument("--servers", type=integer(1), metavar="N",
                   help="ranks 0..N-1 are parameter servers (default: manifest roles)")
    f.add_argument("--storage", choices=STORAGE_KINDS, default="shared",
                   help="how initialisation reads the data (default shared: one worker after another)")
    f.add_argument("--free", default="c_p,c_b,c_u",
                   help="constants to fit (default c_p,c_b,c_u; add t_phase_min, kappa for the floor and the "
                        "contention extension)")
    f.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE", help="hold a constant fixed")
    f.add_argument("--c-u-from-trace", action="store_true",
                   help="hold c_u at the server rank's measured busy time per update instead of fitting it "
                        "(predicts the knee from runs below it)")
    f.add_argument("--serial-comm", action="store_true",
                   help="the workers pull, compute and push one after another (ps-sgd): fit the closed-loop model "
                        "(the worker, then the server and its link as queues: mean value analysis) instead of "
                        "Hashemi's max(network, worker), which assumes they overlap; recorded in the model")
    f.add_argument("--cpu-shares", action="store_true",
                   help="with --serial-comm: fit c_p and c_b in CPU seconds of a whole core, each run's workers at "
                        "their sampled share of a core, each message waiting for a rank off its core (the round "
                        "t_slice fitted), c_u the server's measured busy time per update; recorded in the model")
    f.add_argument("--threshold", type=positive(), default=0.10, metavar="FRACTION",
                   help="relative divergence that flags a run (default 0.10: 10 %%)")
    f.add_argument("--out", metavar="FILE", help="write the fitted model as JSON")
    f.add_argument("--json", action="store_true", help="print the fitted model as JSON")
    f.set_defaults(func=run_fit)

    q = sub.add_parser("predict", help="predicted phase time at other worker counts, and what-ifs",
                       description="Predict the computation-phase time of a fitted model at the given worker "
                                   "counts, beside the measured runs, and with constants changed (--what-if).")
    q.add_argument("model", metavar="MODEL", help="model JSON written by 'ddltrace model fit --out'")
    q.add_argument("--workers", required=True, help="worker counts, e.g. 1,2,4,8,16,32,64")
    q.add_argument("--batch", type=positive(), help="batch size (default: the model's); the per-sample costs move to "
                                                    "its working set by the fit's profile's compute curves")
    q.add_argument("--batches", metavar="LIST",
                   help="with --profile: B's phase at each of these batch sizes (e.g. 32,64,128,256) and each "
                        "--workers, and the best pair of the two")
    q.add_argument("--what-if", action="append", default=[], metavar="NAME=VALUE",
                   help="change a constant: r_net=0.1x (ten times faster network), c_u=2e-5 (seconds); repeatable")
    q.add_argument("--profile", metavar="B.json",
                   help="predict another machine: the fitted costs carried from the profile the model was fitted "
                        "with ('model fit --profile A.json') to this one ('ddltrace calibrate' there); --what-if "
                        "then changes B's constants")
    q.add_argument("--disk-profile", metavar="B-disk.json",
                   help="with --profile: B's disk section apart ('ddltrace calibrate --only disk' on B; default: the "
                        "--profile's r_d), for B's initialisation")
    q.add_argument("--serial-comm", action="store_true",
                   help="with --profile, for a model fitted with Hashemi's max: the workers pull, compute and push "
                        "one after another (ps-sgd): the time B's network adds to their transfers goes into c_p. "
                        "A model fitted with 'model fit --serial-comm' is the closed loop already")
    q.add_argument("--plot", metavar="PNG", help="write a plot of predicted vs measured")
    q.add_argument("--json", action="store_true", help="print the table as JSON")
    q.set_defaults(func=run_predict)


def _fixed(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        if not name.strip() or not value.strip():
            raise DdltraceError(f"--fix {item!r}: expected NAME=VALUE with a number")
        out[name.strip()] = finite(value, f"--fix {item!r}")
        if out[name.strip()] < 0:  # every constant of the model is a cost or a ratio >= 0 (model predict refuses it)
            raise DdltraceError(f"--fix {item!r}: {name.strip()} must be >= 0")
    return out


def _measurements(args) -> tuple[pd.DataFrame, str]:
    import pandas as pd

    from ddltrace.analyses.fit_hashemi import measurements_from_stores

    if args.csv and args.stores:
        raise DdltraceError("give either stores or --csv, not both")
    if args.csv:
        try:
            frame = pd.read_csv(args.csv)
        except FileNotFoundError:
            raise DdltraceError(f"{args.csv}: no such measurements file") from None
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise DdltraceError(f"{args.csv}: not a CSV table ({exc})") from None
        frame.index = range(2, len(frame) + 2)  # each run named by its line in the file (the header is line 1)
        return frame, ""
    if not args.stores:
        raise DdltraceError("model fit: give the stores of a scaling series (or --csv FILE)")
    seen: dict[Path, str] = {}
    for store in args.stores:  # one run given twice would count twice: more degrees of freedom, narrower intervals
        if Path(store).resolve() in seen:
            raise DdltraceError(f"{store}: given twice (as {seen[Path(store).resolve()]} too): each run is one "
                                "measurement")
        seen[Path(store).resolve()] = store
    frame = measurements_from_stores(args.stores, batch=args.batch, samples=args.samples, epochs=args.epochs,
                                     servers=args.servers)
    return frame, str(frame["job"].iloc[0])


def run_fit(args) -> int:
    from ddltrace.analyses.fit_hashemi import BYTES_PER_VALUE, PROFILE_CONSTANTS, HashemiFit
    from ddltrace.models import init_transfer, transfer

    if args.bytes_per_value is not None and args.bytes_per_value not in BYTES_PER_VALUE:
        raise DdltraceError(f"--bytes-per-value {args.bytes_per_value:g}: give one of "
                            f"{', '.join(map(str, BYTES_PER_VALUE))} (bytes of a value, as in a DNN description)")
    if args.cpu_shares and not args.serial_comm:
        raise DdltraceError("--cpu-shares: only with --serial-comm (the closed loop, whose workers poll while they "
                            "wait)")
    if args.out:
        from ddltrace.outputs import json_with_keys, refuse_other_file

        refuse_other_file(args.out, "a fitted model", lambda path: json_with_keys(path, ("model", "constants", "job")))
    frame, job = _measurements(args)
    profile, raw_profile = {}, None
    if args.profile:
        raw_profile = load_json(args.profile, "hardware profile")
        constants = profile_constants(raw_profile, args.profile)
        profile = {k: v for k, v in constants.items() if k in PROFILE_CONSTANTS and isinstance(v, float)}
        if not profile and "C_muladd" not in constants:
            raise DdltraceError(f"{args.profile}: the hardware profile holds none of what the fit holds or keeps "
                                f"({', '.join(PROFILE_CONSTANTS)}, C_muladd: 'ddltrace calibrate' measures them)")
    n_w, n_f, s = args.n_w, args.n_f, args.bytes_per_value
    work = None
    if args.dnn:
        dnn = load_dnn(args.dnn)
        n_w = n_w if n_w is not None else float(dnn.parameters)
        n_f = n_f if n_f is not None else float(dnn.input_neurons)
        s = s if s is not None else float(dnn.bytes_per_value)
        work = transfer.work_counts(dnn)
    if n_w is None and "n_w" in frame:  # the runs' own n_w, where every run says the same
        said = set(frame["n_w"].dropna())
        n_w = said.pop() if len(said) == 1 and len(frame["n_w"].dropna()) == len(frame) else None
    free = [name.strip() for name in args.free.split(",") if name.strip()]
    # the profile the fit held, kept in the model: 'model predict --profile B.json' carries the costs from it
    machine = transfer.profile_record(raw_profile, args.profile, s or 8.0) if raw_profile else None
    fit = HashemiFit(d=args.samples, n_f=n_f or 0.0, n_w=n_w or 0.0, s=s or 8.0, epochs=args.epochs or 1.0,
                     storage=args.storage, profile=profile, free=free, fixed=_fixed(args.fix),
                     divergence_threshold=args.threshold, c_u_from_trace=args.c_u_from_trace,
                     serial=args.serial_comm, cpu_shares=args.cpu_shares, machine=machine).fit(frame, args.csv)
    model = fit.to_dict()
    held = {}  # the profile's constants the fit held, with their calibrated uncertainty (one standard uncertainty)
    for name, entry in model["constants"].items():
        record = ((machine or {}).get("constants") or {}).get(name)
        if entry["source"] == "profile" and record:
            entry["uncertainty"] = held[name] = record["uncertainty"]
    model["job"] = job
    # the job's recorded settings (fit_hashemi.JOB_SETTINGS): 'report --model' checks the series is of this job
    model["job_settings"] = frame.attrs.get("job_settings") if not args.csv else None
    model["profile"] = machine
    model["work_per_sample"] = work
    model[init_transfer.KEY] = {
        "a": init_transfer.disk_r_d(load_json(args.disk_profile, "disk profile"), args.disk_profile)
        if args.disk_profile else None,
        "device_bytes": init_transfer.device_bytes(args.stores, args.storage)}
    lacking = {section: [k for k in names if k not in profile] for section, names in PROFILE_SECTIONS.items()}
    lacking = {section: names for section, names in lacking.items() if names}
    if args.profile and lacking:  # held at 0 unsaid, the table below would not even list them
        model["notes"].append(f"{args.profile} has no " + ", ".join(
            f"{', '.join(names)} (calibrate's {section} section)" for section, names in lacking.items())
            + ": held at 0, so the model's " + " and ".join(TERM_OF[section] for section in lacking)
            + (" term is" if len(lacking) == 1 else " terms are") + " zero")
        fit.notes_.append(model["notes"][-1])
    if profile and not (n_w or 0) > 0:
        model["notes"].append("n_w is unknown (give --dnn or --n-w): the memory and network terms are zero")
        fit.notes_.append(model["notes"][-1])
    for label, w, w_by in frame[["label", "w", "w_by"]].itertuples(index=False) if "w_by" in frame else ():
        if w_by.startswith(("inferred", "unknown")):  # the run did not say its workers: how w was got
            model["notes"].append(f"{label}: w = {w:g} {w_by}")
            fit.notes_.append(model["notes"][-1])
    if args.out:
        from ddltrace.store import atomic_output

        try:  # (a kill or a full disk leaves the old file, never a cut one)
            with atomic_output(args.out) as out:
                out.write((json.dumps(model, indent=2, allow_nan=False) + "\n").encode())
        except OSError as exc:
            raise DdltraceError(f"{args.out}: cannot write the model ({exc.strerror})") from None
    if args.json:
        json.dump(model, sys.stdout, indent=2, allow_nan=False)
        print()
        return 0
    print(describe_fit(fit, job, held))
    if args.disk_profile:  # what 'model predict --profile B.json' will carry the initialisation with, or why not
        why = init_transfer.missing(model)
        disk = model[init_transfer.KEY]
        print(f"\ninitialisation to carry to B's disk: not possible: {why}" if why else
              f"\ninitialisation to carry to B's disk: A's r_d {disk['a']['r_d']:.4g} s/B ({args.disk_profile}), a "
              f"worker fetched {disk['device_bytes']['bytes']:.0f} B from A's device (median over "
              f"{disk['device_bytes']['workers']} workers)")
    if args.out:
        print(f"\nmodel written to {args.out}")
    return 0


def _measured_how(runs: list) -> str:
    """How the intervals take a constant measured from the runs' traces (``runs``: their own figures)."""
    if len(runs) > 1:
        return (f"the {len(runs)} runs' figures; the intervals draw it as one of them, each equally likely: "
                "docs/MODELS.md, \"c_u from the trace: its interval\"")
    return "one run's figure: held exact in the intervals, no second run to show its spread"


def _measured_covers(model: dict) -> str:
    """What a prediction's intervals add for a constant measured from the runs' traces, '' where none is drawn."""
    from ddltrace.models import transfer

    entries = model.get("constants") or {}
    drawn = transfer.measured_runs(entries)
    held = [name for name, entry in entries.items()
            if isinstance(entry, dict) and isinstance(entry.get("runs"), list) and len(entry["runs"]) == 1]
    return ("".join(f"; {name} as one of the {len(runs)} runs' own figures ({min(runs):.3g} to {max(runs):.3g} "
                    f"{entries[name].get('unit', '')}), each equally likely" for name, runs in drawn.items())
            + "".join(f"; {name} held at the one run's figure it was measured from" for name in held))


def _seconds(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else format_ns(x * 1e9)


def describe_fit(fit, job: str = "", held: dict | None = None) -> str:
    """The text report of a fitted HashemiFit; ``held``: the uncertainty (one standard uncertainty, the constant's
    unit) of each constant the fit held at the profile's value."""
    from ddltrace.models import hashemi

    pct = int(round(100 * fit.confidence))
    lines = [f"Hashemi et al. ASGD model fitted to {fit.n_runs_} runs{f' of {job}' if job else ''} "
             f"({pct} % confidence intervals)", ""]
    values = fit.to_dict()["constants"]
    for name in hashemi.NAMES:
        entry = values[name]
        if entry["source"] == "default (0)":
            continue
        text = f"  {name:<12} {entry['value']:.4e} {entry['unit']:<9}"
        ci = entry.get("ci")
        if ci and ci[0] is not None:
            text += f"  [{ci[0]:.4e}, {ci[1]:.4e}]  {entry['source']}"
        elif name in fit.unconstrained_:
            text += f"  not constrained: 0 to {fit.unconstrained_[name]:.3g} fit as well"
        elif name in fit.unsupported_:
            text += f"  not supported by the runs (fitted it would be {fit.unsupported_[name]:.3g}); held at 0"
        elif entry.get("runs"):  # measured from the trace: the runs' own figures, what the intervals draw it from
            runs = entry["runs"]
            text += (f"  [{min(runs):.4e}, {max(runs):.4e}]  {entry['source']} ({_measured_how(runs)})"
                     if len(runs) > 1 else f"  {entry['source']} ({_measured_how(runs)})")
        elif name in (held or {}):
            spread = (f"± {100 * held[name] / entry['value']:.1f} %" if entry["value"] else
                      f"± {held[name]:.4e}")
            text += f"  {entry['source']} ({spread}, one standard uncertainty; held, not fitted)"
        else:
            text += f"  {entry['source']}"
        lines.append(text)
    if math.isinf(fit.knee_) and getattr(fit, "knee_min_", None):
        lines.append(f"\nknee: beyond the runs, w* >= {fit.knee_min_:.3g} workers (no run shows the server's limit)")
    elif math.isinf(fit.knee_):
        lines.append("\nknee: none (neither the server nor the floor ever binds)")
    else:
        low, high = fit.knee_ci_
        resampled = [name for name, runs in fit.measured_runs_.items() if len(runs) > 1]
        interval = ("" if math.isnan(low) else
                    f" [{100 * fit.confidence:.0f} %: {_workers(low)} to "
                    f"{'no bound' if math.isinf(high) else _workers(high)}, the fitted constants drawn with their "
                    "covariance" + "".join(f", {name} as one of the runs' figures" for name in resampled) + "]")
        lines.append(f"\nknee: {_knee_text(fit.knee_)}{interval} ({fit.knee_cause_} term takes over) at batch "
                     f"{fit.knee_batch_:g}")
        if fit.knee_ < 1:
            lines.append(f"  {_under_one(fit.knee_cause_)}")
        elif low < 1:
            lines.append(f"  the interval's low end is under 1 worker: in those draws the {_term(fit.knee_cause_)} "
                         "term is the larger already at one worker")
    lines.append(f"fit: rms relative error {format_percent(fit.rms_relative_error_)} over {fit.n_runs_} runs (of the "
                 "model's computation phase against each run's)")
    if len(fit.loo_):
        lines.append("\nleave-one-out (each run's computation phase, all epochs: measured, the slowest worker's steady "
                     "state as read from its store; predicted by the model fitted to the other runs; error = "
                     "|predicted - measured| / measured):")
        for row in fit.loo_.to_dict("records"):
            lines.append(f"  {row['label']:<32} w={row['w']:<5g} b={row['b']:<6g} measured "
                         f"{_seconds(row['measured_s']):>9}  predicted {_seconds(row['predicted_s']):>9}  "
                         f"error {row['abs_pct_error']:.1f} %")
        lines.append(f"  mean absolute error {fit.loo_['abs_pct_error'].mean():.1f} %, worst "
                     f"{fit.loo_['abs_pct_error'].max():.1f} %")
    flagged = fit.divergence_[fit.divergence_["flagged"]]
    threshold = format_percent(fit.divergence_threshold)
    if len(flagged):
        lines.append(f"\ndivergent runs (a measured term, computation phase or initialisation, off the fitted "
                     f"model by more than {threshold}; in brackets (measured - model) / model):")
        term_constant = {"server/network": "c_u, r_net", "worker": "c_p, c_b, r_m, w_m", "floor": "t_phase_min",
                         "disk": f"r_d, storage {fit.storage}"}
        for row in flagged.to_dict("records"):
            where = ", past the knee (server contention the model does not have)" if row["past_knee"] else ""
            what = "computation phase" if row["term"] == "phase" else "initialisation"
            lines.append(f"  {row['label']}: {what} measured {_seconds(row['measured_s'])}, model "
                         f"{_seconds(row['predicted_s'])} ({100 * row['divergence']:+.0f} %), bound by the "
                         f"{row['bound_by']} term ({term_constant[row['bound_by']]}){where}")
    else:
        checked = " and initialisation" if "init" in set(fit.divergence_["term"]) else ""
        lines.append(f"\nno run diverges from the model by more than {threshold} (computation phase{checked})")
    if fit.notes_:
        lines.append("\nnotes:")
        lines.extend(f"  - {note}" for note in fit.notes_)
    return "\n".join(lines)


# -- predict ---------------------------------------------------------------------------------------------------

#: The best worker count on B is the fewest asked whose predicted phase is within this share of the fastest.
BEST_TOLERANCE = 0.05


def _on_profile(model: dict, source: str, profile_path: str, constants, wl, serial: bool = False) -> dict:
    """What carrying the model to the machine of ``profile_path`` needs: the profiles' records ``a`` and ``b``, the
    DNN's work per sample, the server's split of c_u, and the w-independent factors (each rank's share of a core
    taken as equal on A and B) with their notes, for the description."""
    from ddltrace.models import transfer

    fitted_on = model.get("profile")
    if not isinstance(fitted_on, dict):
        raise DdltraceError(f"{source}: the model was fitted without a hardware profile, so there is nothing to "
                            "carry its costs from; refit with 'ddltrace model fit ... --profile A.json'")
    on_b = transfer.profile_record(load_json(profile_path, "hardware profile"), profile_path, wl.s)
    counts = model.get("work_per_sample") or {"muladds": 1.0, "neurons": 0.0}
    runs = model.get("measurements") or []
    _, factors, notes = transfer.transfer(constants, wl, counts, fitted_on, on_b, serial=serial, runs=runs)
    return {"a": fitted_on, "b": on_b, "counts": counts, "factors": factors, "notes": notes,
            "server_split": transfer.server_split(constants.c_u, fitted_on, runs)}


def _workers(w: float) -> str:
    """A knee (workers) for the text: the formula's w* under 1 (it may be 0 or negative there) is '< 1'."""
    return "< 1" if w < 1 else f"{w:.3g}"


def _knee_text(w: float) -> str:
    """'w* = 3.2 workers', or 'w* < 1 worker' (the formula's value is no worker count there)."""
    return "w* < 1 worker" if w < 1 else f"w* = {w:.3g} workers"


def _term(cause: str) -> str:
    """The term a knee's cause names: Hashemi's T_net is the server's updates and the transfers together."""
    return "floor" if cause == "floor" else "server/network"


def _under_one(cause: str) -> str:
    """What a knee under 1 worker means, said alike by model fit and model predict."""
    return (f"w* < 1: the {_term(cause)} term is the larger already at one worker, so from the first worker on "
            "each added worker gains less than its ideal share")


def _knee(model: dict, wl, k, c_u_factor: float = 1.0) -> tuple[float, str, float | None]:
    """(w*, cause, lower bound): when the runs only bound c_u (held at 0), w* is at least the knee at that bound
    (carried to B by ``c_u_factor``)."""
    from dataclasses import replace

    from ddltrace.models import hashemi

    w_star, cause = hashemi.knee(wl, k)
    entry = (model.get("constants") or {}).get("c_u") or {}
    bound = entry.get("upper_bound") or entry.get("fitted_value")
    at_least = None
    if k.c_u == 0 and bound:
        at_least = hashemi.knee(wl, replace(k, c_u=float(bound) * c_u_factor))[0]
    return w_star, cause, at_least


def _workload(model: dict, source: str, batch: float | None) -> tuple:
    """(the fitted constants at ``batch``, the Workload there, the batch they were fitted at, the factor the
    per-sample costs took to get there: :func:`ddltrace.models.transfer.at_batch` on the fit's profile, 1 where the
    model has none or the batch is the fit's)."""
    import pandas as pd

    from ddltrace.analyses.fit_hashemi import constants_from_model
    from ddltrace.models import hashemi, transfer

    constants, workload = constants_from_model(model, source)
    measured = pd.DataFrame(model.get("measurements") or [])
    # each checked > 0 where given (constants_from_model)
    fit_b = (model.get("knee") or {}).get("batch")
    if fit_b is None and "b" in measured and measured["b"].notna().any():
        fit_b = float(measured["b"].mode()[0])
    b = batch or fit_b
    d = workload.get("d")
    if d is None and "d" in measured and measured["d"].notna().any():
        d = float(measured["d"].dropna().median())
    epochs = 1.0 if workload.get("epochs") is None else workload["epochs"]
    if "epochs" in measured and measured["epochs"].notna().any():
        epochs = float(measured["epochs"].dropna().median())
    if b is None or d is None:
        raise DdltraceError(f"{source}: the model lacks the batch size or the data set size; give --batch")
    wl = hashemi.Workload(d=float(d), b=float(b), n_f=workload.get("n_f") or 0.0, n_w=workload.get("n_w") or 0.0,
                          serial=bool(workload.get("serial")), cpu_shares=bool(workload.get("cpu_shares")),
                          epochs=float(epochs), s=8.0 if workload.get("s") is None else workload["s"])
    factor, fitted_on = 1.0, model.get("profile")
    if fit_b and isinstance(fitted_on, dict):
        counts = model.get("work_per_sample") or {"muladds": 1.0, "neurons": 0.0}
        constants, factor = transfer.at_batch(constants, wl, float(fit_b), fitted_on, counts)
    return constants, wl, float(fit_b or b), factor


#: The knee on B's draws are searched below this many times the knee on B plus one (at least KNEE_SEARCH_LEAST).
KNEE_SEARCH_TIMES, KNEE_SEARCH_LEAST = 4, 64


def _knee_interval_on_b(model: dict, source: str, constants, wl, moved: dict, runs: list, serial: bool,
                        batch_factor: float, knee_b: float, played: list[int], what_if: dict | None = None) -> dict:
    """The knee on B's interval (workers), drawn as the fit's (:func:`ddltrace.analyses.fit_hashemi.knee_interval`:
    the fitted constants from Student's t with the model's covariance, the per-sample ones times ``batch_factor``)
    with, in each draw, both profiles' constants drawn as the phase's interval draws them
    (:func:`ddltrace.models.transfer.profile_draws`) and carried to B (:func:`ddltrace.models.transfer.phase_at`);
    its w* by the knee's own rule (:func:`ddltrace.models.transfer.knee_search`, all draws at once:
    :mod:`ddltrace.models.drawn_knees`, one at a time at a w where B's quota loop is played) below ``searched_below_w``
    workers (:data:`KNEE_SEARCH_TIMES` the knee on B, at least :data:`KNEE_SEARCH_LEAST`: a draw with none there
    counts as past it, which is all the interval's upper end needs to say); with ``what_if``'s changes to B's constants
    at each w, the knee of the what-if on B. ``{"ci": (low, high), "draws", "confidence", "searched_below_w"}``, or
    ``{"why_not": ...}`` where it is not drawn."""
    import numpy as np

    from ddltrace.analyses.fit_hashemi import KNEE_DRAWS, knee_interval
    from ddltrace.models import drawn_knees, transfer

    covariance = _covariance_at(model, batch_factor)
    if math.isinf(knee_b):
        return {"why_not": f"no knee on B below {transfer.KNEE_MOST} workers" + (
            " (the runs only bound c_u: no run shows the server's limit)" if constants.c_u == 0 else "")}
    if covariance is None:
        return {"why_not": _no_covariance(source)}
    if played:
        return {"why_not": "B's quota holds every rank at w = " + ", ".join(map(str, played)) + ", where the "
                           "phase is the quota loop played out over the periods (0.05-0.1 s each): "
                           f"{KNEE_DRAWS} draws of it would take minutes"}
    z_a, z_b = transfer.profile_draws(moved["a"], moved["b"], KNEE_DRAWS)
    server = transfer.server_measured(moved["a"], runs)
    most = max(KNEE_SEARCH_LEAST, KNEE_SEARCH_TIMES * (int(knee_b) + 1))
    a, b = moved["a"], moved["b"]

    def knees_of(drawn) -> np.ndarray:
        ratios = transfer.profile_ratios(wl, moved["counts"], a, b, z_a, z_b)

        def one(w: int, i: int) -> float:  # where B's quota loop is played: one draw at a time
            return transfer.phase_at(drawn_knees.one_draw(drawn, i), wl, w, a, runs, b, moved["counts"], serial,
                                     what_if, z_a={name: float(z[i]) for name, z in z_a.items()},
                                     z_b={name: float(z[i]) for name, z in z_b.items()}, server=server)["phase_s"]

        return drawn_knees.searched_knees(
            lambda w: drawn_knees.phases_at(drawn, wl, w, a, runs, b, serial, ratios, server, what_if), KNEE_DRAWS,
            most, one)

    confidence = float(model.get("confidence") or 0.95)
    return {"ci": knee_interval(knees_of, constants, covariance, confidence,
                                measured=transfer.measured_runs(model["constants"])), "draws": KNEE_DRAWS,
            "confidence": confidence, "searched_below_w": most}


def _covariance_at(model: dict, batch_factor: float) -> dict | None:
    """The model's ``covariance`` of its fitted constants with the per-sample costs' rows and columns times
    ``batch_factor`` (their values at another batch, :func:`_workload`); None where the model has none."""
    import numpy as np

    from ddltrace.models.transfer import PER_SAMPLE

    covariance = model.get("covariance")
    if not isinstance(covariance, dict) or not covariance.get("names"):
        return None
    scale = np.array([batch_factor if name in PER_SAMPLE else 1.0 for name in covariance["names"]])
    return {**covariance, "matrix": (np.asarray(covariance["matrix"], dtype=float) * np.outer(scale, scale))}


def _no_covariance(source: str) -> str:
    return (f"{source} has no covariance of its fitted constants (no degrees of freedom left: as many fitted "
            "constants as runs; or a model written before 'model fit' recorded it: refit it)")


def _knee_interval_on_a(model: dict, source: str, constants, wl, batch_factor: float, fit_b: float,
                        what_if: dict | None, knee: float) -> dict:
    """The knee on A's interval (workers), with the what-if or without: ``{"ci", "draws", "confidence"}`` drawn as the
    fit's (:func:`ddltrace.analyses.fit_hashemi.knee_interval`, the covariance at this batch), or ``{"why_not"}``.
    A ``--cpu-shares`` model's knee is a search over w in each draw (:func:`ddltrace.models.drawn_knees.
    searched_knees`, all draws at once): at the fit's batch without what-ifs, the fit's (model.json's ``knee.ci``)."""
    from ddltrace.analyses.fit_hashemi import KNEE_DRAWS, knee_interval
    from ddltrace.models import drawn_knees, hashemi, transfer

    confidence = float(model.get("confidence") or 0.95)
    if math.isinf(knee):
        return {"why_not": "no knee"}
    covariance = _covariance_at(model, batch_factor)
    if covariance is None:
        return {"why_not": _no_covariance(source)}
    ci = (model.get("knee") or {}).get("ci") or [None, None]
    if wl.cpu_shares and not what_if and wl.b == fit_b and ci[0] is not None:
        return {"ci": (float(ci[0]), math.inf if ci[1] is None else float(ci[1])), "draws": KNEE_DRAWS,
                "confidence": confidence, "covers": KNEE_ON_A_COVERS + _measured_covers(model)}
    if wl.cpu_shares:  # the knee of each draw's predicted phases at the ranks' shares, searched over w
        a, runs = model.get("profile") or {}, model.get("measurements") or []
        ci = knee_interval(lambda drawn: drawn_knees.searched_knees(
            lambda w: drawn_knees.phases_at(drawn, wl, w, a, runs, what_if=what_if), KNEE_DRAWS, transfer.KNEE_MOST),
            constants, covariance, confidence, measured=transfer.measured_runs(model["constants"]))
        return {"ci": ci, "draws": KNEE_DRAWS, "confidence": confidence,
                "covers": KNEE_ON_A_COVERS + _measured_covers(model)}
    ci = knee_interval(lambda drawn: hashemi.w_star(wl, drawn.scaled(what_if) if what_if else drawn), constants,
                       covariance, confidence, measured=transfer.measured_runs(model["constants"]))
    return {"ci": ci, "draws": KNEE_DRAWS, "confidence": confidence,
            "covers": KNEE_ON_A_COVERS + _measured_covers(model)}


def _json_knee_on_a(drawn: dict) -> dict:
    if "why_not" in drawn:
        return {"why_not": drawn["why_not"]}
    low, high = drawn["ci"]
    return {"low_w": None if math.isinf(low) else low, "high_w": None if math.isinf(high) else high,
            "confidence": drawn["confidence"], "draws": drawn["draws"], "covers": drawn["covers"]}


#: How the phase's interval on B draws the fitted constants, by whether the model has a covariance.
FIT_DRAWS = {True: "together, from Student's t with the model's covariance, as A's interval",
             False: "each on its own standard error: the model has no covariance"}
#: What the knee on A's interval and the phase's interval on A cover (docs/MODELS.md, "Commands").
KNEE_ON_A_COVERS = "the fit's constants drawn together from Student's t with the fit's covariance (as the fit's knee)"
PHASE_ON_A_COVERS = ("the fit's constants drawn together from Student's t with the fit's covariance, a constant the "
                     "runs only bound uniformly below its bound; the profile's constants held; not a new run's "
                     "scatter about the model")


def _describe_knee_on_a(drawn: dict) -> str:
    if "why_not" in drawn:
        return f"  interval: not drawn: {drawn['why_not']}" if drawn["why_not"] != "no knee" else ""
    low, high = drawn["ci"]
    return (f"  {100 * drawn['confidence']:.0f} % interval: {_workers(low)} to "
            f"{'no bound' if math.isinf(high) else _workers(high)} workers, over {drawn['draws']} draws of "
            f"{drawn['covers']}")


def _entries_at(entries: dict, factor: float) -> dict:
    """The model's fitted entries with the per-sample costs' standard errors and bounds times ``factor`` (their
    values at another batch, :func:`_workload`), for the interval's draws."""
    from ddltrace.models.transfer import PER_SAMPLE

    scaled = {}
    for name, entry in entries.items():
        if name in PER_SAMPLE and isinstance(entry, dict) and factor != 1.0:
            entry = {**entry, **{key: entry[key] * factor for key in ("stderr", "upper_bound") if entry.get(key)}}
        scaled[name] = entry
    return scaled


def _fit_draws(constants, entries: dict, covariance: dict | None):
    """The fitted constants' :data:`~ddltrace.models.transfer.DRAWS` draws (arrays) that the phase's intervals take:
    together from Student's t with the model's ``covariance`` (:func:`ddltrace.analyses.fit_hashemi.knee_draws`), a
    constant the runs only bound uniformly below its bound; each on its own standard error where the model has no
    covariance (B's interval only). ``entries`` and ``covariance`` at the batch predicted (:func:`_entries_at`,
    :func:`_covariance_at`)."""
    from ddltrace.models import transfer

    if covariance is None:
        return transfer.stderr_draws(entries, constants, transfer.DRAWS)
    from ddltrace.analyses.fit_hashemi import knee_draws

    return transfer.bounded_draws(knee_draws(constants, covariance, transfer.DRAWS, transfer.measured_runs(entries)),
                                  entries, transfer.DRAWS)


def _batch_sweep(model: dict, source: str, workers: list[int], batches: list[int], profile: str,
                 serial: bool) -> dict:
    """B's computation phase (seconds, all epochs) at each batch size and worker count: per batch, the fitted
    costs moved to its working set on A (:func:`_workload`) and carried to B at each w as the prediction carries
    them (:func:`ddltrace.models.transfer.phase_at`); the best pair is the fewest workers, then the smallest batch,
    within :data:`BEST_TOLERANCE` of the fastest. The epochs are the model's at every batch."""
    from ddltrace.models import hashemi, transfer

    rows, runs = [], model.get("measurements") or []
    constants, wl, _, _ = _workload(model, source, None)
    moved = _on_profile(model, source, profile, constants, wl, serial)  # A's and B's records: the same at every b
    confidence = float(model.get("confidence") or 0.95)
    for b in batches:
        constants, wl, fit_b, factor = _workload(model, source, float(b))
        drawn = _fit_draws(constants, _entries_at(model["constants"], factor), _covariance_at(model, factor))
        (low, high), = transfer.interval(drawn, wl, moved["counts"], moved["a"], moved["b"], workers, confidence,
                                         serial=serial, runs=runs)
        for j, w in enumerate(workers):
            there = transfer.phase_at(constants, wl, w, moved["a"], runs, moved["b"], moved["counts"],
                                      serial)
            loop = there["loop"] or {}
            rows.append({"b": b, "w": w, "profile_s": there["phase_s"],
                         "profile_low_s": transfer.onto_loop(low[j], there["analytic_s"], loop.get("phase_s"),
                                                             loop.get("low_s"), min),
                         "profile_high_s": transfer.onto_loop(high[j], there["analytic_s"], loop.get("phase_s"),
                                                              loop.get("high_s"), max),
                         "profile_bound_by": hashemi.bound_by(hashemi.phase_terms(w, wl, there["constants"])),
                         "c_p_batch_factor": factor,
                         "working_set_bytes": hashemi.working_set_bytes(b, wl.n_f, wl.n_w, wl.s)})
    fastest = min(r["profile_s"] for r in rows)
    best = min((r for r in rows if r["profile_s"] <= (1 + BEST_TOLERANCE) * fastest), key=lambda r: (r["w"], r["b"]))
    return {"fit_b": fit_b, "rows": rows, "best": {"w": best["w"], "b": best["b"], "profile_s": best["profile_s"]},
            "confidence": confidence, "draws": transfer.DRAWS}


def _print_batch_sweep(sweep: dict, workers: list[int]) -> None:
    print(f"\nbatch sizes on B (computation phase, all epochs; the per-sample costs at each batch's working set by "
          f"the fit's profile's compute curves, relative to batch {sweep['fit_b']:g}, then carried to B):")
    print(f"{'batch':>7}  {'working set':>12}  {'c_p x':>6}  " + "  ".join(f"{f'w={w}':>28}" for w in workers))
    for b in dict.fromkeys(r["b"] for r in sweep["rows"]):
        mine = {r["w"]: r for r in sweep["rows"] if r["b"] == b}
        first = next(iter(mine.values()))
        print(f"{b:>7}  {first['working_set_bytes'] / 2**20:>8.3g} MiB  {first['c_p_batch_factor']:>6.3g}  "
              + "  ".join(f"{_seconds(r['profile_s']):>9} [{_seconds(r['profile_low_s'])}, "
                          f"{_seconds(r['profile_high_s'])}]".rjust(28) for r in (mine[w] for w in workers)))
    print(f"  [ ]: {100 * sweep['confidence']:.0f} % interval over {sweep['draws']} draws of the fit's and both "
          "profiles' constants, as the prediction's at one batch")
    best = sweep["best"]
    print(f"best on B over the batches and workers asked: w = {best['w']} at batch {best['b']}, "
          f"{_seconds(best['profile_s'])} (the fewest workers, then the smallest batch, within "
          f"{100 * BEST_TOLERANCE:.0f} % of the fastest predicted phase); the model keeps the epochs fixed: a larger "
          "batch may need more of them to converge, which it does not predict")


def _predict_table(model: dict, source: str, workers: list[int], batch: float | None,
                   what_if: dict, profile: str | None = None, serial: bool = False) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    from ddltrace.models import hashemi, transfer

    constants, wl, fit_b, batch_factor = _workload(model, source, batch)
    measured = pd.DataFrame(model.get("measurements") or [])
    unknown = [name for name in what_if if name not in hashemi.NAMES]
    if unknown:
        raise DdltraceError(f"--what-if: {unknown[0]!r} is not a constant of the model ({', '.join(hashemi.NAMES)})")
    moved = _on_profile(model, source, profile, constants, wl, serial) if profile else None
    runs = model.get("measurements") or []

    predictions: dict[tuple, dict] = {}

    def at(w: int, on_b: bool = False, changed: bool = False) -> dict:
        """The prediction at w (transfer.phase_at) on A or carried to B, with the what-if or without; each once (the
        rows and the knees share them)."""
        key = (w, on_b, changed)
        if key not in predictions:
            change = what_if if changed else None
            predictions[key] = (transfer.phase_at(constants, wl, w, moved["a"], runs, moved["b"], moved["counts"],
                                                  serial, change) if on_b else
                                transfer.phase_at(constants, wl, w, model.get("profile") or {}, runs, what_if=change))
        return predictions[key]

    def knee_on_a(changed: bool = False) -> tuple[float, str, float | None]:
        if wl.cpu_shares:  # the constants depend on w (the ranks' shares): the knee of the predicted phases
            return (*transfer.knee_over_w(lambda w: at(w, changed=changed), wl), None)
        return _knee(model, wl, at(1, changed=changed)["constants"])

    base = at(workers[0], on_b=bool(moved))["constants"]
    for name, (how, factor) in what_if.items():
        if how == "scale" and factor != 1 and getattr(base, name) == 0:  # a factor of 0 changes nothing
            source_of = ((model.get("constants") or {}).get(name) or {}).get("source", "")
            where = "on B" if moved else f"in {source}" + (f" ({source_of})" if source_of else "")
            raise DdltraceError(f"--what-if {name}={factor:g}x: {name} is 0 {where}, so a factor changes nothing; "
                                f"give a value instead ({name}=VALUE, in {hashemi.UNITS[name]})")
        value = factor if how == "set" else getattr(base, name) * factor
        if name in transfer.TAKEN and value > 1:  # a share: t (1 - net_duplex / 2) would turn negative past 2
            raise DdltraceError(f"--what-if {name}={factor:g}{'x' if how == 'scale' else ''}: {name} is a share "
                                f"from 0 to 1, this gives {value:.3g}")
    knees = {"model": knee_on_a()}
    if moved:
        at_least = None
        if constants.c_u == 0:  # only bounded by the runs: the knee at the bound, carried at the largest w asked
            largest = at(max(workers), on_b=True)
            _, _, at_least = _knee(model, wl, largest["constants"], largest["factors"]["c_u"])
        knees["profile"] = (*transfer.knee_over_w(lambda w: at(w, on_b=True), wl), at_least)
        knee_b = knees["profile"][0]
        played = [] if math.isinf(knee_b) else [w for w in range(1, int(knee_b) + 2) if at(w, on_b=True)["loop"]]
        interval_on_b = _knee_interval_on_b(model, source, constants, wl, moved, runs, serial, batch_factor, knee_b,
                                            played)
    if what_if:
        knees["what_if"] = ((*transfer.knee_over_w(lambda w: at(w, on_b=True, changed=True), wl), None) if moved
                            else knee_on_a(changed=True))
    knee_intervals = {"model": _knee_interval_on_a(model, source, constants, wl, batch_factor, fit_b, None,
                                                   knees["model"][0])}
    if what_if and moved:  # the what-if's knee on B, drawn as the knee on B is
        knee_w = knees["what_if"][0]
        played = [] if math.isinf(knee_w) else [w for w in range(1, int(knee_w) + 2)
                                                if at(w, on_b=True, changed=True)["loop"]]
        interval_on_b_what_if = _knee_interval_on_b(model, source, constants, wl, moved, runs, serial, batch_factor,
                                                    knee_w, played, what_if)
    elif what_if:
        knee_intervals["what_if"] = _knee_interval_on_a(model, source, constants, wl, batch_factor, fit_b, what_if,
                                                        knees["what_if"][0])
    rows = []
    for w in workers:
        here = at(w)
        terms = hashemi.phase_terms(w, wl, here["constants"])
        row = {"w": w, "b": wl.b, "predicted_s": here["phase_s"], "bound_by": hashemi.bound_by(terms),
               "comp_s": wl.epochs * terms["comp"], "mem_s": wl.epochs * terms["mem"],
               "net_s": wl.epochs * terms["net"]}
        if moved:
            there = at(w, on_b=True)
            on_b_terms = hashemi.phase_terms(w, wl, there["constants"])
            factors_w, shares, loop = there["factors"], there["shares"], there["loop"]
            if loop:  # the quota holds every rank: the loop played out over the quota's periods (docs/MODELS.md)
                row.update(quota_loop_s=loop["phase_s"], quota_loop_low_s=loop["low_s"],
                           quota_loop_high_s=loop["high_s"], quota_loop_locked=loop["locked"],
                           mean_value_s=there["analytic_s"])
            row.update(profile_s=there["phase_s"],
                       profile_bound_by=hashemi.bound_by(on_b_terms), profile_comp_s=wl.epochs * on_b_terms["comp"],
                       profile_mem_s=wl.epochs * on_b_terms["mem"], profile_net_s=wl.epochs * on_b_terms["net"],
                       profile_c_p_factor=factors_w["c_p"], profile_c_u_factor=factors_w["c_u"],
                       profile_quota_wait_s=factors_w.get("c_b_quota_wait_s", 0.0),
                       share_a=shares["share_a"], share_b=shares["share_b"], share_a_from=shares["share_a_from"],
                       link_cores_a=shares["link_cores_a"], link_cores_b=shares["link_cores_b"],
                       link_note=factors_w.get("link_note"))
        if what_if:
            changed = at(w, on_b=bool(moved), changed=True)
            row["what_if_s"] = changed["phase_s"]
            row["what_if_bound_by"] = hashemi.bound_by(hashemi.phase_terms(w, wl, changed["constants"]))
        if len(measured):
            match = measured[(measured["w"] == w) & (measured["b"] == wl.b)]
            row["measured_s"] = float(match["phase_s"].mean()) if len(match) else math.nan
        rows.append(row)
    table = pd.DataFrame(rows)
    confidence = float(model.get("confidence") or 0.95)
    entries = _entries_at(model["constants"], batch_factor)
    covariance = _covariance_at(model, batch_factor)
    drawn = _fit_draws(constants, entries, covariance) if covariance is not None or moved else None
    if covariance is not None:  # A's phase (and its what-if) over the fit's own uncertainty
        a_record = model.get("profile") or {}
        table["predicted_low_s"], table["predicted_high_s"] = transfer.interval_on_a(drawn, wl, workers, a_record,
                                                                                     runs, confidence)
        if what_if and not moved:
            table["what_if_low_s"], table["what_if_high_s"] = transfer.interval_on_a(
                drawn, wl, workers, a_record, runs, confidence, what_if)
        table.attrs["interval_on_a"] = {"confidence": confidence, "draws": transfer.DRAWS,
                                        "covers": PHASE_ON_A_COVERS + _measured_covers(model)}
    else:
        table.attrs["interval_on_a"] = {"why_not": _no_covariance(source)}
    table.attrs["knee_intervals"] = knee_intervals
    if moved:  # B's phase and its what-if over A's draws (the what-if's not where B's quota loop is played)
        spans = transfer.interval(drawn, wl, moved["counts"], moved["a"], moved["b"], workers, confidence,
                                  what_ifs=(None, what_if) if what_if else (None,), serial=serial, runs=runs)
        table["profile_low_s"], table["profile_high_s"] = spans[0]
        if what_if:
            table["what_if_low_s"], table["what_if_high_s"] = spans[1]
            if "quota_loop_s" in table:
                table.loc[table["quota_loop_s"].notna(), ["what_if_low_s", "what_if_high_s"]] = math.nan
        if "quota_loop_s" in table:  # the interval of the analytic phase moved onto the loop's mean, with its spread
            played = table["quota_loop_s"].notna()
            part = table.loc[played]
            table.loc[played, "profile_low_s"] = transfer.onto_loop(
                part["profile_low_s"], part["mean_value_s"], part["quota_loop_s"], part["quota_loop_low_s"], np.minimum)
            table.loc[played, "profile_high_s"] = transfer.onto_loop(
                part["profile_high_s"], part["mean_value_s"], part["quota_loop_s"], part["quota_loop_high_s"],
                np.maximum)
            table.loc[~played, "mean_value_s"] = table.loc[~played, "profile_s"]
        fastest = table["profile_s"].min()
        shares_1 = transfer.cpu_shares(moved["a"], moved["b"], runs, 1)
        best = table[table["profile_s"] <= (1 + BEST_TOLERANCE) * fastest]["w"].min()
        table.attrs["transfer"] = {"profile": profile, "fitted_on": moved["a"]["source"],
                                   "alone": [shares_1["alone_a"], shares_1["alone_b"]],
                                   "factors": moved["factors"], "server_split": moved["server_split"],
                                   "notes": moved["notes"], "confidence": confidence,
                                   "best_w": int(best), "draws": transfer.DRAWS, "serial_comm": serial,
                                   "closed_loop": wl.serial,
                                   "fit_draws": FIT_DRAWS[covariance is not None] + _measured_covers(model),
                                   "best_past_knee": _past_knee(table, knees["profile"][0], best)}
    table.attrs["knees"] = knees
    if moved:
        table.attrs["knee_interval_on_b"] = interval_on_b
    if moved and what_if:
        table.attrs["knee_interval_on_b_what_if"] = interval_on_b_what_if
    table.attrs["batch"] = {"fit_b": fit_b, "c_p_factor": batch_factor, "note": _batch_note(model, wl.b, fit_b,
                                                                                          batch_factor)}
    return table


def _batch_note(model: dict, b: float, fit_b: float, factor: float) -> str | None:
    """How the prediction at batch ``b`` got its per-sample cost from the fit's batch, and what it cannot know;
    None at the fit's batch."""
    if b == fit_b:
        return None
    note = (f"the fit's batch {fit_b:g}; c_p x{factor:.4g} at this batch's working set by the fit's profile's compute "
            "curves" if ((model.get("profile") or {}).get("curves") or {}).get("C_muladd") else
            f"the fit's batch {fit_b:g}; c_p kept as fitted: the model has no profile's compute curves to move it to "
            "this batch's working set")
    if len({run.get("b") for run in model.get("measurements") or []}) == 1 and (
            (model["constants"].get("c_b") or {}).get("source") != "fitted"):
        note += "; the runs had one batch size, so c_p also holds their per-batch cost, which counts per sample here"
    return note


def _json_knee_interval(drawn: dict) -> dict:
    """The knee on B's interval for --json: ``low_w``, ``high_w`` (workers; None where more than the tail's share of
    the draws found no knee below ``searched_below_w``), the draws and the definition, or ``why_not``."""
    if "why_not" in drawn:
        return {"why_not": drawn["why_not"]}
    low, high = drawn["ci"]
    return {"low_w": None if math.isinf(low) else low, "high_w": None if math.isinf(high) else high,
            "confidence": drawn["confidence"],
            "draws": drawn["draws"], "searched_below_w": drawn["searched_below_w"], "definition": KNEE_DEFINITION,
            "covers": KNEE_COVERS}


#: What the knee on B is, and what its interval covers (docs/MODELS.md, "The knee on B and its interval").
KNEE_MOST = 1024  # transfer.KNEE_MOST (the CLI starts without numpy)
KNEE_DEFINITION = ("w* on B: the fewest workers w from which one more worker gains less than half of its ideal share "
                   "of B's predicted computation phase, T(w + 1) > T(w) (1 - 0.5 / (w + 1)), in whole workers "
                   f"(none below {KNEE_MOST})")
KNEE_COVERS = ("the fit's constants drawn together from Student's t with the fit's covariance (as the fit's knee "
               "interval) and, in each draw, both profiles' constants drawn log-normally from their uncertainties "
               "(as the phase's interval; once where B's profile is A's own)")


def _describe_knee_interval(drawn: dict, of: str = "knee on B", define: bool = True) -> list[str]:
    """The knee on B's interval (``of``: the what-if's, where ``define`` is False: the definition said once)."""
    if "why_not" in drawn:
        return [f"  {of}'s interval: not drawn: {drawn['why_not']}"]
    low, high = drawn["ci"]
    lower, upper = (f"more than {drawn['searched_below_w'] - 1}" if math.isinf(x) else f"{x:.3g}" for x in (low, high))
    return [f"  {100 * drawn['confidence']:.0f} % interval: {lower} to {upper} workers, over {drawn['draws']} "
            f"draws of {KNEE_COVERS}", *([f"  {KNEE_DEFINITION}"] if define else [])]


def _past_knee(table: pd.DataFrame, knee: float, best: float) -> dict | None:
    """Where the best worker count on B lies past the knee on B: the phase (s) at the first worker count asked
    past the knee and at the best, which the knee's rule (one more worker gains less than half of its ideal
    share) leaves still falling; None when the best is not past the knee."""
    if math.isinf(knee) or not best > knee:
        return None
    first = table[table["w"] > knee].iloc[0]
    at_best = table[table["w"] == best].iloc[0]
    return {"knee_w": float(knee), "from_w": int(first["w"]), "from_s": float(first["profile_s"]),
            "best_w": int(best), "best_s": float(at_best["profile_s"])}


def _describe_transfer(table: pd.DataFrame) -> list[str]:
    from ddltrace.models import quota_loop, transfer

    info = table.attrs["transfer"]
    f = info["factors"]
    pct = int(round(100 * info["confidence"]))
    split = info["server_split"]
    lines = [f"carried from {info['fitted_on']} (A, the fit's profile) to {info['profile']} (B), factor B / A "
             "with a rank's share of a core equal on both:",
             f"  compute per sample (c_p, t_phase_min) x{f['c_p']:.4g}: feed-forward work at the job's working set "
             "(C_muladd, C_act, C_err)",
             f"  per batch (c_b) x{f['c_b']:.4g}: C_muladd over the weights; per update (c_u) x{f['c_u']:.4g}: "
             + (f"nothing to carry: {split['how']}" if split.get("zero") else
                f"the server's busy {1e3 * split['server_s']:.3g} ms per update ({100 * split['cpu_fraction']:.0f} % "
                f"CPU, as C_muladd over the weights; {split['how']}), the fit's other {1e3 * split['rest_s']:.3g} ms "
                "as the per-sample work"),
             "  each CPU-bound factor at w also times (alone_B / alone_A) share_A(w) / share_B(w), a rank's share of a "
             f"core (alone: calibrate's own, A {info['alone'][0]:.3g}, B {info['alone'][1]:.3g}; 1 where its curves "
             "are in CPU seconds); per w:",
             *[f"    w={row['w']}: share on A {row['share_a']:.3g} ({row['share_a_from']}), on B {row['share_b']:.3g}; "
               f"c_p x{row['profile_c_p_factor']:.4g}, c_u x{row['profile_c_u_factor']:.4g}; c_b gains "
               f"{1e3 * row['profile_quota_wait_s']:.3g} ms a batch of waits for receivers off their cores (B's "
               "quota, or the scheduler's round)"
               + (f"; the network's packets take {row['link_cores_a']:.3g} cores on A, {row['link_cores_b']:.3g} "
                  "on B from a worker's compute" if row['link_cores_a'] or row['link_cores_b'] else "")
               + (f" ({row['link_note']})" if isinstance(row.get("link_note"), str) else "")
               for row in table.to_dict("records")],
             f"  memory r_m x{f['r_m']:.4g}, w_m x{f['w_m']:.4g}; network r_net x{f['r_net']:.4g}, "
             f"lat_net x{f['lat_net']:.4g}; storage r_d x{f['r_d']:.4g}",
             f"  interval: {pct} % of {info['draws']} draws of the fit's constants ({info['fit_draws']}) and of both "
             "profiles' (log-normal, the relative uncertainty one standard deviation of the log)"]
    played = [row for row in table.to_dict("records") if transfer.is_finite(row.get("quota_loop_s"))]
    if played:
        lines.append("  where B's quota holds every rank (w = " + ", ".join(str(r["w"]) for r in played) + "), the "
                     f"closed loop is played out over the quota's periods for {quota_loop.STARTS} random starts "
                     "of the ranks' periods (on B: their mean; the interval also spans them): " + "; ".join(
                         f"w={r['w']}: {_seconds(r['quota_loop_s'])} [{_seconds(r['quota_loop_low_s'])}, "
                         f"{_seconds(r['quota_loop_high_s'])}], mean value analysis {_seconds(r['mean_value_s'])}"
                         + (f" ({r['quota_loop_locked']:.0f} of the starts left out: they lock the loop, a message's "
                            "two ranks never running together)" if r["quota_loop_locked"] else "")
                         for r in played))
    if info.get("serial_comm"):
        lines.insert(3, "  --serial-comm: c_p also gains B's extra time of the two transfers of n_w values per batch "
                        "(its factor above includes it)")
    lines += [f"  note: {note}" for note in info["notes"]]
    return lines


def _init_on_b(model: dict, source: str, profile: str, disk_b: dict | None, workers: list[int]) -> dict | None:
    """B's initialisation carried through r_d (ddltrace.models.init_transfer; ``disk_b``: B's disk section given
    apart, else the profile's), or ``{"missing": why}`` where the model or B's profile lacks what it needs; None
    where A's runs measured no initialisation."""
    from ddltrace.models import init_transfer, transfer

    if not any(transfer.is_finite(r.get("init_s")) for r in model.get("measurements") or []):
        return None
    why = init_transfer.missing(model)
    if why:
        return {"missing": f"{source}: {why}"}
    if disk_b is None:
        try:
            disk_b = init_transfer.disk_r_d(load_json(profile, "hardware profile"), profile)
        except DdltraceError as exc:
            return {"missing": f"{exc} (or give B's disk section apart: --disk-profile B-disk.json)"}
    return init_transfer.init_on_b(model, disk_b, workers)


#: The file types matplotlib's Agg backend writes (``FigureCanvasAgg.get_supported_filetypes``), for --plot.
PLOT_TYPES = ("eps", "jpeg", "jpg", "pdf", "pgf", "png", "ps", "raw", "rgba", "svg", "svgz", "tif", "tiff", "webp")


def run_predict(args) -> int:
    if args.plot and Path(args.plot).suffix.lower().lstrip(".") not in PLOT_TYPES:
        raise DdltraceError(f"--plot {args.plot}: not a picture file matplotlib writes (give a name ending in "
                            f"{', '.join('.' + t for t in ('png', 'pdf', 'svg'))}, ...)")
    model = load_json(args.model, "model")
    workers = sorted(set(parse_int_list(args.workers, "--workers")))  # the table, the plot's line, "the first w past"
    what_if = parse_what_if(args.what_if)
    if args.serial_comm and not args.profile:
        raise DdltraceError("--serial-comm: only with --profile B.json (it says how the costs carry to B)")
    if args.serial_comm and isinstance(model, dict) and (model.get("workload") or {}).get("serial"):
        raise DdltraceError(f"--serial-comm: {args.model} is the closed loop already ('model fit --serial-comm'): its "
                            "transfers are in its cycle; the option is for a model fitted with Hashemi's max")
    disk_b = None
    if args.disk_profile:  # given for its disk section: without one it is bad input
        from ddltrace.models import init_transfer

        if not args.profile:
            raise DdltraceError("--disk-profile: only with --profile B.json (it is B's disk section)")
        disk_b = init_transfer.disk_r_d(load_json(args.disk_profile, "disk profile"), args.disk_profile)
    if args.batches and not args.profile:
        raise DdltraceError("--batches: only with --profile B.json (the batch sizes are compared on B)")
    batches = parse_int_list(args.batches, "--batches") if args.batches else []
    table = _predict_table(model, args.model, workers, args.batch, what_if, args.profile, args.serial_comm)
    moved = "transfer" in table.attrs
    init = _init_on_b(model, args.model, args.profile, disk_b, workers) if moved else None
    sweep = _batch_sweep(model, args.model, workers, batches, args.profile, args.serial_comm) if batches else None
    if args.plot:
        _plot(table, args.plot, args.what_if)
    if args.json:
        records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                   for r in table.to_dict("records")]
        knees = {k: {"w": None if math.isinf(w) else w, "cause": c, "at_least": low}
                 for k, (w, c, low) in table.attrs["knees"].items()}
        for name, drawn in table.attrs["knee_intervals"].items():
            knees[name]["interval"] = _json_knee_on_a(drawn)
        if moved:
            knees["profile"]["interval"] = _json_knee_interval(table.attrs["knee_interval_on_b"])
        if "knee_interval_on_b_what_if" in table.attrs:
            knees["what_if"]["interval"] = _json_knee_interval(table.attrs["knee_interval_on_b_what_if"])
        out = {"model": args.model, "what_if": args.what_if, "knee": knees, "rows": records,
               "interval_on_a": table.attrs["interval_on_a"], "definitions": _definitions(table, model)}
        if moved:
            out["transfer"] = table.attrs["transfer"]
        if init is not None:
            out["init_on_b"] = init
        if sweep:
            out["batches"] = sweep
        out["batch"] = table.attrs["batch"]
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    knees = table.attrs.get("knees", {})
    label = " ".join(args.what_if)
    where = f"what-if on B: {label}" if moved else f"what-if: {label}"
    on_a = table.attrs["interval_on_a"]
    header = f"{'workers':>7}  {'predicted':>10}  "
    if "predicted_low_s" in table:
        span_title = f"{100 * on_a['confidence']:.0f} % interval"
        header += f"{span_title:>23}  "
    header += f"{'bound by':<15}"
    if "measured_s" in table:
        header += f"  {'measured':>10}  {'error':>7}"
    if moved:
        pct = int(round(100 * table.attrs["transfer"]["confidence"]))
        header += f"  {'on B':>10}  {f'{pct} % interval':>23}  {'bound by on B':<15}"
    if what_if:
        header += f"  {'what-if':>10}  "
        if "what_if_low_s" in table:
            header += f"{'interval':>23}  "
        header += f"{'bound by':<15}"
    batch = table.attrs["batch"]
    moved_batch = f" ({batch['note']})" if batch.get("note") else ""
    print(f"computation phase (all epochs) at batch {table['b'].iloc[0]:g}{moved_batch}"
          + (f"; {where}" if label else ""))
    print(header)
    for row in table.to_dict("records"):
        line = f"{row['w']:>7}  {_seconds(row['predicted_s']):>10}  "
        if "predicted_low_s" in row:
            line += f"{_span(row['predicted_low_s'], row['predicted_high_s']):>23}  "
        line += f"{row['bound_by']:<15}"
        if "measured_s" in row:
            meas = row["measured_s"]
            err = "" if math.isnan(meas) else f"{100 * (row['predicted_s'] - meas) / meas:+.1f} %"
            line += f"  {_seconds(meas) if not math.isnan(meas) else '-':>10}  {err:>7}"
        if moved:
            span = f"[{_seconds(row['profile_low_s'])}, {_seconds(row['profile_high_s'])}]"
            line += f"  {_seconds(row['profile_s']):>10}  {span:>23}  {row['profile_bound_by']:<15}"
        if what_if:
            line += f"  {_seconds(row['what_if_s']):>10}  "
            if "what_if_low_s" in row:
                line += f"{_span(row['what_if_low_s'], row['what_if_high_s']):>23}  "
            line += f"{row['what_if_bound_by']:<15}"
        print(line.rstrip())
    for name, text in _definitions(table, model).items():
        print(f"  {name}: {text}")
    names = {"model": "", "profile": " on B", "what_if": f" with {label}" + (" on B" if moved else "")}
    for name, (w_star, cause, at_least) in knees.items():
        where = "none" if math.isinf(w_star) else f"{_knee_text(w_star)} ({cause})"
        if math.isinf(w_star) and at_least:
            where = f"w* >= {at_least:.3g} workers (no run shows the server's limit)"
        print(f"knee{names[name]}: {where}")
        if w_star < 1:
            print(f"  {_under_one(cause)}")
        if name in table.attrs["knee_intervals"] and _describe_knee_on_a(table.attrs["knee_intervals"][name]):
            print(_describe_knee_on_a(table.attrs["knee_intervals"][name]))
        if name == "profile":
            print("\n".join(_describe_knee_interval(table.attrs["knee_interval_on_b"])))
        if name == "what_if" and "knee_interval_on_b_what_if" in table.attrs:
            print("\n".join(_describe_knee_interval(table.attrs["knee_interval_on_b_what_if"], "the what-if's knee",
                                                     define=False)))
    if moved:
        best = table.attrs["transfer"]["best_w"]
        print(f"best worker count on B: {best} (the fewest of those asked within "
              f"{100 * BEST_TOLERANCE:.0f} % of the fastest predicted phase)")
        past = table.attrs["transfer"]["best_past_knee"]
        if past:
            falls = (f"{_seconds(past['from_s'])} at w = {past['from_w']}, {_seconds(past['best_s'])} at w = "
                     f"{past['best_w']} ({100 * (past['best_s'] - past['from_s']) / past['from_s']:+.0f} %)"
                     if past["best_w"] > past["from_w"] else
                     f"{_seconds(past['best_s'])} at w = {past['best_w']}, the first count asked past the knee, is "
                     f"within {100 * BEST_TOLERANCE:.0f} % of the fastest")
            print(f"  past the knee on B (w* = {past['knee_w']:.3g}) each added worker gains less than half of its "
                  f"ideal share, but the phase still falls: {falls}")
        print("\n".join(_describe_transfer(table)))
    if init is not None and "missing" in init:
        print(f"initialisation on B: not predicted: {init['missing']}")
    elif init is not None:
        from ddltrace.models import init_transfer

        print("\n".join(init_transfer.describe(init)))
    if sweep:
        _print_batch_sweep(sweep, workers)
    if args.plot:
        print(f"\nplot written to {args.plot}")
    return 0


def _span(low: float, high: float) -> str:
    return "-" if math.isnan(low) else f"[{_seconds(low)}, {_seconds(high)}]"


def _definitions(table: pd.DataFrame, model: dict) -> dict[str, str]:
    """What each column of the prediction's table is (its window, its unit, its interval or why it has none)."""
    on_a = table.attrs["interval_on_a"]
    kind = ("the closed loop (the workers pull, compute and push in turn; the server a queue)"
            if (model.get("workload") or {}).get("serial") else "Hashemi's max(network, worker compute + memory)")
    rms = model.get("rms_relative_error")
    drawn = (f"{100 * on_a['confidence']:.0f} % interval over {on_a['draws']} draws of {on_a['covers']} (the fit's "
             f"rms relative error over its runs: {format_percent(rms) if isinstance(rms, float) else 'n/a'})"
             if "why_not" not in on_a else f"no interval: {on_a['why_not']}")
    out = {"predicted": f"the model's computation phase at w workers, all epochs, seconds ({kind}); {drawn}"}
    if "measured_s" in table:
        out["measured"] = ("the runs' computation phase at that w and batch as the fit read them (the slowest worker's "
                           "steady state, all epochs; their mean where several); error = (predicted - measured) / "
                           "measured")
    if "what_if_s" in table:
        out["what-if"] = ("the prediction with the what-if's constants" + (
            " on B; its interval over the same draws as B's, none ('-') where B's quota loop is played out"
            if "profile_s" in table else
            "; its interval over the same draws as the prediction's" if "what_if_low_s" in table else ""))
    return out


def _plot(table: pd.DataFrame, path: str, what_if: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(table["w"], table["predicted_s"], "o-", label="model")
    if "predicted_low_s" in table:
        pct = int(round(100 * table.attrs["interval_on_a"]["confidence"]))
        ax.fill_between(table["w"], table["predicted_low_s"], table["predicted_high_s"], alpha=0.15,
                        label=f"model, {pct} % interval (the fit's constants)")
    if "profile_s" in table:
        ax.plot(table["w"], table["profile_s"], "d-", label="on B (--profile)")
        ax.fill_between(table["w"], table["profile_low_s"], table["profile_high_s"], alpha=0.2,
                        label=f"on B, {int(round(100 * table.attrs['transfer']['confidence']))} % interval")
    if "what_if_s" in table:
        ax.plot(table["w"], table["what_if_s"], "s--", label="what-if: " + " ".join(what_if))
    if "measured_s" in table and table["measured_s"].notna().any():
        ax.plot(table["w"], table["measured_s"], "k^", label="measured")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("workers w")
    ax.set_ylabel("computation phase, all epochs (s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise DdltraceError(f"{path}: cannot write the plot ({exc.strerror})") from None
    finally:
        plt.close(fig)
