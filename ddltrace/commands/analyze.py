"""``ddltrace analyze STORE [STORE ...]``: what holds the job back, with the numbers that prove it.

Prints the findings, most severe first, each with its evidence and what to try; then the breakdown per rank
(phase times and the share of each category, the average rank beside the slowest); with several stores, the
scaling study with Chang's Lemma 3.1. ``--json`` prints the same for machines. ``--fail-on warning|error`` exits 1
when a finding reaches that severity, so the command can guard a training pipeline in CI.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pandas as pd

from ddltrace.analyses.findings import SEVERITIES, Finding, run_detectors, severity_rank
from ddltrace.analyses.phases import PHASES
from ddltrace.analyses.run_analysis import RunAnalysis, analyze_store
from ddltrace.analyses.scaling import scaling_table
from ddltrace.analyses.thresholds import DEFAULTS, Thresholds
from ddltrace.timeline import CATEGORIES
from ddltrace.units import format_ns, format_percent

SHOWN_CATEGORIES = ("compute", "comm", "wait", "barrier", "io", "memcpy", "idle", "other")
MAX_RANKS_SHOWN = 32


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze", help="find what holds a run back (findings with evidence, breakdown, scaling)",
        description="Analyse one run, or a series of runs of one job (different numbers of workers or batch "
                    "sizes): phases, time per category, Scalasca wait states, and the divergences ddltrace knows "
                    "(sequential initialisation, parameter-server saturation, stragglers, staleness, I/O-bound, "
                    "low overlap, cache cliff). Findings come most severe first, each with its evidence.",
        epilog="Thresholds: " + ", ".join(f"{k}={t.value:g}" for k, t in DEFAULTS.items())
               + ". See docs/ANALYSES.md for what each detector measures and why its default is what it is.")
    p.add_argument("stores", nargs="+", metavar="STORE", help="trace store(s) written by ddltrace run / import")
    p.add_argument("--json", action="store_true", help="print JSON (findings, phases, breakdown, scaling)")
    p.add_argument("--fail-on", choices=["warning", "error"],
                   help="exit 1 when a finding reaches this severity (for CI)")
    p.add_argument("--threshold", action="append", default=[], metavar="KEY=VALUE",
                   help="change a threshold (repeatable), e.g. --threshold ps.busy_min=0.8")
    p.add_argument("--config", metavar="FILE", help="thresholds from a JSON or TOML file ([thresholds] table)")
    p.add_argument("--phase", choices=["all", *PHASES], default="all",
                   help="phase of the breakdown table (default all: the whole run, as IPM shows it)")
    p.set_defaults(func=run)


def run(args) -> int:
    thresholds = Thresholds()
    if args.config:
        thresholds = thresholds.with_config(args.config)
    thresholds = thresholds.with_assignments(args.threshold)
    runs = [analyze_store(path) for path in args.stores]
    findings = run_detectors(runs, thresholds)
    scaling = scaling_table(runs) if len(runs) > 1 else pd.DataFrame()
    if args.json:
        json.dump(to_json(runs, findings, scaling, thresholds, args.phase), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(runs, findings, scaling, args.phase))
    if args.fail_on and any(severity_rank(f.severity) >= severity_rank(args.fail_on) for f in findings):
        return 1
    return 0


# -- text -----------------------------------------------------------------------------------------------------


def render(runs: list[RunAnalysis], findings: list[Finding], scaling: pd.DataFrame, phase: str) -> str:
    lines = []
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    lines.append(f"ddltrace analyze: {len(runs)} store{'s' if len(runs) > 1 else ''}; "
                 f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)")
    lines.append("")
    if findings:
        lines.append("Findings, most severe first")
        for f in findings:
            lines.extend(render_finding(f))
    else:
        lines.append("No findings: nothing holds this run back by the current thresholds.")
    for r in runs:
        lines.append("")
        lines.extend(render_run(r, phase))
    if len(scaling):
        lines.append("")
        lines.extend(render_scaling(scaling))
    return "\n".join(lines) + "\n"


def render_finding(f: Finding) -> list[str]:
    out = [f"  [{f.severity.upper()}] {f.title}"]
    where = [f"store {f.store}" if f.store else "", f"phase {f.phase}",
             f"ranks {_ranks(f.ranks)}" if f.ranks else ""]
    out.append("      " + "; ".join(w for w in where if w))
    width = max((len(k) for k in f.evidence), default=0)
    for key, quantity in f.evidence.items():
        out.append(f"      {key:<{width}}  {quantity}")
    if f.advice:
        out.append(f"      what to try: {f.advice}")
    return out


def _ranks(ranks: list[int]) -> str:
    if len(ranks) <= 8:
        return ", ".join(map(str, ranks))
    return ", ".join(map(str, ranks[:8])) + f", ... ({len(ranks)} ranks)"


def render_run(r: RunAnalysis, phase: str) -> list[str]:
    table = r.table(phase)
    phases = r.phase_table
    out = [f"Breakdown of {r.name} (w = {r.workers} worker{'s' if r.workers != 1 else ''}, {len(r.ranks)} ranks; "
           f"shares of {'the whole run' if phase == 'all' else 'the ' + phase + ' phase'})"]
    if not len(table):
        return out + ["  (no events)"]
    shown = [c for c in SHOWN_CATEGORIES if table[c].sum() > 0]
    header = ["rank", "role", "init", "steady", "final", "steps", *shown, "overlap"]
    rows = []
    for rank in table.index[:MAX_RANKS_SHOWN]:
        p = phases.loc[rank]
        rows.append([str(rank), r.roles.get(rank, "-"), format_ns(p["init_ns"]), format_ns(p["steady_ns"]),
                     format_ns(p["final_ns"]), str(int(p["steps"])),
                     *[format_percent(table.loc[rank, f"share_{c}"]) for c in shown],
                     format_percent(table.loc[rank, "overlap"])])
    summary = r.average_and_slowest(phase)
    for label, row in summary.iterrows():
        rows.append([str(label), "", "", "", "", "", *[format_percent(row[f"share_{c}"]) for c in shown],
                     format_percent(row["overlap"])])
    out.extend("  " + line for line in _columns(header, rows))
    if len(table) > MAX_RANKS_SHOWN:
        out.append(f"  ({len(table) - MAX_RANKS_SHOWN} more ranks; --json lists them all)")
    states = r.wait_state_table()
    totals = states.sum()
    if totals.sum() > 0:
        out.append("  wait states (all ranks, whole run): " + ", ".join(
            f"{k.replace('_', ' ')} {format_ns(v)}" for k, v in totals.items() if v > 0))
    out.append("  " + "; ".join(f"{m}: {n} rank(s)" for m, n in phases["method"].value_counts().items())
               + " (how phases were found)")
    return out


def render_scaling(scaling: pd.DataFrame) -> list[str]:
    out = ["Scaling study (speedup against the run with the fewest workers; Chang's Lemma 3.1 from R_O)"]
    header = ["w", "batch", "init", "steady", "total", "speedup", "efficiency", "R_O", "E lemma (base)",
              "E lemma (own)"]
    rows = []
    for _, row in scaling.iterrows():
        r_o = (f"{format_percent(row['overhead_ratio'])} ({format_percent(row['overhead_ratio_min'])}"
               f"-{format_percent(row['overhead_ratio_max'])})")
        rows.append([str(int(row["workers"])), "-" if pd.isna(row["batch_size"]) else str(int(row["batch_size"])),
                     format_ns(row["init_ns"]), format_ns(row["steady_ns"]), format_ns(row["total_ns"]),
                     f"{row['speedup_steady']:.2f}x", format_percent(row["efficiency_steady"]), r_o,
                     format_percent(row["efficiency_lemma_base"]), format_percent(row["efficiency_lemma_own"])])
    out.extend("  " + line for line in _columns(header, rows))
    return out


def _columns(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in column) for column in zip(header, *rows, strict=True)]
    return ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip() for line in [header, *rows]]


# -- JSON -----------------------------------------------------------------------------------------------------


def _clean(value):
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) or math.isinf(value) else float(value)
    if value is pd.NA:
        return None
    return value


def _records(frame: pd.DataFrame) -> list[dict]:
    return _clean(frame.reset_index().to_dict(orient="records"))


def to_json(runs: list[RunAnalysis], findings: list[Finding], scaling: pd.DataFrame, thresholds: Thresholds,
            phase: str) -> dict:
    stores = []
    for r in runs:
        table = r.table(phase)
        stores.append({
            "store": r.name, "world_size": r.store.world_size, "workers": r.workers, "batch_size": r.batch_size,
            "roles": {str(k): v for k, v in r.roles.items()},
            "phases": _records(r.phase_table),
            "breakdown_phase": phase,
            "breakdown_ns": _records(table[list(CATEGORIES) + ["total_ns", "overlap"]]),
            "average_and_slowest": _records(r.average_and_slowest(phase)),
            "wait_states_ns": _records(r.wait_state_table()),
        })
    return _clean({
        "findings": [f.to_dict() for f in findings],
        "stores": stores,
        "scaling": _records(scaling) if len(scaling) else [],
        "thresholds": dict(thresholds),
        "units": "times in ns; shares and overlap as fractions 0..1",
    })
