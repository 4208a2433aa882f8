"""ddltrace/executor.py's local processes (``--jobs``): results in the items' order whatever order they finish in,
progress, a dead process named in one line; ``analyze --jobs 2`` and the default for a big store give the local
run's output. The Dask side is in tests/test_dask_cluster.py (a real cluster)."""

from __future__ import annotations

import os
import time
from itertools import repeat
from pathlib import Path

import pytest

from ddltrace.analyses.synthetic import write_ps_store
from ddltrace.cli import main
from ddltrace.errors import DdltraceError
from ddltrace.executor import LocalMapper, usable_cpus


def _slow_square(x: int) -> tuple[int, int]:
    """x squared, the first items slowest (so they finish last), and the process that computed it."""
    time.sleep(0.05 * (4 - x) if x < 4 else 0)
    return x * x, os.getpid()


def _first_waits_for_the_second(marker: str, x: int) -> int:
    """Item 0 finishes only once item 1 has (it waits for the file item 1 writes): finishing order 1 before 0."""
    path = Path(marker)
    if x == 1:
        path.write_text("done")
    if x == 0:
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return x


def _dies_on_three(x: int) -> int:
    if x == 3:
        os._exit(9)
    return x


def test_results_come_in_the_items_order_from_other_processes():
    seen = []
    with LocalMapper(2, progress=lambda done, total, where: seen.append((done, total, where))) as mapper:
        results = list(mapper(_slow_square, range(8)))
    assert [r for r, _ in results] == [x * x for x in range(8)]
    assert os.getpid() not in {pid for _, pid in results}
    assert seen[-1] == (8, 8, "in 2 processes of this machine")


def test_unordered_results_come_as_they_finish(tmp_path):
    """ordered=False (analyze's): item 1 is handed back before item 0, which cannot finish before it; ordered, the
    same work comes back in the items' order."""
    for ordered, first in ((False, 1), (True, 0)):
        marker = tmp_path / f"marker-{ordered}"
        with LocalMapper(2, ordered=ordered) as mapper:
            results = list(mapper(_first_waits_for_the_second, repeat(str(marker)), range(6)))
        assert results[0] == first and sorted(results) == list(range(6))


def test_one_item_or_one_job_runs_in_this_process():
    with LocalMapper(2) as mapper:
        assert [pid for _, pid in mapper(_slow_square, [5])] == [os.getpid()]
    with LocalMapper(1) as mapper:
        assert {pid for _, pid in mapper(_slow_square, range(3))} == {os.getpid()}


def test_a_process_that_dies_is_one_line_naming_the_call():
    with LocalMapper(2) as mapper, pytest.raises(DdltraceError) as caught:
        list(mapper(_dies_on_three, range(6)))
    message = str(caught.value)
    assert "a worker process died without a word" in message and "--jobs 1" in message
    assert message.startswith("_dies_on_three(")


def test_analyze_in_local_processes_gives_the_output_of_one_process(tmp_path, capsys, monkeypatch):
    """--jobs 2, and the default for a store of POOL_MIN_EVENTS events (lowered here to this small store's), print
    what --jobs 1 prints; the default's progress says how many processes read the ranks."""
    from ddltrace.commands import analyze

    write_ps_store(tmp_path / "ps", workers=4, steps=12, straggler=2, seed=3)
    printed = {}
    for how in (["--jobs", "1"], ["--jobs", "2"], []):
        if not how:
            monkeypatch.setattr(analyze, "POOL_MIN_EVENTS", 1)
            monkeypatch.setattr(analyze, "PROGRESS_EVENTS", 1)
        assert main(["analyze", str(tmp_path / "ps"), *how]) == 0
        printed[" ".join(how)], err = capsys.readouterr()
    assert printed["--jobs 1"] == printed["--jobs 2"] == printed[""] and "Straggler" in printed[""]
    jobs = min(usable_cpus(), analyze.DEFAULT_MAX_JOBS)
    assert ("in this process" if jobs == 1 else f"in {jobs} processes of this machine") in err
