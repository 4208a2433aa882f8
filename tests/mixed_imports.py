"""A folder of traces of two formats and a broken file, imported two ways (--jobs, a Dask cluster) by the tests
that check an import gives the store one process gives."""

from __future__ import annotations

import shutil
from pathlib import Path

from ddltrace.store import TraceStore

DATA = Path(__file__).parent / "data"
BROKEN = "broken.pt.trace.json"


def mixed_folder(folder: Path) -> Path:
    """``folder`` made with a Kineto job (torch), an MXNet job and a truncated Kineto file (:data:`BROKEN`)."""
    shutil.copytree(DATA / "torch_gloo", folder / "torch")
    shutil.copytree(DATA / "mxnet_dist_sync", folder / "mxnet")
    (folder / BROKEN).write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "na')
    return folder


def assert_same_stores(a: TraceStore, b: TraceStore) -> None:
    """The same ranks (two or more), each with the same rows (more than 10) and rank info, and the same manifest
    notes."""
    assert a.ranks == b.ranks and len(a.ranks) >= 2
    for rank in a.ranks:
        ta, tb = a.timeline([rank]), b.timeline([rank])
        assert len(ta) > 10 and ta.equals(tb), rank
        assert a.rank_info(rank) == b.rank_info(rank)
    assert a.manifest["notes"] == b.manifest["notes"]
