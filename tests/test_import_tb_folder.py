"""A TensorBoard profile folder (``<logdir>/plugins/profile/<run>/``) built from the real TF 2.21 XPlane of
tests/data and xprof's JSON conversion of the same session: one session per host (the XPlane), ranks from the
hosts (or TF_CONFIG), never from a file's position; of several runs, the newest, said so."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ddltrace.cli import main
from ddltrace.collectors.importers import Categorizer, ImportContext, detect
from ddltrace.store import TraceStore

DATA = Path(__file__).parent / "data"
XPLANE = DATA / "tf2_profile" / "worker0" / "vm.xplane.pb"
TRACE_JSON = DATA / "tf2_trace_viewer" / "worker0" / "vm.trace.json.gz"


def _xplane_rows(path: Path):
    """The XPlane read on its own: its rows, the reference for the store's."""
    (part,) = detect(path).read(path, ImportContext(Categorizer()))
    return part.timeline


def _run(logdir: Path, run: str, hosts: dict[str, Path]) -> Path:
    folder = logdir / "plugins" / "profile" / run
    folder.mkdir(parents=True)
    for host, source in hosts.items():
        shutil.copy(source, folder / (host + (".trace.json.gz" if source.suffix == ".gz" else ".xplane.pb")))
    (folder / "vm.overview_page.pb").write_bytes(b"\x0a\x00")  # a tool's file: not a trace
    return folder


def test_one_host_xplane_and_its_json_are_one_rank(tmp_path, capsys):
    folder = _run(tmp_path / "logdir", "2026_11_20_10_00_00", {"vm": XPLANE})
    shutil.copy(TRACE_JSON, folder / "vm.trace.json.gz")
    assert main(["import", str(folder), "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    store = TraceStore.open(tmp_path / "s")
    assert store.ranks == [0] and store.world_size == 1 and store.rank_info(0)["host"] == "vm"
    assert store.run["framework"] == "tf2-xplane"
    reference = _xplane_rows(XPLANE)
    timeline = store.timeline()
    assert len(timeline) == len(reference) and timeline["dur_ns"].sum() == reference["dur_ns"].sum()
    assert "vm.trace.json.gz: not read: the same profiling session of host vm as vm.xplane.pb" in out
    assert "not traces and were skipped: vm.overview_page.pb" in out


def test_several_runs_the_newest_by_name(tmp_path, capsys):
    logdir = tmp_path / "logdir"
    old = _run(logdir, "2026_11_19_09_00_00", {"oldhost": XPLANE})
    _run(logdir, "2026_11_20_10_00_00", {"vm": XPLANE})
    for path in old.iterdir():  # the older run touched last: the run names decide, not the times
        os.utime(path, (2e9, 2e9))
    (logdir / "train").mkdir()
    (logdir / "train" / "events.out.tfevents.1795387686.vm").write_bytes(b"\x00" * 16)
    assert main(["import", str(logdir), "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    store = TraceStore.open(tmp_path / "s")
    assert store.ranks == [0] and store.rank_info(0)["host"] == "vm"
    note = (f"{logdir / 'plugins' / 'profile'}: 2 profiling runs; imported the newest, 2026_11_20_10_00_00 "
            "(run names are their start times); not imported: 2026_11_19_09_00_00")
    assert note in out and any(note in n for n in store.manifest["notes"])
    assert "oldhost" not in out.replace(note, "")


def test_hosts_are_ranks_by_name_or_by_tf_config(tmp_path, capsys, monkeypatch):
    hosts = {"10.0.0.10_6003": XPLANE, "10.0.0.2_6003": XPLANE, "10.0.0.3_6003": TRACE_JSON}
    folder = _run(tmp_path / "logdir", "2026_11_20_10_00_00", hosts)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert main(["import", str(folder), "--out", str(tmp_path / "by_name")]) == 0
    store = TraceStore.open(tmp_path / "by_name")
    assert {r: store.rank_info(r)["host"] for r in store.ranks} == {0: "10.0.0.2_6003", 1: "10.0.0.3_6003",
                                                                    2: "10.0.0.10_6003"}
    assert "ranks from the hosts (host name order: no TF_CONFIG)" in capsys.readouterr().out

    cluster = ["10.0.0.10:6003", "10.0.0.3:6003", "10.0.0.2:6003"]
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker",
                                                                                         "index": 0}}))
    assert main(["import", str(folder), "--out", str(tmp_path / "by_config")]) == 0
    store = TraceStore.open(tmp_path / "by_config")
    assert [store.rank_info(r)["host"].replace("_", ":") for r in store.ranks] == cluster
    assert store.rank_info(1)["format"] == "tf2"  # the host with only a trace-viewer JSON is read from it
    assert "TF_CONFIG cluster order (chief, then workers)" in capsys.readouterr().out
