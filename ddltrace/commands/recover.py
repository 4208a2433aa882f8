"""``ddltrace recover [RECORDS --out STORE]``: list the raw record sets left on this machine, or make the
store from one."""

from __future__ import annotations

import argparse
from pathlib import Path

from ddltrace.errors import DdltraceError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "recover", help="make the store from the raw records a killed or failed `ddltrace run` left",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A `ddltrace run` keeps each rank's raw MPI records (in /dev/shm for --np, beside the store\n"
                    "for --launcher) until its store is written and verified. When run is killed (OOM killer,\n"
                    "a scheduler), its write fails (a full disk) or is abandoned (Ctrl-C twice), the records\n"
                    "stay. With no argument this lists them: path, job command, start time, ranks, size. With\n"
                    "a path and --out it makes the store from them and then deletes them. `run` prints the\n"
                    "command to type at its start.",
        epilog="examples:\n"
               "  ddltrace recover\n"
               "  ddltrace recover /dev/shm/ddltrace-records-k2x9a1 --out run4")
    p.add_argument("records", nargs="?", metavar="RECORDS", help="a record folder, as listed")
    p.add_argument("--out", metavar="STORE", help="trace store folder to create")
    p.set_defaults(func=run)


def run(args) -> int:
    from ddltrace.collectors import record_sets

    if args.records is None:
        if args.out:
            raise DdltraceError("--out: give the record folder to recover too (`ddltrace recover` lists them)")
        found = record_sets.find()
        if not found:
            print(f"no record sets left on this machine (looked in {record_sets.SHM} and the sets named in "
                  f"{record_sets.registry()})")
        for rs in found:
            print(record_sets.describe(rs))
        return 0
    if not args.out:
        raise DdltraceError(f"--out: required with {args.records} (the trace store folder to create)")
    from ddltrace.collectors.launcher import recover_store, summary_line
    from ddltrace.outputs import refuse_inside

    refuse_inside(args.out, args.records, "the record folder")  # which is deleted once the store is written
    if Path(args.out).exists():  # (StoreLock's own line names --force, which recover has not)
        raise DdltraceError(f"{args.out}: already exists (choose another --out, or remove it yourself)")
    result = recover_store(Path(args.records), Path(args.out))
    print(summary_line(result))
    for note in result.notes:
        print(f"ddltrace: note: {note}")
    return 0
