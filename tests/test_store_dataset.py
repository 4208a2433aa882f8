"""A store is an ordinary Parquet dataset (docs/ARCHITECTURE.md, "Reading a store with other tools"): DuckDB and
pyarrow.dataset read ``STORE/timeline`` as one table, and a SQL query over it gives ``ddltrace info``'s time per
category per rank to the nanosecond."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from shared_data import REPO, SHARED

from ddltrace.store import TraceStore, write_store
from ddltrace.timeline import CATEGORIES

duckdb = pytest.importorskip("duckdb", reason="duckdb not installed (pip install -e '.[dev]')")

HTA_FOLDER = SHARED / "hta_traces" / "trace_filter"
#: A store written before the ``correlation`` column existed (5 MPI ranks, one lane each, no compute rows).
OLD_STORE = REPO / "sample_traces" / "ps-sgd" / "par-w4" / "store"

#: ``info``'s ``time_ns`` in SQL: each rank's span cut at every start and end; on each piece, a lane's category is
#: the highest in the lane priority (analyses/breakdown.py LANE_PRIORITY) among its rows covering the piece; the
#: piece is compute where any lane's is compute, else the highest lane's; a piece no row covers is idle (compute
#: on a rank with no compute rows, an MPI trace). ``union_by_name`` reads stores older than ``correlation``.
INFO_TIME_SQL = """
WITH t AS (SELECT rank, lane, category::VARCHAR AS category, start_ns AS s, start_ns + dur_ns AS e
           FROM read_parquet(?, union_by_name = true)),
priority(category, p) AS (VALUES ('idle', 0), ('other', 1), ('compute', 2), ('io', 3), ('memcpy', 4),
                                 ('comm', 5), ('wait', 6), ('barrier', 7)),
edges AS (SELECT rank, s AS x FROM t UNION SELECT rank, e FROM t),
pieces AS (SELECT * FROM (SELECT rank, x AS lo, lead(x) OVER (PARTITION BY rank ORDER BY x) AS hi FROM edges)
           WHERE hi IS NOT NULL),
per_lane AS (SELECT g.rank, g.lo, g.hi, t.lane, max(p) AS p
             FROM pieces g JOIN t ON t.rank = g.rank AND t.s <= g.lo AND t.e >= g.hi JOIN priority USING (category)
             GROUP BY ALL),
covered AS (SELECT rank, lo, hi, bool_or(p = 2) AS any_compute, max(p) AS p FROM per_lane GROUP BY ALL),
gaps AS (SELECT rank, CASE WHEN bool_or(category = 'compute') THEN 'idle' ELSE 'compute' END AS gap
         FROM t GROUP BY rank)
SELECT g.rank, coalesce(CASE WHEN c.any_compute THEN 'compute' END, priority.category, gaps.gap) AS category,
       sum(g.hi - g.lo)::BIGINT AS time_ns
FROM pieces g LEFT JOIN covered c USING (rank, lo, hi) LEFT JOIN priority ON priority.p = c.p JOIN gaps USING (rank)
GROUP BY ALL
"""


def _cli(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "ddltrace", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def hta_store(tmp_path_factory) -> Path:
    """The 2-rank HTA Kineto trace (host threads and GPU streams, overlapping) imported into a fresh store."""
    if not HTA_FOLDER.is_dir():
        pytest.skip(f"{HTA_FOLDER} absent (the workplace's shared traces)")
    out = tmp_path_factory.mktemp("dataset") / "store"
    _cli("import", str(HTA_FOLDER), "--out", str(out))
    return out


@pytest.fixture(scope="module")
def mpi_only_store(tmp_path_factory) -> Path:
    """:data:`OLD_STORE`'s MPI calls without its compute rows: the time between calls is compute in ``info``."""
    timeline = TraceStore.open(OLD_STORE).timeline()
    out = tmp_path_factory.mktemp("dataset") / "mpi-only"
    write_store(out, timeline[timeline["category"] != "compute"].reset_index(drop=True))
    return out


@pytest.fixture(params=["hta", "old", "mpi_only"])
def store(request) -> Path:
    return OLD_STORE if request.param == "old" else request.getfixturevalue(f"{request.param}_store")


def _info_time(store: Path) -> dict[tuple[int, str], int]:
    info = json.loads(_cli("info", str(store), "--json"))
    return {(r["rank"], c): ns for r in info["ranks"] for c, ns in r["time_ns"].items() if ns}


def test_duckdb_sql_gives_info_time_per_category(store):
    got = duckdb.connect().execute(INFO_TIME_SQL, [f"{store}/timeline/*.parquet"]).fetchall()
    want = _info_time(store)
    assert {(rank, category): ns for rank, category, ns in got} == want
    assert len({rank for rank, _ in want}) >= 2


def test_every_rank_file_has_one_schema(store):
    schemas = {pq.read_schema(path).remove_metadata() for path in (store / "timeline").glob("rank-*.parquet")}
    assert len(schemas) == 1
    schema = schemas.pop()
    assert schema.field("category").type == pa.dictionary(pa.int8(), pa.string())
    assert schema.field("dur_ns").type == pa.int64() and schema.field("rank").type == pa.int32()


def test_duckdb_and_pyarrow_dataset_read_the_rows_ddltrace_reads(store):
    """Raw sums of dur_ns (overlaps counted twice, unlike info) and row counts per rank and category: DuckDB's
    ``read_parquet`` glob and ``pyarrow.dataset`` give ddltrace's own reader's figures."""
    frame = TraceStore.open(store).timeline()
    want = {(int(rank), str(category)): (int(ns), int(n)) for (rank, category), (ns, n) in
            frame.groupby(["rank", "category"], observed=True)["dur_ns"].agg(["sum", "count"]).iterrows()}
    got = duckdb.connect().execute(
        "SELECT rank, category, sum(dur_ns)::BIGINT, count(*) FROM read_parquet(?) GROUP BY ALL",
        [f"{store}/timeline/*.parquet"]).fetchall()
    assert {(rank, category): (ns, n) for rank, category, ns, n in got} == want
    table = ds.dataset(store / "timeline", format="parquet").to_table(columns=["rank", "category", "dur_ns"])
    table = table.set_column(1, "category", table["category"].cast(pa.string()))
    sums = table.group_by(["rank", "category"]).aggregate([("dur_ns", "sum"), ("dur_ns", "count")]).to_pylist()
    assert {(r["rank"], r["category"]): (r["dur_ns_sum"], r["dur_ns_count"]) for r in sums} == want
    assert set(frame["category"].astype(str)) <= set(CATEGORIES)


def test_old_and_new_stores_read_together_by_name(hta_store):
    """A store written before ``correlation`` and a newer one: a plain glob refuses the mix, ``union_by_name``
    (DuckDB) or the newer schema (pyarrow.dataset) reads the older rows' ``correlation`` as null."""
    files = [f"{hta_store}/timeline/*.parquet", f"{OLD_STORE}/timeline/*.parquet"]
    with pytest.raises(duckdb.Error, match="correlation"):
        duckdb.connect().execute("SELECT count(correlation) FROM read_parquet(?)", [files]).fetchall()
    new_rows = len(TraceStore.open(hta_store).timeline())
    old_rows = len(TraceStore.open(OLD_STORE).timeline())
    [(rows, with_correlation)] = duckdb.connect().execute(
        "SELECT count(*), count(correlation) FROM read_parquet(?, union_by_name = true)", [files]).fetchall()
    assert rows == new_rows + old_rows and 0 < with_correlation <= new_rows
    schema = ds.dataset(hta_store / "timeline", format="parquet").schema
    both = ds.dataset([ds.dataset(hta_store / "timeline", schema=schema),
                       ds.dataset(OLD_STORE / "timeline", schema=schema)])
    table = both.to_table(columns=["correlation"])
    assert table.num_rows == rows and table["correlation"].null_count == rows - with_correlation


def test_counters_read_as_one_table():
    """``counters/*.parquet`` (the ranks' and the machine's, rank -1) read by DuckDB give ddltrace's samples."""
    frame = TraceStore.open(OLD_STORE).counters()
    want = {(int(rank), name): (int(n), float(total)) for (rank, name), (n, total) in
            frame.groupby(["rank", "name"])["value"].agg(["count", "sum"]).iterrows()}
    got = duckdb.connect().execute("SELECT rank, name, count(*), sum(value) FROM read_parquet(?) GROUP BY ALL",
                                   [f"{OLD_STORE}/counters/*.parquet"]).fetchall()
    assert {(rank, name): (n, pytest.approx(total, rel=1e-12)) for rank, name, n, total in got} == want
    assert -1 in {rank for rank, _ in want} and len(want) > 2
