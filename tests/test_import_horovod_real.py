"""A real Horovod timeline (Horovod 0.28.1, Gloo, PyTorch; tests/data/README.md says how it was made)."""

from __future__ import annotations

import gzip
from pathlib import Path

from ddltrace.cli import main
from ddltrace.store import TraceStore

TIMELINE = Path(__file__).parent / "data" / "horovod_gloo" / "horovod_timeline.json.gz"


def test_real_horovod_timeline_categories_and_wall_clock(tmp_path, capsys):
    assert main(["import", str(TIMELINE), "--out", str(tmp_path / "s")]) == 0
    assert "[horovod]" in capsys.readouterr().out
    store = TraceStore.open(tmp_path / "s")
    timeline = store.timeline()
    by_name = timeline.groupby("name", observed=True)["category"].agg(lambda c: set(c.astype(str)))
    assert by_name["ALLREDUCE"] == {"comm"} and by_name["GLOO_ALLREDUCE"] == {"comm"}
    assert by_name["BROADCAST"] == {"comm"} and by_name["NEGOTIATE_ALLREDUCE"] == {"wait"}
    assert by_name["MEMCPY_IN_FUSION_BUFFER"] == {"memcpy"}
    # one lane per tensor; every allreduce of a tensor inside its own lane, in order
    assert (timeline["lane"].str.startswith("tensor:")).all()
    assert timeline.loc[timeline["name"] == "ALLREDUCE", "lane"].nunique() >= 6
    # ts are µs since the timeline started; start_time_since_epoch_in_micros puts them on the wall clock
    text = gzip.open(TIMELINE, "rt").read()
    start_us = int(text.split('"start_time_since_epoch_in_micros":')[1].split("}")[0])
    assert timeline["start_ns"].min() >= start_us * 1000
    assert timeline["start_ns"].max() - start_us * 1000 < 60 * 10**9  # a job of seconds, not a wrong epoch
