"""Record the ps-sgd job's configuration in trace stores made without it, from the command line they recorded.

``ddltrace run`` records a ``workload`` entry (the job's configuration: its workers, server rank, protocol, ...)
in the manifest of every store of the shipped ps-sgd job; ``ddltrace workload --trace`` did so before, but a plain
``ddltrace run -- python -m ddltrace.collectors.workloads.ps_sgd ...`` (``benchmarks/new_hardware.py``'s runs,
under a CPU quota's or a disk throttle's wrapper too) did not, and the analyses then inferred w from the messages:
a w = 1 run (two ranks) read as two workers and no server. This script gives such a store the entry a run would
record now (:func:`ddltrace.collectors.workloads.ps_sgd_config.record`: the job's own option parser on the
manifest's ``run.command``, on ``run.world_size`` ranks), the ground truth being the ``ground_truth.json`` beside
the store (the job's ``--out`` with the store in ``OUT/store``). Where that ground truth is there, the derived
configuration must hold every value the job wrote (an option the job gained since, e.g. ``--cold-read``, comes in
at its default), else the store is left as it is and named.

Usage: ``python scripts/annotate_workload_stores.py [STORE ...] [--check]``; no STORE: every ``sample_traces/*/*/
store``. Stores that already have the entry, or whose command is not the job, are left alone. ``--check``: write
nothing; exit 1 when a store of the job lacks the entry. Exit 2 when a derived configuration contradicts its
ground truth. Rerunning changes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ddltrace.collectors.workloads import ps_sgd_config
from ddltrace.store import TraceStore

REPO = Path(__file__).resolve().parent.parent
NOTE = ("workload entry added by scripts/annotate_workload_stores.py from run.command and run.world_size "
        "(the run's ddltrace did not record it)")


def derived(store: TraceStore) -> dict | None:
    """The manifest ``store`` should have (a copy), with the job's entry; None when its command is not the job."""
    manifest = json.loads(json.dumps(store.manifest))
    manifest.pop("workload", None)
    run = manifest.get("run", {})
    if not ps_sgd_config.record(manifest, run.get("command", ""), int(run.get("world_size") or 0), store.path,
                                out=store.path.parent):
        return None
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("stores", nargs="*", type=Path, help="trace stores (default: every sample_traces/*/*/store)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 where a store of the job lacks it")
    args = p.parse_args(argv)
    stores = args.stores or sorted((REPO / "sample_traces").glob("*/*/store"))
    missing = bad = 0
    for path in stores:
        store = TraceStore.open(path)
        manifest = None if "workload" in store.manifest else derived(store)
        if manifest is None:
            continue
        entry = manifest["workload"]
        if "ground_truth" in entry:
            written = json.loads((path / entry["ground_truth"]).read_text())["config"]
            differ = sorted(k for k in written if written[k] != entry["config"].get(k))
            if differ:
                print(f"{path}: the configuration derived from its command differs from its ground truth's in "
                      f"{', '.join(differ)}; left as it is", file=sys.stderr)
                bad += 1
                continue
        missing += 1
        if args.check:
            print(f"{path}: no workload entry (w = {entry['config']['workers']} by its command)")
            continue
        store.manifest["workload"] = entry
        store.manifest.setdefault("notes", []).extend([manifest["notes"][-1], NOTE])
        store.save_manifest()
        print(f"{path}: workload entry recorded: w = {entry['config']['workers']}, server rank "
              f"{entry['config']['server_rank']}, {entry['config']['sync']}, {entry['config']['compute']} compute")
    return 2 if bad else (1 if missing and args.check else 0)


if __name__ == "__main__":
    sys.exit(main())
