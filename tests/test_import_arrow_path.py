"""`ddltrace import` of a Kineto trace and of an IPM profile (real files of others) runs without pandas, scipy,
matplotlib or pyarrow.compute: the importers build each rank's timeline as an Arrow table
(ddltrace/arrow_timeline.py) and the store writes it as it is. The files so written are the ones the DataFrame
path writes, value for value and type for type, and read back as the same DataFrames."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from shared_data import corpus, needs

from ddltrace.collectors.importers import Categorizer, ImportContext, get_importer
from ddltrace.collectors.importers.base import FileReport
from ddltrace.store import TraceStore

KINETO = corpus("kineto_tb_resnet50_w0", "worker0.1623143089861.pt.trace.json.gz")
IPM = corpus("ipm_hunold_1494937738", "hunold.1494937738.200810.ipm.xml")
FILES = [pytest.param(KINETO, "kineto", marks=needs(KINETO), id="kineto"),
         pytest.param(IPM, "ipm", marks=needs(IPM), id="ipm")]
HEAVY = ("pandas", "scipy", "matplotlib", "pyarrow.compute")

_CHILD = f"""
import json, sys
from ddltrace.cli import main
code = main(["import", sys.argv[1], "--out", sys.argv[2]])
print(json.dumps([code, [name for name in {HEAVY!r} if name in sys.modules]]))
"""


@pytest.mark.parametrize(("path", "fmt"), FILES)
def test_import_loads_no_pandas(path: Path, fmt: str, tmp_path):
    out = tmp_path / "store"
    result = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(out)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    code, loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert code == 0
    assert loaded == []
    store = TraceStore.open(out)
    assert store.ranks and all(store.rank_info(r)["format"] == fmt for r in store.ranks)


@pytest.mark.parametrize(("path", "fmt"), FILES)
def test_arrow_and_dataframe_paths_write_the_same_files(path: Path, fmt: str, tmp_path):
    parts = list(get_importer(fmt).read(path, ImportContext(Categorizer(), report=FileReport(str(path)))))
    arrow, frame = TraceStore.create(tmp_path / "arrow"), TraceStore.create(tmp_path / "frame")
    for part in parts:  # the Arrow table first: reading part.timeline makes (and keeps) its DataFrame
        arrow.add_rank(part.rank, part.table, part.counter_table, save=False)
        assert isinstance(part.timeline, pd.DataFrame)
        frame.add_rank(part.rank, part.timeline, part.counters, save=False)
    arrow.save_manifest()
    frame.save_manifest()
    written = sorted(p.relative_to(arrow.path) for p in arrow.path.rglob("*.parquet"))
    assert written == sorted(p.relative_to(frame.path) for p in frame.path.rglob("*.parquet"))
    assert len(written) >= len(parts)
    for name in written:
        mine, theirs = pq.read_table(arrow.path / name), pq.read_table(frame.path / name)
        assert mine.equals(theirs) and mine.schema.equals(theirs.schema, check_metadata=True)
    assert arrow.manifest["ranks"] == frame.manifest["ranks"]
    pd.testing.assert_frame_equal(TraceStore.open(arrow.path).timeline(), TraceStore.open(frame.path).timeline())
    pd.testing.assert_frame_equal(TraceStore.open(arrow.path).timeline(),
                                  pd.concat([p.timeline for p in sorted(parts, key=lambda p: p.rank)],
                                            ignore_index=True))
