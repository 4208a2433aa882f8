"""``ddltrace calibrate``: run the microbenchmarks and write the hardware profile the models read."""

from __future__ import annotations

import sys
import time

from ddltrace.options import integer, number

DESCRIPTION = """\
Measure this machine's constants for the analytical models: C_muladd, C_act, C_err (curves over segment sizes
crossing the caches, float32 and float64), C_interf(H), memory r_m and w_m (STREAM's kernels), disk r_d, w_d and
IOPS (page cache bypassed), network lat_net and r_net (against 'ddltrace probe serve' on --peer, else a loopback
server), an MPI ping-pong, and the GPU when NVML sees one. Writes one JSON profile: each constant with its
uncertainty and unit, the curves, and the machine's description. Every benchmark records the CPU time other
processes took while it ran: on a busy machine the figures are noisy, and the summary says where.

With --conv-algorithms: measure instead each conv layer of a DNN description (--dnn) with two real convolution
algorithms on this machine's CPU, GEMM (im2col + BLAS) and FFT (scipy.fft), forward and backward, at each mini-batch
size (--batches), and write the description with their tables (time with its spread, workspace bytes) for
'ddltrace plan batch --dnn FILE' (Chang et al.'s mini-batch program). docs/CALIBRATION.md says how.
"""

#: calibrate's options that belong to the hardware profile's run, refused beside --conv-algorithms
_PROFILE_ONLY = (("only", "--only"), ("peer", "--peer"), ("disk_path", "--disk-path"), ("disk_size", "--disk-size"),
                 ("cpu_window", "--cpu-window"), ("compare", "--compare"))


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure the machine's constants into a hardware profile",
                              description=DESCRIPTION)
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats: under 30 s")
    p.add_argument("--only", metavar="SECTIONS", help="comma-separated sections among cpu,mem,disk,net,gpu")
    p.add_argument("--peer", metavar="HOST:PORT", help="probe server for the network section (default: a "
                   "loopback server started here)")
    p.add_argument("--out", metavar="FILE",
                   help="profile file to write (default: hardware-profile.json; with --conv-algorithms the DNN "
                        "description with the tables, default DNN-algorithms.json)")
    p.add_argument("--disk-path", metavar="DIR", help="directory for the disk benchmark's file (default: the temp dir)")
    p.add_argument("--disk-size", metavar="MIB", type=integer(1, 2**20, unit="MiB"),
                   help="disk file size in MiB (default: 32 quick, 1024)")
    p.add_argument("--net-timeout", type=number(0.001, 3600, unit="s"), default=5.0, metavar="S",
                   help="seconds to wait for the peer at any step (default: 5)")
    p.add_argument("--cpu-window", type=number(0.001, 10, unit="s"), metavar="S",
                   help="each timed run of the compute curves lasts at least S seconds (default 0.005 quick, "
                        "0.05): make it several periods of a CPU quota for the curves to see the quota's rate")
    p.add_argument("--json", action="store_true", help="print the profile (with --compare: the comparison) as JSON "
                   "instead of the summary table")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="compare two profiles instead of measuring")
    c = p.add_argument_group("convolution algorithm tables (Chang et al.'s mini-batch program)")
    c.add_argument("--conv-algorithms", action="store_true",
                   help="measure GEMM and FFT convolutions (CPU, forward + backward) of each conv layer of --dnn at "
                        "each of --batches and write the DNN description with the tables, instead of a profile")
    c.add_argument("--dnn", metavar="DNN", help="DNN description (a file, or a bundled name: alexnet, vgg11, ...)")
    c.add_argument("--batches", metavar="LIST", help="mini-batch sizes (default 1,2,4,8)")
    c.add_argument("--repeats", type=integer(1, 1000), metavar="N",
                   help="timed runs per layer, algorithm and batch; the median is kept (default 3; up to 2 more "
                        "where other processes were busy, none with --quick)")
    c.add_argument("--threads", type=integer(1, 1024), metavar="N",
                   help="BLAS and scipy.fft threads (default 1: per-core figures, as the profile's)")
    c.add_argument("--clock", choices=("wall", "cpu"),
                   help="the tables' time_s: the median wall time of a step (default) or its CPU time per "
                        "step (one thread; steadier on a machine others share); both are kept in the file")
    p.set_defaults(func=run)


class _Progress:
    """One status line on stderr: rewritten in place on a terminal, one line per section otherwise."""

    def __init__(self, stream=None, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self.t0 = time.perf_counter()
        self.width = 0

    def __call__(self, step: str) -> None:
        if self.quiet:
            return
        elapsed = time.perf_counter() - self.t0
        text = f"calibrate [{elapsed:5.1f} s] {step}"
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        elif step in ("cpu", "mem", "disk", "net", "gpu"):
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def run(args) -> int:
    from ddltrace.errors import DdltraceError

    if args.conv_algorithms:
        return run_conv_algorithms(args)
    given = [option for option, value in (("--dnn", args.dnn), ("--batches", args.batches),
                                          ("--repeats", args.repeats), ("--threads", args.threads),
                                          ("--clock", args.clock))
             if value is not None]
    if given:
        raise DdltraceError(f"calibrate: {', '.join(given)} go{'es' if len(given) == 1 else ''} with "
                            "--conv-algorithms")
    out_given = args.out is not None
    if args.out is None:
        args.out = "hardware-profile.json"
    from ddltrace.collectors.microbench import profile as prof
    from ddltrace.collectors.microbench import suite

    if args.compare:
        measuring = [option for option, value in (("--quick", args.quick), ("--only", args.only),
                                                  ("--peer", args.peer), ("--out", out_given),
                                                  ("--disk-path", args.disk_path), ("--disk-size", args.disk_size),
                                                  ("--cpu-window", args.cpu_window)) if value]
        if measuring:  # (they were ignored without a word: --only cpu still listed every constant)
            raise DdltraceError(f"calibrate --compare: {', '.join(measuring)} go{'es' if len(measuring) == 1 else ''} "
                                "with a measurement; --compare lists every constant of the two profiles")
        a, b = (prof.load(path) for path in args.compare)
        if args.json:
            import json

            print(json.dumps({"a": args.compare[0], "b": args.compare[1],
                              "constants": prof.compare_constants(a, b)}, indent=1))
            return 0
        print(f"A: {args.compare[0]} ({a['machine'].get('hostname')}, {a['machine'].get('cpu_model')}, "
              f"{a['created_utc']})")
        print(f"B: {args.compare[1]} ({b['machine'].get('hostname')}, {b['machine'].get('cpu_model')}, "
              f"{b['created_utc']})")
        print(prof.table(prof.compare(a, b), prof.COMPARE_HEADER))
        print("± A, ± B: one standard uncertainty each, relative; 'differs': |ln(B / A)| above twice the two "
              "relative uncertainties in quadrature (where A or B is 0: |B - A| above twice the two uncertainties in "
              "quadrature)")
        return 0
    from pathlib import Path

    from ddltrace.outputs import check_writable, json_with_keys, refuse_other_file

    refuse_other_file(args.out, "a hardware profile",  # before the measurements, not after them
                      lambda path: json_with_keys(path, ("format", "constants", "machine")))
    check_writable(Path(args.out).parent, "a hardware profile")
    progress = _Progress(quiet=args.quiet)
    opts = suite.Options(quick=args.quick, sections=suite.parse_sections(args.only), peer=args.peer,
                         disk_path=args.disk_path, disk_bytes=args.disk_size * 2**20 if args.disk_size else None,
                         net_timeout=args.net_timeout, cpu_window=args.cpu_window,
                         progress=progress)
    try:
        profile = suite.calibrate(opts)
    finally:
        progress.done()
    path = prof.save(profile, args.out)
    if args.json:
        import json

        print(json.dumps(profile, indent=1))
    else:
        m = profile["machine"]
        print(f"{m['cpu_model']}, {m['usable_cores']} cores, {prof.si(m['memory_bytes'], 'B')} memory, {m['kernel']}")
        print(prof.table(prof.summary_rows(profile), prof.SUMMARY_HEADER))
        print(prof.UNCERTAINTY_NOTE)
        for note in profile["notes"]:
            print(f"note: {note}")
        seconds = sum(profile["section_seconds"].values())
        print(f"profile written to {path} ({len(profile['constants'])} constants, {len(profile['curves'])} curves, "
              f"{seconds:.1f} s)")
    return _incomplete(profile, path)


def _incomplete(profile: dict, path) -> int:
    """0 for a profile with every section asked for; else one line on stderr naming what is missing (the profile
    keeps what was measured) and 130 after Ctrl-C, 143 after SIGTERM, 2 after a failed section."""
    from ddltrace.cli import EXIT_BAD_INPUT

    missing = profile.get("not_measured") or {}
    if not missing:
        return 0
    full = ", ".join(profile["sections"]) or "no section"
    kept = f"{path} keeps the {len(profile['constants'])} constants measured ({full} in full)"
    cut = profile.get("interrupted")
    if cut:
        terminated = missing[cut].startswith("terminated")
        print(f"ddltrace: {'terminated (SIGTERM)' if terminated else 'interrupted'} during the {cut} section; {kept}",
              file=sys.stderr)
        return 143 if terminated else 130
    failed = "; ".join(f"section {section} {why}" for section, why in missing.items())
    print(f"ddltrace: error: {failed}; {kept}", file=sys.stderr)
    return EXIT_BAD_INPUT


class _LayerProgress(_Progress):
    """calibrate's progress line, and off a terminal one line per layer (as per section for the profile)."""

    def __init__(self, quiet: bool = False):
        super().__init__(quiet=quiet)
        self.layer = None

    def __call__(self, step: str) -> None:
        layer = step.split()[0]
        if self.quiet or self.tty or layer == self.layer:
            super().__call__(step)
            return
        self.layer = layer
        self.stream.write(f"calibrate [{time.perf_counter() - self.t0:5.1f} s] {step}\n")
        self.stream.flush()


def run_conv_algorithms(args) -> int:
    """--conv-algorithms: the DNN description with measured algorithm tables (collectors/microbench/conv_algorithms)."""
    from ddltrace.errors import DdltraceError
    from ddltrace.models.quantities import parse_int_list

    given = [option for dest, option in _PROFILE_ONLY if getattr(args, dest) is not None]
    if given:
        raise DdltraceError(f"calibrate --conv-algorithms: {', '.join(given)} belong{'s' if len(given) == 1 else ''} "
                            "to the hardware profile's run, not to the convolution tables")
    if not args.dnn:
        raise DdltraceError("calibrate --conv-algorithms needs --dnn (a DNN description with conv layers, e.g. "
                            "alexnet)")
    batches = sorted(set(parse_int_list(args.batches, "--batches"))) if args.batches else [1, 2, 4, 8]
    from pathlib import Path

    from ddltrace.outputs import check_writable, json_with_keys, refuse_other_file

    out = args.out or f"{Path(args.dnn).stem}-algorithms.json"
    refuse_other_file(out, "a DNN description with algorithm tables",
                      lambda path: json_with_keys(path, ("format", "layers", "algorithm_tables")))
    check_writable(Path(out).parent, "a DNN description with algorithm tables")
    from ddltrace.collectors.microbench import conv_algorithms

    progress = _LayerProgress(quiet=args.quiet)
    try:
        description = conv_algorithms.calibrate(args.dnn, batches,
                                                repeats=args.repeats or conv_algorithms.DEFAULT_REPEATS,
                                                threads=args.threads or 1, progress=progress,
                                                clock=args.clock or "wall", extra=0 if args.quick else None)
    finally:
        progress.done()
    path = conv_algorithms.save(description, out)
    stopped = conv_algorithms.interruption(description, path)
    if args.json:
        import json

        print(json.dumps(description, indent=1))
    else:
        _conv_report(description, path, batches)
    if stopped:
        print(stopped[1], file=sys.stderr)
    return stopped[0] if stopped else 0


def _conv_report(description: dict, path, batches: list[int]) -> None:
    """--conv-algorithms' text: the tables, busy runs, what they are, where they went."""
    from ddltrace.collectors.microbench import conv_algorithms

    meta = description["algorithm_tables"]
    m = meta["machine"]
    threads = f"{meta['threads']} thread{'s' if meta['threads'] > 1 else ''}"
    print(f"{description['name']}: convolution algorithms on {m['cpu_model']} ({threads}), "
          f"{meta['dtype']}, forward + backward, median {meta['clock']} time of {meta['repeats']} runs ± 1.4826 x "
          "MAD")
    for line in conv_algorithms.summary(description):
        print(line)
    busy = sum(e["busy_runs"] for layer in description["layers"] for table in (layer.get("algorithms") or {}).values()
               for e in table.values() if isinstance(e, dict) and "busy_runs" in e)
    if busy:
        print(f"note: other processes used over a quarter of a core during {busy} run(s): the wall times are noisy" +
              ("; --clock cpu takes each step's CPU time instead (kept in the file as cpu_s)"
               if meta["clock"] == "wall" and meta["threads"] == 1 else ""))
    print("CPU algorithms (numpy/scipy), not a GPU's cuDNN: docs/CALIBRATION.md says how a GPU user gets theirs")
    print(f"written to {path} ({meta['seconds']:.1f} s); then: ddltrace plan batch --dnn {path} --gpu-memory SIZE "
          f"--batches {','.join(str(b) for b in batches)}")
