"""py-spy's rows (source "py-spy") sample the stacks a rank's other rows already cover: `info` and the analyses
leave them out of the rank's time and span, so a profile with stacks breaks down as the same profile without them
(QA: a framework profiler's window of 354 ms beside py-spy's 5.9 s of samples read 94 % "other" and 5.36 s of
initialisation)."""

from __future__ import annotations

import json

from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.store import write_store

MS = 1_000_000


def _rows(stacks: bool) -> list[dict]:
    rows = []
    for step in range(5):
        t = 3_000 * MS + step * 70 * MS
        rows += [{"rank": 0, "lane": "cpu/thread 1", "name": f"ProfilerStep#{step}", "category": "other",
                  "start_ns": t, "dur_ns": 70 * MS, "step": step, "source": "pytorch"},
                 {"rank": 0, "lane": "cpu/thread 1", "name": "aten::mm", "category": "compute",
                  "start_ns": t + 5 * MS, "dur_ns": 40 * MS, "step": step, "source": "pytorch"},
                 {"rank": 0, "lane": "cpu/thread 1", "name": "gloo:all_reduce", "category": "comm",
                  "start_ns": t + 50 * MS, "dur_ns": 15 * MS, "step": step, "source": "pytorch"}]
    if stacks:  # py-spy from the process's start to its exit, 10 ms samples
        rows += [{"rank": 0, "lane": "python", "name": "<module> (train.py:9)", "category": "other",
                  "start_ns": i * 10 * MS, "dur_ns": 10 * MS, "source": "py-spy"} for i in range(600)]
    return rows


def test_a_profile_with_stacks_reads_as_the_same_profile_without_them(tmp_path, capsys):
    stores = {}
    for stacks in (False, True):
        path = tmp_path / ("with" if stacks else "without")
        write_store(path, _rows(stacks), run={"command": "job", "world_size": 1,
                                              "collectors": ["system", "py-spy"] if stacks else ["system"]})
        stores[stacks] = path
    infos = []
    for stacks in (False, True):
        assert main(["info", str(stores[stacks]), "--json"]) == 0
        (rank,) = json.loads(capsys.readouterr().out)["ranks"]
        infos.append(rank)
    assert infos[1]["events"] == infos[0]["events"] + 600  # the samples are kept in the store, and counted
    assert infos[1]["time_ns"] == infos[0]["time_ns"] and infos[1]["span_ns"] == infos[0]["span_ns"] == 350 * MS
    plain, sampled = analyze_store(stores[False]), analyze_store(stores[True])
    assert sampled.table("all").equals(plain.table("all"))
    assert sampled.phase_table.equals(plain.phase_table)
    assert sampled.phases[0].init_ns == 0 and len(sampled.phases[0].steps) == 5
