"""The duration of a broadcast or reduce whose kernels did not all overlap (analyses/gpu_collectives.py): NCCL runs
those down a chain from (or to) the root, each rank waiting only for the one before it, so the root's kernel, the
shortest, ends once it has pushed its data and the data reaches the last rank when the last kernel ends. Such an
instance's duration is the latest end - the latest start (nccl-tests' time with ``-a 3``: from the barrier, when
all have arrived, to the slowest rank's completion), ``duration_from`` "chain: ..."; an instance whose kernels all
overlap keeps the shortest kernel, ``duration_from`` "shortest kernel".

Real trace: TraceLens' fused NCCL trace (amd/HPCTrainingExamples' merged_nccl_only.json.gz, tests/data/wild/
PROVENANCE.md: 4 ranks, 6 broadcasts, 15 all-reduces), each figure checked against one computed here from the
file's own kernel timestamps. A written 4-rank store with the trace's first broadcast checks the same where the
corpus is absent (CI)."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from shared_data import corpus, needs

from ddltrace.analyses.gpu_collectives import CHAIN, SHORTEST
from ddltrace.cli import main
from ddltrace.store import write_store
from ddltrace.units import format_ns

FUSED_NCCL = corpus("tracelens_fused_nccl", "merged_nccl_only.json.gz")
#: c10d's dtype names in the file's args, and their sizes (bytes)
DTYPE_BYTES = {"Float": 4, "Long": 8}


def _ns(us) -> int:
    return int((Decimal(us) * 1000).to_integral_value())


def _file_instances(path: Path, collective: str) -> list[dict]:
    """The n-th kernel of ``collective`` on every rank of the fused file, as one instance each: its ranks' (start,
    end) in ns on the file's clock and its size (c10d's ``In msg nelems`` x the dtype's size)."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh, parse_float=Decimal)["traceEvents"]
    per_rank: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e["args"].get("Collective name") == collective:
            per_rank[e["args"]["rank"]].append(e)
    ranks = sorted(per_rank)
    counts = {len(per_rank[r]) for r in ranks}
    assert len(counts) == 1, counts  # the same number of them on every rank
    out = []
    for i in range(counts.pop()):
        kernels = [sorted(per_rank[r], key=lambda e: Decimal(e["ts"]))[i] for r in ranks]
        sizes = {k["args"]["In msg nelems"] * DTYPE_BYTES[k["args"]["dtype"]] for k in kernels}
        assert len(sizes) == 1
        out.append({"spans": [(_ns(k["ts"]), _ns(k["ts"]) + _ns(k["dur"])) for k in kernels], "bytes": sizes.pop()})
    return out


def _analyze(store: Path, capsys) -> tuple[dict, str]:
    capsys.readouterr()
    assert main(["analyze", "--json", "--quiet", str(store)]) == 0
    gpu = json.loads(capsys.readouterr().out)["stores"][0]["gpu"]
    assert main(["analyze", str(store)]) == 0
    return gpu, capsys.readouterr().out


def _collectives_row(text: str, collective: str) -> str:
    """The row of ``collective`` in the text output's 'Collectives by kind' table."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("Collectives by kind"))
    header = lines[at + 1]
    assert "duration from" in header
    return next(line for line in lines[at + 2:] if line.split()[0] == collective)


@needs(FUSED_NCCL)
def test_a_chained_broadcast_lasts_from_the_last_arrival_to_the_last_end_on_the_real_fused_trace(tmp_path, capsys):
    """On TraceLens' fused NCCL trace every broadcast's root kernel (15-16 us for 212 KB, 8 us for 424 B) ended
    before the last rank's started: the data reached every rank only when the last kernel ended, 22.5 us after the
    last rank arrived for the 212 KB ones. Before, the duration was the root's kernel (6 broadcasts, 70 us; busbw
    median / max 6.61 / 13.8 GB/s), overstating the bus bandwidth 1.5x; now 91.8 us, 4.58 / 9.45 GB/s."""
    broadcasts = _file_instances(FUSED_NCCL, "broadcast")
    allreduces = _file_instances(FUSED_NCCL, "allreduce")
    assert len(broadcasts) == 6 and len(allreduces) == 15
    want = []
    for b in broadcasts:
        starts, ends = zip(*b["spans"], strict=True)
        assert min(ends) < max(starts)  # the file's own fact: no broadcast's kernels all overlap (a chain)
        duration = max(ends) - max(starts)
        want.append((min(starts), duration, b["bytes"]))
    # the 212 KB ones: the chain's time is well above the root's kernel, the figure given before
    assert all(d > 1.4 * min(e - s for s, e in b["spans"])
               for (_, d, size), b in zip(want, broadcasts, strict=True) if size == 212480)

    store = tmp_path / "store"
    assert main(["import", str(FUSED_NCCL), "--out", str(store), "--progress", "never"]) == 0
    gpu, text = _analyze(store, capsys)
    got = sorted((c for c in gpu["collectives"] if c["collective"] == "broadcast"), key=lambda c: c["first_start_ns"])
    assert len(got) == 6 and all(c["ranks"] == 4 for c in got)
    origin = want[0][0] - got[0]["first_start_ns"]  # the store's clock: the file's, shifted
    for c, (first, duration, size) in zip(got, want, strict=True):
        assert c["first_start_ns"] + origin == first
        assert c["duration_ns"] == duration
        assert c["bytes"] == size
        assert c["algbw"] == pytest.approx(size / (duration / 1e9), rel=1e-12)
        assert c["busbw"] == pytest.approx(size / (duration / 1e9), rel=1e-12)  # nccl-tests' factor 1
        assert c["duration_from"] == CHAIN
    # the all-reduces' kernels all overlap the last one's start: their duration is still the shortest kernel
    reduced = sorted((c for c in gpu["collectives"] if c["collective"] == "allreduce"),
                     key=lambda c: c["first_start_ns"])
    assert len(reduced) == 15
    for c, a in zip(reduced, allreduces, strict=True):
        starts, ends = zip(*a["spans"], strict=True)
        assert min(ends) >= max(starts)
        assert c["duration_from"] == SHORTEST
        assert c["duration_ns"] == min(e - s for s, e in a["spans"])
    # the text output: the broadcasts' summed time and which definition gave it
    row = _collectives_row(text, "broadcast")
    assert CHAIN in row and f"  {format_ns(sum(d for _, d, _ in want))}  " in row
    assert SHORTEST in _collectives_row(text, "allreduce")
    assert "latest end minus latest start" in gpu["definitions"]["collectives"]


#: The fused trace's first 212 KB broadcast (us, on its clock): rank 0 the root, rank 3 the last to arrive
CHAIN_SPANS = {0: (221.428, 236.771), 1: (389.918, 1709.355), 2: (0.0, 1710.699), 3: (1688.215, 1703.838)}


def test_a_chained_broadcast_in_a_written_store(tmp_path, capsys):
    """A store of 4 ranks: the trace's first 212 KB broadcast (its root's kernel of 15.3 us ended 1.45 ms before the
    last rank's started), an all-reduce whose kernels all overlap (it ties the ranks' clocks) and a broadcast whose
    kernels all overlap. The chained one lasts 1710.699 - 1688.215 us = 22.484 us, not the root's 15.343 us; the
    overlapping ones keep the shortest kernel."""
    rows = []

    def kernels(name, spans, size):
        for r, (s, e) in spans.items():
            rows.append({"rank": r, "lane": "gpu:0/stream 7", "name": name, "category": "comm",
                         "start_ns": round(s * 1e3), "dur_ns": round(e * 1e3) - round(s * 1e3), "bytes": size})

    kernels("ncclDevKernel_Broadcast_RING_LL", CHAIN_SPANS, 212480)
    kernels("ncclDevKernel_AllReduce_Sum_f32_RING_LL", {r: (5000.0 + 100 * r, 6000.0) for r in range(4)}, 1 << 20)
    kernels("ncclDevKernel_Broadcast_RING_LL", {r: (8000.0 + 10 * r, 8100.0 + r) for r in range(4)}, 212480)
    store = write_store(tmp_path / "chain", pd.DataFrame(rows), run={"world_size": 4}).path
    gpu, text = _analyze(store, capsys)
    chain, allreduce, overlapped = sorted(gpu["collectives"], key=lambda c: c["first_start_ns"])
    assert [c["collective"] for c in (chain, allreduce, overlapped)] == ["broadcast", "allreduce", "broadcast"]
    assert chain["ranks"] == 4 and chain["late_rank"] == 3
    assert chain["duration_ns"] == 1_710_699 - 1_688_215
    assert chain["max_duration_ns"] == 1_710_699  # rank 2's kernel, waiting included
    assert chain["busbw"] == pytest.approx(212480 / 22_484e-9, rel=1e-12)
    assert chain["wait_ns"] == 15_343 + (1_688_215 - 389_918) + 1_688_215  # unchanged: the early ranks' wait
    assert chain["duration_from"] == CHAIN
    assert allreduce["duration_from"] == SHORTEST and allreduce["duration_ns"] == 6_000_000 - 5_300_000
    assert allreduce["busbw"] == pytest.approx((1 << 20) / 700e-6 * 2 * 3 / 4, rel=1e-12)
    assert overlapped["duration_from"] == SHORTEST and overlapped["duration_ns"] == 8_103_000 - 8_030_000
    assert overlapped["busbw"] == pytest.approx(212480 / 73_000e-9, rel=1e-12)
    # text: the broadcasts' row says the two definitions, the all-reduce's the shortest kernel
    row = _collectives_row(text, "broadcast")
    assert f"{SHORTEST} (1), chain (1)" in row and f"  {format_ns(22_484 + 73_000)}  " in row
    assert SHORTEST in _collectives_row(text, "allreduce") and CHAIN not in _collectives_row(text, "allreduce")
