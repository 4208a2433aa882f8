"""What the store's read checks cost: one rank of N intervals read with and without them (best of 9 each).

The checks (``ddltrace.store._timeline_problem``: rank column, start/dur integers, categories in the closed set,
no negative duration, no int64 overflow, rows within the manifest's span) are timed alone too, on the frame
already read, and per interval. Random intervals of 3 names and the 8 categories, zstd Parquet as a store writes.

    .venv/bin/python benchmarks/store_read_checks.py [--intervals 2000000]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from ddltrace import store as store_module
from ddltrace.store import TraceStore, write_store
from ddltrace.timeline import CATEGORIES, TIMELINE_DTYPES, make_timeline


def best(run, repeats: int = 9) -> float:
    """The fastest of ``repeats`` runs, in s."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=int, default=2_000_000)
    n = parser.parse_args().intervals
    rng = np.random.default_rng(0)
    timeline = make_timeline(rank=np.zeros(n, np.int32), name=np.array(["MPI_Send", "fwd", "MPI_Wait"])[
        rng.integers(0, 3, n)], category=np.array(CATEGORIES)[rng.integers(0, len(CATEGORIES), n)],
        start_ns=np.cumsum(rng.integers(100, 1000, n)).astype(np.int64),
        dur_ns=rng.integers(0, 90, n).astype(np.int64))
    with tempfile.TemporaryDirectory() as folder:
        store = write_store(f"{folder}/s", timeline)
        checks = store_module._timeline_problem
        store_module._timeline_problem = lambda *args: None
        unchecked = best(lambda: TraceStore.open(store.path).timeline())
        store_module._timeline_problem = checks
        checked = best(lambda: TraceStore.open(store.path).timeline())
        frame = store._read("timeline", 0, TIMELINE_DTYPES)
        alone = best(lambda: checks(frame, 0, store.rank_info(0)))
    print(f"{n} intervals: read in {unchecked * 1e3:.0f} ms without the checks, {checked * 1e3:.0f} ms with them; "
          f"the checks alone {alone * 1e3:.1f} ms ({alone / n * 1e9:.1f} ns per interval)")


if __name__ == "__main__":
    main()
