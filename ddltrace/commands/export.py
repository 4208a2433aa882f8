"""``ddltrace export STORE --chrome OUT``: write a store as Chrome trace JSON (Perfetto UI, chrome://tracing)."""

from __future__ import annotations

from pathlib import Path

from ddltrace.errors import DdltraceError
from ddltrace.outputs import refused
from ddltrace.rank_progress import PROGRESS_EVENTS, PROGRESS_RANKS, rank_progress


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="export a trace store to another tool's format",
        description="Export a trace store. --chrome writes Chrome trace JSON that Perfetto UI "
                    "(ui.perfetto.dev) and chrome://tracing open: ranks as processes, lanes as threads, times as the "
                    "store's ns in exact decimal microseconds (a viewer reading them as float64 keeps about 0.25 us "
                    "at epoch times); 'ddltrace import' reads the file back into the same store.")
    p.add_argument("store", help="trace store folder")
    p.add_argument("--chrome", metavar="OUT", required=True, help="output file (.json)")
    p.add_argument("--ranks", metavar="LIST", help="only these ranks, e.g. 0,2-5")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists and is a file")
    p.add_argument("--quiet", action="store_true", help="no progress messages (a big store has them on stderr)")
    p.set_defaults(func=run)




def parse_ranks(text: str | None) -> list[int] | None:
    """'0,2-5' -> [0, 2, 3, 4, 5], each rank once in order of first mention ('1,1' wrote rank 1 twice: its rows
    doubled on import); None stays None."""
    if text is None:
        return None
    ranks: list[int] = []
    for part in text.split(","):
        try:
            if "-" in part:
                lo, hi = (int(end) for end in part.split("-", 1))
            else:
                lo = hi = int(part)
        except ValueError:
            raise DdltraceError(f"--ranks: '{part}' is not a rank or a range like 2-5") from None
        if lo > hi:  # range() of it is empty: the export held no event and said nothing
            raise DdltraceError(f"--ranks: '{part}' is an empty range (its first rank is above its last: {hi}-{lo}?)")
        ranks.extend(range(lo, hi + 1))
    return list(dict.fromkeys(ranks))


def _progress(store):
    """For a big store (:data:`PROGRESS_RANKS` ranks or :data:`PROGRESS_EVENTS` intervals), a line on stderr before
    the first rank and every ``PROGRESS_EVERY_S`` seconds: ranks written of all, events written (the intervals,
    counters and names written so far) and their rate (events per second of wall time); None for a small one."""
    import sys

    listed = sum(int(store.rank_info(r).get("events", 0) or 0) for r in store.ranks)
    if len(store.ranks) < PROGRESS_RANKS and listed < PROGRESS_EVENTS:
        return None

    def say(message: str) -> None:
        print(f"ddltrace export: {store.path}: {message}", file=sys.stderr, flush=True)

    say(f"writing {len(store.ranks)} ranks ({listed:,} intervals) rank by rank")
    return rank_progress(say, "written")


def run(args) -> int:
    from ddltrace.chrome import export_chrome, not_exported
    from ddltrace.outputs import refuse_inside
    from ddltrace.store import TraceStore, rank_ranges

    out = Path(args.chrome)
    refuse_inside(out, args.store, "the trace store")
    if out.is_dir():
        raise DdltraceError(f"{out}: is a folder (give a file name for the Chrome trace)")
    if out.exists() and not args.force:
        raise DdltraceError(f"{out}: already exists (choose another --chrome, or add --force)")
    store = TraceStore.open(args.store)
    ranks = parse_ranks(args.ranks)
    try:  # written to a temporary file and renamed: a failure leaves nothing
        count = export_chrome(store, args.chrome, ranks, None if args.quiet else _progress(store))
    except OSError as exc:  # a full disk, a folder that refuses
        raise refused(exc, args.chrome, "the Chrome trace") from None
    missing = not_exported(store, ranks)  # (each with why in the file, after its events: import keeps it)
    print(f"wrote {args.chrome}: {count} events from {store.path}"
          + (f"; not in it, each with why (ddltrace import keeps it): rank {rank_ranges(sorted(missing))} of the "
             f"world of {store.world_size}" if missing else ""))
    return 0
