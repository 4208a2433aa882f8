"""A CPU quota is not a slower core (issue 17): the transfer of a fitted model to B carries each rank's share of a
core (calibrate records the allowance it ran under; A's runs record the share their ranks had), and the server's
cost per update is split into the CPU it used and the time it waited, from the server's trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddltrace.analyses.fit_hashemi import cpu_share, measurements_from_store
from ddltrace.collectors import cpu_quota
from ddltrace.collectors.microbench.machine import cpu_allowance
from ddltrace.models import transfer
from ddltrace.models.hashemi import Constants, Workload
from ddltrace.store import TraceStore

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"
WL = Workload(d=4096, b=64, n_f=2, n_w=40000, epochs=1, s=8)
COUNTS = {"muladds": 120000.0, "neurons": 10002.0}
#: A's shares of a core at w = 1, 2, 4 as the reference job's ranks had them on this 2-core VM (nh1's runs)
SHARES = {1: 0.98, 2: 0.69, 4: 0.37}


def _profile(scale: float, cores: int = 2, quota: float | None = None, period: float | None = None) -> dict:
    """A profile record whose compute constants are ``scale`` times a base, calibrated under ``quota``."""
    raw = {"machine": {"hostname": "vm", "usable_cores": cores,
                       "cpu_allowance": {"cores": cores, "quota_cores": quota, "quota_period_s": period}},
           "constants": {"C_muladd": {"value": 2e-11 * scale, "uncertainty": 0.0},
                         "C_act": {"value": 1e-9 * scale, "uncertainty": 0.0},
                         "C_err": {"value": 1e-9 * scale, "uncertainty": 0.0},
                         "r_net": {"value": 3e-10, "uncertainty": 0.0}}}
    return transfer.profile_record(raw, f"profile x{scale}", 8)


def _runs(busy_per_update) -> list[dict]:
    """A's runs at w = 1, 2, 4 with SHARES and the server's busy time per update ``busy_per_update(share)``."""
    return [{"w": float(w), "b": 64.0, "d": 4096.0, "epochs": 1.0, "ranks": w + 1.0, "cpu_share": share,
             "server_busy_s": 64 * busy_per_update(share)} for w, share in SHARES.items()]


def test_cpu_allowance_reads_the_tightest_quota_of_its_cgroup_and_ancestors(tmp_path):
    root = tmp_path / "cgroup"
    for folder, quota in (("cpu,cpuacct/job", "50000"), ("cpu,cpuacct/job/rank1", "-1")):
        (root / folder).mkdir(parents=True)
        (root / folder / "cpu.cfs_quota_us").write_text(quota + "\n")
        (root / folder / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup.txt"
    proc.write_text("9:memory:/x\n4:cpu,cpuacct:/job/rank1\n0::/\n")
    got = cpu_allowance(proc, root)
    assert got["quota_cores"] == 0.5
    assert got["quota_period_s"] == 0.1
    assert got["quota_source"] == str(root / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us")
    assert got["cores"] == len(__import__("os").sched_getaffinity(0))
    # cgroup v2: cpu.max, "max" for none
    v2 = tmp_path / "v2"
    for folder, line in (("a", "max 100000"), ("a/b", "25000 100000")):
        (v2 / folder).mkdir(parents=True)
        (v2 / folder / "cpu.max").write_text(line + "\n")
    proc.write_text("0::/a/b\n")
    assert cpu_allowance(proc, v2)["quota_cores"] == 0.25
    proc.write_text("0::/a\n")
    assert cpu_allowance(proc, v2)["quota_cores"] is None


@pytest.mark.skipif(cpu_quota.missing() is not None, reason=str(cpu_quota.missing()))
def test_calibrate_under_a_real_quota_records_it(tmp_path):
    """calibrate's cpu section inside a quota of half a core: the profile records the quota, its period, and the
    share its one-thread curves had (CPU time over wall time), which cannot pass the quota."""
    out = tmp_path / "B.json"
    ddltrace = str(Path(sys.executable).with_name("ddltrace"))
    with cpu_quota.CpuQuota(0.5) as quota:
        done = subprocess.run(quota.wrap([ddltrace, "calibrate", "--quick", "--only", "cpu", "--out", str(out)]),
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    allowance = json.loads(out.read_text())["machine"]["cpu_allowance"]
    assert (allowance["quota_cores"], allowance["quota_period_s"]) == (0.5, 0.01)
    assert 0 < allowance["share_seen"] <= 0.5 * 1.05
    record = transfer.profile_record(json.loads(out.read_text()), str(out), 8)
    assert record["allowance"]["share_seen"] == allowance["share_seen"]
    # every point of the compute curves carries the CPU share its runs had (a point of a few ms may fall inside one
    # unthrottled stretch of the period, or mostly in throttled ones: that is what it corrects)
    shares = [pt["cpu_share"] for name, curve in json.loads(out.read_text())["curves"].items()
              if name.startswith(("C_muladd", "C_act", "C_err")) for pt in curve["points"]]
    assert shares and all(0 < x <= 1.05 for x in shares)
    assert min(shares) < 0.9  # the quota throttled some of them
    assert record["cpu_seconds"] is True


def test_a_quota_slows_a_rank_by_its_share_not_by_calibrates_factor():
    """B = A under a quota of half a core: calibrate's one thread saw 2x; A's ranks had SHARES. On B a rank gets
    min(0.5, share_A): c_p carries by 2 * 0.5 * share_A / min(0.5, share_A), 1.96 at w = 1 and 1 at w = 4 where A's
    ranks already had less than half a core."""
    a, b = _profile(1.0), _profile(2.0, quota=0.5)
    runs = _runs(lambda share: 1e-3 / share)
    k = Constants(c_p=1e-4, c_u=1e-3)
    for w, share in SHARES.items():
        on_b, factors, _ = transfer.transfer(k, WL, COUNTS, a, b, w=w, runs=runs)
        expected = 2.0 * 0.5 * share / min(0.5, share)
        assert factors["c_p"] == pytest.approx(expected)
        assert on_b.c_p == pytest.approx(k.c_p * expected)
        shares = transfer.cpu_shares(a, b, runs, w)
        assert (shares["share_a"], shares["share_b"], shares["share_a_from"]) == (share, min(0.5, share), "measured")
    # a w the runs did not measure: every rank busy on A's 2 cores, w + 1 ranks
    assert transfer.cpu_shares(a, b, runs, 8)["share_a"] == pytest.approx(2 / 9)
    assert transfer.transfer(k, WL, COUNTS, a, b, w=8, runs=runs)[1]["c_p"] == pytest.approx(1.0)


def test_another_cpu_without_a_quota_carries_by_the_work_ratio_at_every_w():
    a, b = _profile(1.0), _profile(1.5)
    runs = _runs(lambda share: 1e-3 / share)
    k = Constants(c_p=1e-4, c_b=1e-3, c_u=1e-3)
    for w in (1, 2, 4, 8, 64):
        _, factors, _ = transfer.transfer(k, WL, COUNTS, a, b, w=w, runs=runs)
        assert factors["c_p"] == pytest.approx(1.5)
        assert factors["c_b"] == pytest.approx(1.5)
        assert factors["c_u"] == pytest.approx(1.5)
    # twice the cores: a rank's share on B doubles (to at most a core), so a w past A's cores gains
    wide = _profile(1.0, cores=4)
    _, factors, _ = transfer.transfer(k, WL, COUNTS, a, wide, w=4, runs=runs)
    assert factors["c_p"] == pytest.approx(SHARES[4] / (2 * SHARES[4]))


def test_the_servers_sleep_is_not_slowed_by_a_quota():
    """The server-bound job's server sleeps 10 ms per gradient and computes 1 ms: its busy time per update on A
    grew as 1 ms / share + 10 ms. Under the quota only the 1 ms is slowed; the fit's c_u beyond the server's
    median busy time (the runs' plateau, not the server's work) carries like the workers' compute."""
    a, b = _profile(1.0), _profile(2.0, quota=0.5)
    runs = _runs(lambda share: 1e-3 / share + 10e-3)
    busy = [1e-3 / s + 10e-3 for s in SHARES.values()]
    split = transfer.server_split(0.0125, a, runs)
    assert split["server_s"] == pytest.approx(float(np.median(busy)))
    assert split["cpu_fraction"] == pytest.approx(1 / 11)
    assert split["rest_s"] == pytest.approx(0.0125 - split["server_s"])
    k = Constants(c_p=1e-4, c_u=0.0125)
    for w, share in SHARES.items():
        m = 2.0 * 0.5 * share / min(0.5, share)
        _, factors, _ = transfer.transfer(k, WL, COUNTS, a, b, w=w, runs=runs)
        expected = split["server_s"] * (m / 11 + 10 / 11) + split["rest_s"] * m
        assert factors["c_u"] * 0.0125 == pytest.approx(expected)
    # the compute-bound job's server: all of its busy time grew with 1 / share: all CPU
    assert transfer.server_split(0.008, a, _runs(lambda share: 1e-3 / share))["cpu_fraction"] == pytest.approx(1.0)


@pytest.mark.skipif(not (SAMPLES / "par-w2" / "store").exists(), reason="the committed sample traces are absent")
def test_a_runs_cpu_share_is_its_workers_sampled_cpu_percent():
    path = SAMPLES / "par-w2" / "store"
    store = TraceStore.open(path)
    frames = [pd.read_parquet(path / "counters" / f"rank-{r:05d}.parquet") for r in (1, 2)]
    samples = pd.concat(frames)
    samples = samples[samples["name"] == "cpu_percent"].sort_values("t_ns")
    start, end = int(samples["t_ns"].iloc[1]), int(samples["t_ns"].iloc[-2])
    inside = samples[(samples["t_ns"] > start) & (samples["t_ns"] <= end)]
    assert len(inside) >= 3
    assert cpu_share(store, [1, 2], start, end) == pytest.approx(inside["value"].mean() / 100)
    assert np.isnan(cpu_share(store, [1, 2], end + 10**12, end + 2 * 10**12))
    row = measurements_from_store(path)
    assert row["ranks"] == 3.0
    assert 0 < row["cpu_share"] <= 1.1
    # the workers' messages per batch: sends (a pull request and the gradient) and receives (the weights)
    worker = pd.read_parquet(path / "timeline" / "rank-00001.parquet")
    names = worker["name"].astype(str).str.removesuffix("_c")
    batches = row["d"] * row["epochs"] / (row["b"] * row["w"])
    assert row["sent_per_batch"] == pytest.approx(2.0, abs=0.1)
    assert row["received_per_batch"] == pytest.approx(1.0, abs=0.1)
    assert row["sent_per_batch"] <= (names == "MPI_Send").sum() / batches


def test_a_message_waits_for_a_receiver_the_quota_throttled():
    """Ranks that poll while they wait spend their quota polling and are throttled for the rest of the period: at
    half a core of a 10 ms period, a rank that would use a whole core is off half the time in 5 ms stretches, so
    a message waits 1.25 ms on average; one that would use less than its quota is never throttled."""
    a, b = _profile(1.0), _profile(2.0, quota=0.5, period=0.010)
    assert transfer.quota_wait(b, 1.0) == pytest.approx(1.25e-3)
    assert transfer.quota_wait(b, 0.8) == pytest.approx((1 - 0.5 / 0.8) ** 2 * 0.005)
    assert transfer.quota_wait(b, 0.4) == 0.0
    assert transfer.quota_wait(a, 1.0) == 0.0
    # ps-sgd: per batch a worker receives the weights (1) and sends a pull request and its gradient (2); the
    # compute-bound job's server polls (its share 0.98 at w = 1), the server-bound one's sleeps (0.45)
    k = Constants(c_p=1e-4, c_u=1e-3)
    for server_share, expected in ((0.98, 1.25e-3 + 2 * (1 - 0.5 / 0.98) ** 2 * 0.005), (0.45, 1.25e-3)):
        runs = [dict(r, sent_per_batch=2.0, received_per_batch=1.0, server_cpu_share=server_share)
                for r in _runs(lambda share: 1e-3 / share)]
        for r in runs:
            r["cpu_share"] = 1.0 if r["w"] == 1 else r["cpu_share"]
        on_b, factors, _ = transfer.transfer(k, WL, COUNTS, a, b, w=1, runs=runs)
        assert on_b.c_b == pytest.approx(expected)
        assert factors["c_b_quota_wait_s"] == pytest.approx(expected)
    # w = 4: A's ranks had 0.37 of a core, under the quota: nothing waits
    assert transfer.transfer(k, WL, COUNTS, a, b, w=4, runs=runs)[0].c_b == 0.0


def test_the_share_calibrate_saw_divides_out():
    """A calibration that had 0.45 of a core (its one-thread curves' CPU time over their wall time) read the
    compute 2.2x slower on the same core: the cores' ratio is 2.2 x 0.45 = 0.99, and a rank with a core on A and
    half a core on B is slowed 2x at w = 1."""
    a = _profile(1.0)
    raw = {"machine": {"usable_cores": 2, "cpu_allowance": {"cores": 2, "quota_cores": 0.5, "share_seen": 0.45}},
           "constants": {name: {"value": v * 2.2, "uncertainty": 0.0}
                         for name, v in (("C_muladd", 2e-11), ("C_act", 1e-9), ("C_err", 1e-9))}}
    b = transfer.profile_record(raw, "B", 8)
    runs = [dict(r, cpu_share=1.0) for r in _runs(lambda share: 1e-3 / share)]
    _, factors, _ = transfer.transfer(Constants(c_p=1e-4), WL, COUNTS, a, b, w=1, runs=runs)
    assert factors["c_p"] == pytest.approx(2.2 * 0.45 / 0.5)


def test_curves_timed_with_their_cpu_share_compare_the_cores():
    """B's curves read 2.6x A's in wall time, with each point's runs at 0.38 of a core (a quota's luck): in CPU
    seconds, the same core (0.99x). A rank with a core on A and half a core on B is slowed 2x at w = 1."""
    def raw(scale: float, share: float, quota: float | None) -> dict:
        curves = {f"{name}_f64": {"points": [{"x": x, "y": y * scale, "spread": 0.0, "cpu_share": share}
                                             for x, y in ((16384, base), (1 << 20, 1.5 * base))]}
                  for name, base in (("C_muladd_gemm", 2e-11), ("C_act_sigmoid_numpy", 1e-9),
                                     ("C_err_sigmoid_numpy", 1e-9))}
        constants = {name: {"value": base * scale, "uncertainty": 0.0, "alias_of": f"{src}_f32"}
                     for name, src, base in (("C_muladd", "C_muladd_gemm", 2e-11),
                                             ("C_act", "C_act_sigmoid_numpy", 1e-9),
                                             ("C_err", "C_err_sigmoid_numpy", 1e-9))}
        return {"machine": {"usable_cores": 2, "cpu_allowance": {"cores": 2, "quota_cores": quota,
                                                                  "share_seen": 0.5 if quota else 1.0}},
                "constants": constants, "curves": curves}
    a = transfer.profile_record(raw(1.0, 1.0, None), "A", 8)
    b = transfer.profile_record(raw(2.6, 0.38, 0.5), "B", 8)
    assert a["cpu_seconds"] and b["cpu_seconds"]
    runs = [dict(r, cpu_share=1.0) for r in _runs(lambda share: 1e-3 / share)]
    _, factors, _ = transfer.transfer(Constants(c_p=1e-4), WL, COUNTS, a, b, w=1, runs=runs)
    assert factors["c_p"] == pytest.approx(2.6 * 0.38 / 0.5)
    # the same curves without the shares: calibrate's share_seen (0.5) divides out instead
    plain = raw(2.6, 0.38, 0.5)
    for curve in plain["curves"].values():
        for point in curve["points"]:
            del point["cpu_share"]
    old = transfer.profile_record(plain, "B without shares", 8)
    assert not old["cpu_seconds"]
    _, factors, _ = transfer.transfer(Constants(c_p=1e-4), WL, COUNTS, a, old, w=1, runs=runs)
    assert factors["c_p"] == pytest.approx(2.6 * 0.5 / 0.5)
