"""Predict the reference job on a machine B from its runs on A and B's calibration, then run it on B and compare.

Run (root, cgroup v1, iproute2, MPICH; about 10 minutes on an idle 2-core machine):
``.venv/bin/python benchmarks/new_hardware.py [--out DIR] [--b quota,net] [--shapes compute,server]
[--workers 1,2,4] [--repeats 1] [--b-runs 3] [--fit-a both]``

A is this machine as it is; each B is the same machine made slower in a known way:

- ``quota``: every rank of the job, and ``ddltrace calibrate``, in a cgroup of its own with ``--share`` of a core
  (cgroup v1 CFS quota, period ``--period`` 10 ms), A's network (:mod:`ddltrace.collectors.cpu_quota`). A quota
  throttles in bursts of its period; calibrate times each run of its compute curves over ``--cpu-window`` (50 ms,
  five periods), so it sees the rate the job sees, not the unthrottled bursts.
- ``net``: every rank on a node of its own of the simulated cluster (:mod:`ddltrace.collectors.cluster`), each
  node's link shaped to ``--rate`` (200 Mbit/s, tbf, both directions, a bucket of ``--burst`` 32 KiB: a real link
  has none, and a bucket near a message's size lets the job's messages pass faster than the rate calibrate
  measures), A's CPU; calibrate runs on node 0 against a probe server on node 1 (the same links).
- ``disk``: the job's ranks and calibrate in one cgroup whose reads of the data disk are throttled to ``--disk-rate``
  KiB/s (cgroup v1 blkio, :mod:`ddltrace.collectors.disk_throttle`; the data disk: ext4 on a loop device in a file
  under ``--out``, read by A's runs too, unthrottled: :mod:`ddltrace.collectors.loop_disk`), A's CPU and network;
  only the ``cold-init`` shape: sequential initialisation (the workers read the whole file in turn, Hashemi's
  shared storage) from the disk (``--cold-read``), little compute. Calibrate's disk section runs on A and inside B
  apart (A-disk.json, B-disk.json), the fit learns r_d from A's initialisations, and B's initialisation is
  predicted and compared beside the phase (:func:`init_on_b`).

A's and B's calibrations run one right after the other, and the runs alternate between A and B at each w.

For each B and each shape of the reference job (``ddltrace workload ps-sgd``'s job, real numpy compute: ``compute``,
the job as it is; ``server``: ``--server-cost`` seconds of server time per gradient, a server-bound job;
``emulated`` and ``emulated-server``: the same with the workers' compute a sleep, for the net B only: a quota cannot
slow a sleep): calibrate A, calibrate inside B, again in ``--rounds`` rounds (the cpu section; each compute point
the median of the rounds: this VM's core is up to 1.5x slower per CPU second in stretches that one round's point
catches whole or not), run the job at each w on A and then on B (alternating: the machine
is shared, its load drifts), ``model fit A's STORES --dnn mlp-2-10k-2 --servers 1 --profile A.json`` three ways
(Hashemi's max; the closed loop, ``--serial-comm``; the closed loop in CPU seconds, ``--serial-comm --cpu-shares``,
which on a quota B plays the loop out over the quota's periods), ``model predict --profile B.json`` at each w, and
compare the prediction with B's measured computation phase (the slowest
worker's steady state, read from the trace store as the fit reads A's). Printed per row: the prediction with its
interval (95 %), the measured phase, the error, the term that binds on B (predicted), B / A measured, and
whether the knee predicted on B is on the side of each w that the runs show. B's measured phase at a w is the
median of ``--b-runs`` runs of the job on B (default 3: one run of B is one draw, and on a quota its w = 1 phase moves
by tens of per cent between runs); below each row, B's runs, their range and each model's error against each run
(:func:`b_median`). After B's runs at a w, A runs once more: how far A's phase and compute per sample moved
meanwhile is printed below the row and in the summary (:func:`drift`), the machine's own drift, against which to
read an error. The model is fitted on both of A's runs at each w, which bracket B's in time (``--fit-a both``, the
default since 2026-11-26; one run of A is one draw as one of B is), and the errors of the fit on A's first runs
alone are printed beside (``--fit-a first``: that fit only). The load average (1 min) before and after each run says
how busy the shared machine was.
``--repeats N`` repeats everything and prints the errors' spread.

On two real machines: run the job at several w on A under ``ddltrace run`` and calibrate both machines, then
``benchmarks/new_hardware.py --profile-a A.json --runs-a A-w1/store A-w2/store A-w4/store --profile-b B.json
[--runs-b B-w1/store ...]`` (several B stores at a w: B's runs there, compared through their median; several
profiles after ``--profile-a`` or ``--profile-b``: rounds of one machine's calibration, each compute point their
median) fits, predicts B at the w of A's runs (or
``--workers``) and compares with B's runs where given; with ``--disk-a A-disk.json --disk-b B-disk.json``
(``calibrate --only disk`` on each, the profiles above without it, the job run with ``--cold-read``, its
ground_truth.json beside each store) B's initialisation too. Results go to ``OUT/results.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ddltrace.analyses.fit_hashemi import measurements_from_store
from ddltrace.errors import DdltraceError
from ddltrace.store import atomic_output

PYTHON = sys.executable
DDLTRACE = str(Path(sys.executable).with_name("ddltrace"))
JOB = [PYTHON, "-m", "ddltrace.collectors.workloads.ps_sgd"]
DNN = "mlp-2-10k-2"
#: the job's options besides its samples (one epoch, batch 64: 64 batches of 4096 samples on one worker)
COMMON = ["--epochs", "1", "--batch", "64", "--hidden", "10000", "--init", "parallel",
          "--server-receive", "probe"]
SHAPES = {"compute": ["--compute", "real"], "server": ["--compute", "real", "--server-cost", "0.01"],
          # the workers' compute a sleep of 0.5 ms per sample, as if each had a core of its own (the 2-core
          # machine cannot give 4 workers one each): the model's premise holds on A; only for the net B
          "emulated": ["--compute", "emulated", "--sample-time", "0.0005"],
          "emulated-server": ["--compute", "emulated", "--sample-time", "0.0005", "--server-cost", "0.01"],
          # for the disk B only: the workers read the whole file one after another (Hashemi's shared storage), each
          # from the disk (--cold-read), and compute little (a 0.1 ms sleep per sample): the initialisation dominates
          "cold-init": ["--compute", "emulated", "--sample-time", "0.0001", "--init", "sequential", "--cold-read"]}
CALIBRATE = ["calibrate", "--quick", "--only", "cpu,mem,net"]
#: the net B's tbf bucket (bytes): about a tenth of one 320 kB weights message. A real 200 Mbit/s link has no bucket;
#: the cluster's default then (10 ms of the rate, 250 kB; now 1 ms) let 78 % of every message pass at once after the
#: compute gap, so the job saw about a third of the rate's transfer time while calibrate's stream, which drains the
#: bucket, saw the rate (docs/MODELS.md).
BURST = 32 * 1024
#: calibrate's disk file for the disk B (MiB): read three times at the throttle's rate
DISK_MIB = 1


def _check(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        raise DdltraceError(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-800:]}")


def _load() -> float:
    return os.getloadavg()[0]


# -- machines ------------------------------------------------------------------------------------------------

class MachineA:
    """This machine as it is."""

    name = "A"
    description = "this machine as it is"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def calibrate(self, out: Path, window: float) -> list[str]:
        """The command that calibrates this machine into ``out`` (started by :func:`calibrate_both`)."""
        return [DDLTRACE, *CALIBRATE, "--cpu-window", str(window), "--out", str(out)]

    @contextlib.contextmanager
    def calibrating(self, out: Path, window: float):
        yield self.calibrate(out, window)

    def run(self, w: int, job: list[str], store: Path) -> None:
        _check(subprocess.run([DDLTRACE, "run", "--no-progress", "--np", str(w + 1), "--out", str(store), "--",
                               *job], capture_output=True, text=True, timeout=300), f"the job on {self.name}, w={w}")


class QuotaB(MachineA):
    """Every process of the job (each rank) and calibrate with ``share`` of a core."""

    name = "quota"

    def __init__(self, share: float, period_s: float):
        from ddltrace.collectors.cpu_quota import CpuQuota

        self.quota = CpuQuota(share, period_s)
        self.description = (f"each rank in a cgroup of its own, CFS quota {self.quota.quota_us} us per "
                            f"{self.quota.period_us} us ({share:g} of a core); A's network")

    def __enter__(self):
        self.quota.__enter__()
        return self

    def __exit__(self, *exc):
        self.quota.close()

    def calibrate(self, out: Path, window: float) -> list[str]:
        return self.quota.wrap(super().calibrate(out, window))

    def run(self, w: int, job: list[str], store: Path) -> None:
        super().run(w, self.quota.wrap(job), store)


class NetB(MachineA):
    """Every rank on a node of its own, each node's link shaped to ``rate_bit`` bit/s."""

    name = "net"

    def __init__(self, rate_bit: float, burst: int | None = BURST):
        self.rate_bit, self.burst = rate_bit, burst
        self.description = (f"each rank on its own simulated node, links {rate_bit / 1e6:g} Mbit/s (tbf, burst "
                            f"{f'{burst} B' if burst else 'the cluster default: 1 ms of the rate'}); A's CPU")

    @contextlib.contextmanager
    def _cluster(self, n: int):
        """``n`` nodes, each link shaped to the rate with a bucket of ``burst`` bytes (None: the cluster's default)."""
        from ddltrace.collectors import cluster as cl

        with cl.Cluster(n) as c:
            for index in range(n):
                c.shape(index, self.rate_bit, self.burst)
            yield c

    @contextlib.contextmanager
    def calibrating(self, out: Path, window: float):
        """Yields the command that calibrates a node of a 2-node shaped cluster against a probe server on the
        other node (the cluster lives until the block ends)."""
        with self._cluster(2) as c:
            server = c.nodes[1].popen([PYTHON, "-m", "ddltrace.collectors.microbench.network", c.nodes[1].addr, "0"],
                                      stdout=subprocess.PIPE, text=True)
            try:
                line = server.stdout.readline().strip()
                if not line.startswith("listening on "):
                    raise DdltraceError(f"the probe server on {c.nodes[1].host} did not start ({line!r})")
                yield c.nodes[0].enter([*super().calibrate(out.resolve(), window), "--net-timeout", "30",
                                        "--peer", line.removeprefix("listening on ")])
            finally:
                server.kill()
                server.wait()

    def run(self, w: int, job: list[str], store: Path) -> None:
        from ddltrace.collectors.mpi_env import find_tool

        with self._cluster(w + 1) as c:
            launcher = c.mpiexec(find_tool("mpiexec"), ppn=1)
            _check(subprocess.run([DDLTRACE, "run", "--no-progress", "--launcher", launcher, "--out", str(store),
                                   "--", *job], capture_output=True, text=True, timeout=300),
                   f"the job on the shaped cluster, w={w}")


class DiskB(MachineA):
    """Every rank of the job, and calibrate, in one cgroup whose reads of the data disk are throttled to
    ``read_bps`` bytes per second (:mod:`ddltrace.collectors.disk_throttle`); A's CPU and network. The data disk is
    a disk of its own, ext4 on a loop device in a file under ``folder`` (:mod:`ddltrace.collectors.loop_disk`),
    which A's runs read too, unthrottled: a throttle of the root disk also slowed the ranks' reads of their own
    code, which this VM's kernel keeps paging out of the page cache. Only reads that reach the disk are slowed:
    the job reads cold (the ``cold-init`` shape's ``--cold-read``)."""

    name = "disk"

    def __init__(self, folder: Path, read_bps: int):
        from ddltrace.collectors import disk_throttle, loop_disk

        for why in (disk_throttle.missing(), loop_disk.missing()):
            if why:
                raise DdltraceError(why)
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.read_bps = folder, read_bps
        self.disk = self.throttle = None
        self.description = (f"its data disk (ext4 on a loop device, a file on the root disk) read at "
                            f"{read_bps / 2**10:g} KiB/s by the job's ranks and calibrate (cgroup v1 blkio, one "
                            "cgroup); A's CPU and network, and A reads the same data disk unthrottled")

    def __enter__(self):
        from ddltrace.collectors.disk_throttle import DiskThrottle
        from ddltrace.collectors.loop_disk import LoopDisk

        self.disk = LoopDisk(self.folder).__enter__()
        try:
            self.throttle = DiskThrottle(self.disk.mount, self.read_bps).__enter__()
        except BaseException:
            self.disk.close()
            raise
        return self

    def __exit__(self, *exc):
        for part in (self.throttle, self.disk):
            if part is not None:
                part.close()

    def data_file(self, samples: int) -> Path:
        """The job's data set on the data disk, made (outside B) where missing: A's runs and B's read this file."""
        from ddltrace.collectors.workloads import dataset

        return dataset.make_dataset(self.disk.mount / f"ps_sgd_data_{samples}_0.tsv", samples, 0)

    def calibrate(self, out: Path, window: float) -> list[str]:
        return self.throttle.wrap(super().calibrate(out, window))

    def run(self, w: int, job: list[str], store: Path) -> None:
        super().run(w, self.throttle.wrap(job), store)

    def calibrate_disks(self, a: MachineA, folder: Path) -> None:
        """calibrate's disk section on A, then inside B, into folder/A-disk.json and B-disk.json: r_d from O_DIRECT
        reads of a file of DISK_MIB MiB on the data disk. Kept apart from A.json: a profile's
        r_d is held by the fit, which would then not learn the job's own reading from A's initialisations."""
        for machine, key in ((a, "A"), (self, "B")):
            cmd = [DDLTRACE, "calibrate", "--quick", "--only", "disk", "--disk-path", str(self.disk.mount),
                   "--disk-size", str(DISK_MIB), "--out", str(folder / f"{key}-disk.json")]
            _check(subprocess.run(self.throttle.wrap(cmd) if machine is self else cmd, capture_output=True,
                                  text=True, timeout=600), f"calibrate's disk section on {machine.name}")


def init_on_b(prediction: dict, runs_a: dict[int, dict], runs_b: dict[int, dict]) -> dict:
    """Per w, B's initialisation as ``model predict --profile B.json --disk-profile B-disk.json --json`` gives it
    (its ``init_on_b``: :mod:`ddltrace.models.init_transfer` on the model fitted with ``--disk-profile A-disk.json``,
    ``T_disk(B) = T_disk(A) + (r_d(B) - r_d(A)) D``) beside the measured ``init_s`` of the runs (s, read as the fit
    reads A's: the slowest worker, from the end of MPI_Init to its first step), B's the median over its runs at w
    (a :func:`b_median` row, or one run's row of :func:`run_series`). What the carry lacks is a DdltraceError naming
    it."""
    result = prediction.get("init_on_b")
    if result is None:
        raise DdltraceError("B's initialisation: A's runs measured no initialisation")
    if "missing" in result:
        raise DdltraceError(f"B's initialisation: {result['missing']}")
    for row in result["rows"]:
        w = row["w"]
        if w in runs_a:
            row["a_s"] = runs_a[w]["init_s"]
        if w in runs_b:
            row["measured_runs_s"] = [run["init_s"] for run in runs_b[w].get("runs", [runs_b[w]])]
            row["measured_s"] = statistics.median(row["measured_runs_s"])
            row["error"] = row["predicted_s"] / row["measured_s"] - 1
    return result


def print_init(result: dict) -> None:
    from ddltrace.models.init_transfer import READS

    init = result["init"]
    print(f"  initialisation ({init['storage']} storage, T_init = {READS[init['storage']]} x T_disk): the fit of "
          "A's read a worker's T_disk = "
          f"{1e3 * init['r_d_fit'] * init['model_bytes']:.1f} ms (r_d {init['r_d_fit']:.3g} s/B x s n_f d = "
          f"{init['model_bytes']:.0f} B); disk r_d A {init['r_d_a']:.3g}, B {init['r_d_b']:.3g} s/B "
          f"({1 / init['r_d_b'] / 2**10:.0f} KiB/s); a worker fetched {init['device_bytes']:.0f} B from the device")
    print("  w   A measured   B measured   predicted [95 %]               error    r_d scaled B/A (whole read)")
    for r in init["rows"]:
        a = f"{r['a_s']:8.3f} s" if "a_s" in r else " " * 10
        b = f"{r['measured_s']:8.3f} s" if "measured_s" in r else " " * 10
        error = f"{100 * r['error']:+6.1f} %" if "error" in r else " " * 8
        print(f"  {r['w']:<3d} {a}   {b}   {r['predicted_s']:7.3f} s [{r['low_s']:6.3f}, {r['high_s']:6.3f}]  "
              f"{error}  {r['scaled_s']:9.3f} s")
        if len(r.get("measured_runs_s") or []) > 1:
            print(f"      B's {len(r['measured_runs_s'])} runs (s): "
                  + ", ".join(f"{x:.3f}" for x in r["measured_runs_s"]) + " (B measured: their median); error per run "
                  + " / ".join(f"{100 * (r['predicted_s'] / x - 1):+.1f}" for x in r["measured_runs_s"]) + " %")


def calibrate_both(a, b, folder: Path, window: float, rounds: int = 1) -> None:
    """Calibrate A, then B at once after it, into folder/A.json and folder/B.json; with ``rounds`` > 1, the cpu
    section again (A, B, A, B, ...) into A-r2.json, B-r2.json, ..., and A.json / B.json get each compute point the
    median of the rounds (``profile.merge_rounds``): this VM's core runs some calibrations' points up to 1.5x slower
    for a few hundred ms (its host), which one round of 3 runs of 50 ms catches or not. (Both machines at the same
    time was tried, to give them the same load: on this shared machine it made B's compute factor wrong by 2-3
    times.)"""
    from ddltrace.collectors.microbench import profile as prof

    names = {"A": ["A.json"], "B": ["B.json"]}
    for r in range(rounds):
        for machine, key in ((a, "A"), (b, "B")):
            out = folder / (f"{key}.json" if r == 0 else f"{key}-r{r + 1}.json")
            with machine.calibrating(out, window) as cmd:
                if r > 0:  # the compute curves again; the memory and network sections once
                    cmd = [*cmd, "--only", "cpu"]
                _check(subprocess.run(cmd, capture_output=True, text=True, timeout=600),
                       f"calibrate on {machine.name}, round {r + 1}")
            if r > 0:
                names[key].append(out.name)
    if rounds > 1:
        for key, files in names.items():
            (folder / f"{key}-r1.json").write_text((folder / files[0]).read_text())
            merged = prof.merge_rounds([prof.load(folder / f) for f in files])
            prof.save(merged, folder / f"{key}.json")


# -- the flow --------------------------------------------------------------------------------------------------

def job_args(shape: str, samples: int) -> list[str]:
    """The reference job's arguments for ``shape`` with ``samples`` samples per epoch."""
    return ["--samples", str(samples), *COMMON, *SHAPES[shape]]


def run_series(machine, shape: str, workers: list[int], folder: Path, samples: int = 4096,
               data: Path | None = None, run: int = 1) -> dict[int, dict]:
    """The job at each w on ``machine`` (reading ``data``, where given): per w its store, phase (s) and the load
    average around the run. ``run`` > 1: a further run at the same w, in a folder of its own (``-runN``)."""
    out = {}
    for w in workers:
        run_dir = folder / f"{machine.name}-{shape}-w{w}{f'-run{run}' if run > 1 else ''}"
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
        run_dir.mkdir(parents=True)
        job = [*JOB, "--out", str(run_dir), *job_args(shape, samples), *(["--data", str(data)] if data else [])]
        before = _load()
        t0 = time.perf_counter()
        machine.run(w, job, run_dir / "store")
        wall = time.perf_counter() - t0
        truth = json.loads((run_dir / "ground_truth.json").read_text())
        out[w] = {**run_row(run_dir / "store"), "train_s": truth["train_s"],
                  "compute_per_sample_s": truth["compute_per_sample_s"]["measured"], "wall_s": wall,
                  "load_before": before, "load_after": _load()}
        which = f"{machine.name} {shape} w={w}{f' run {run}' if run > 1 else ''}"
        print(f"  {which}: phase {out[w]['phase_s']:.3f} s (job's clock {truth['train_s']:.3f} s,"
              f" compute {1e6 * out[w]['compute_per_sample_s']:.0f} us/sample, a worker's share of a core "
              f"{out[w]['cpu_share']:.2f}), load {before:.1f} -> "
              f"{out[w]['load_after']:.1f}", flush=True)
    return out


def first_only(result: dict) -> dict[int, dict]:
    """Per w, each model's error against B's median (``error``, ``serial_error``, ``shares_error``) from a
    :func:`compare` of the fit on A's first runs alone."""
    keys = ("error", "serial_error", "shares_error")
    return {r["w"]: {key: r[key] for key in keys if key in r} for r in result["rows"]}


def drift(first: dict[int, dict], again: dict[int, dict]) -> dict[int, dict]:
    """Per w, A's run before B's runs and its run after them (not fitted): their phases (s), compute per sample (s)
    and how much each moved (after / before - 1). On this VM A's phase moved by up to a third between two runs at one
    w seconds apart (docs/MODELS.md, nh-s14b): a model's error within that is not the model's alone."""
    out = {}
    for w, row in again.items():
        before = first[w]
        out[w] = {"phase_s": [before["phase_s"], row["phase_s"]],
                  "compute_per_sample_s": [before["compute_per_sample_s"], row["compute_per_sample_s"]],
                  "phase_moved": row["phase_s"] / before["phase_s"] - 1,
                  "compute_moved": row["compute_per_sample_s"] / before["compute_per_sample_s"] - 1}
    return out


def b_median(runs: list[dict]) -> dict:
    """B's runs of the job at one w as one row: ``phase_s`` the median of their phases (s; of two, their mean), with
    ``phases_s`` (each run's, in the order run), ``min_s``, ``max_s`` and ``spread`` ((max - min) / median); the
    worker's share of a core (``cpu_share``) likewise the median; ``store`` the first run's, ``stores`` all, ``runs``
    each run's own row. One run of B is one draw: on a quota its w = 1 phase moved by up to 30 % between runs with
    the same shares (docs/MODELS.md)."""
    if not runs:
        raise DdltraceError("B's runs at a w: none")
    phases = [float(r["phase_s"]) for r in runs]
    median = statistics.median(phases)
    row = {**runs[0], "phase_s": median, "phases_s": phases, "min_s": min(phases), "max_s": max(phases),
           "spread": (max(phases) - min(phases)) / median, "stores": [r["store"] for r in runs], "runs": runs}
    if "load_after" in runs[-1]:
        row["load_after"] = runs[-1]["load_after"]  # the load after B's last run
    shares = [float(r["cpu_share"]) for r in runs if r.get("cpu_share") is not None]
    if len(shares) == len(runs):
        row["cpu_share"] = statistics.median(shares)
    return row


def fit_and_predict(profile_a: Path, stores_a: list[str], profile_b: Path, workers: list[int], folder: Path,
                    servers: int = 1, disks: tuple[Path, Path] | None = None) -> tuple[dict, dict, dict]:
    """``model fit`` on A's stores (``servers`` server ranks) with A's profile, then ``model predict --profile B.json
    --json`` at ``workers``: Hashemi's model (network and worker overlap, their max), and the closed loop (``model
    fit --serial-comm``: the workers pull, compute and push one after another, as ps-sgd's do), and the closed loop
    in CPU seconds (``--cpu-shares``: each run's workers at their share of a core, c_u the server's measured time;
    on B, where the quota holds every rank, the loop played out over the quota's periods). ``disks``: A's and B's
    disk sections apart (``calibrate --only disk``), given to ``model fit --disk-profile`` and ``model predict
    --disk-profile``, which then carry B's initialisation (``init_on_b`` of each prediction)."""
    disk_a, disk_b = (["--disk-profile", str(path)] for path in disks) if disks else ([], [])
    out = []
    for extra, name in (([], "model.json"), (["--serial-comm"], "model-serial.json"),
                        (["--serial-comm", "--cpu-shares"], "model-shares.json")):
        model = folder / name
        _check(subprocess.run([DDLTRACE, "model", "fit", *stores_a, "--dnn", DNN, "--servers", str(servers),
                               "--profile", str(profile_a), "--out", str(model), *disk_a, *extra],
                              capture_output=True, text=True, timeout=300), "model fit")
        done = subprocess.run([DDLTRACE, "model", "predict", str(model), "--workers", ",".join(map(str, workers)),
                               "--profile", str(profile_b), *disk_b, "--json"], capture_output=True, text=True,
                              timeout=300)
        _check(done, "model predict")
        out.append(json.loads(done.stdout))
    return out[0], out[1], out[2]


def _scales(before: float, after: float, w_before: int, w: int) -> bool:
    """Whether going from ``w_before`` to ``w`` workers is below the knee: the phase fell by at least half of
    the ideal ``1 - w_before / w``."""
    return 1 - after / before >= 0.5 * (1 - w_before / w)


def knee_sides(measured: dict[int, float], predicted: dict[int, float]) -> list[dict]:
    """For each measured w after the first: whether the runs show it below the knee (the phase fell by at least
    half of the ideal from the previous w) and whether the prediction on B says so, judged the same way on its
    phases at the same w."""
    out, ws = [], sorted(measured)
    for prev, w in zip(ws, ws[1:], strict=False):
        below_measured = _scales(measured[prev], measured[w], prev, w)
        below_predicted = _scales(predicted[prev], predicted[w], prev, w)
        out.append({"w": w, "gain": 1 - measured[w] / measured[prev],
                    "predicted_gain": 1 - predicted[w] / predicted[prev], "below_measured": below_measured,
                    "below_predicted": below_predicted, "agree": below_measured == below_predicted})
    return out


def compare(prediction: dict, serial: dict, a: dict[int, dict] | None, b: dict[int, dict] | None,
            shares: dict | None = None) -> dict:
    """Per w: the prediction on B (Hashemi's max; ``serial_*`` with --serial-comm; ``shares_*`` with --serial-comm
    --cpu-shares) against B's measured phase."""
    rows = []
    for i, (row, srow) in enumerate(zip(prediction["rows"], serial["rows"], strict=True)):
        w = int(row["w"])
        item = {"w": w, "predicted_s": row["profile_s"], "low_s": row["profile_low_s"],
                "high_s": row["profile_high_s"], "bound_by": row["profile_bound_by"],
                "a_predicted_s": row["predicted_s"], "serial_s": srow["profile_s"],
                "serial_low_s": srow["profile_low_s"], "serial_high_s": srow["profile_high_s"],
                "serial_bound_by": srow["profile_bound_by"], "share_a": row.get("share_a"),
                "share_b": row.get("share_b"), "c_p_factor": row.get("profile_c_p_factor"),
                "c_u_factor": row.get("profile_c_u_factor")}
        if shares:
            crow = shares["rows"][i]
            item.update(shares_s=crow["profile_s"], shares_low_s=crow["profile_low_s"],
                        shares_high_s=crow["profile_high_s"], shares_bound_by=crow["profile_bound_by"],
                        shares_quota_loop=crow.get("quota_loop_s") is not None,
                        shares_mean_value_s=crow.get("mean_value_s", crow["profile_s"]),
                        shares_a_predicted_s=crow["predicted_s"])
        if b and w in b:
            item["measured_s"] = b[w]["phase_s"]  # B's median over its runs at w (b_median), or its one run
            runs = b[w].get("phases_s") or [b[w]["phase_s"]]
            item.update(measured_runs_s=runs, measured_min_s=min(runs), measured_max_s=max(runs),
                        measured_spread=(max(runs) - min(runs)) / b[w]["phase_s"])
            for key, pred in (("", row["profile_s"]), ("serial_", srow["profile_s"]),
                              ("shares_", item.get("shares_s"))):
                if pred is not None:
                    item[f"{key}error"] = (pred - b[w]["phase_s"]) / b[w]["phase_s"]
                    item[f"{key}run_errors"] = [(pred - phase) / phase for phase in runs]
        if b and w in b and "cpu_share" in b[w]:
            item["share_b_measured"] = b[w]["cpu_share"]
        if b and w in b:  # the server's mean wait per update it received, each of B's runs (s)
            waits = [run.get("update_wait_s") for run in b[w].get("runs", [b[w]])]
            if all(x is not None and x == x for x in waits):
                item["update_waits_s"] = waits
        if a and w in a and b and w in b:
            item["ratio_measured"] = b[w]["phase_s"] / a[w]["phase_s"]
            item["ratio_predicted"] = row["profile_s"] / row["predicted_s"]
        rows.append(item)
    knee, serial_knee = prediction["knee"]["profile"], serial["knee"]["profile"]
    measured = {w: r["phase_s"] for w, r in b.items()} if b else {}
    paper = {r["w"]: r["predicted_s"] for r in rows}
    closed = {r["w"]: r["serial_s"] for r in rows}
    sides = len(measured) > 1 and set(measured) <= set(paper)
    extra = {}
    if shares:
        cpu = {r["w"]: r["shares_s"] for r in rows}
        extra = {"shares_knee": shares["knee"]["profile"], "shares_knee_sides": knee_sides(measured, cpu) if sides
                 else [], "shares_best_w": shares["transfer"].get("best_w"),
                 "shares_factors": shares["transfer"]["factors"]}
    return {**extra, "rows": rows, "knee": knee, "knee_sides": knee_sides(measured, paper) if sides else [],
            "serial_knee": serial_knee, "serial_knee_sides": knee_sides(measured, closed) if sides else [],
            "factors": prediction["transfer"]["factors"], "serial_factors": serial["transfer"]["factors"],
            "server_split": prediction["transfer"].get("server_split"),
            "best_w": prediction["transfer"].get("best_w"), "serial_best_w": serial["transfer"].get("best_w")}


def _knee_text(knee: dict) -> str:
    """The knee on B as ``model predict --json`` gives it, with its interval where drawn (workers)."""
    if knee.get("w") is not None:
        drawn = knee.get("interval") or {}
        if drawn.get("low_w") is None:
            return f"w* = {knee['w']:.1f} ({knee['cause']})"
        high = f"more than {drawn['searched_below_w'] - 1}" if drawn["high_w"] is None else f"{drawn['high_w']:.0f}"
        return (f"w* = {knee['w']:.1f} [{100 * drawn['confidence']:.0f} %: {drawn['low_w']:.0f} to {high}] "
                f"({knee['cause']})")
    return f"w* >= {knee.get('at_least') or float('inf'):.1f} ({knee['cause']})"


def print_comparison(title: str, result: dict) -> None:
    print(f"\n{title}")
    for label, f in (("", result["factors"]), (" (closed loop)", result["serial_factors"])):
        print(f"  factors B / A{label} (shares equal): " + ", ".join(f"{k} {f[k]:.2f}" for k in
                                                                    ("c_p", "c_u", "r_m", "r_net", "lat_net")))
    split = result.get("server_split")
    if split:
        print(f"  c_u on A: the server's {1e3 * split['server_s']:.3g} ms per update, "
              f"{100 * split['cpu_fraction']:.0f} % CPU ({split['how']}); the fit's other "
              f"{1e3 * split['rest_s']:.3g} ms carried as compute")
    for r in result["rows"]:
        if r.get("share_a") is not None:
            runs = len(r.get("measured_runs_s") or [])
            seen = (f" (B's run{'s measured, median,' if runs > 1 else ' measured'} {r['share_b_measured']:.2f})"
                    if r.get("share_b_measured") is not None else "")
            print(f"  w={r['w']}: a rank's share of a core on A {r['share_a']:.2f}, on B {r['share_b']:.2f}{seen}: "
                  f"factors c_p {r['c_p_factor']:.2f}, c_u {r['c_u_factor']:.2f}")
    print(f"  knee on B predicted (the first w from which one more worker gains less than half its ideal share): "
          f"{_knee_text(result['knee'])}, closed loop {_knee_text(result['serial_knee'])}"
          f"; best w on B: {result['best_w']}, {result['serial_best_w']}")
    if result.get("shares_knee"):
        print(f"  closed loop in CPU seconds (--cpu-shares): knee on B {_knee_text(result['shares_knee'])}, best w "
              f"{result['shares_best_w']}; L: the quota holds every rank, the loop played out over its periods")
    runs = max((len(r.get("measured_runs_s") or []) for r in result["rows"]), default=0)
    if runs > 1:
        print(f"  measured on B: the median of B's runs at w (up to {runs}); the errors against it, and below each "
              "row B's runs (s), their range ((max - min) / median) and each model's error against each run")
    print("  w   measured on B  predicted (max) [95 %]          error    bound           "
          "closed loop [95 %]              error    bound           "
          + ("CPU shares [95 %]                error    bound             " if result.get("shares_knee") else "")
          + "B/A measured")
    for r in result["rows"]:
        measured = f"{r['measured_s']:8.3f} s" if "measured_s" in r else " " * 10
        cells = []
        kinds = [("", "error", "bound_by"), ("serial_", "serial_error", "serial_bound_by")]
        if "shares_s" in r:
            kinds.append(("shares_", "shares_error", "shares_bound_by"))
        for key, err, bound in kinds:
            pred = r["predicted_s" if not key else f"{key}s"]
            lo, hi = r[f"{key}low_s"], r[f"{key}high_s"]
            error = f"{100 * r[err]:+6.1f} %" if err in r else " " * 8
            loop = " L" if key == "shares_" and r.get("shares_quota_loop") else "  "
            cells.append(f"{pred:7.3f} s [{lo:6.3f}, {hi:6.3f}]  {error}  {r[bound]:<14s}{loop}")
        ratio = f"{r['ratio_measured']:6.2f}" if "ratio_measured" in r else ""
        print(f"  {r['w']:<3d} {measured}     {'   '.join(cells)}  {ratio}")
        if len(r.get("measured_runs_s") or []) > 1:
            print("      " + runs_text(r))
        alone = (result.get("first_only") or {}).get(r["w"])
        if alone:
            print("      fitted on A's first run at each w alone: " + ", ".join(
                f"{label} {100 * alone[key]:+.1f} %" for label, key in
                (("max", "error"), ("closed loop", "serial_error"), ("CPU shares", "shares_error")) if key in alone))
        moved = (result.get("a_again") or {}).get(r["w"])
        if moved:
            fitted = "fitted too" if result.get("fit_a") == "both" else "not fitted"
            print(f"      A again after B's runs ({fitted}): phase {moved['phase_s'][1]:.3f} s against "
                  f"{moved['phase_s'][0]:.3f} s before them ({100 * moved['phase_moved']:+.1f} %), compute "
                  f"{1e6 * moved['compute_per_sample_s'][1]:.0f} against {1e6 * moved['compute_per_sample_s'][0]:.0f} "
                  f"us/sample ({100 * moved['compute_moved']:+.1f} %)")
        if r.get("update_waits_s"):
            waits = ", ".join(f"{1e3 * x:.2f}" for x in r["update_waits_s"])
            print(f"      the server's mean wait per update it received on B: {waits} ms (about a message's time on "
                  "B's link where the updates flowed in only once asked for, as the closed loop has it; near 0 where "
                  "they came in while the server sent or applied others)")
    for label, sides in (("max", result["knee_sides"]), ("serial", result["serial_knee_sides"]),
                         ("cpu shares", result.get("shares_knee_sides", []))):
        for side in sides:
            print(f"  knee ({label}) w={side['w']}: B's phase (median) fell {100 * side['gain']:.0f} % from the "
                  "previous w: "
                  f"{'below' if side['below_measured'] else 'at or past'} the knee; predicted to fall "
                  f"{100 * side['predicted_gain']:.0f} %: {'below' if side['below_predicted'] else 'past'}: "
                  f"{'agree' if side['agree'] else 'DISAGREE'}")


def runs_text(row: dict) -> str:
    """One line: B's runs at a w (s), their median and range, and each model's error against each run."""
    phases = row["measured_runs_s"]
    text = (f"B's {len(phases)} runs: {', '.join(f'{p:.3f}' for p in phases)} s; median {row['measured_s']:.3f} s, "
            f"range {row['measured_min_s']:.3f}-{row['measured_max_s']:.3f} s ({100 * row['measured_spread']:.0f} % "
            "of the median); error per run:")
    for label, key in (("max", "run_errors"), ("closed loop", "serial_run_errors"),
                       ("CPU shares", "shares_run_errors")):
        if row.get(key):
            text += f" {label} {' / '.join(f'{100 * e:+.0f}' for e in row[key])} %;"
    return text.rstrip(";")


def simulated(args) -> list[dict]:
    out = Path(args.out)
    workers = [int(w) for w in args.workers.split(",")]
    results = []
    for repeat in range(args.repeats):
        for b_name in args.b.split(","):
            machine_b = (QuotaB(args.share, args.period) if b_name == "quota"
                         else DiskB(out, int(args.disk_rate * 2**10)) if b_name == "disk"
                         else NetB(args.rate * 1e6, args.burst or None))
            for shape in ["cold-init"] if b_name == "disk" else args.shapes.split(","):
                folder = out / f"r{repeat}" / f"{b_name}-{shape}"
                folder.mkdir(parents=True, exist_ok=True)
                print(f"\n== repeat {repeat + 1}, B = {b_name} ({machine_b.description}), shape {shape} "
                      f"({' '.join(SHAPES[shape])}), load {_load():.1f}", flush=True)
                a, runs_a, runs_b = MachineA(), {}, {}
                with machine_b:  # A and B alternate, so that both see about the same load of the shared machine
                    calibrate_both(a, machine_b, folder, args.cpu_window, args.rounds)
                    data = machine_b.data_file(args.samples) if b_name == "disk" else None
                    if b_name == "disk":
                        machine_b.calibrate_disks(a, folder)
                    a_again = {}
                    for w in workers:  # A once (the fit's run), then B's runs (their median is compared), then A
                        runs_a.update(run_series(a, shape, [w], folder, args.samples, data))
                        runs_b[w] = b_median([run_series(machine_b, shape, [w], folder, args.samples, data, n)[w]
                                              for n in range(1, args.b_runs + 1)])
                        # again (fitted with the first by --fit-a both): how far the machine moved while B's ran
                        a_again[w] = run_series(a, shape, [w], folder, args.samples, data, run=2)[w]
                    throttled = machine_b.quota.throttled() if b_name == "quota" else None
                    if b_name == "disk":  # bytes the throttled cgroup read and wrote on the disk
                        throttled = machine_b.throttle.bytes_done()
                disks = (folder / "A-disk.json", folder / "B-disk.json") if b_name == "disk" else None
                first = [runs_a[w]["store"] for w in workers]
                both = [*first, *[a_again[w]["store"] for w in workers]] if args.fit_a == "both" else first
                prediction, serial, shares = fit_and_predict(folder / "A.json", both, folder / "B.json", workers,
                                                             folder, disks=disks)
                result = compare(prediction, serial, runs_a, runs_b, shares)
                if args.fit_a == "both":  # the same prediction from A's first runs alone, as before 2026-11-26
                    alone = folder / "fit-first"
                    alone.mkdir(exist_ok=True)
                    paper, closed, cpu = fit_and_predict(folder / "A.json", first, folder / "B.json", workers, alone,
                                                         disks=disks)
                    result["first_only"] = first_only(compare(paper, closed, runs_a, runs_b, cpu))
                result.update({"repeat": repeat, "b": b_name, "b_description": machine_b.description,
                               "shape": shape, "job": job_args(shape, args.samples), "a_runs": runs_a, "b_runs": runs_b,
                               "fit_a": args.fit_a,
                               "throttled": throttled, "a_again": drift(runs_a, a_again),
                               "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                               "host": socket.gethostname(), "cores": os.cpu_count()})
                if b_name == "disk":
                    result["init"] = init_on_b(prediction, runs_a, runs_b)
                print_comparison(f"B = {b_name}, shape {shape}, repeat {repeat + 1}", result)
                if b_name == "disk":
                    print_init(result)
                results.append(result)
                _write_results(out, results)
    return results


def summary(results: list[dict]) -> None:
    """Per B, shape and w: the errors of the repeats (median, min, max) and the knee's agreement."""
    print("\nsummary over the repeats (error = predicted / measured - 1; measured: the median of B's runs at w, and "
          "each run; the knee judged on the medians)")
    keys = sorted({(r["b"], r["shape"]) for r in results})
    for b, shape in keys:
        mine = [r for r in results if (r["b"], r["shape"]) == (b, shape)]
        for w in sorted({row["w"] for r in mine for row in r["rows"]}):
            spreads = [100 * row["measured_spread"] for r in mine for row in r["rows"]
                       if row["w"] == w and len(row.get("measured_runs_s") or []) > 1]
            if spreads:
                print(f"  {b:<6s} {shape:<8s} w={w} B's runs: range (max - min) / median "
                      f"{', '.join(f'{x:.0f}' for x in spreads)} % (per repeat)")
            for label, key in (("max", "error"), ("serial", "serial_error"), ("shares", "shares_error")):
                errors = [100 * row[key] for r in mine for row in r["rows"] if row["w"] == w and key in row]
                runs = [100 * e for r in mine for row in r["rows"] if row["w"] == w for e in row.get(
                    key.replace("error", "run_errors"), [])]
                if errors:
                    print(f"  {b:<6s} {shape:<8s} w={w} {label:<6s}: error against B's median "
                          f"{statistics.median(errors):+.1f} %, range {min(errors):+.1f} .. {max(errors):+.1f} % over "
                          f"{len(errors)} repeat(s); against each of B's {len(runs)} runs {min(runs):+.1f} .. "
                          f"{max(runs):+.1f} %")
        moved = [100 * m["phase_moved"] for r in mine for m in (r.get("a_again") or {}).values()]
        if moved:
            print(f"  {b:<6s} {shape:<8s} A's phase moved {min(moved):+.1f} .. {max(moved):+.1f} % between its run "
                  "before B's runs and one after them (the machine's own drift)")
        for label, key in (("max", "knee_sides"), ("serial", "serial_knee_sides"), ("shares", "shares_knee_sides")):
            sides = [s["agree"] for r in mine for s in r.get(key, [])]
            if sides:
                print(f"  {b:<6s} {shape:<8s} knee ({label}) on the right side: {sum(sides)} of {len(sides)}")
    for label, key in (("max", "error"), ("serial", "serial_error"), ("shares", "shares_error")):
        errors = [abs(row[key]) for r in results for row in r["rows"] if key in row]
        runs = [abs(e) for r in results for row in r["rows"] for e in row.get(key.replace("error", "run_errors"), [])]
        if errors:
            print(f"  {label}: {sum(e <= 0.10 for e in errors)} of {len(errors)} predictions within 10 % of B's median"
                  f", {sum(e <= 0.05 for e in errors)} within 5 %; of B's single runs {sum(e <= 0.10 for e in runs)} "
                  f"of {len(runs)} within 10 %, {sum(e <= 0.05 for e in runs)} within 5 %")
        alone = [abs(row[key]) for r in results for row in (r.get("first_only") or {}).values() if key in row]
        if alone:
            print(f"  {label}, fitted on A's first run at each w alone: {sum(e <= 0.10 for e in alone)} of "
                  f"{len(alone)} within 10 %, {sum(e <= 0.05 for e in alone)} within 5 %; mean absolute error "
                  f"{100 * statistics.mean(alone):.1f} % against {100 * statistics.mean(errors):.1f} % fitted on both")


def init_summary(results: list[dict]) -> None:
    """Per B, shape and w, the errors of B's predicted initialisation over the repeats (median, min, max)."""
    rows = [(r["b"], r["shape"], row) for r in results for row in (r.get("init") or {}).get("rows", [])
            if "error" in row]
    for b, shape, w in sorted({(b, shape, row["w"]) for b, shape, row in rows}):
        errors = [100 * row["error"] for b2, s2, row in rows if (b2, s2, row["w"]) == (b, shape, w)]
        print(f"  {b:<6s} {shape:<8s} w={w} init  : error median {statistics.median(errors):+.1f} %, range "
              f"{min(errors):+.1f} .. {max(errors):+.1f} % over {len(errors)} repeat(s)")


def one_profile(paths: list[str], out: Path, name: str) -> Path:
    """A machine's profile from one calibration, or from several (rounds, taken alternately with the other
    machine's where both are at hand): each compute point their median (``profile.merge_rounds``), saved as
    ``out/NAME.json``."""
    if len(paths) == 1:
        return Path(paths[0])
    from ddltrace.collectors.microbench import profile as prof

    return prof.save(prof.merge_rounds([prof.load(p) for p in paths]), out / f"{name}.json")


def run_row(store: str | Path, servers: int = 1) -> dict:
    """One run's figures, read from its store as the fit reads A's (:func:`measurements_from_store`): its workers
    ``w``, phase and initialisation (s), a worker's share of a core, the server's mean wait per update it received
    (s)."""
    row = measurements_from_store(store, servers=servers)
    return {"store": str(store), "w": int(row["w"]), "phase_s": float(row["phase_s"]), "init_s": float(row["init_s"]),
            "cpu_share": float(row["cpu_share"]), "update_wait_s": float(row["server_update_wait_s"])}


def b_rows_from_stores(stores: list[str], servers: int = 1) -> dict[int, dict]:
    """B's stores (several at a w: runs of the same job, compared through their median) as :func:`b_median`'s rows
    per w (:func:`run_row`)."""
    by_w: dict[int, list[dict]] = {}
    for store in stores:
        row = run_row(store, servers)
        by_w.setdefault(row["w"], []).append(row)
    return {w: b_median(runs) for w, runs in sorted(by_w.items())}


def two_machines(args) -> list[dict]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    a_rows = {row["w"]: row for row in (run_row(store, args.servers) for store in args.runs_a)}
    b_rows = b_rows_from_stores(args.runs_b or [], args.servers)
    workers = [int(w) for w in args.workers.split(",")] if args.workers_given else sorted(a_rows | b_rows)
    profile_a, profile_b = one_profile(args.profile_a, out, "A"), one_profile(args.profile_b, out, "B")
    if bool(args.disk_a) != bool(args.disk_b):
        raise DdltraceError("B's initialisation needs both --disk-a and --disk-b (calibrate --only disk on each)")
    disks = (Path(args.disk_a), Path(args.disk_b)) if args.disk_a else None
    prediction, serial, shares = fit_and_predict(profile_a, list(args.runs_a), profile_b, workers, out,
                                                 args.servers, disks)
    result = compare(prediction, serial, a_rows, b_rows, shares)
    result.update({"b": "B", "shape": "given", "a_runs": a_rows, "b_runs": b_rows})
    if disks:
        result["init"] = init_on_b(prediction, a_rows, b_rows)
    print_comparison(f"B = {' '.join(args.profile_b)}", result)
    if result.get("init"):
        print_init(result)
    _write_results(out, [result])
    return [result]


def _write_results(out: Path, results: list) -> None:
    """``OUT/results.json``, replaced whole (a kill mid-write leaves the previous one, with every earlier result)."""
    with atomic_output(out / "results.json") as fh:
        fh.write(json.dumps(results, indent=1).encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/ddltrace-new-hardware", help="folder for runs, profiles, results")
    parser.add_argument("--b", default="quota,net",
                        help="the B's to make: quota, net, disk (default quota,net; disk runs the cold-init shape)")
    parser.add_argument("--shapes", default="compute,server", help=f"job shapes among {', '.join(SHAPES)}")
    parser.add_argument("--workers", default=None, help="worker counts (default 1,2,4)")
    parser.add_argument("--samples", type=int, default=4096,
                        help="the job's samples per epoch (default 4096; more: longer phases, which average this VM's "
                             "slow stretches of its core)")
    parser.add_argument("--repeats", type=int, default=1, help="repeat everything N times (default 1)")
    parser.add_argument("--b-runs", type=int, default=3,
                        help="run the job on B this many times at each w and compare the predictions with the median "
                             "of B's phases, each run's error printed too (default 3: one run of B is one draw)")
    parser.add_argument("--fit-a", choices=("both", "first"), default="both",
                        help="fit the model on A's two runs at each w, the one before B's runs and the one after "
                             "them, which bracket B's in time (both, the default; the fit on the first alone is "
                             "printed beside it), or on the first alone (first)")
    parser.add_argument("--share", type=float, default=0.5, help="quota: share of a core per process (default 0.5)")
    parser.add_argument("--period", type=float, default=0.010, help="quota: CFS period in s (default 0.010)")
    parser.add_argument("--rate", type=float, default=200.0, help="net: link rate in Mbit/s (default 200)")
    parser.add_argument("--disk-rate", type=float, default=256.0,
                        help="disk: read rate of the throttled disk in KiB/s (default 256)")
    parser.add_argument("--burst", type=int, default=BURST,
                        help=f"net: tbf burst in bytes (default {BURST}, about a tenth of a weights message; 0: the "
                             "cluster's, 1 ms of the rate, 25 kB at 200 Mbit/s)")
    parser.add_argument("--cpu-window", type=float, default=0.05,
                        help="calibrate --cpu-window on every machine, s (default 0.05: five quota periods)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="calibrate A and B alternately this many times (the cpu section again after the first) "
                             "and keep each compute point's median over the rounds (default 3)")
    parser.add_argument("--profile-a", nargs="+", help="two real machines: A's profile (calibrate on A); several: "
                                                       "rounds, each compute point their median")
    parser.add_argument("--runs-a", nargs="+", help="two real machines: A's trace stores of the job at 2+ w")
    parser.add_argument("--profile-b", nargs="+", help="two real machines: B's profile (calibrate on B); several: "
                                                       "rounds, each compute point their median")
    parser.add_argument("--runs-b", nargs="+", help="two real machines: B's trace stores, to compare with")
    parser.add_argument("--servers", type=int, default=1, help="two real machines: server ranks (default 1)")
    parser.add_argument("--disk-a", help="two real machines: A's disk section (calibrate --only disk), to predict B's "
                                         "initialisation; --profile-a then without r_d, --runs-a read cold")
    parser.add_argument("--disk-b", help="two real machines: B's disk section (calibrate --only disk)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the with blocks remove cgroups and namespaces
    if args.b_runs < 1:
        parser.error("--b-runs: at least 1")
    args.workers_given = args.workers is not None
    args.workers = args.workers or "1,2,4"
    try:
        if args.profile_a or args.runs_a or args.profile_b:
            if not (args.profile_a and args.runs_a and args.profile_b):
                raise DdltraceError("two real machines need --profile-a, --runs-a and --profile-b")
            results = two_machines(args)
        else:
            results = simulated(args)
        summary(results)
        init_summary(results)
    except DdltraceError as exc:
        print(f"new_hardware: {exc}", file=sys.stderr)
        return 2
    finally:
        with contextlib.suppress(Exception):
            from ddltrace.collectors import cluster as cl
            from ddltrace.collectors import cpu_quota, disk_throttle, loop_disk

            cpu_quota.remove_stale()
            disk_throttle.remove_stale()
            loop_disk.remove_stale(args.out)
            cl.remove_stale()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
