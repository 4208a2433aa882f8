"""How well does the fitted ASGD model predict a held-out worker count on real runs of the reference job?

Run: ``.venv/bin/python benchmarks/model_fit_accuracy.py [--out DIR] [--workers 1,2,4,8] [--reuse]``
or, on the committed traces: ``.venv/bin/python benchmarks/model_fit_accuracy.py --series sample_traces/ps-sgd/par``

It runs the parameter-server job that ships with ddltrace (``ddltrace workload ps-sgd --compute emulated
--trace``: Hashemi et al.'s 2-10K-2 network, one server, w workers, compute emulated by sleeping c_p per
sample) at each worker count, reads the computation phase of every run from its trace store (the phases
come from the communication pattern: the job marks no steps), then

- fits on the smaller worker counts and predicts the largest (w = 1, 2, 4 -> 8), and the reverse (2, 4, 8 -> 1),
  printing the absolute percentage error of each held-out point (target <= 10 %, goal <= 5 %);
- compares the fitted per-sample time c_p with the job's ground truth (its measured compute per sample).

The job's compute is emulated at 1 ms per sample (one epoch of 16384 samples, batch 64) so that the worker
term dominates below the knee; the server's own cost is whatever it is on this machine. The machine is shared
and small (2 cores run w + 1 MPI ranks), so the figures move from run to run; ``--reuse`` refits stores already
under ``--out``. The reference figures are the job's own ground truth: its clock for the training phase, its
measured compute per sample, and its server's busy time per update.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from ddltrace.analyses.fit_hashemi import HashemiFit, measurements_from_stores

DDLTRACE = Path(sys.executable).with_name("ddltrace")
SAMPLES, EPOCHS, BATCH, HIDDEN = 16384, 1, 64, 10000
SAMPLE_TIME = 1e-3  # emulated c_p: large enough that w = 1, 2, 4 are worker-bound on a 2-core machine
N_W = 2 * HIDDEN + HIDDEN * 2  # Hashemi's n_w = d_i d_h + d_h d_o


def run_series(out: Path, workers: list[int], reuse: bool) -> list[Path]:
    stores = []
    for w in workers:
        folder = out / f"w{w}"
        if not (reuse and (folder / "store").exists()):
            subprocess.run(["rm", "-rf", str(folder)], check=True)
            subprocess.run([str(DDLTRACE), "workload", "ps-sgd", "--workers", str(w), "--out", str(folder),
                            "--compute", "emulated", "--samples", str(SAMPLES), "--epochs", str(EPOCHS),
                            "--batch", str(BATCH), "--hidden", str(HIDDEN), "--sample-time", str(SAMPLE_TIME),
                            "--trace"],
                           check=True, capture_output=True, text=True)
        stores.append(folder / "store")
    return stores


def held_out(runs: pd.DataFrame, train: list[int], test: int, c_u_from_trace: bool = False
             ) -> tuple[float, float, HashemiFit]:
    fit = HashemiFit(n_f=2, n_w=N_W, c_u_from_trace=c_u_from_trace).fit(runs[runs["w"].isin(train)])
    measured = float(runs.loc[runs["w"] == test, "phase_s"].iloc[0])
    predicted = float(fit.predict(test, BATCH)[0])
    return measured, predicted, fit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/ddltrace-model-fit-accuracy", help="folder for the runs")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--reuse", action="store_true", help="refit the stores already under --out")
    parser.add_argument("--series", metavar="PREFIX",
                        help="fit existing runs PREFIX-w1, PREFIX-w2, ... (each with store/ and ground_truth.json), "
                             "e.g. sample_traces/ps-sgd/par (the committed series), instead of running the job")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    if args.series:
        folders = {w: Path(f"{args.series}-w{w}") for w in workers}
        stores = [folders[w] / "store" for w in workers]
    else:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stores = run_series(out, workers, args.reuse)
        folders = {w: out / f"w{w}" for w in workers}
    runs = measurements_from_stores(stores, servers=1)
    truth = {int(w): json.loads((folders[w] / "ground_truth.json").read_text()) for w in workers}
    print("runs (computation phase read from each trace store):")
    for row in runs.to_dict("records"):
        job = truth[int(row["w"])]
        print(f"  w={int(row['w'])}: phase {row['phase_s']:.3f} s (job's own clock: training {job['train_s']:.3f} s), "
              f"init {row['init_s']:.3f} s (job: {job['init_s']:.3f} s), phases by {row['phases_by']}")
    cases = [(workers[:-1], workers[-1], False), (workers[1:], workers[0], False), (workers[:-1], workers[-1], True)]
    for train, test, from_trace in cases:
        measured, predicted, fit = held_out(runs, train, test, from_trace)
        error = 100 * abs(predicted - measured) / measured
        how = ", c_u from the server's trace" if from_trace else ""
        print(f"\nfit on w = {','.join(map(str, train))}{how}, predict w = {test}: measured {measured:.3f} s, "
              f"predicted {predicted:.3f} s, absolute error {error:.1f} % (target 10 %, ratio {error / 10:.2f})")
        for name, value in fit.params_.items():
            lo, hi = fit.ci_[name]
            print(f"  {name} = {value:.4e} [{lo:.4e}, {hi:.4e}]")
        for note in fit.notes_:
            print(f"  note: {note}")
    full = HashemiFit(n_f=2, n_w=N_W).fit(runs)
    c_p_truth = sum(t["compute_per_sample_s"]["measured"] for t in truth.values()) / len(truth)
    c_u_truth = sum(t["server"]["busy_ns"] / t["server"]["updates"] for t in truth.values()) / len(truth) / 1e9
    ratio = full.params_["c_p"] / c_p_truth
    print(f"  job's own compute per sample {c_p_truth:.4e} s: fitted c_p / truth = {ratio:.3f}"
          " (c_p also carries the per-batch overhead of one batch size)")
    if "c_u" in full.params_:
        print(f"  server's busy time per update {c_u_truth:.4e} s: fitted c_u / truth = "
              f"{full.params_['c_u'] / c_u_truth:.3f}")
    else:
        print(f"  server's busy time per update {c_u_truth:.4e} s: c_u not fitted (no run shows the server's limit)")
    print("  leave-one-out errors: " + ", ".join(f"w={int(r['w'])} {r['abs_pct_error']:.1f} %"
                                                 for r in full.loo_.to_dict("records")))


if __name__ == "__main__":
    main()
