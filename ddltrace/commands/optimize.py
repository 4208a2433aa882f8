"""``ddltrace optimize --dnn D --profile P --machines N``: Yan et al.'s scalability optimiser.

Minimises the epoch time T_epoch over the number of parameter servers, model replicas and workers per replica
(N_ps + N_mr * N_wr <= N), the threads per worker (H <= cores) and, per layer, the partitions and replicas
(the dynamic program over layers with the greedy segment-to-worker mapping). Prints the configurations
ranked, each with its predicted epoch time, its three terms and its bottleneck, and the interval of the epoch time
over the profile's uncertainties (with how often each printed configuration is the fastest of them).
``--baseline A.json`` puts the same configurations on the machine the job runs on now beside them.
"""

from __future__ import annotations

import json
import math
import sys
import time

from ddltrace.errors import DdltraceError
from ddltrace.models.dnn import load_dnn
from ddltrace.models.quantities import load_json, parse_int_list, parse_what_if, precision_name, profile_constants
from ddltrace.options import integer, positive
from ddltrace.rank_progress import PROGRESS_EVERY_S
from ddltrace.units import format_count, format_ns

#: Monte Carlo draws of the profile's constants for the intervals of the printed configurations.
DRAWS = 100
#: Profile constants Yan's model reads, with the name calibrate also gives them (the relative uncertainty of either).
UNCERTAIN = {"C_muladd": None, "C_act": None, "C_err": None, "C_ncost": "lat_net", "C_nbw": "r_net"}

#: ``--read-bound``'s choices: models/yan.py's READ_BOUNDS, named here so that the CLI starts without numpy
#: (tests/test_cli_startup.py checks that the two agree).
READ_BOUNDS = ("min", "max", "mean")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "optimize", help="rank cluster configurations by predicted epoch time (Yan et al.)",
        description="Search parameter servers, model replicas, workers per replica, threads and per-layer "
                    "partitions/replicas for the fastest epoch on N machines, with Yan et al.'s layer-wise model "
                    "and a hardware profile (C_muladd, C_act, C_err, C_interf, C_ncost/lat_net, C_nbw/r_net).",
        epilog="Example: ddltrace optimize --dnn imagenet22k-adam --profile hw.json --machines 20 --samples 15e6")
    p.add_argument("--dnn", required=True, help="DNN description: a JSON file or a bundled name "
                                                "(mnist-adam, imagenet22k-adam, alexnet, vgg11, ...)")
    p.add_argument("--profile", required=True, metavar="FILE", help="hardware profile (ddltrace calibrate)")
    p.add_argument("--machines", type=integer(2), required=True, help="machines N in all (servers + workers)")
    p.add_argument("--samples", type=positive(), default=1e6, help="samples per epoch N_sample (default 1e6)")
    p.add_argument("--read-every", type=positive(), default=70, help="samples between weight reads N_read (default 70)")
    p.add_argument("--read-bound", choices=READ_BOUNDS, default="min",
                   help="PS read time: min (eq. 11, the default: it ranks Yan et al.'s Table 1 best, see "
                        "benchmarks/model_ranking.py), max (eq. 10) or their mean")
    p.add_argument("--threads", help="thread counts H to try, e.g. 1,8,16 (default: every H from 1 to the profile's "
                                        "cores)")
    p.add_argument("--max-workers", type=integer(1), default=4,
                   help="largest N_wr, workers per replica (default 4; the search grows with its square)")
    p.add_argument("--config", action="append", default=[], metavar="W/R/PS",
                   help="only these configurations (#workers/#replicas/#servers), repeatable")
    p.add_argument("--what-if", action="append", default=[], metavar="NAME=VALUE",
                   help="change a hardware constant: C_nbw=10x (ten times the bandwidth), C_muladd=0.5x, "
                        "C_ncost=1e-6 (seconds); repeatable")
    p.add_argument("--baseline", metavar="A.json",
                   help="the profile of the machine the job runs on now: each printed configuration's epoch time "
                        "there too, B / A, and A's own best")
    p.add_argument("--top", type=integer(1), default=10, help="configurations to print (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def parse_config(text: str) -> tuple[int, int, int]:
    """'4/4/4' -> (N_wr, N_mr, N_ps)."""
    parts = text.split("/")
    try:
        values = tuple(int(x) for x in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 1:
        raise DdltraceError(f"--config {text!r}: expected W/R/PS, three positive integers (e.g. 4/4/4)")
    return values


def _relative_uncertainty(profile: dict, bytes_per_value: int) -> dict[str, float]:
    """Each constant's uncertainty over its value (one standard deviation), 0 where the profile gives none; the
    compute constants' at the DNN's precision (``bytes_per_value``)."""
    table = profile.get("constants", profile) if isinstance(profile, dict) else {}
    out = {}
    for name, alias in UNCERTAIN.items():
        name_there = precision_name(table, name, bytes_per_value)
        entry = table.get(name_there, table.get(alias) if alias else None)
        if isinstance(entry, dict) and entry.get("value"):
            out[name] = abs(float(entry.get("uncertainty") or 0.0) / float(entry["value"]))
    return out


def _hardware(path: str, what_if: list[str], bytes_per_value: int):
    """Yan's constants of the profile at ``path``, the compute ones at the DNN's precision (``bytes_per_value``),
    with the what-ifs made; and the profile as read."""
    from ddltrace.models import yan

    raw = load_json(path, "hardware profile")
    hw = yan.Hardware.from_profile(profile_constants(raw, path, bytes_per_value), path)
    if what_if:
        changes = parse_what_if(what_if)
        cores = changes.get("cores")
        if cores is not None and cores[0] == "set" and not (cores[1] >= 1 and float(cores[1]).is_integer()):
            raise DdltraceError(f"--what-if cores={cores[1]:g}: the cores per machine must be a whole number >= 1")
        try:
            hw = hw.scaled(changes)
        except KeyError as exc:
            raise DdltraceError(f"--what-if: {exc.args[0]!r} cannot change: use one of "
                                f"{', '.join(yan.Hardware.__dataclass_fields__)} (cores only with cores=N)") from None
        if not hw.C_nbw > 0:  # every weight read and activation divides by it
            raise DdltraceError(f"--what-if {' '.join(w for w in what_if if w.strip().startswith('C_nbw'))}: the "
                                "network bandwidth C_nbw must stay above 0 bytes/s")
    return hw, raw


def _one(dnn, hw, args, config, cache: dict | None = None) -> float:
    """T_epoch of one (N_wr, N_mr, N_ps, H) configuration on ``hw`` (H capped at its cores); ``cache`` is
    :func:`~ddltrace.models.yan.optimise_layers`' (boundary costs of one DNN on one ``hw``, shared between
    configurations)."""
    from ddltrace.models import yan

    wr, mr, ps, h = config
    res = yan.Resources(ps, mr, wr, min(h, max(1, hw.cores)), args.samples, args.read_every, args.read_bound)
    return yan.optimise_layers(dnn, res, hw, cache).t_epoch


def _intervals(dnn, hw, raw: dict, args, configs: list[tuple], say) -> tuple[list, list, list]:
    """(low, high, share of draws fastest) of each configuration over the profile's uncertainties; progress lines
    through ``say``."""
    import numpy as np

    rel = _relative_uncertainty(raw, dnn.bytes_per_value)
    rng = np.random.default_rng(0)
    times = np.empty((DRAWS, len(configs)))
    tick = progress_ticks(say, "draws of the profile's constants")
    for i in range(DRAWS):
        changes = {name: ("scale", math.exp(rng.standard_normal() * r)) for name, r in rel.items()}
        drawn, cache = hw.scaled(changes), {}
        times[i] = [_one(dnn, drawn, args, c, cache) for c in configs]
        tick(i + 1, DRAWS)
    low, high = np.percentile(times, [2.5, 97.5], axis=0)
    fastest = np.bincount(times.argmin(axis=1), minlength=len(configs)) / DRAWS
    return low.tolist(), high.tolist(), fastest.tolist()


def progress_ticks(say, what: str):
    """``tick(done, total)``: a line through ``say`` every :data:`~ddltrace.rank_progress.PROGRESS_EVERY_S`
    seconds of the work (none for work shorter than that), and at its end if one was printed."""
    started = last = time.perf_counter()
    printed = False

    def tick(done: int, total: int) -> None:
        nonlocal last, printed
        now = time.perf_counter()
        if now - last >= PROGRESS_EVERY_S or (printed and done == total):
            last, printed = now, True
            say(f"{done:,} of {total:,} {what} ({now - started:.0f} s)")

    return tick


def run(args) -> int:
    from ddltrace.models import yan

    dnn = load_dnn(args.dnn)
    hw, raw = _hardware(args.profile, args.what_if, dnn.bytes_per_value)
    # read before the search: a --baseline that is no profile is one line, not one after the search's progress
    hw_a = _hardware(args.baseline, [], dnn.bytes_per_value)[0] if args.baseline else None
    threads = parse_int_list(args.threads, "--threads") if args.threads else None
    configs = [parse_config(c) for c in args.config] or None
    def say(message: str) -> None:
        print(f"ddltrace optimize: {message}", file=sys.stderr, flush=True)

    ranked = yan.optimise(dnn, hw, args.machines, N_sample=args.samples, N_read=args.read_every, threads=threads,
                          read_bound=args.read_bound, configurations=configs, max_workers=args.max_workers,
                          progress=progress_ticks(say, "configurations searched"))
    rows = [{"rank": i + 1, "config": c.label, "N_wr": c.N_wr, "N_mr": c.N_mr, "N_ps": c.N_ps, "H": c.H,
             "t_epoch_s": c.t_epoch, "compute_s": c.breakdown.compute, "activations_s": c.breakdown.activations,
             "weight_reads_s": c.breakdown.weights, "bottleneck": c.breakdown.bottleneck,
             "layers": [{"layer": layer.name, "partitions": s[0], "replicas": s[1]}
                        for layer, s in zip(dnn.layers, c.breakdown.states, strict=True)]}
            for i, c in enumerate(ranked)]
    shown = rows[:args.top]
    keys = [(r["N_wr"], r["N_mr"], r["N_ps"], r["H"]) for r in shown]
    low, high, fastest = _intervals(dnn, hw, raw, args, keys, say)
    for row, lo, hi, share in zip(shown, low, high, fastest, strict=True):
        row.update(t_epoch_low_s=lo, t_epoch_high_s=hi, fastest_share=share)
    baseline = None
    if args.baseline:
        cache_a: dict = {}
        for row, key in zip(shown, keys, strict=True):
            row["baseline_t_epoch_s"] = _one(dnn, hw_a, args, key, cache_a)
        best_a = yan.optimise(dnn, hw_a, args.machines, N_sample=args.samples, N_read=args.read_every,
                              threads=threads and [min(h, max(1, hw_a.cores)) for h in threads],
                              read_bound=args.read_bound, configurations=configs, max_workers=args.max_workers,
                              progress=progress_ticks(say, "configurations searched on --baseline's profile"))[0]
        baseline = {"profile": args.baseline, "best": best_a.label, "best_H": best_a.H,
                    "best_t_epoch_s": best_a.t_epoch}
    if args.json:
        json.dump({"dnn": dnn.name, "machines": args.machines, "samples": args.samples, "what_if": args.what_if,
                   "read_every": args.read_every, "read_bound": args.read_bound, "draws": DRAWS,
                   "baseline": baseline, "ranked": rows}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{dnn.name} on {args.machines} machines: {len(rows)} configurations, {format_count(args.samples)} samples "
          f"per epoch, weights read every {format_count(args.read_every)} samples ({args.read_bound} of eq. 10/11)"
          + (f"; what-if: {' '.join(args.what_if)}" if args.what_if else ""))
    header = (f"{'rank':>4}  {'W/R/PS':<8} {'H':>3}  {'T_epoch':>9}  {'95 % interval':>21}  {'fastest':>7}  "
              f"{'compute':>9}  {'activ.':>9}  {'reads':>9}  ")
    if baseline:
        header += f"{'on A':>9}  {'B / A':>6}  "
    print(header + f"{'bottleneck':<24} partitions x replicas per layer")
    for row in shown:
        layers = " ".join(f"{lay['partitions']}x{lay['replicas']}" for lay in row["layers"])
        span = f"[{format_ns(row['t_epoch_low_s'] * 1e9)}, {format_ns(row['t_epoch_high_s'] * 1e9)}]"
        line = (f"{row['rank']:>4}  {row['config']:<8} {row['H']:>3}  {format_ns(row['t_epoch_s'] * 1e9):>9}  "
                f"{span:>21}  {100 * row['fastest_share']:>5.0f} %  "
                f"{format_ns(row['compute_s'] * 1e9):>9}  {format_ns(row['activations_s'] * 1e9):>9}  "
                f"{format_ns(row['weight_reads_s'] * 1e9):>9}  ")
        if baseline:
            line += (f"{format_ns(row['baseline_t_epoch_s'] * 1e9):>9}  "
                     f"{row['t_epoch_s'] / row['baseline_t_epoch_s']:>5.3g}x  ")
        print(line + f"{row['bottleneck']:<24} {layers}")
    if len(rows) > args.top:
        print(f"... {len(rows) - args.top} more (--top N)")
    print("T_epoch: time per epoch, the sum of compute (U_f + U_b + U_w of each layer's slowest segment, times "
          "C_interf(H), x N_sample / Q(l)), activ. (the remote activations and error terms M_f + M_b, x N_sample / "
          f"Q(l)) and reads (the weight reads M_w, {args.read_bound} of eq. 10/11, x N_sample / N_read); bottleneck: "
          "the largest of the three; W/R/PS: workers per replica N_wr / model replicas N_mr / parameter servers N_ps, "
          "H threads per worker" + ("; on A: the same configuration's T_epoch with --baseline's profile, B / A their "
                                    "ratio" if baseline else ""))
    print(f"interval: 95 % of {DRAWS} draws of the profile's C_muladd, C_act, C_err, C_ncost, C_nbw within their "
          "uncertainties (log-normal, the relative uncertainty one standard deviation of the log; C_interf held); "
          "fastest: share of the draws in which the configuration is the fastest of those printed")
    if baseline:
        print(f"on A ({baseline['profile']}): best {baseline['best']} with H = {baseline['best_H']} at "
              f"{format_ns(baseline['best_t_epoch_s'] * 1e9)} per epoch")
    return 0
