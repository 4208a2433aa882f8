"""``ddltrace report STORE... [--profile P] [--model M] [--threshold K=V] [--out DIR [--force]]``: the bottleneck
report."""

from __future__ import annotations

import sys
from pathlib import Path

from ddltrace.commands.analyze import (
    THRESHOLDS_EPILOG,
    add_threshold_options,
    add_where_options,
    check_workers_see,
    rank_mapper,
    thresholds_of,
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="write the bottleneck report of one run or a scaling series",
        description="Analyse one or more trace stores (several stores of one job at different worker counts "
                    "make a scaling series) and write report.html (self-contained, figures embedded), "
                    "report.md with the figures as PNG files beside it, and findings.json.",
        epilog=THRESHOLDS_EPILOG)
    p.add_argument("stores", nargs="+", metavar="STORE",
                   help="trace store folder(s), or trace files or folders (anything ddltrace import reads), "
                        "imported into a temporary store first")
    p.add_argument("--out", default="ddltrace-report", metavar="DIR", help="output folder (default: %(default)s)")
    p.add_argument("--profile", metavar="PROFILE", help="hardware profile from 'ddltrace calibrate' (JSON)")
    p.add_argument("--model", metavar="MODEL", help="fitted model from 'ddltrace model fit --out' (JSON): drawn "
                                                    "beside the measured scaling series")
    p.add_argument("--force", action="store_true", help="write into --out when it holds files already (an earlier "
                                                        "report's are replaced, its figures not drawn again removed; "
                                                        "other files stay)")
    p.add_argument("--quiet", action="store_true", help="no progress messages")
    add_threshold_options(p)
    add_where_options(p)
    p.set_defaults(func=run)


def check_out(out: Path, force: bool) -> None:
    """Refuse (one line, before any work) an ``out`` that holds files already, unless ``force``, and a trace
    store whatever ``force`` says: a second report into the same folder would mix with the first, and a store
    is not a report's folder. A file is refused later, by :func:`ddltrace.outputs.check_writable`."""
    from ddltrace.errors import DdltraceError
    from ddltrace.store import MANIFEST

    if not out.is_dir() or not any(out.iterdir()):
        return
    if (out / MANIFEST).is_file():
        raise DdltraceError(f"{out}: a trace store; the report is not written into one (choose another --out)")
    if not force:
        raise DdltraceError(f"{out}: already exists (choose another --out, or add --force to replace the report in "
                            "it)")


def run(args) -> int:
    from ddltrace import quiet_gc

    with quiet_gc.loading():  # (the module says why)
        from ddltrace.heap_reuse import keep_freed_memory
        from ddltrace.report import build_report  # matplotlib loads only when a report is drawn
        from ddltrace.trace_inputs import as_stores, stores_in

    check_out(Path(args.out), args.force)
    thresholds = thresholds_of(args)  # (a bad one said before any work)
    keep_freed_memory()  # fewer page faults in the analyses' frames and the figures (the module says why)

    def progress(message: str) -> None:
        print(f"ddltrace report: {message}", file=sys.stderr, flush=True)

    left: list[tuple[str, str]] = []  # (input, why) of each run left out: it could not be read, others could
    given = [each for path in args.stores for each in stores_in(path)]  # (a folder of stores: its stores)
    with as_stores(given, "report", args.quiet, left) as (stores, labels), rank_mapper(args) as mapper:
        check_workers_see(mapper, stores, labels, "report")
        files = build_report(stores, args.out, profile=args.profile, model=args.model, labels=labels,
                             progress=None if args.quiet else progress, mapper=mapper,
                             thresholds=thresholds, left=left)
    print(f"report: {files.html}")
    print(f"        {files.markdown} ({len(files.figures)} figures beside it)")
    if files.trace:
        print(f"        {files.trace} (Chrome trace JSON: the report's 'Open in Perfetto UI' loads it)")
    print(f"        {files.findings}")
    return 0
