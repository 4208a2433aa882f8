"""``ddltrace diff CONTROL TEST``: what changed between two runs, name by name (:mod:`ddltrace.analyses.trace_diff`)."""

from __future__ import annotations

import json
import sys

from ddltrace.errors import DdltraceError, one_line
from ddltrace.units import format_ns

#: Rows of the table shown by default (``--top``).
TOP = 15
_ROWS = {"all": "the host's and the devices'", "cpu": "the host's only", "gpu": "the devices' only"}


def register(subparsers) -> None:
    from ddltrace.options import integer

    p = subparsers.add_parser(
        "diff", help="compare two runs name by name: counts and summed time of each operator, kernel or call",
        description="Compare two runs (trace stores, or trace files or folders, imported first) name by name, as "
                    "HTA's TraceDiff does: for one rank and one training step of each (by default the first rank "
                    "and its first step), the rows of each name and their summed duration, test minus control, and "
                    "which names were added, deleted, or run more or less often.")
    p.add_argument("control", help="the run compared against: a trace store, or trace files or a folder")
    p.add_argument("test", help="the run compared: a trace store, or trace files or a folder")
    for side in ("control", "test"):
        p.add_argument(f"--{side}-rank", type=integer(0), metavar="R", help=f"the {side}'s rank (default: its first)")
        p.add_argument(f"--{side}-step", metavar="N|all",
                       help=f"the {side}'s training step as its trace numbers it (run --framework pytorch's: the "
                            "job's step numbers, 5-9 for --steps 5-9; a job's own torch.profiler schedule numbers its "
                            "ProfilerStep#N from 0; the error lists a rank's steps), or 'all' for its whole run "
                            "(default: the rank's first step; the whole run where the trace marks no steps)")
    p.add_argument("--device", choices=("all", "cpu", "gpu"), default="all",
                   help="the host's rows (cpu), the devices' (gpu: kernels, copies, device annotations) or all "
                        "(default)")
    p.add_argument("--top", type=integer(0), default=TOP, metavar="K",
                   help="names shown, the largest changes in time first (default: %(default)s; 0: all)")
    p.add_argument("--json", action="store_true", help="print JSON: every name, times in ns")
    p.add_argument("--quiet", action="store_true", help="no progress messages")
    p.set_defaults(func=run)


def run(args) -> int:
    from ddltrace.analyses import trace_diff
    from ddltrace.trace_inputs import as_stores

    with as_stores([args.control, args.test], "diff", args.quiet) as (stores, labels):
        sides = [_side(store, labels.get(store, store), getattr(args, f"{side}_rank"), getattr(args, f"{side}_step"),
                       args.device, side) for store, side in zip(stores, ("control", "test"), strict=True)]
    table = trace_diff.compare(sides[0]["summary"], sides[1]["summary"])
    changes = {change: int((table["change"] == change).sum()) for change in trace_diff.CHANGES}
    if args.json:
        json.dump({"control": _described(sides[0]), "test": _described(sides[1]), "device": args.device,
                   "changes": changes, "names": table.to_dict("records")}, sys.stdout, indent=2, default=int)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(render(table, sides, changes, args.device, args.top))
    return 0


def _side(store_path: str, label: str, rank: int | None, step: str | None, device: str, side: str) -> dict:
    """One side's window and its :func:`~ddltrace.analyses.trace_diff.summary`."""
    from ddltrace.analyses import trace_diff
    from ddltrace.store import TraceStore

    store = TraceStore.open(store_path)
    ranks = store.ranks
    if not ranks:
        raise DdltraceError(f"{label}: holds no rank")
    if rank is None:
        rank = ranks[0]
    elif rank not in ranks:
        raise DdltraceError(f"--{side}-rank {rank}: {label} has no rank {rank} (it has {_listed(ranks)})")
    timeline = store.timeline([rank])
    steps = trace_diff.steps(timeline)
    if step is None:
        chosen = steps[0] if steps else None
    elif step == "all":
        chosen = None
    else:
        try:
            chosen = int(step)
        except ValueError:
            raise DdltraceError(f"--{side}-step: '{step}' is not a step number or 'all'") from None
        if chosen not in steps:
            raise DdltraceError(f"--{side}-step {chosen}: rank {rank} of {label} has no step {chosen} "
                                + (f"(its steps: {_listed(steps)})" if steps else "(it marks no steps: give 'all')"))
    rows = trace_diff.window(timeline, chosen, device)
    span = int((rows["start_ns"] + rows["dur_ns"]).max() - rows["start_ns"].min()) if len(rows) else 0
    return {"label": label, "rank": rank, "step": chosen, "steps": len(steps), "rows": len(rows), "span_ns": span,
            "aggregate": bool(store.rank_info(rank).get("aggregate")), "format": store.rank_info(rank).get("format"),
            "import_problems": store.import_problems,
            "summary": trace_diff.summary(rows)}


def _totals_kind(fmt: str | None) -> str:
    """What a profile of per-call totals holds a row for, by its format."""
    if fmt == "ipm":
        return "an IPM profile: a row per call and partner"
    if fmt == "cntk-summary":
        return "a CNTK summary: a row per profiled name"
    return "a row per call kind"


def _listed(values: list[int]) -> str:
    return ", ".join(map(str, values)) if len(values) <= 8 else f"{values[0]} .. {values[-1]}, {len(values)} in all"


def _described(side: dict) -> dict:
    return {k: side[k] for k in ("label", "rank", "step", "rows", "span_ns", "aggregate", "import_problems")}


def _window(side: dict) -> str:
    where = f"step {side['step']}" if side["step"] is not None else \
        ("its whole run" if side["steps"] else "its whole run (it marks no steps)")
    return (f"{side['label']}: rank {side['rank']}, {where}: {side['rows']:,} rows over {format_ns(side['span_ns'])} "
            f"(first start to last end)")


def render(table, sides: list[dict], changes: dict, device: str, top: int) -> str:
    """The text of ``ddltrace diff``: each side's window, the changes counted, and the ``top`` names with the
    largest change in summed time."""
    lines = [f"control  {_window(sides[0])}", f"test     {_window(sides[1])}",
             f"rows compared: {_ROWS[device]}; names: {len(table):,} "
             f"({', '.join(f'{n:,} {c}' for c, n in changes.items())}: of their counts, as HTA's trace_diff says them; "
             "the time of a name whose count is unchanged may have changed)"]
    for side in sides:  # a side read from damaged files is of what the import could read (analyze says it alike)
        problems = side["import_problems"]
        if problems:
            more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
            lines.append(f"Import problems in {side['label']}: {'; '.join(map(one_line, problems[:3]))}{more}. Its "
                         "side is of what the import could read.")
    lines.append("")
    shown = table if top <= 0 else table.head(top)
    headers = ["name", "category", "count c", "count t", "time c", "time t", "diff time", "diff count"]
    body = [[_short(r.name), str(r.category), f"{r.control_count:,}", f"{r.test_count:,}", format_ns(r.control_ns),
             format_ns(r.test_ns), ("+" if r.diff_ns > 0 else "") + format_ns(r.diff_ns), f"{r.diff_count:+,}"]
            for r in shown.itertuples()]
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(headers)]
    for row in [headers, *body]:
        lines.append("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(row, widths, strict=True))).rstrip())
    if len(shown) < len(table):
        lines.append(f"({len(table) - len(shown):,} more names: --top 0 shows all, --json gives every figure)")
    lines += ["", "count: rows of the name in the window; time: their durations summed (a row nested in another "
                  "counts in both, as in HTA's TraceDiff); c: control, t: test; diff: test minus control"]
    lines += list(dict.fromkeys(
        f"rank {side['rank']} of {side['label']} holds per-call totals ({_totals_kind(side.get('format'))}, the "
        "number of calls not kept): its counts are rows, not calls; its times are the calls' totals"
        for side in sides if side["aggregate"]))
    return "\n".join(lines) + "\n"


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."
