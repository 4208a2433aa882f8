"""Running the microbenchmarks and turning their results into the hardware profile (``ddltrace calibrate``).

Sections: cpu (clock, C_muladd, C_act, C_err, C_interf(H)), mem (r_m, w_m, STREAM), disk (r_d, w_d, IOPS),
net (lat_net, r_net, parallel streams, MPI ping-pong), gpu (NVML description, torch rates). Each constant is
recorded with its uncertainty, its unit and the CPU time other processes used while it was measured.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ddltrace.collectors.microbench import ccompile, disk, feedforward, gpu, interference, machine, memory, network
from ddltrace.collectors.microbench import mpi_pingpong as mpi
from ddltrace.collectors.microbench import profile as prof
from ddltrace.collectors.microbench.measure import Measurement, extra_repeats, linear_fit, robust_spread, usable_cores
from ddltrace.errors import DdltraceError

SECTIONS = ("cpu", "mem", "disk", "net", "gpu")
TCP_GOODPUT = 1448 / 1514
"""TCP payload per Ethernet frame (MTU 1500, TCP timestamps): goodput / line rate."""


@dataclass
class Options:
    """What to run: ``quick`` (under 30 s), the sections, the network peer (None: a loopback server),
    the directory for the disk file, the disk file's size (None: 32 MiB quick, 1 GiB full), ``cpu_window``
    the seconds each timed run of the compute curves lasts at least (None: 5 ms quick, 50 ms full; longer than
    a CPU quota's period, the curves see the quota's average rate, as a job does, not its unthrottled bursts)."""

    quick: bool = False
    sections: tuple[str, ...] = SECTIONS
    peer: str | None = None
    disk_path: str | None = None
    disk_bytes: int | None = None
    net_timeout: float = 5.0
    cpu_window: float | None = None
    progress: Callable[[str], None] = field(default=lambda msg: None)


def parse_sections(text: str | None) -> tuple[str, ...]:
    """'cpu,net' -> ('cpu', 'net'); DdltraceError naming an unknown section."""
    if not text:
        return SECTIONS
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [n for n in names if n not in SECTIONS]
    if bad or not names:
        raise DdltraceError(f"--only {text!r}: unknown section(s) {', '.join(bad) or '(none)'}; "
                            f"choose from {','.join(SECTIONS)}")
    return names


def _meas_constant(p: dict, name: str, meas: Measurement, unit: str, description: str, method: str,
                   scale: float = 1.0) -> None:
    """Record a repeated measurement, optionally scaled (``scale`` turns the measured unit into ``unit``)."""
    prof.add_constant(p, name, meas.value * scale, meas.uncertainty * abs(scale), unit, description, method,
                      meas.busy_runs, float(np.nansum(meas.other_cpu_s)))


def _inverse_constant(p: dict, name: str, meas: Measurement, unit: str, description: str, method: str,
                      factor: float = 1.0) -> None:
    """Record factor / value (e.g. seconds per byte from bytes per second), propagating the relative error."""
    value = factor / meas.value
    prof.add_constant(p, name, value, value * meas.uncertainty / meas.value, unit, description, method,
                      meas.busy_runs, float(np.nansum(meas.other_cpu_s)))


def run_cpu(p: dict, opts: Options) -> None:
    quick = opts.quick
    clock, note = machine.core_clock(runs=30 if quick else 100)
    if clock is None:
        p["notes"].append(f"core clock not measured: {note}")
    else:
        _meas_constant(p, "core_clock_hz", clock, "Hz", "core clock from a dependent integer add chain",
                       "fastest of many 2 ms runs of dependent adds, one per cycle")
        for dtype, size in (("f64", 8), ("f32", 4)):
            peak = machine.peak_muladd_per_s(clock.value, size)
            prof.add_constant(p, f"peak_muladd_{dtype}_per_s", peak, peak * clock.uncertainty / clock.value,
                              "muladd/s", f"one core's peak {dtype} multiply-adds per second",
                              f"clock x 2 FMA units x {machine.vector_bits()}-bit vectors")
    if ccompile.load_kernels() is None:
        p["notes"].append(ccompile.last_note() + "; the numpy forms ran")
    min_time, repeats = (0.005, 3) if quick else (0.05, 5)
    if opts.cpu_window is not None:
        min_time = opts.cpu_window
        p["notes"].append(f"compute curves: each timed run lasts at least {opts.cpu_window:g} s (--cpu-window)")
    sizes = feedforward.segment_sizes(quick)
    curves = feedforward.muladd_curves(sizes, min_time, repeats, opts.progress)
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    curves.update(feedforward.neuron_curves(feedforward.segment_sizes(quick, neurons=True), min_time, repeats,
                                            opts.progress))
    # the neuron curves run one thread (numpy element-wise, C loops): their CPU time over their wall time is the
    # share of a core calibrate had (a quota's, or what the load left), which the transfer to another machine
    # divides out to compare the cores themselves (ddltrace.models.transfer)
    seen = (time.thread_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
    p["machine"].setdefault("cpu_allowance", {})["share_seen"] = min(1.0, seen)
    for name, points in curves.items():
        unit = "s/muladd" if name.startswith("C_muladd") else "s/neuron"
        prof.add_curve(p, name, "segment_bytes", "B", unit,
                       [{"x": pt.segment_bytes, "y": pt.value, "spread": pt.spread, "busy_runs": pt.busy_runs,
                         "cpu_share": round(pt.cpu_share, 4), "cpu_y": pt.cpu_value,
                         "cpu_spread": pt.cpu_spread} for pt in points])
        what = name.split("_")
        pin = feedforward.in_cache_point(points)
        prof.add_constant(p, name, pin.value, max(pin.spread, 1e-3 * pin.value), unit,
                          f"{' '.join(what[1:])}: segment of {prof.si(pin.segment_bytes, 'B')} (in L2)",
                          "median of repeats", pin.busy_runs, pin.other_cpu_s)
        if name.startswith("C_muladd"):
            pout = feedforward.out_of_cache_point(points)
            prof.add_constant(p, name + "_mem", pout.value, max(pout.spread, 1e-3 * pout.value), unit,
                              f"{' '.join(what[1:])}: segment of {prof.si(pout.segment_bytes, 'B')} (beyond the LLC)",
                              "median of repeats", pout.busy_runs, pout.other_cpu_s)
    aliases = {"C_muladd": "C_muladd_gemm_f32", "C_act": "C_act_sigmoid_numpy_f32", "C_err": "C_err_sigmoid_numpy_f32"}
    for alias, source in aliases.items():
        c = dict(p["constants"][source])
        c["description"] = f"the models' default: {source} ({c['description']})"
        c["alias_of"] = source
        p["constants"][alias] = c
    if clock is not None:
        for dtype in ("f64", "f32"):
            peak = p["constants"][f"peak_muladd_{dtype}_per_s"]
            gemm = p["constants"][f"C_muladd_gemm_{dtype}"]
            frac = 1 / (gemm["value"] * peak["value"])
            rel = math.hypot(gemm["uncertainty"] / gemm["value"], peak["uncertainty"] / peak["value"])
            prof.add_constant(p, f"gemm_peak_fraction_{dtype}", frac, frac * rel, "ratio",
                              f"BLAS GEMM ({dtype}, one thread) multiply-adds per second over the core's peak")
    llc = machine.llc_bytes()
    segments = {"cache": feedforward.cache_sizes().get("L2", 512 * 1024) // 2, "mem": (2 if quick else 4) * llc}
    curves = interference.interference_curves(list(segments.values()), usable_cores(),
                                              min_time=0.02 if quick else 0.1, repeats=3 if quick else 5,
                                              progress=opts.progress)
    for label, curve in zip(segments, curves, strict=True):
        seg = curve["segment_bytes"]
        pts = curve["points"]
        prof.add_curve(p, f"C_interf_{label}", "H", "processes", "ratio",
                       [{"x": pt["H"], "y": pt["ratio"], "spread": pt["spread"], "form": pt["form"],
                         "pinned": pt["pinned"]} for pt in pts],
                       f"H-process / 1-process time of the canonical loop, segment {prof.si(seg, 'B')}")
        for pt in pts[1:]:
            prof.add_constant(p, f"C_interf_H{pt['H']}_{label}", pt["ratio"], max(pt["spread"], 1e-3 * pt["ratio"]),
                              "ratio", f"C_interf({pt['H']}): {pt['H']} pinned processes vs 1, segment "
                              f"{prof.si(seg, 'B')}", f"{pt['form']} form, pinned={pt['pinned']}",
                              busy_runs=int(pt["busy"]), other_cpu_s=pt["other_cpu_s"])


def run_mem(p: dict, opts: Options) -> None:
    cores = usable_cores()
    threads = sorted({1, cores}) if opts.quick else list(range(1, cores + 1))
    kernels = ("read", "write", "triad") if opts.quick else memory.KERNELS
    forms = (("c",) if ccompile.load_kernels() is not None else ("numpy",)) if opts.quick else None
    # STREAM's rule is arrays of 4 x LLC; --quick uses 2 x LLC (three arrays: 6 x LLC in all, still memory)
    n = memory.array_elements(2 * machine.llc_bytes()) if opts.quick else None
    res = memory.stream(threads, repeats=3 if opts.quick else 10, n=n, forms=forms, kernels=kernels,
                        progress=opts.progress)
    form = "c" if "c" in res["forms"] else "numpy"
    bw = res["bandwidth"]
    method = f"{form} kernel, {prof.si(res['array_bytes'], 'B')} arrays, 1 thread"
    _inverse_constant(p, "r_m", bw[form]["read"][1], "s/B", "memory read time per byte (one thread)", method)
    _inverse_constant(p, "w_m", bw[form]["write"][1], "s/B", "memory write time per byte (one thread)", method)
    for f, kernels_bw in bw.items():
        for kernel, by_threads in kernels_bw.items():
            prof.add_curve(p, f"mem_bw_{kernel}_{f}", "threads", "threads", "B/s",
                           [{"x": t, "y": m.value, "spread": m.spread, "best": max(m.values)}
                            for t, m in sorted(by_threads.items())],
                           f"STREAM {kernel}, {f} form, arrays of {prof.si(res['array_bytes'], 'B')}")
    for kernel, by_threads in bw[form].items():
        top = max(by_threads)
        _meas_constant(p, f"mem_bw_{kernel}", by_threads[top], "B/s",
                       f"memory bandwidth, {kernel} kernel, {top} thread(s)", f"{form} kernel, STREAM byte counts")


def run_disk(p: dict, opts: Options) -> None:
    directory = opts.disk_path or tempfile.gettempdir()
    size = opts.disk_bytes or (32 if opts.quick else 1024) * 2**20
    res = disk.measure(directory, size, repeats=3, random_seconds=0.2 if opts.quick else 2.0, progress=opts.progress)
    method = f"{res.method}, {prof.si(res.file_bytes, 'B')} file in {res.path}"
    _meas_constant(p, "r_d", res.r_d, "s/B", "disk sequential read time per byte", method + ", 1 MiB reads")
    _meas_constant(p, "w_d", res.w_d, "s/B", "disk sequential write time per byte", method + ", 1 MiB writes + fsync")
    _meas_constant(p, "disk_iops_4k", res.iops, "1/s", "random 4 KiB reads per second (queue depth 1)", method)


def _loopback_server(timeout: float) -> tuple[subprocess.Popen, str, int]:
    """A probe server in a child process on 127.0.0.1 (any free port)."""
    proc = subprocess.Popen([sys.executable, "-m", "ddltrace.collectors.microbench.network", "127.0.0.1", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()  # "listening on HOST:PORT"
    except BaseException:  # Ctrl-C while it starts: not left behind
        proc.kill()
        proc.wait()
        raise
    if not line.startswith("listening on "):
        proc.kill()
        proc.wait()
        raise DdltraceError(f"loopback probe server did not start (it said {line!r})")
    host, port = network.parse_peer(line.removeprefix("listening on "))
    return proc, host, port


def run_net(p: dict, opts: Options) -> None:
    server = None
    if opts.peer:
        host, port = network.parse_peer(opts.peer)
        placement = f"peer {opts.peer}"
    else:
        server, host, port = _loopback_server(opts.net_timeout)
        placement = "loopback, client and server processes unpinned"
    try:
        res = network.measure(host, port, quick=opts.quick, timeout=opts.net_timeout, progress=opts.progress,
                              stream_sizes=network.STREAM_SIZES[:-1] if opts.quick else None,
                              duplex=opts.peer is not None)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    record_network(p, res, placement)
    if opts.peer is None:
        p["notes"].append("net_duplex not measured on loopback: both directions there share this machine's CPU "
                          "with the probe, not a link (calibrate with --peer measures it)")
    if opts.quick:
        p["notes"].append("MPI ping-pong skipped in --quick (starting an MPI job takes seconds)")
    else:
        record_mpi(p, opts)


def _errors(fit) -> str:
    """How a fitted constant's uncertainty was made: its standard error, and the 95 % half-width beside it."""
    return (f"uncertainty: the fit's standard error over {fit.points} points (95 % confidence half-width "
            f"{fit.t95:.2f} x that)")


def record_network(p: dict, res: network.NetworkResult, placement: str) -> None:
    """Add lat_net, r_net and their kin from a network measurement."""
    lat = res.lat_fit
    small = res.latency_points[0][1]
    if lat.intercept > 0:
        prof.add_constant(p, "lat_net", lat.intercept, lat.intercept_se, "s", "network latency (one way)",
                          f"intercept of t = lat + r n over ping-pongs of 1 B..64 KiB, {_errors(lat)}; "
                          f"{placement}")
    else:
        _meas_constant(p, "lat_net", small, "s", "network latency (one way)",
                       f"1-byte ping-pong (the fit's intercept was not positive); {placement}")
        p["notes"].append("lat_net: the latency fit's intercept was not positive; the 1-byte time is used")
    p["constants"]["C_ncost"] = dict(p["constants"]["lat_net"], alias_of="lat_net",
                                     description="Yan et al.'s C_ncost: network latency (one way)")
    bw = res.bw_fit
    if not bw.slope > 0:
        raise DdltraceError(f"peer {res.peer}: the streaming times do not grow with the size; no bandwidth fit")
    prof.add_constant(p, "r_net", bw.slope, bw.slope_se, "s/B", "network time per payload byte (TCP goodput)",
                      f"slope of t = c + r n over streams of {res.stream_points[0][0]} B..{res.stream_points[-1][0]} B,"
                      f" {_errors(bw)}; {placement}")
    # the uncertainty is first order (r_net's relative standard error); a reciprocal's interval is not symmetric,
    # so the method gives the 95 % interval as 8 / r_net's own bounds, unbounded above when r_net's reaches 0
    low, high = bw.slope + bw.slope_ci, bw.slope - bw.slope_ci
    interval = f"{prof.si(8 / low, 'bit/s')}..{prof.si(8 / high, 'bit/s') if high > 0 else 'unbounded'}"
    prof.add_constant(p, "C_nbw", 8 / bw.slope, 8 * bw.slope_se / bw.slope**2, "bit/s",
                      "Yan et al.'s C_nbw: network bandwidth (payload bits per second) = 8 / r_net",
                      f"uncertainty: r_net's relative standard error (first order); 95 % interval {interval} "
                      "(8 / r_net's 95 % bounds)")
    if not high > 0:
        p["notes"].append(f"C_nbw: r_net's 95 % interval reaches 0 (slope {bw.slope:.3g} s/B, standard error "
                          f"{bw.slope_se:.3g} over {bw.points} stream sizes): the bandwidth is bounded below only "
                          f"({prof.si(8 / low, 'bit/s')}); its ± is first order and understates the upper side")
    for streams, meas in res.parallel.items():
        _meas_constant(p, f"net_bw_{streams}_streams", meas, "B/s", f"aggregate goodput of {streams} parallel streams",
                       placement)
    if res.duplex is not None:
        record_duplex(p, *res.duplex, placement)
    if res.cpu_per_byte is not None:
        cpu = res.cpu_per_byte
        _meas_constant(p, "net_cpu_per_byte", cpu, "s/B",
                       "CPU time of this machine per byte it sends and receives (one byte each way, the kernel's "
                       "packet work where it is charged to the running process)",
                       f"this process's CPU time over {network.DUPLEX_SIZE} B streamed each way at once, per byte, "
                       f"median of {len(cpu.values)} runs ({min(cpu.values):.3g}-{max(cpu.values):.3g} s/B); "
                       f"{placement}")
    prof.add_curve(p, "net_pingpong", "message_bytes", "B", "s",
                   [{"x": s, "y": m.value, "spread": m.spread} for s, m in res.latency_points], "one-way time")
    prof.add_curve(p, "net_stream", "message_bytes", "B", "s",
                   [{"x": s, "y": m.value, "spread": m.spread} for s, m in res.stream_points], "stream + ack time")


def record_duplex(p: dict, one: Measurement, both: Measurement, placement: str) -> None:
    """net_duplex from the seconds to stream DUPLEX_SIZE bytes one way (``one``) and both ways at once
    (``both``): ``2 - both / one``, clipped to 0..1. 1 where the two directions keep their own bandwidth (a
    full-duplex path: both ways take as long as one), 0 where they take turns (twice as long); its uncertainty is
    the ratio's, from the two measurements' spreads (first order). Its method names the two-way runs' range: on a
    tbf-shaped link some take up to 1.6 times one way's time while most take as long (docs/CALIBRATION.md)."""
    ratio = both.value / one.value
    spread = ratio * math.hypot(both.uncertainty / both.value, one.uncertainty / one.value)
    prof.add_constant(p, "net_duplex", min(1.0, max(0.0, 2.0 - ratio)), spread, "1",
                      "share of a direction's bandwidth it keeps while the other direction is busy (1: full duplex, "
                      "0: the directions take turns)",
                      f"2 - t(both ways at once) / t(one way), {network.DUPLEX_SIZE} B each way: {both.value:.4g} s "
                      f"against {one.value:.4g} s (medians of {len(both.values)} and {len(one.values)} runs; the "
                      f"two-way runs {min(both.values):.4g}-{max(both.values):.4g} s), clipped to 0..1; uncertainty: "
                      f"the ratio's from the runs' spreads (first order); {placement}",
                      both.busy_runs + one.busy_runs, float(np.nansum(both.other_cpu_s + one.other_cpu_s)))


def record_mpi(p: dict, opts: Options) -> None:
    opts.progress("MPI ping-pong")
    res, note = mpi.measure(mpi.SIZES, repeats=3, min_time=0.05)
    if not res:
        p["notes"].append(note)
        return
    med = {s: float(np.median(v)) for s, v in res.items()}
    prof.add_curve(p, "mpi_pingpong", "message_bytes", "B", "s",
                   [{"x": s, "y": med[s], "spread": robust_spread(v)} for s, v in res.items()],
                   "one-way time, 2 ranks on this machine")
    fit = linear_fit(list(med), list(med.values()), relative=True)
    if fit.intercept > 0 and fit.slope > 0:
        prof.add_constant(p, "lat_mpi", fit.intercept, fit.intercept_se, "s", "MPI ping-pong latency (one way), "
                          "2 local ranks", f"intercept of t = lat + r n, {_errors(fit)}")
        prof.add_constant(p, "r_mpi", fit.slope, fit.slope_se, "s/B", "MPI time per byte, 2 local ranks",
                          f"slope of t = lat + r n, {_errors(fit)}")
    else:
        p["notes"].append("MPI ping-pong: the fit t = lat + r n gave a non-positive term; only the curve is kept")


def run_gpu(p: dict, opts: Options) -> None:
    gpus, note = gpu.describe()
    p["machine"]["gpus"] = gpus
    if not gpus:
        p["notes"].append(note)
        return
    rates, note = gpu.torch_rates(0, quick=opts.quick)
    if not rates:
        p["notes"].append(note)
    for name, r in rates.items():
        vals = r["values"]
        unit = "B/s" if "bytes" in name else "muladd/s"
        spread = max(float(1.4826 * np.median(np.abs(np.asarray(vals) - np.median(vals)))), 1e-3 * r["value"])
        prof.add_constant(p, f"gpu0_{name.removesuffix('_bytes_per_s').removesuffix('_muladd_per_s')}", r["value"],
                          spread, unit, f"GPU 0 {name.replace('_', ' ')}", "torch, median of 5")


RUNNERS = {"cpu": run_cpu, "mem": run_mem, "disk": run_disk, "net": run_net, "gpu": run_gpu}


def calibrate(opts: Options) -> dict:
    """Run the chosen sections; the profile (validated: every constant positive and finite).

    A section that fails (a peer that stops answering, a disk that fills up: DdltraceError) is named in
    ``not_measured`` and in the notes, and the other sections still run. Ctrl-C or SIGTERM stops the calibration:
    what was measured is kept (every constant is recorded whole, when its measurement ends), the section cut short
    and those not started are named in ``not_measured``, and ``interrupted`` says which. ``sections`` lists the
    sections measured in full."""
    from ddltrace.interrupts import Terminated

    if "disk" in opts.sections:  # fail on a bad path before minutes of other work
        disk.check_path(opts.disk_path or tempfile.gettempdir(),
                        opts.disk_bytes or (32 if opts.quick else 1024) * 2**20)
    if "net" in opts.sections and opts.peer:
        host, port = network.parse_peer(opts.peer)
        network.ProbeClient(host, port, opts.net_timeout).close()
    p = prof.new_profile(machine.describe(), opts.quick, list(opts.sections))
    timings, done, missing = {}, [], {}
    # Quick: busy runs are flagged, not repeated; otherwise up to 2 more runs replace disturbed ones.
    with extra_repeats(0 if opts.quick else 2):
        for k, section in enumerate(opts.sections):
            t0 = time.perf_counter()
            try:
                opts.progress(section)
                RUNNERS[section](p, opts)
            except KeyboardInterrupt as exc:
                how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"
                p["interrupted"] = section
                missing[section] = f"{how} after {time.perf_counter() - t0:.1f} s; the constants it had measured " \
                                   "by then are kept"
                missing.update({later: f"not started ({how} before it)" for later in opts.sections[k + 1:]})
                break
            except DdltraceError as exc:
                missing[section] = f"failed: {exc}"
                continue
            finally:
                timings[section] = round(time.perf_counter() - t0, 3)
            done.append(section)
    p["section_seconds"] = timings
    p["sections"] = done
    if missing:
        p["not_measured"] = missing
        p["notes"] += [f"section {section} not measured in full: {why}" for section, why in missing.items()]
    bad = prof.problems(p)
    if bad:
        raise RuntimeError("calibration produced an invalid profile: " + "; ".join(bad))
    return p
