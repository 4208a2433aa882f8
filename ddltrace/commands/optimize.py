"""``ddltrace optimize --dnn D --profile P --machines N``: Yan et al.'s scalability optimiser.

Minimises the epoch time T_epoch over the number of parameter servers, model replicas and workers per replica
(N_ps + N_mr * N_wr <= N), the threads per worker (H <= cores) and, per layer, the partitions and replicas
(the dynamic program over layers with the greedy segment-to-worker mapping). Prints the configurations
ranked, each with its predicted epoch time, its three terms and its bottleneck.
"""

from __future__ import annotations

import json
import sys

from ddltrace.errors import DdltraceError
from ddltrace.models.dnn import load_dnn
from ddltrace.models.quantities import load_json, parse_int_list, parse_what_if, profile_constants
from ddltrace.options import integer, positive
from ddltrace.units import format_ns

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
    p.add_argument("--threads", help="thread counts H to try, e.g. 1,8,16 (default: the profile's cores)")
    p.add_argument("--max-workers", type=integer(1), default=4,
                   help="largest N_wr, workers per replica (default 4; the search grows with its square)")
    p.add_argument("--config", action="append", default=[], metavar="W/R/PS",
                   help="only these configurations (#workers/#replicas/#servers), repeatable")
    p.add_argument("--what-if", action="append", default=[], metavar="NAME=VALUE",
                   help="change a hardware constant: C_nbw=10x (ten times the bandwidth), C_muladd=0.5x, "
                        "C_ncost=1e-6 (seconds); repeatable")
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


def run(args) -> int:
    from ddltrace.models import yan

    dnn = load_dnn(args.dnn)
    hw = yan.Hardware.from_profile(profile_constants(load_json(args.profile, "hardware profile"), args.profile),
                                   args.profile)
    if args.what_if:
        try:
            hw = hw.scaled(parse_what_if(args.what_if))
        except KeyError as exc:
            raise DdltraceError(f"--what-if: {exc.args[0]!r} cannot change: use one of "
                                f"{', '.join(yan.Hardware.__dataclass_fields__)} (cores only with cores=N)") from None
    threads = parse_int_list(args.threads, "--threads") if args.threads else None
    configs = [parse_config(c) for c in args.config] or None
    ranked = yan.optimise(dnn, hw, args.machines, N_sample=args.samples, N_read=args.read_every, threads=threads,
                          read_bound=args.read_bound, configurations=configs, max_workers=args.max_workers)
    rows = [{"rank": i + 1, "config": c.label, "N_wr": c.N_wr, "N_mr": c.N_mr, "N_ps": c.N_ps, "H": c.H,
             "t_epoch_s": c.t_epoch, "compute_s": c.breakdown.compute, "activations_s": c.breakdown.activations,
             "weight_reads_s": c.breakdown.weights, "bottleneck": c.breakdown.bottleneck,
             "layers": [{"layer": layer.name, "partitions": s[0], "replicas": s[1]}
                        for layer, s in zip(dnn.layers, c.breakdown.states, strict=True)]}
            for i, c in enumerate(ranked)]
    if args.json:
        json.dump({"dnn": dnn.name, "machines": args.machines, "samples": args.samples, "what_if": args.what_if,
                   "read_every": args.read_every, "read_bound": args.read_bound, "ranked": rows}, sys.stdout,
                  indent=2)
        print()
        return 0
    print(f"{dnn.name} on {args.machines} machines: {len(rows)} configurations, {args.samples:g} samples per "
          f"epoch, weights read every {args.read_every:g} samples ({args.read_bound} of eq. 10/11)"
          + (f"; what-if: {' '.join(args.what_if)}" if args.what_if else ""))
    print(f"{'rank':>4}  {'W/R/PS':<8} {'H':>3}  {'T_epoch':>9}  {'compute':>9}  {'activ.':>9}  {'reads':>9}  "
          f"{'bottleneck':<24} partitions x replicas per layer")
    for row in rows[:args.top]:
        layers = " ".join(f"{lay['partitions']}x{lay['replicas']}" for lay in row["layers"])
        print(f"{row['rank']:>4}  {row['config']:<8} {row['H']:>3}  {format_ns(row['t_epoch_s'] * 1e9):>9}  "
              f"{format_ns(row['compute_s'] * 1e9):>9}  {format_ns(row['activations_s'] * 1e9):>9}  "
              f"{format_ns(row['weight_reads_s'] * 1e9):>9}  {row['bottleneck']:<24} {layers}")
    if len(rows) > args.top:
        print(f"... {len(rows) - args.top} more (--top N)")
    return 0
