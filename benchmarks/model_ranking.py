"""Yan et al.'s Table 1: does our optimiser rank the paper's 8 configurations per benchmark as Adam measured?

Run: ``.venv/bin/python benchmarks/model_ranking.py [--read-bound min|max|mean|all] [--search]``

The hardware is the paper's section 6.1 cluster, turned into the model's constants:

- C_muladd: 268.8 GFLOP/s per 16-core server = 8.4 G multiply-adds/s per core -> 1.19e-10 s in cache; out of
  cache a multiply-add streams a 4-byte weight at 1/16 of two sockets' DDR3-1600 (2 x 38.4 GB/s) -> 8.3e-10 s.
  The curve steps between the two as a segment's working set grows past the 2 x 20 MB of L3 (Xeon E5-2450).
- C_act = C_err = 1e-8 s (about 20 cycles at 2.1 GHz for a sigmoid and its derivative), C_interf(16) = 1.
- C_nbw = 10 Gbit/s = 1.25e9 B/s; C_ncost = 50 us (Ethernet, kernel TCP).
- 16 threads per server, weights read every N_read = 70 samples (writes every 40 are asynchronous, not modelled).

The DNNs are the bundled reconstructions (ddltrace/models/dnns/mnist-adam.json, imagenet22k-adam.json):
the paper gives only their layer kinds and total connections. The paper's figure is its measured rank; ours is
the rank of the predicted epoch time, configurations predicted in exactly the same time sharing the mean of
their ranks (no order of the paper's list breaks a tie); the ratio is Kendall's tau-b, which counts a tie as
neither agreement nor disagreement (1 = the same order, the paper's own model reached 1 on both). The ties are
printed.
"""

from __future__ import annotations

import argparse
import time

from scipy.stats import kendalltau, rankdata

from ddltrace.models import yan
from ddltrace.models.dnn import load_dnn

HARDWARE = yan.Hardware(C_muladd=((0.0, 1.19e-10), (40e6, 1.19e-10), (80e6, 8.3e-10)), C_act=1e-8, C_err=1e-8,
                        C_ncost=50e-6, C_nbw=1.25e9, C_interf=1.0, cores=16)
THREADS = 16
N_READ = 70
MACHINES = 20

# (#W/#R/#PS, measured rank) from Table 1
TABLE_1 = {
    "mnist-adam": (60_000, [("2/9/2", 1), ("2/8/4", 2), ("2/6/8", 3), ("4/4/4", 4), ("1/19/1", 5), ("1/18/2", 6),
                            ("1/16/4", 7), ("1/12/8", 8)]),
    "imagenet22k-adam": (15_000_000, [("4/4/4", 1), ("4/4/2", 2), ("2/9/2", 3), ("4/3/6", 4), ("4/3/4", 5),
                                      ("2/8/4", 6), ("2/6/6", 7), ("2/6/4", 8)]),
}


#: Predicted epoch times closer than this (relative) are one tie: the same arithmetic in another order.
TIE_TOLERANCE = 1e-12


def tied_ranks(times: list[float]) -> list[float]:
    """Ranks of predicted times (1 = fastest); times equal within TIE_TOLERANCE share the mean of their ranks."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    group, groups = 0, [0] * len(times)
    for prev, cur in zip(order, order[1:], strict=False):
        if times[cur] - times[prev] > TIE_TOLERANCE * abs(times[cur]):
            group += 1
        groups[cur] = group
    return [float(r) for r in rankdata(groups, method="average")]


def rank_table(name: str, read_bound: str, n_read: float = N_READ) -> tuple[float, list[dict]]:
    """Kendall's tau-b between the paper's measured ranks and ours, and one row per configuration."""
    samples, table = TABLE_1[name]
    dnn = load_dnn(name)
    configs = [tuple(int(x) for x in label.split("/")) for label, _ in table]
    ranked = {c.label: c for c in yan.optimise(dnn, HARDWARE, MACHINES, N_sample=samples, N_read=n_read,
                                               threads=[THREADS], read_bound=read_bound, configurations=configs)}
    ranks = tied_ranks([ranked[label].t_epoch for label, _ in table])
    rows = [{"config": label, "paper": paper, "ours": rank, "t_epoch_s": ranked[label].t_epoch,
             "bottleneck": ranked[label].breakdown.bottleneck,
             "layers": " ".join(f"{p}x{r}" for p, r in ranked[label].breakdown.states)}
            for (label, paper), rank in zip(table, ranks, strict=True)]
    tau = kendalltau([r["paper"] for r in rows], [r["ours"] for r in rows], variant="b").statistic
    return float(tau), rows


def ties(rows: list[dict]) -> list[list[str]]:
    """The configurations predicted in the same time, as groups of labels (those sharing a rank)."""
    by_rank: dict[float, list[str]] = {}
    for r in rows:
        by_rank.setdefault(r["ours"], []).append(r["config"])
    return [labels for _, labels in sorted(by_rank.items()) if len(labels) > 1]


def search(name: str, read_bound: str) -> yan.RankedConfiguration:
    samples, _ = TABLE_1[name]
    return yan.optimise(load_dnn(name), HARDWARE, MACHINES, N_sample=samples, N_read=N_READ, threads=[THREADS],
                        read_bound=read_bound, max_workers=4)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-bound", choices=[*yan.READ_BOUNDS, "all"], default="all")
    parser.add_argument("--search", action="store_true", help="also search all configurations on 20 machines")
    args = parser.parse_args()
    bounds = yan.READ_BOUNDS if args.read_bound == "all" else (args.read_bound,)
    for name in TABLE_1:
        for bound in bounds:
            t0 = time.perf_counter()
            tau, rows = rank_table(name, bound)
            print(f"\n{name}, M_w = {bound} of eq. 10/11 ({time.perf_counter() - t0:.1f} s to rank)")
            print(f"  {'W/R/PS':<8} {'paper rank':>10} {'our rank':>9} {'T_epoch':>10}  {'bottleneck':<24} layers PxR")
            for r in rows:
                print(f"  {r['config']:<8} {r['paper']:>10} {r['ours']:>9g} {r['t_epoch_s'] / 60:>7.2f} min  "
                      f"{r['bottleneck']:<24} {r['layers']}")
            tied = "; ".join(" = ".join(group) for group in ties(rows)) or "none"
            print(f"  Kendall tau-b: ours {tau:.3f}, paper's model 1.000, ratio {tau / 1.0:.3f}; "
                  f"ties in predicted time (mean rank each): {tied}")
        tau, rows = rank_table(name, "min", n_read=1e18)
        print(f"  diagnostic, weight reads left out (compute and activations only): ranks "
              f"{[r['ours'] for r in rows]}, Kendall tau-b {tau:.3f}")
        if args.search:
            t0 = time.perf_counter()
            best = search(name, "min")
            paper_best = TABLE_1[name][1][0][0]
            print(f"  search of all configurations on {MACHINES} machines (N_wr <= 4, min bound): best "
                  f"{best.label} at {best.t_epoch / 60:.2f} min; paper's measured best {paper_best} "
                  f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
