"""``ddltrace plan gpus|ps|batch|placement``: Chang et al.'s lemmas, the mini-batch program, RALP's placement.

- ``plan gpus --overhead-ratio R [--gpus 2,4,8] [--efficiency E] [--speedup S]``: Lemma 3.1, speedup and
  efficiency on N GPUs, the largest overhead ratio for a target efficiency, the GPUs for a target speedup.
- ``plan ps --param-bytes 250MB --workers 8 --bandwidth 10Gbit/s --compute-time 0.5s``: Lemma 3.2, the parameter
  servers that hide pull and push behind compute (``--profile B.json`` instead of ``--bandwidth``: B's C_nbw).
- ``plan batch --dnn D --gpu-memory 12GiB --batches 32,64,128``: the mini-batch integer program (one convolution
  algorithm per layer within the GPU memory), the batch with the most samples per second (``--profile B.json``
  instead of ``--gpu-memory``: B's GPU 0).
- ``plan placement --dnn D --batch 32 --workers 8``: RALP's skewness, split point and traffic per step.
"""

from __future__ import annotations

import json
import math
import sys

from ddltrace.errors import DdltraceError
from ddltrace.models.dnn import load_dnn
from ddltrace.models.quantities import parse_bandwidth, parse_bytes, parse_int_list, parse_seconds
from ddltrace.options import integer, number
from ddltrace.units import format_bytes, format_ns, format_percent

#: ``placement --k``'s default: models/ralp.py's DEFAULT_K, named here so that the CLI starts without numpy
#: (tests/test_cli_startup.py checks that the two agree).
DEFAULT_K = -0.5


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="plan GPUs, parameter servers, mini-batch and layer placement (Chang et al., RALP)",
        description="Back-of-the-envelope planning from the papers' closed forms: Lemma 3.1 (GPUs), Lemma 3.2 "
                    "(parameter servers), the mini-batch integer program, RALP's layer placement.")
    sub = p.add_subparsers(dest="plan_verb", metavar="gpus|ps|batch|placement")
    sub.required = True

    g = sub.add_parser("gpus", help="Lemma 3.1: speedup and efficiency from the overhead ratio",
                       description="Amdahl with the overhead ratio R_O = T_O / T that computation cannot hide: "
                                   "S(N) = 1 / (R_O + (1 - R_O) / N), E(N) = S(N) / N.")
    g.add_argument("--overhead-ratio", type=number(0, 1), help="R_O, the fraction of a step not hidden (0..1)")
    g.add_argument("--gpus", default="1,2,4,8,16", help="GPU counts N (default 1,2,4,8,16)")
    g.add_argument("--efficiency", type=number(0, 1, low_open=True),
                   help="target efficiency E: print the largest R_O for each N")
    g.add_argument("--speedup", type=number(1, None, "x"),
                   help="target speedup S: print the GPUs it takes (with --overhead-ratio)")
    g.add_argument("--json", action="store_true", help="print JSON")
    g.set_defaults(func=run_gpus)

    s = sub.add_parser("ps", help="Lemma 3.2: parameter servers to hide communication",
                       description="N_ps >= 2 S_p N_w / (B T_C): pull and push of S_p bytes by N_w workers per round, "
                                   "B bytes/s per server, T_C seconds of compute per round.")
    s.add_argument("--param-bytes", help="parameter size S_p, e.g. 250MB (or give --dnn)")
    s.add_argument("--dnn", help="DNN description whose parameters give S_p")
    s.add_argument("--workers", type=integer(1), required=True, help="workers N_w")
    s.add_argument("--bandwidth", help="per-server bandwidth B, e.g. 10Gbit/s or 1.25GB/s (or give --profile)")
    s.add_argument("--profile", metavar="FILE", help="hardware profile ('ddltrace calibrate') of the servers' "
                                                     "machine: B is its C_nbw (else 1 / r_net)")
    s.add_argument("--compute-time", required=True, help="compute time of one round T_C, e.g. 0.5s or 300ms")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=run_ps)

    b = sub.add_parser("batch", help="mini-batch integer program under a GPU memory budget",
                       description="For each batch size, choose one convolution algorithm per layer (from the DNN's "
                                   "algorithm tables) minimising time within the GPU memory (scipy.optimize.milp); "
                                   "recommend the batch with the most samples per second.")
    b.add_argument("--dnn", required=True, help="DNN description with per-layer algorithm tables")
    b.add_argument("--gpu-memory", help="GPU memory, e.g. 12GiB (or give --profile)")
    b.add_argument("--profile", metavar="FILE", help="hardware profile ('ddltrace calibrate' with the gpu section) "
                                                     "of the machine: its GPU 0's memory")
    b.add_argument("--batches", required=True, help="candidate batch sizes, e.g. 32,64,128,256")
    b.add_argument("--json", action="store_true", help="print JSON")
    b.set_defaults(func=run_batch)

    r = sub.add_parser("placement", help="RALP: skewness, split point and traffic per step",
                       description="RALP's profiler: parameter skewness (offload when S < K), the split after "
                                   "layer i* = argmin O_i + sum P_x, and bytes per step and worker for a parameter "
                                   "server, ring all-reduce and RALP's placement.")
    r.add_argument("--dnn", required=True, help="DNN description (e.g. alexnet, vgg11)")
    r.add_argument("--batch", type=integer(1), required=True, help="batch size per worker")
    r.add_argument("--workers", type=integer(1), required=True, help="ring all-reduce participants W")
    r.add_argument("--k", type=number(), default=DEFAULT_K, help=f"threshold K (default {DEFAULT_K})")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=run_placement)


def _dump(obj) -> int:
    json.dump(obj, sys.stdout, indent=2)
    print()
    return 0


def run_gpus(args) -> int:
    from ddltrace.models import chang

    gpus = parse_int_list(args.gpus, "--gpus")
    out: dict = {"gpus": gpus}
    if args.speedup is not None and args.overhead_ratio is None:
        raise DdltraceError("plan gpus: --speedup needs --overhead-ratio R_O (the GPUs a speedup takes depend on it)")
    if args.overhead_ratio is None and args.efficiency is None:
        raise DdltraceError("plan gpus: give --overhead-ratio R_O (the speedup table; with --speedup, the GPUs it "
                            "takes) or --efficiency (the largest R_O for each GPU count)")
    if args.overhead_ratio is not None:
        r_o = args.overhead_ratio
        out["overhead_ratio"] = r_o
        out["table"] = [{"gpus": n, "speedup": chang.speedup(n, r_o), "efficiency": chang.efficiency(n, r_o)}
                        for n in gpus]
        if args.speedup is not None:
            out["gpus_for_speedup"] = {"speedup": args.speedup, "gpus": chang.gpus_for_speedup(args.speedup, r_o)}
    if args.efficiency is not None:
        out["max_overhead_ratio"] = [{"gpus": n, "efficiency": args.efficiency,
                                      "max_overhead_ratio": chang.max_overhead_ratio(n, args.efficiency)}
                                     for n in gpus]
    if args.json:
        return _dump(out)
    if "table" in out:
        bound = (f"speedup bounded by {1 / out['overhead_ratio']:.3g}x" if out["overhead_ratio"] else
                 "no overhead: the speedup is N, unbounded")
        print(f"Lemma 3.1 with overhead ratio R_O = {format_percent(out['overhead_ratio'])} ({bound})")
        print(f"{'GPUs':>5}  {'speedup':>8}  {'efficiency':>10}")
        for row in out["table"]:
            print(f"{row['gpus']:>5}  {row['speedup']:>7.2f}x  {format_percent(row['efficiency']):>10}")
    if "gpus_for_speedup" in out:
        need = out["gpus_for_speedup"]["gpus"]
        print(f"speedup {args.speedup:g}x needs N = {need:.2f} -> {math.ceil(need - 1e-9)} GPUs")
    for row in out.get("max_overhead_ratio", []):
        if row["gpus"] == 1:  # E(1) = 1 whatever R_O
            print(f"efficiency {format_percent(row['efficiency'])} on 1 GPU: any R_O (one GPU is always 100 % "
                  "efficient)")
            continue
        print(f"efficiency {format_percent(row['efficiency'])} on {row['gpus']} GPUs needs R_O <= "
              f"{format_percent(row['max_overhead_ratio'])}")
    return 0


def _one_of(given: str | None, profile: str | None, option: str, parse, from_profile) -> float:
    """The option's value, or the profile's: exactly one of the two."""
    if (given is None) == (profile is None):
        raise DdltraceError(f"give exactly one of {option} or --profile")
    return parse(given) if given is not None else from_profile(profile)


def _profile_bandwidth(path: str) -> tuple[float, str, float]:
    """Bytes per second of the profile's network: C_nbw, else 1 / r_net; with the constant's name and its relative
    uncertainty (one standard uncertainty over the value, 0 where the profile gives none)."""
    from ddltrace.models.quantities import load_json, profile_constants

    raw = load_json(path, "hardware profile")
    constants = profile_constants(raw, path)
    table = raw.get("constants", raw)
    for name in ("C_nbw", "r_net"):
        value = constants.get(name)
        if isinstance(value, float) and value > 0:
            entry = table.get(name)
            spread = entry.get("uncertainty") if isinstance(entry, dict) else None
            relative = float(spread) / float(entry["value"]) if spread and isinstance(entry.get("value"), int | float) \
                else 0.0
            return (value if name == "C_nbw" else 1.0 / value), name, relative
    raise DdltraceError(f"{path}: the profile has no network bandwidth (C_nbw or r_net: calibrate's net section)")


#: The share of the interval of N_ps from a profile's bandwidth (its uncertainty one standard deviation of its log).
CONFIDENCE = 0.95


def _profile_gpu_memory(path: str) -> float:
    """Bytes of memory of the profile's GPU 0."""
    from ddltrace.models.quantities import load_json

    profile = load_json(path, "hardware profile")
    gpus = (profile.get("machine") or {}).get("gpus") if isinstance(profile, dict) else None
    memory = gpus[0].get("memory_bytes") if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict) else None
    if not isinstance(memory, int | float) or isinstance(memory, bool) or not memory > 0:
        raise DdltraceError(f"{path}: the profile describes no GPU memory (calibrate's gpu section on a machine "
                            "with a GPU)")
    return float(memory)


def run_ps(args) -> int:
    from ddltrace.models import chang

    if (args.param_bytes is None) == (args.dnn is None):
        raise DdltraceError("plan ps: give exactly one of --param-bytes or --dnn")
    size = parse_bytes(args.param_bytes, "--param-bytes") if args.param_bytes else load_dnn(args.dnn).model_bytes
    if (args.bandwidth is None) == (args.profile is None):
        raise DdltraceError("give exactly one of --bandwidth or --profile")
    if args.profile:
        bandwidth, name, relative = _profile_bandwidth(args.profile)
        source = f"{args.profile}'s {name}" + (" (1 / r_net)" if name == "r_net" else "")
    else:
        bandwidth, source, relative = parse_bandwidth(args.bandwidth, "--bandwidth"), "--bandwidth", None
    compute = parse_seconds(args.compute_time, "--compute-time")
    need = chang.parameter_servers(size, args.workers, bandwidth, compute)
    servers = max(1, math.ceil(need - 1e-9))
    interval = None  # N_ps is 1 / B: B's log-normal interval (the uncertainty one standard deviation of its log)
    if relative is not None:
        from statistics import NormalDist

        spread = math.exp(NormalDist().inv_cdf(0.5 + CONFIDENCE / 2) * relative)
        interval = {"confidence": CONFIDENCE, "bandwidth_relative_uncertainty": relative,
                    "min_servers": [need / spread, need * spread],
                    "servers": [max(1, math.ceil(need / spread - 1e-9)), max(1, math.ceil(need * spread - 1e-9))]}
    why_not = None if interval else "the bandwidth and the compute time are given (--bandwidth, --compute-time), " \
                                     "not measured: N_ps is exact for them"
    if args.json:
        return _dump({"param_bytes": size, "workers": args.workers, "bandwidth_bytes_per_s": bandwidth,
                      "bandwidth_from": source, "compute_time_s": compute, "min_servers": need, "servers": servers,
                      "interval": interval, "why_no_interval": why_not})
    print(f"Lemma 3.2: {args.workers} workers pull and push {format_bytes(size)} each round "
          f"({format_bytes(2 * size * args.workers)} in all) over {format_bytes(bandwidth)}/s per server "
          f"({source}), hidden behind {format_ns(compute * 1e9)} of compute")
    if interval:
        low, high = interval["min_servers"]
        print(f"N_ps >= {need:.2f} [{100 * CONFIDENCE:.0f} %: {low:.2f} to {high:.2f} over the bandwidth's "
              f"uncertainty, {100 * relative:.1f} % taken as one standard deviation of its log]: use {servers} "
              f"parameter server{'s' if servers > 1 else ''} ({interval['servers'][0]} to {interval['servers'][1]} "
              "within the interval)")
    else:
        print(f"N_ps >= {need:.2f}: use {servers} parameter server{'s' if servers > 1 else ''} (no interval: "
              f"{why_not})")
    return 0


def _time_spread(dnn, choice) -> float | None:
    """The spread of a choice's time: its tables' time_spread_s in quadrature (independent runs), None where one of
    the chosen entries gives none (a table written by hand)."""
    spreads = [layer.algorithms[choice.algorithms[layer.name]][choice.batch].time_spread_s
               for layer in dnn.layers if layer.name in choice.algorithms]
    if not choice.feasible or not spreads or any(s is None for s in spreads):
        return None
    return math.sqrt(sum(s * s for s in spreads))


def _without_tables(dnn) -> list[str]:
    """The conv layers with no algorithm table, in a description where some layer has one (a partial calibrate run's,
    or tables written for some layers only): the program leaves their time and workspace out."""
    if not any(layer.algorithms for layer in dnn.layers):
        return []
    return [layer.name for layer in dnn.layers if layer.type == "conv" and not layer.algorithms]


def _without_tables_line(dnn, lacking: list[str]) -> str:
    """The line naming the conv layers ``lacking`` a table, and why where the file says (a partial run)."""
    why = " (partial tables: calibrate --conv-algorithms was interrupted before them)" if dnn.partial_tables else ""
    one = len(lacking) == 1
    return (f"  no algorithm table for {', '.join(lacking)}{why}: {'that layer adds' if one else 'those layers add'} "
            "no time and no workspace below")


def run_batch(args) -> int:
    from ddltrace.models import chang

    dnn = load_dnn(args.dnn)
    memory = _one_of(args.gpu_memory, args.profile, "--gpu-memory", lambda text: parse_bytes(text, "--gpu-memory"),
                     _profile_gpu_memory)
    batches = parse_int_list(args.batches, "--batches")
    best, choices = chang.choose_batch(dnn, batches, memory)
    spreads = {c.batch: _time_spread(dnn, c) for c in choices}
    lacking = _without_tables(dnn)
    if args.json:
        return _dump({"dnn": dnn.name, "tables_source": dnn.source, "tables_partial": dnn.partial_tables,
                      "layers_without_tables": lacking, "gpu_memory_bytes": memory,
                      "best_batch": best.batch if best else None,
                      "choices": [{"batch": c.batch, "feasible": c.feasible,
                                   "time_s": c.time_s if c.feasible else None, "time_spread_s": spreads[c.batch],
                                   "samples_per_s": c.samples_per_s,
                                   "memory_bytes": c.memory_bytes, "workspace_bytes": c.workspace_bytes,
                                   "algorithms": c.algorithms, "reason": c.reason} for c in choices]})
    print(f"mini-batch program for {dnn.name} within {format_bytes(memory)} of GPU memory")
    if dnn.source:
        print(f"  tables from: {dnn.source}")
    if lacking:
        print(_without_tables_line(dnn, lacking))
    spread_shown = any(v is not None for v in spreads.values())
    width = 21 if spread_shown else 9
    print(f"{'batch':>6}  {'memory':>10}  {'workspace':>10}  {'time':>{width}}  {'samples/s':>10}  algorithms")
    for c in choices:
        if c.feasible:
            algos = " ".join(f"{k}={v}" for k, v in c.algorithms.items())
            took = format_ns(c.time_s * 1e9) + (f" ± {format_ns(spreads[c.batch] * 1e9)}"
                                                 if spreads[c.batch] is not None else "")
            print(f"{c.batch:>6}  {format_bytes(c.memory_bytes):>10}  {format_bytes(c.workspace_bytes):>10}  "
                  f"{took:>{width}}  {c.samples_per_s:>10.1f}  {algos}")
        else:
            print(f"{c.batch:>6}  {format_bytes(c.memory_bytes):>10}  {'-':>10}  {'-':>{width}}  {'-':>10}  "
                  f"does not fit: {c.reason}")
    print("  memory: M(b) = b x (input + all feature maps) x bytes per value + 3 x (weights + biases) x bytes per "
          "value; workspace: the chosen algorithms' (their table's); time: one mini-batch through every layer with "
          "the chosen algorithm (the sum of their table's times)" +
          ("; ±: their time_spread_s in quadrature" if spread_shown else "") + "; samples/s: batch / time")
    if best is None:
        print("no batch size fits the GPU memory")
        return 0
    print(f"best: batch {best.batch} at {best.samples_per_s:.1f} samples/s")
    return 0


def run_placement(args) -> int:
    from ddltrace.models import ralp

    dnn = load_dnn(args.dnn)
    pl = ralp.plan_placement(dnn, args.batch, args.workers, args.k)
    if args.json:
        return _dump({"dnn": dnn.name, "skewness_moments": pl.skewness, "skewness_position": pl.position_skewness,
                      "k": args.k, "offload": pl.offload, "split_after": pl.split.name,
                      "split_cost_bytes": pl.split.cost_bytes, "ps_bytes": pl.ps_bytes, "ring_bytes": pl.ring_bytes,
                      "ralp_bytes": pl.ralp_bytes})
    print(f"RALP placement for {dnn.name}, batch {args.batch}, {args.workers} workers")
    print(f"  skewness of parameter positions S = {pl.position_skewness:.2f} (moment formula on sizes: "
          f"{pl.skewness:.2f}); K = {args.k:g}: {'offload the latter layers' if pl.offload else 'do not offload'}")
    print(f"  split after {pl.split.name} (layer {pl.split.index + 1}): O_i + sum P_x = "
          f"{format_bytes(pl.split.cost_bytes)}")
    print(f"  bytes per step and worker: parameter server {format_bytes(pl.ps_bytes)}, ring all-reduce "
          f"{format_bytes(pl.ring_bytes)}, RALP {format_bytes(pl.ralp_bytes)}")
    return 0
