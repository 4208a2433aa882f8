"""The microbenchmarks, each run for real on small sizes: compiler handling, feed-forward forms, STREAM
kernels, C_interf workers, disk checks, busy-machine accounting, fits, the profile format, GPU absence."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from ddltrace.collectors.microbench import ccompile, disk, feedforward, gpu, interference, machine, measure, memory
from ddltrace.collectors.microbench import profile as prof
from ddltrace.errors import DdltraceError


@pytest.fixture
def no_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("DDLTRACE_CC", str(tmp_path / "missing" / "cc"))
    monkeypatch.setenv("DDLTRACE_CACHE", str(tmp_path / "cache"))


def test_kernels_compile_once_and_are_cached(monkeypatch, tmp_path):
    if ccompile.shutil.which(ccompile.compiler()) is None:
        pytest.skip(f"no C compiler {ccompile.compiler()!r} on this machine")
    monkeypatch.setenv("DDLTRACE_CACHE", str(tmp_path))
    path, note = ccompile.build()
    assert note == "" and path is not None and path.parent == tmp_path / "microbench"
    mtime = path.stat().st_mtime_ns
    again, _ = ccompile.build()
    assert again == path and again.stat().st_mtime_ns == mtime
    lib = ccompile.load_kernels()
    w, a, y = np.full((3, 4), 2.0), np.arange(4.0), np.ones(3)
    lib.muladd_loop_f64(w.ctypes.data, a.ctypes.data, y.ctypes.data, 3, 4)
    assert y.tolist() == [13.0, 13.0, 13.0]  # 1 + 2 * (0 + 1 + 2 + 3)


def test_no_compiler_leaves_the_numpy_forms(no_compiler):
    assert ccompile.load_kernels() is None
    assert "no C compiler" in ccompile.last_note() and "DDLTRACE_CC" in ccompile.last_note()
    curves = feedforward.muladd_curves([16384, 262144], min_time=0.001, repeats=1)
    assert sorted(curves) == ["C_muladd_gemm_f32", "C_muladd_gemm_f64", "C_muladd_gemv_f32", "C_muladd_gemv_f64"]
    neurons = feedforward.neuron_curves([16384], min_time=0.001, repeats=1)
    assert neurons and all("_numpy_" in name for name in neurons)
    for points in [*curves.values(), *neurons.values()]:
        assert all(math.isfinite(p.value) and p.value > 0 for p in points)
    clock, note = machine.core_clock()
    assert clock is None and "no C compiler" in note


def test_compiler_that_fails_is_a_note(monkeypatch, tmp_path):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'cc: fatal error: broken' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DDLTRACE_CC", str(fake))
    monkeypatch.setenv("DDLTRACE_CACHE", str(tmp_path / "cache"))
    assert ccompile.load_kernels() is None
    assert "did not compile" in ccompile.last_note() and "broken" in ccompile.last_note()


def test_literal_loop_and_activations_compute_the_right_values():
    lib = ccompile.load_kernels()
    if lib is None:
        pytest.skip(ccompile.last_note())
    y = np.linspace(-3, 3, 101)
    out = np.empty_like(y)
    lib.act_sigmoid_f64(y.ctypes.data, out.ctypes.data, y.size)
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-y)), rtol=1e-12)
    s, d = np.full_like(y, 0.5), np.empty_like(y)
    lib.err_tanh_f64(out.ctypes.data, s.ctypes.data, d.ctypes.data, y.size)
    np.testing.assert_allclose(d, 0.5 * (1 - out**2), rtol=1e-12)


def test_segment_sizes_cross_the_caches():
    caches, llc = machine.cache_sizes(), machine.llc_bytes()
    quick = feedforward.segment_sizes(quick=True)
    assert min(quick) < caches.get("L1", 32768) and max(quick) > llc
    full = feedforward.segment_sizes(quick=False)
    assert full[0] == 4096 and full[-1] <= 4 * llc and full[-1] * 4 > 4 * llc


def test_machine_description_and_clock():
    desc = machine.describe()
    for key in ("cpu_model", "usable_cores", "cache_bytes", "memory_bytes", "kernel"):
        assert desc[key], key
    clock, note = machine.core_clock(runs=8)
    if clock is None:
        pytest.skip(note)
    assert 1e8 < clock.value < 1e10  # between 0.1 and 10 GHz: a clock, whatever the load
    assert machine.peak_muladd_per_s(clock.value, 4) == 2 * machine.peak_muladd_per_s(clock.value, 8)


def test_stream_kernels_compute_streams_results():
    n = 1 << 16
    arrays = memory.StreamArrays(n)
    for arr in (arrays.a, arrays.b, arrays.c):
        assert arr.ctypes.data % 64 == 0 and arr.size == n
    lib = ccompile.load_kernels()
    forms = ["numpy"] + (["c"] if lib is not None else [])
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        for form in forms:
            arrays.a.fill(1.0)
            arrays.b.fill(2.0)
            arrays.c.fill(0.0)
            for kernel in ("copy", "scale", "add", "triad"):
                meas = arrays.bandwidth(kernel, form, 2, repeats=1, pool=pool, lib=lib)
                assert meas.value > 0 and meas.unit == "B/s"
            # STREAM's check after one pass of each kernel (here run twice: warm-up + 1 repeat, idempotent
            # per pass after the first): c = a, b = 3c, c = a + b, a = b + 3c
            a0 = 1.0
            c = a0
            b = memory.SCALAR * c
            c = a0 + b
            a = b + memory.SCALAR * c
            np.testing.assert_allclose(arrays.a, a)
            np.testing.assert_allclose(arrays.b, b)
            np.testing.assert_allclose(arrays.c, c)


def test_stream_report_has_every_form_kernel_and_thread_count():
    res = memory.stream([1, 2], repeats=1, n=1 << 16, kernels=("read", "write", "triad"))
    for form in res["forms"]:
        for kernel in ("read", "write", "triad"):
            assert set(res["bandwidth"][form][kernel]) == {1, 2}


def test_interference_workers_are_pinned_and_report_ratios():
    small, large = 16 * 1024, 4 * 2**20
    curves = interference.interference_curves([small, large], 2, min_time=0.002, repeats=2)
    # each curve's segment is the n x n float64 matrix timed: 45 x 45 (16200 B) for the 16 KiB asked for
    assert [c["segment_bytes"] for c in curves] == [45 * 45 * 8, 724 * 724 * 8]
    for curve in curves:
        points = curve["points"]
        assert [p["H"] for p in points] == [1, 2] and points[0]["ratio"] == 1.0
        assert all(p["ratio"] > 0 and p["seconds_per_call"] > 0 for p in points)
        if hasattr(os, "sched_setaffinity"):
            assert all(p["pinned"] for p in points)
    # a 4 MiB segment holds 256 x more multiply-adds than 16 KiB: each call takes longer
    assert curves[1]["points"][0]["seconds_per_call"] > curves[0]["points"][0]["seconds_per_call"]


def test_interference_ratio_carries_the_one_process_times_uncertainty():
    """C_interf(H) = median(H-process times) / median(1-process times): its spread is the ratio times both relative
    spreads in quadrature (first-order propagation, computed here with numpy). It was the H-process spread alone
    over the 1-process median: a noisy 1-process baseline, which divides every ratio, counted for nothing."""
    one = [1.00, 1.10, 0.90, 1.20, 0.80]  # relative spread 1.4826 x 0.1 / 1.0 = 14.8 %
    two = [2.00, 2.02, 1.98, 2.01, 1.99]  # relative spread 1.4826 x 0.01 / 2.0 = 0.74 %

    def rel_spread(v):
        v = np.asarray(v)
        return 1.4826 * np.median(np.abs(v - np.median(v))) / np.median(v)

    ratio, spread = interference.ratio_point(two, one)
    assert ratio == pytest.approx(2.0)
    assert spread == pytest.approx(2.0 * np.hypot(rel_spread(two), rel_spread(one)))  # 0.297; it was 0.0148
    assert interference.ratio_point(one, one) == (1.0, 0.0)  # H = 1: 1 by definition


def test_interference_other_cpu_excludes_its_own_workers(monkeypatch):
    """The CPU time 'other processes' used while C_interf ran counted the benchmark's own worker processes (children
    not yet waited for): a worker's whole timed CPU time read as load from elsewhere. The machine's busy count is
    fixed here at 10 CPU seconds over the block: what is left for others is that less the workers' own CPU time."""
    counts = iter([1000.0, 1010.0])
    monkeypatch.setattr(measure, "machine_busy_cpu_s", lambda: next(counts))
    (run,) = interference.run_concurrently(1, [16 * 1024], min_time=0.1, repeats=2)
    (worker,) = run["workers"]
    assert worker["cpu_s"] > 0.1  # two runs of ~0.1 s of CPU time each
    assert run["other_cpu_s"] == pytest.approx(10.0 - worker["cpu_s"], abs=0.05)  # less this process's own


def test_mpi_constants_are_the_weighted_fit_of_the_ranks_times(monkeypatch):
    """lat_mpi and r_mpi are the intercept and slope of t = lat + r n weighted by 1/t over the medians of the
    ranks' one-way times, with their standard errors (computed here by numpy's weighted least squares); each point's
    spread is 1.4826 x MAD as every other curve's (it was numpy's standard deviation: 0.82 x the same deviations'
    robust spread for three alike repeats, and any outlier's full weight)."""
    from ddltrace.collectors.microbench import mpi_pingpong, suite

    sizes = list(mpi_pingpong.SIZES)
    rng = np.random.default_rng(3)
    times = {s: list((2e-6 + 1e-10 * s) * (1 + 0.02 * rng.standard_normal(3))) for s in sizes}
    monkeypatch.setattr(mpi_pingpong, "measure", lambda *a, **k: (times, ""))
    p = prof.new_profile({}, False, ["net"])
    suite.record_mpi(p, suite.Options())
    x = np.array(sizes, dtype=float)
    y = np.array([np.median(times[s]) for s in sizes])
    w = 1 / y
    a = np.column_stack([np.ones_like(x), x]) * w[:, None]
    coef, res, *_ = np.linalg.lstsq(a, y * w, rcond=None)
    cov = res[0] / (len(x) - 2) * np.linalg.inv(a.T @ a)
    lat, r = p["constants"]["lat_mpi"], p["constants"]["r_mpi"]
    assert lat["value"] == pytest.approx(coef[0]) and lat["uncertainty"] == pytest.approx(math.sqrt(cov[0, 0]))
    assert r["value"] == pytest.approx(coef[1]) and r["uncertainty"] == pytest.approx(math.sqrt(cov[1, 1]))
    assert (lat["unit"], r["unit"]) == ("s", "s/B")
    for point in p["curves"]["mpi_pingpong"]["points"]:
        v = np.asarray(times[point["x"]])
        assert point["y"] == np.median(v)
        assert point["spread"] == pytest.approx(1.4826 * np.median(np.abs(v - np.median(v))))


def test_a_compute_points_x_is_its_segments_own_bytes():
    """A C_muladd point's x (segment_bytes) is the bytes of the n x n weight matrix timed, n = the whole square root
    of the size asked for in values; it was the size asked for: 4096 B of float64 is a 22 x 22 matrix, 3872 B
    (the point said 4096), 16 KiB a 45 x 45 one, 16200 B. The neuron curves' arrays are the size asked for."""
    sizes = [4096, 16384]
    curves = feedforward.muladd_curves(sizes, min_time=0.001, repeats=1)
    for name, points in curves.items():
        itemsize = 8 if name.endswith("f64") else 4
        assert [p.segment_bytes for p in points] == [int(math.sqrt(s / itemsize)) ** 2 * itemsize for s in sizes]
    assert [p.segment_bytes for p in curves["C_muladd_gemv_f64"]] == [3872, 16200]
    act = feedforward.neuron_curves([4096], min_time=0.001, repeats=1)
    assert all(points[0].segment_bytes == 4096 for points in act.values())


def test_interference_worker_leaves_ctrl_c_to_the_calibration():
    """A terminal's Ctrl-C reaches every process of the group: each C_interf worker printed a KeyboardInterrupt
    traceback under the calibration's own line. The worker now ignores it (the calibration ends its workers)."""
    import signal

    worker = subprocess.Popen([sys.executable, "-m", "ddltrace.collectors.microbench.interference", "0.001", "1",
                               "4096", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert worker.stdout.readline().strip() == "ready"
    worker.send_signal(signal.SIGINT)
    out, err = worker.communicate("go\n", timeout=60)
    assert worker.returncode == 0 and "KeyboardInterrupt" not in err and '"times_s"' in out


def test_disk_probe_on_a_real_file(tmp_path):
    res = disk.measure(tmp_path, 2 * disk.BLOCK, repeats=1, random_seconds=0.05)
    assert res.r_d.value > 0 and res.w_d.value > 0 and res.iops.value > 0
    assert res.method in ("O_DIRECT", "fdatasync+POSIX_FADV_DONTNEED")
    assert list(tmp_path.iterdir()) == []  # the benchmark's file is removed


def test_disk_path_missing_or_not_a_directory(tmp_path):
    with pytest.raises(DdltraceError, match="does not exist"):
        disk.check_path(tmp_path / "nope", 1)
    (tmp_path / "f").write_text("x")
    with pytest.raises(DdltraceError, match="not a directory"):
        disk.check_path(tmp_path / "f", 1)


def test_disk_path_without_room(tmp_path):
    free = disk.shutil.disk_usage(tmp_path).free
    with pytest.raises(DdltraceError, match="not enough room"):
        disk.check_path(tmp_path, free + 1)


def _mount_tmpfs(target, options: str) -> bool:
    target.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True)
    return proc.returncode == 0


@pytest.fixture
def small_tmpfs(tmp_path):
    target = tmp_path / "small"
    if os.geteuid() != 0 or not _mount_tmpfs(target, "size=8m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield target
    subprocess.run(["umount", str(target)], check=False)


def test_disk_on_a_small_file_system_says_so(small_tmpfs):
    with pytest.raises(DdltraceError, match=f"{small_tmpfs}: not enough room"):
        disk.measure(small_tmpfs, 32 * 2**20)


def test_disk_path_without_permission(tmp_path):
    target = tmp_path / "locked"
    if os.geteuid() == 0:  # root writes anywhere with mode bits: use a read-only file system
        if not _mount_tmpfs(target, "ro,size=1m"):
            pytest.skip("cannot mount a read-only tmpfs here")
        expected = "read-only file system"
    else:
        target.mkdir()
        target.chmod(0o500)
        expected = "permission denied"
    try:
        with pytest.raises(DdltraceError, match=f"{target}: cannot create the disk benchmark's file there "
                                                f"\\({expected}\\)"):
            disk.measure(target, disk.BLOCK)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(target)], check=False)
        else:
            target.chmod(0o700)


def test_other_processes_cpu_time_is_counted():
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<3: pass"])
    try:
        import time

        time.sleep(0.2)
        meas = measure.repeat(lambda: time.sleep(0.3) or 0.3, repeats=2, extra=1)
    finally:
        spinner.kill()
        spinner.wait()
    assert sum(meas.other_cpu_s) > 0.1  # the spinner's CPU time while we slept
    assert meas.busy_runs >= 1 and len(meas.values) == 3  # one extra run for a busy machine


def test_repeat_median_and_spread():
    values = iter([1.0, 2.0, 3.0, 100.0, 2.0])
    meas = measure.repeat(lambda: next(values), repeats=5, extra=0, busy_cores=1e9)
    assert meas.value == 2.0 and meas.spread == pytest.approx(1.4826)


def test_linear_fit_recovers_a_line_with_its_interval():
    rng = np.random.default_rng(0)
    x = np.array([1, 8, 64, 512, 4096, 32768, 262144], dtype=float)
    y = (20e-6 + 1e-9 * x) * (1 + 0.01 * rng.standard_normal(x.size))
    fit = measure.linear_fit(x, y, relative=True)
    assert abs(fit.intercept - 20e-6) < 3 * fit.intercept_ci + 1e-7
    assert abs(fit.slope - 1e-9) < 3 * fit.slope_ci + 1e-12
    assert 0 < fit.slope_ci < 1e-9


def test_a_fitted_constants_uncertainty_is_its_standard_error_as_the_models_read_it():
    """r_net's uncertainty in a profile is the slope's standard error (scipy's linregress on the same points), one
    standard uncertainty as every other constant's and as the models draw it; it was the 95 % half-width, Student's
    t times that (3.18 over five stream sizes), so its share of a prediction's interval was 3x too wide."""
    from scipy import stats

    from ddltrace.collectors.microbench import network, suite
    from ddltrace.collectors.microbench import profile as prof

    sizes = list(network.STREAM_SIZES)
    times = [1e-4 + 4e-10 * n * (1 + e) for n, e in zip(sizes, (0.03, -0.02, 0.01, 0.02, -0.01), strict=True)]
    point = [(n, measure.Measurement(t, 0.0, "s", [t])) for n, t in zip(sizes, times, strict=True)]
    bw = measure.linear_fit(sizes, times)
    lat = measure.linear_fit([1, 64, 4096], [2e-5, 2.1e-5, 2.3e-5])
    reference = stats.linregress(sizes, times)
    assert bw.slope == pytest.approx(reference.slope) and bw.slope_se == pytest.approx(reference.stderr)
    assert bw.t95 == pytest.approx(stats.t.ppf(0.975, 3)) and bw.slope_ci == pytest.approx(3.182 * bw.slope_se, 1e-3)
    p = prof.new_profile({}, False, ["net"])
    suite.record_network(p, network.NetworkResult("peer", lat, bw, point[:3], point, {}), "loopback")
    r_net = p["constants"]["r_net"]
    assert r_net["value"] == pytest.approx(reference.slope)
    assert r_net["uncertainty"] == pytest.approx(reference.stderr)
    assert "standard error over 5 points" in r_net["method"] and "3.18 x" in r_net["method"]
    assert p["constants"]["C_nbw"]["uncertainty"] == pytest.approx(8 * reference.stderr / reference.slope**2)


def test_c_nbw_gives_its_95_interval_from_r_nets_bounds():
    """C_nbw = 8 / r_net: its ± is r_net's relative standard error to first order, symmetric, which a reciprocal's
    interval is not; the method now gives 8 / (r_net +- t x SE) (scipy's t over the points), and where r_net's interval
    reaches 0 (few noisy stream sizes), says that the bandwidth is bounded below only (a note)."""
    from scipy import stats

    from ddltrace.collectors.microbench import network, suite

    sizes = list(network.STREAM_SIZES[:-1])  # --quick: four sizes
    lat = measure.linear_fit([1, 64, 4096], [2e-5, 2.1e-5, 2.3e-5])
    for noise, bounded in (((0.01, -0.01, 0.02, -0.01), True), ((3.0, -0.9, 0.9, -0.2), False)):
        times = [1e-4 + 4e-10 * n * (1 + e) for n, e in zip(sizes, noise, strict=True)]
        ref = stats.linregress(sizes, times)
        t = stats.t.ppf(0.975, len(sizes) - 2)
        bw = measure.linear_fit(sizes, times)
        p = prof.new_profile({}, True, ["net"])
        point = [(n, measure.Measurement(x, 0.0, "s", [x])) for n, x in zip(sizes, times, strict=True)]
        suite.record_network(p, network.NetworkResult("peer", lat, bw, point[:3], point, {}), "loopback")
        method = p["constants"]["C_nbw"]["method"]
        low = prof.si(8 / (ref.slope + t * ref.stderr), "bit/s")
        high = prof.si(8 / (ref.slope - t * ref.stderr), "bit/s") if bounded else "unbounded"
        assert f"95 % interval {low}..{high}" in method
        assert any(n.startswith("C_nbw: r_net's 95 % interval reaches 0") for n in p["notes"]) is not bounded


def test_blas_threads_restores_the_count():
    _, getter = measure._blas_library()
    if getter is None:
        pytest.skip("numpy's BLAS does not expose its thread count")
    before = getter()
    with measure.blas_threads(1) as ok:
        assert ok and getter() == 1
    assert getter() == before


def _profile_with(value, unc=0.1):
    p = prof.new_profile({"hostname": "h", "cpu_model": "c"}, True, ["cpu"])
    prof.add_constant(p, "r_m", value, unc, "s/B", "memory read time per byte")
    return p


@pytest.mark.parametrize("value,unc", [(-1.0, 0.1), (0.0, 0.1), (float("nan"), 0.1), (float("inf"), 0.1),
                                       (1.0, -0.1), (1.0, float("nan"))])
def test_profile_rejects_constants_that_are_not_positive_and_finite(value, unc):
    assert prof.problems(_profile_with(value, unc))


def test_profile_round_trip_and_compare(tmp_path):
    a, b = _profile_with(1e-10, 1e-12), _profile_with(2e-10, 1e-12)
    prof.add_constant(b, "lat_net", 2e-5, 1e-6, "s", "latency")
    pa, pb = prof.save(a, tmp_path / "a.json"), prof.save(b, tmp_path / "b.json")
    assert prof.load(pa) == a
    rows = {r[0]: r for r in prof.compare(prof.load(pa), prof.load(pb))}
    assert rows["r_m"][5] == "2 x" and rows["r_m"][6] == "differs"
    assert rows["r_m"][2] == "± 1 %" and rows["r_m"][4] == "± 0.5 %"  # 1e-12 / 1e-10, 1e-12 / 2e-10
    assert rows["lat_net"][6] == "only in B"
    assert prof.format_value(1e-10, "s/B") == "100 ps/B (10 GB/s)"


def test_profile_load_errors_name_the_file(tmp_path):
    with pytest.raises(DdltraceError, match="no such profile"):
        prof.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DdltraceError, match="bad.json: not a readable JSON profile"):
        prof.load(tmp_path / "bad.json")
    (tmp_path / "neg.json").write_text(__import__("json").dumps(_profile_with(-1.0)))
    with pytest.raises(DdltraceError, match="neg.json: invalid hardware profile"):
        prof.load(tmp_path / "neg.json")


def test_mpi_pingpong_between_two_ranks():
    pytest.importorskip("mpi4py")
    from ddltrace.collectors.microbench import mpi_pingpong

    res, note = mpi_pingpong.measure(sizes=(1, 65536), repeats=2, min_time=0.002, timeout=120)
    assert res, note
    assert set(res) == {1, 65536} and all(len(v) == 2 and min(v) > 0 for v in res.values())


def test_no_gpu_is_one_line():
    gpus, note = gpu.describe()
    if gpus:
        pytest.skip(f"this machine has a GPU: {gpus[0]['name']}")
    assert note.startswith("no GPU: ") and "\n" not in note


class _Throttled:
    """A call of ``busy`` seconds of this thread's CPU under a simulated CFS quota: ``quota`` seconds of CPU per
    ``period``, then asleep until the period ends (no CPU, as a throttled thread); the first call finds the
    period's quota spent, as a call may under a real quota."""

    def __init__(self, busy: float = 1e-4, quota: float = 5e-3, period: float = 1e-2):
        import time

        self.time, self.busy, self.quota, self.period = time, busy, quota, period
        self.start, self.used = time.perf_counter(), quota

    def __call__(self) -> None:
        t = self.time
        if self.used >= self.quota or t.perf_counter() - self.start >= self.period:
            t.sleep(max(0.0, self.start + self.period - t.perf_counter()))
            self.start, self.used = t.perf_counter(), 0.0
        c = t.thread_time()
        while t.thread_time() - c < self.busy:
            pass
        self.used += self.busy


def test_a_point_under_a_quota_is_its_runs_own_cpu_time():
    """A call throttled when the runs are sized no longer shortens them: each run lasts min_time of CPU (many
    periods), and the point's CPU seconds per call are its runs' own CPU time, the call's 100 us of CPU. Before,
    a run sized from the throttled call (10 ms) held 2 calls and ran unthrottled, and its wall time x the point's
    share (the sizing call's sleep included) read a small fraction of the call's CPU time."""
    (point,) = feedforward._curve(lambda size: (_Throttled(), 1, size), [4096], min_time=0.02, repeats=3)
    assert point.value * point.cpu_share == pytest.approx(1e-4, rel=0.2)  # main: 0.1-0.5 of it
    assert point.cpu_value == pytest.approx(1e-4, rel=0.2)
    assert point.value > 1.5 * point.cpu_value  # the wall time of runs of many periods: throttled half of it
    assert 0 < point.cpu_share < 0.75
    assert point.cpu_spread >= 0


def test_per_call_timer_sizes_runs_by_cpu_time():
    cpu: list[float] = []
    timed = measure.per_call_timer(_Throttled(), 0.02, cpu)
    wall = timed()
    assert len(cpu) == 1 and cpu[0] == pytest.approx(1e-4, rel=0.2)
    assert wall > cpu[0]  # a run of 20 ms of CPU under 5 ms per 10 ms period is throttled


def test_merge_rounds_takes_each_points_median_and_what_the_rounds_disagree_by(tmp_path):
    """Three calibrations of one machine, the second caught in a slow stretch (1.5x at C_act): the merged profile
    has each compute point's median, a spread at least the median's standard error over the rounds, the rounds
    kept; memory and the rest as in the first round; it saves and loads as a profile."""
    def one(scale: float, clock: float) -> dict:
        p = prof.new_profile({"hostname": "h"}, quick=True, sections=["cpu"])
        prof.add_constant(p, "C_act_sigmoid_numpy_f64", 5e-9 * scale, 1e-11, "s/neuron", "d", "m")
        prof.add_constant(p, "core_clock_hz", clock, 1e6, "Hz", "d", "m")
        prof.add_curve(p, "C_act_sigmoid_numpy_f64", "segment_bytes", "B", "s/neuron",
                       [{"x": x, "y": 1e-8 * scale * k, "spread": 1e-11, "cpu_share": 0.5, "cpu_y": 5e-9 * scale * k,
                         "cpu_spread": 1e-11} for x, k in ((16384, 1.0), (524288, 1.1))])
        return p
    rounds = [one(1.0, 3e9), one(1.5, 2e9), one(1.02, 1e9)]
    merged = prof.merge_rounds(rounds)
    points = merged["curves"]["C_act_sigmoid_numpy_f64"]["points"]
    cpu = [5e-9 * s for s in (1.0, 1.5, 1.02)]
    assert points[0]["cpu_y"] == pytest.approx(5.1e-9)
    assert points[1]["cpu_y"] == pytest.approx(5.1e-9 * 1.1)
    assert points[0]["y"] == pytest.approx(1.02e-8)
    assert points[0]["rounds"] == pytest.approx(cpu)
    assert points[0]["cpu_spread"] == pytest.approx(1.2533 * np.std(cpu, ddof=1) / math.sqrt(3))
    assert points[0]["cpu_spread"] > 10 * 1e-11
    assert merged["constants"]["C_act_sigmoid_numpy_f64"]["value"] == pytest.approx(5.1e-9)
    assert merged["constants"]["core_clock_hz"]["value"] == 3e9  # not a compute constant: the first round's
    assert rounds[0]["curves"]["C_act_sigmoid_numpy_f64"]["points"][0]["cpu_y"] == 5e-9  # the rounds untouched
    assert "median of 3 calibrations" in merged["notes"][-1]
    again = prof.load(prof.save(merged, tmp_path / "merged.json"))
    assert again["curves"]["C_act_sigmoid_numpy_f64"]["points"][0]["cpu_y"] == pytest.approx(5.1e-9)
