"""``ddltrace report STORE... [--profile P] [--model M] [--out DIR]``: the bottleneck report (HTML, Markdown, JSON)."""

from __future__ import annotations

import sys

from ddltrace.commands.analyze import add_where_options, check_workers_see, rank_mapper


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="write the bottleneck report of one run or a scaling series",
        description="Analyse one or more trace stores (several stores of one job at different worker counts "
                    "make a scaling series) and write report.html (self-contained, figures embedded), "
                    "report.md with the figures as PNG files beside it, and findings.json.")
    p.add_argument("stores", nargs="+", metavar="STORE",
                   help="trace store folder(s), or trace files or folders (anything ddltrace import reads), "
                        "imported into a temporary store first")
    p.add_argument("--out", default="ddltrace-report", metavar="DIR", help="output folder (default: %(default)s)")
    p.add_argument("--profile", metavar="PROFILE", help="hardware profile from 'ddltrace calibrate' (JSON)")
    p.add_argument("--model", metavar="MODEL", help="fitted model from 'ddltrace model fit --out' (JSON): drawn "
                                                    "beside the measured scaling series")
    p.add_argument("--quiet", action="store_true", help="no progress messages")
    add_where_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ddltrace import quiet_gc

    with quiet_gc.loading():  # (the module says why)
        from ddltrace.heap_reuse import keep_freed_memory
        from ddltrace.report import build_report  # matplotlib loads only when a report is drawn
        from ddltrace.trace_inputs import as_stores

    keep_freed_memory()  # fewer page faults in the analyses' frames and the figures (the module says why)

    def progress(message: str) -> None:
        print(f"ddltrace report: {message}", file=sys.stderr, flush=True)

    with as_stores(args.stores, "report", args.quiet) as (stores, labels), rank_mapper(args) as mapper:
        check_workers_see(mapper, stores, labels, "report")
        files = build_report(stores, args.out, profile=args.profile, model=args.model, labels=labels,
                             progress=None if args.quiet else progress, mapper=mapper)
    print(f"report: {files.html}")
    print(f"        {files.markdown} ({len(files.figures)} figures beside it)")
    if files.trace:
        print(f"        {files.trace} (Chrome trace JSON: the report's 'Open in Perfetto UI' loads it)")
    print(f"        {files.findings}")
    return 0
