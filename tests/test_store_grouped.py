"""Many small ranks in one Parquet file, one after the other (ddltrace/store.py ``GROUP_BELOW_ROWS``,
docs/ARCHITECTURE.md store layout): what `ddltrace import` writes for an IPM profile of 64 ranks of a few rows each.
The ranks read back as before, the store stays one Parquet dataset (no rank twice), a rank whose rows the manifest
gives wrong is named and the others are read, and a manifest naming a file outside the store is refused."""

from __future__ import annotations

import json
import warnings

import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from shared_data import corpus, needs

from ddltrace.cli import main
from ddltrace.errors import DamagedStoreWarning, StoreError
from ddltrace.store import GROUP_FROM_RANKS, TraceStore, merge_stores, verify_written
from ddltrace.timeline import make_timeline

IPM = corpus("ipm_hunold_1494937738", "hunold.1494937738.200810.ipm.xml")


def rows_for(rank: int, n: int = 4) -> pd.DataFrame:
    return make_timeline([dict(rank=rank, name=f"op{i}", category="compute" if i % 2 else "wait",
                               start_ns=1000 * rank + 100 * i, dur_ns=50 + i, source="test") for i in range(n)])


def _grouped(path, ranks: int) -> TraceStore:
    store = TraceStore.create(path)
    for rank in range(ranks):
        store.add_rank(rank, rows_for(rank), save=False, group=True)
    store.save_manifest()
    return TraceStore.open(path)


def _dataset_rows(store: TraceStore) -> pd.DataFrame:
    """Rows per rank of STORE/timeline read as one Parquet dataset (as DuckDB or Spark would)."""
    table = ds.dataset(store.path / "timeline", format="parquet").to_table(columns=["rank"])
    return table.to_pandas()["rank"].value_counts().sort_index()


@needs(IPM)
def test_an_import_of_many_small_ranks_writes_them_into_one_file(tmp_path):
    assert main(["import", str(IPM), "--out", str(tmp_path / "s")]) == 0
    store = TraceStore.open(tmp_path / "s")
    assert len(store.ranks) == 64 >= GROUP_FROM_RANKS
    assert sorted(p.name for p in (store.path / "timeline").iterdir()) == ["ranks-00000-00063.parquet"]
    ends = [sum(store.rank_info(r)["events"] for r in store.ranks[:i + 1]) for i in range(64)]
    assert [store.rank_info(r)["rows"] for r in store.ranks] == [[a, b] for a, b in zip([0, *ends], ends, strict=False)]
    verify_written(store, store.ranks)  # every rank's row group holds the rows the manifest counts
    timeline = store.timeline()
    assert sorted(set(timeline["rank"])) == store.ranks
    counts = timeline["rank"].value_counts().sort_index()
    assert counts.to_dict() == {r: store.rank_info(r)["events"] for r in store.ranks}
    assert _dataset_rows(store).to_dict() == counts.to_dict()


def test_fewer_small_ranks_than_the_minimum_get_files_of_their_own(tmp_path):
    store = _grouped(tmp_path / "s", 3)
    assert sorted(p.name for p in (store.path / "timeline").iterdir()) == [f"rank-0000{r}.parquet" for r in range(3)]
    assert all("rows" not in store.rank_info(r) for r in store.ranks)


def test_a_held_rank_reads_before_it_is_written_and_a_new_timeline_replaces_it(tmp_path):
    store = TraceStore.create(tmp_path / "s")
    for rank in range(GROUP_FROM_RANKS + 2):
        store.add_rank(rank, rows_for(rank), save=False, group=True)
    pd.testing.assert_frame_equal(store.timeline([5]), rows_for(5))  # held in memory, read from there
    store.add_rank(5, rows_for(5, n=300), save=False, group=True)  # too many rows to hold: a file of its own
    store.save_manifest()
    again = TraceStore.open(store.path)
    assert "rows" not in again.rank_info(5) and again.rank_info(5)["events"] == 300
    assert sorted(p.name for p in (store.path / "timeline").iterdir()) == ["rank-00005.parquet",
                                                                          "ranks-00000-00065.parquet"]
    assert _dataset_rows(again).to_dict() == {r: 300 if r == 5 else 4 for r in again.ranks}  # no rank twice
    pd.testing.assert_frame_equal(again.timeline([5]), rows_for(5, n=300))
    pd.testing.assert_frame_equal(again.timeline([6]), rows_for(6))
    merged = merge_stores(again, _grouped(tmp_path / "t", GROUP_FROM_RANKS), tmp_path / "m", renumber=True)
    assert len(merged.timeline()) == len(again.timeline()) + 4 * GROUP_FROM_RANKS
    with pytest.raises(StoreError, match="rank 6 is written in timeline/ranks-00000-00065.parquet with other ranks"):
        again.add_rank(6, rows_for(6))  # its rows would be in the dataset twice


@pytest.mark.parametrize(("rows", "why"), [([1000, 1004], "holds 256 rows, not the rows 1000 to 1004"),
                                          ([24, 28], "rows .* of rank 6 in the file of rank 5")])
def test_wrong_rows_name_their_rank_and_the_others_are_read(tmp_path, rows, why):
    store = _grouped(tmp_path / "s", GROUP_FROM_RANKS)
    manifest = json.loads((store.path / "manifest.json").read_text())
    assert manifest["ranks"]["5"]["rows"] == [20, 24]
    manifest["ranks"]["5"]["rows"] = rows
    (store.path / "manifest.json").write_text(json.dumps(manifest))
    damaged = TraceStore.open(store.path)
    with pytest.warns(DamagedStoreWarning, match=why):
        timeline = damaged.timeline()
    assert sorted(set(timeline["rank"])) == [r for r in range(GROUP_FROM_RANKS) if r != 5]
    assert 5 in damaged.damaged and "ranks-00000-00063.parquet" in damaged.damaged[5]


@pytest.mark.parametrize(("key", "value"), [("timeline_file", "../../manifest.json"), ("rows", [0, 9]),
                                            ("rows", "0-4")])
def test_a_rank_entry_naming_a_file_outside_the_store_or_rows_not_its_own_is_refused(tmp_path, key, value):
    store = _grouped(tmp_path / "s", GROUP_FROM_RANKS)
    manifest = json.loads((store.path / "manifest.json").read_text())
    manifest["ranks"]["7"][key] = value
    (store.path / "manifest.json").write_text(json.dumps(manifest))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        damaged = TraceStore.open(store.path)
    assert any("rank 7" in str(w.message) and key in str(w.message) for w in caught)
    assert 7 not in damaged.ranks and len(damaged.ranks) == GROUP_FROM_RANKS - 1


def test_the_read_back_check_finds_a_shared_file_short_of_its_ranks_rows(tmp_path):
    store = _grouped(tmp_path / "s", GROUP_FROM_RANKS)
    verify_written(store, range(GROUP_FROM_RANKS))
    shared = store.path / "timeline" / "ranks-00000-00063.parquet"
    pq.write_table(pq.read_table(shared).slice(0, 200), shared)
    with pytest.raises(StoreError, match="200 rows written, its ranks' entries name 256"):
        verify_written(store, range(GROUP_FROM_RANKS))
