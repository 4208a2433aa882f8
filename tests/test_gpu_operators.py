"""Device time by launching operator (analyses/gpu_operators.py) on real Kineto traces, every figure computed here
from the JSON itself by a different method: per host thread, its events swept in start order (the longer first at
one start) with a stack of the open ones (an event ending where the next starts is closed; one of no duration
encloses nothing); at each launch call (HTA's runtime launch names, and the graph launches and blocking copies and
fills HTA's list lacks, with the correlation id of device work), the stack's names are its operators, the top its
parent. Each kernel, copy or fill with that correlation id adds its duration (the file's decimal µs x 1000) to its
launch's parent's self time and, once per name, to the total of every name on the stack. The profiler's own
bookkeeping span (cat ``Trace``) is left out, as the importer leaves it out."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal

import pytest
from shared_data import SHARED

from ddltrace.analyses.gpu_launch import BLOCKING_COPIES, GRAPH_LAUNCHES, LAUNCH_NAMES
from ddltrace.analyses.gpu_operators import NO_OPERATOR, parents
from ddltrace.cli import main

DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
WORK = {"kernel", "gpu_memcpy", "gpu_memset"}


def _ns(value) -> int:
    return int(Decimal(value) * 1000)


def _truth(path) -> dict:
    events = [e for e in json.loads(gzip.open(path).read(), parse_float=Decimal)["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") != "Trace"]
    work = defaultdict(list)
    for e in events:
        if e.get("cat") in WORK and "correlation" in e.get("args", {}):
            work[e["args"]["correlation"]].append(_ns(e["dur"]))
    threads = defaultdict(list)
    for e in events:
        if e.get("cat") not in DEVICE:
            threads[(e["pid"], e["tid"])].append(e)
    calls = Counter(e["name"] for thread in threads.values() for e in thread)
    self_ns, self_work, total = Counter(), Counter(), Counter()
    for thread in threads.values():
        stack: list[tuple[int, str]] = []  # (end ns, name) of the open events
        for e in sorted(thread, key=lambda e: (_ns(e["ts"]), -_ns(e["dur"]))):
            start, end = _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])
            while stack and stack[-1][0] <= start:
                stack.pop()
            correlation = e.get("args", {}).get("correlation")
            launches = e["name"] in LAUNCH_NAMES or e["name"].startswith((*GRAPH_LAUNCHES, *BLOCKING_COPIES))
            if launches and correlation in work:
                parent = stack[-1][1] if stack else NO_OPERATOR
                for dur in work[correlation]:
                    self_ns[parent] += dur
                    self_work[parent] += 1
                    for name in {name for _, name in stack} or {NO_OPERATOR}:
                        total[name] += dur
            if end > start:
                stack.append((end, e["name"]))
    return {name: (calls[name] if name != NO_OPERATOR else 0, self_work[name], self_ns[name], total[name])
            for name in set(self_ns) | set(total)}


@pytest.mark.parametrize("trace", ["df_index_resolver/df_index_resolver.json.gz",
                                   "trace_filter/sampled_rank-0.json.gz",
                                   "negative_queue_length_values_check/rank0.json.gz",
                                   "trace_diff/test/test.json.gz"])
def test_every_operator_s_device_time_is_the_file_s(tmp_path, capsys, trace):
    path = SHARED / "hta_traces" / trace
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared)")
    truth = _truth(path)
    assert main(["analyze", str(path), "--json", "--quiet"]) == 0
    (store,) = json.loads(capsys.readouterr().out)["stores"]
    got = {r["name"]: (r["calls"], r["self_work"], r["self_ns"], r["total_ns"]) for r in store["gpu"]["operators"]}
    assert got == truth
    assert sum(r["self_share"] for r in store["gpu"]["operators"]) == pytest.approx(1.0)


def test_parents_nest_by_time_and_adjacent_rows_are_siblings():
    """Lane 0: A [0, 100) holds B [10, 50) and C [50, 90) (B ends where C starts: siblings), C holds D [60, 70);
    E [100, 120) follows A; F [60, 60) of no duration starts with D, inside it (the longer first at one start), and
    encloses nothing. Lane 1: G [0, 200) is nobody's parent on lane 0."""
    import numpy as np

    lane = np.array([0, 0, 0, 0, 0, 0, 1])
    start = np.array([0, 10, 50, 60, 100, 60, 0])
    end = np.array([100, 50, 90, 70, 120, 60, 200])
    assert parents(lane, start, end).tolist() == [-1, 0, 0, 2, -1, 3, -1]


def test_the_report_draws_the_operators(tmp_path):
    folder = SHARED / "hta_traces" / "trace_filter"
    if not folder.is_dir():
        pytest.skip(f"{folder} absent (../shared)")
    assert main(["report", str(folder), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    assert (tmp_path / "r" / "gpu_operators.png").is_file() and "Device time by the host operator" in text
