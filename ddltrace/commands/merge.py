"""``ddltrace merge STORE PART --out NEW``: join to a run's store the part a node left on its own disk (the
store's notes and ``run.missing_nodes`` name the node and the folder), or merge two stores of one run (stores
evidently of two runs refused unless ``--as-one-run``: ddltrace/merged_manifest.py's ``not_one_run``)."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from ddltrace.errors import DdltraceError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "merge", help="join a missing node's part (or a second store of the same job) to a store",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="With `ddltrace run --out` on node-local disk, each node's agent sends its node's part to\n"
                    "the launching process at the end. A node that died or could not reach it keeps its part;\n"
                    "the store names that node and the folder (`ddltrace info`, run.missing_nodes). Copy the\n"
                    "folder from the node and join it here: its ranks and counters are added to a new store.\n"
                    "PART may also be a second trace store of the same run (ranks must not overlap): a part of\n"
                    "it exported with `ddltrace export --ranks` and imported, say. Stores that are evidently\n"
                    "of two runs are refused, nothing written: their world sizes, their runs' commands or their\n"
                    "job configurations (the workload entries) differ where both record one, or they ran far\n"
                    "apart on the wall clock. --as-one-run merges them anyway, where you know better.",
        epilog="examples:\n"
               "  scp -r node7:/local/.run64.x1y2/records node7-part\n"
               "  ddltrace merge run64 node7-part --out run64-full")
    p.add_argument("store", metavar="STORE", help="the run's trace store")
    p.add_argument("part", metavar="PART", help="a node's part (a folder copied from that node) or another store")
    p.add_argument("--out", metavar="NEW", required=True, help="the merged trace store folder to create")
    p.add_argument("--as-one-run", action="store_true",
                   help="merge two stores though they look like two runs (world sizes, commands or job "
                        "configurations differ; far apart in time): you know they are parts of one run. A note "
                        "in the merged store says what differed")
    p.set_defaults(func=run)


def note_left_out(stores, merged, said: dict[str, str]) -> None:
    """Before the merged store is written (``merge_stores``' ``amend``): a note (ddltrace/merged_manifest.py's
    ``unread_note``, which :meth:`TraceStore.missing` gives as the reason and ``info`` on its ``not listed`` line) on
    each rank of the run a store left out as the merge read it, a file or a manifest entry found damaged (its
    :attr:`TraceStore.damaged` line), that the merged store does not hold (was: a warning on stderr only, and the
    merged store's ``info`` said "no usable entry in the manifest")."""
    from ddltrace.merged_manifest import NOT_MERGED, unread_note

    held = set(merged.ranks)
    for store in stores:
        for rank, why in sorted(store.damaged.items()):
            if rank not in held and rank < merged.world_size:
                merged.manifest["notes"].append(unread_note([rank], f"{NOT_MERGED}: {why}"))


def run(args) -> int:
    from ddltrace.store import TraceStore, merge_stores, rank_ranges

    part, out = Path(args.part), Path(args.out)
    if not out.parent.is_dir():
        raise DdltraceError(f"{out.parent}: no such folder for the merged store")
    if (part / "manifest.json").exists():
        # the merge's own notes (world size, clocks, workload entry), a line each; the stores' stay in the manifest
        stores = TraceStore.open(args.store), TraceStore.open(part)
        merged = merge_stores(*stores, out, amend=functools.partial(note_left_out, stores),
                              tell=lambda note: print(f"ddltrace: note: {note}", file=sys.stderr),
                              as_one_run=args.as_one_run)
        left_out = sorted({r for store in stores for r in store.damaged} - set(merged.ranks))
    else:
        from ddltrace.collectors.node_merge import join_part

        merged, left_out = join_part(args.store, part, out), []
    missing = merged.run.get("missing_nodes")
    print(f"ddltrace: wrote {merged.path}: {len(merged.ranks)} ranks"
          + (f"; still missing: node(s) {', '.join(sorted(missing))}" if missing else "")
          + (f"; left out, damaged (its notes say why): rank {rank_ranges(left_out)}" if left_out else ""))
    return 0
