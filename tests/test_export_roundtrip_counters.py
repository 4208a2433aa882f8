"""``ddltrace export --chrome`` then ``ddltrace import``: the counters come back as the store had them, the
machine-wide ones (counters rank -1, process "machine" in the export) included (was: dropped, 445 samples of 3
series of 874 of 14, while the import's summary counted all 874 kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ddltrace.cli import main
from ddltrace.store import TraceStore

PAR_W4 = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd" / "par-w4" / "store"
#: The columns of a counters file: the rank (-1: the machine), the series' name, the time (ns) and the value.
COLUMNS = ["rank", "name", "t_ns", "value"]


@pytest.fixture
def round_trip(tmp_path, capsys) -> tuple[Path, str]:
    """par-w4 exported and imported back into ``tmp_path/back``; the import's printed summary."""
    out = tmp_path / "par.json"
    assert main(["export", str(PAR_W4), "--chrome", str(out), "--quiet"]) == 0
    back = tmp_path / "back"
    capsys.readouterr()
    assert main(["import", str(out), "--out", str(back), "--progress", "never"]) == 0
    return back, capsys.readouterr().out


def _counters(store: Path) -> dict[str, list[tuple]]:
    """Each counters file of ``store`` (``machine``, ``rank-00003``) as its rows of :data:`COLUMNS`, in file order."""
    return {file.stem: list(zip(*(pq.read_table(file, columns=COLUMNS).column(c).to_pylist() for c in COLUMNS),
                                strict=True))
            for file in sorted((store / "counters").glob("*.parquet"))}


def test_every_counter_sample_comes_back_with_its_rank_or_the_machine(round_trip):
    """Every series and sample (name, exact ns time, value) of every rank and of the machine, in its file."""
    back, _ = round_trip
    original, imported = _counters(PAR_W4), _counters(back)
    assert imported == original
    assert {row[0] for row in imported["machine"]} == {-1} and len(imported["machine"]) == 429
    assert sum(map(len, imported.values())) == 874
    assert TraceStore.open(back).counter_ranks == TraceStore.open(PAR_W4).counter_ranks == [-1, 0, 1, 2, 3, 4]


def test_info_gives_the_same_counters_line(round_trip, capsys):
    back, _ = round_trip
    lines = []
    for store in (PAR_W4, back):
        assert main(["info", str(store)]) == 0
        lines.append([line for line in capsys.readouterr().out.splitlines() if line.startswith("counters ")])
    assert lines[0] == lines[1] == ["counters    874 samples of 14 series"]


def test_info_json_gives_the_same_counters(round_trip, capsys):
    """``info --json``: the same samples and series."""
    back, _ = round_trip
    found = []
    for store in (PAR_W4, back):
        assert main(["info", str(store), "--json"]) == 0
        found.append(json.loads(capsys.readouterr().out))
    before, after = found
    assert (after["counter_samples"], after["counter_names"]) == (before["counter_samples"], before["counter_names"])


def test_the_import_counts_the_counter_events_it_kept(round_trip, tmp_path, capsys):
    """All 874 ``C`` events kept, and so counted; one of a process that is neither a rank nor the machine is
    counted as not kept (was: counted kept, and dropped)."""
    _, summary = round_trip
    assert "skipped 874 event(s): counter (C) events, kept as counters" in summary
    trace = json.loads((tmp_path / "par.json").read_text())
    trace["traceEvents"].append({"ph": "C", "name": "stray", "pid": 77, "tid": 0, "ts": 1, "args": {"stray": 1.0}})
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(trace))
    assert main(["import", str(edited), "--out", str(tmp_path / "edited"), "--progress", "never"]) == 0
    summary = capsys.readouterr().out
    assert "skipped 874 event(s): counter (C) events, kept as counters" in summary
    assert "skipped 1 event(s): counter (C) events of a process that is neither a rank nor the machine, not kept" \
        in summary
    assert sum(map(len, _counters(tmp_path / "edited").values())) == 874



def test_info_gives_the_same_per_node_table(round_trip, capsys):
    """The machine counters' node (the run's one host, ``run.hosts``, for their plain names): ``info``'s per-node
    table and its ``--json`` rows as the original's."""
    back, _ = round_trip
    tables, nodes = [], []
    for store in (PAR_W4, back):
        assert main(["info", str(store)]) == 0
        text = capsys.readouterr().out
        tables.append(text[text.index("\nper node"):].splitlines()[:4])
        assert main(["info", str(store), "--json"]) == 0
        nodes.append(json.loads(capsys.readouterr().out)["nodes"])
    assert tables[0] == tables[1] and tables[1][3].split()[:2] == ["vm", "33"]
    assert nodes[0] == nodes[1] and [n["host"] for n in nodes[1]] == ["vm"]
    assert TraceStore.open(back).run["hosts"] == TraceStore.open(PAR_W4).run["hosts"] == ["vm"]


GPU_RUN = Path(__file__).resolve().parent.parent / "sample_traces" / "h100-ddp" / "run-straggler" / "store"


def _same_run_entries(original: Path, back: Path) -> None:
    """Every entry of ``original``'s manifest that is the run's comes back in ``back``'s, compared key by key, so
    that an entry a later ddltrace records and the export or the import does not carry fails here: each entry of
    ``run`` (null values come back absent, which readers take the same; ``imported_files`` counts this import's
    files: the export, 1); :data:`~ddltrace.chrome.RUN_ENTRIES` (the notes before the import's own, the workload's
    ground truth naming the same file); and no top-level entry that is neither of those nor the store's own
    (:data:`~ddltrace.chrome.STORE_ENTRIES`)."""
    from ddltrace.chrome import RUN_ENTRIES, STORE_ENTRIES

    before, after = (json.loads((p / "manifest.json").read_text()) for p in (original, back))
    assert set(before) <= {"run", *RUN_ENTRIES, *STORE_ENTRIES}, set(before) - {"run", *RUN_ENTRIES, *STORE_ENTRIES}
    for key, value in before["run"].items():
        if key == "imported_files":
            assert after["run"][key] == 1
        elif value is None:
            assert after["run"].get(key) is None, key
        else:
            assert key in after["run"] and after["run"][key] == value, (key, value, after["run"].get(key))
    for key in RUN_ENTRIES:
        if key not in before:
            assert key not in after, key
        elif key == "notes":
            assert after["notes"][:len(before["notes"])] == before["notes"]
        elif key == "workload":
            truth = [(p / m["workload"]["ground_truth"]).resolve() for p, m in ((original, before), (back, after))]
            assert truth[0] == truth[1] and truth[0].is_file()
            assert {**after["workload"], "ground_truth": None} == {**before["workload"], "ground_truth": None}
        else:
            assert after[key] == before[key], key


def test_every_run_entry_comes_back_key_by_key(round_trip, tmp_path):
    """par-w4 (an MPI run: its start and end, no GPU) and an H100 run (its GPU model, PyTorch's profiled steps): every
    run entry of the manifest after export and import, the start and end (ns) and the GPU models among them (was:
    lost, qa-s20b #5), also in an export of one rank."""
    back, _ = round_trip
    _same_run_entries(PAR_W4, back)
    assert TraceStore.open(back).run["start_ns"] == TraceStore.open(PAR_W4).run["start_ns"]
    gpu = tmp_path / "gpu.json"
    for ranks, name in (([], "gpu"), (["--ranks", "1"], "gpu-1")):
        assert main(["export", str(GPU_RUN), *ranks, "--chrome", str(gpu), "--quiet", "--force"]) == 0
        assert main(["import", str(gpu), "--out", str(tmp_path / name), "--progress", "never", "--quiet"]) == 0
        _same_run_entries(GPU_RUN, tmp_path / name)
        run, original = TraceStore.open(tmp_path / name).run, TraceStore.open(GPU_RUN).run
        assert run["gpus"] == original["gpus"] and len(run["gpus"]) == 1
        assert (run["start_ns"], run["end_ns"]) == (original["start_ns"], original["end_ns"])


def test_run_entries_of_the_wrong_kind_are_named_not_restored_and_others_kept_as_they_are(round_trip, tmp_path,
                                                                                          capsys):
    """``otherData.run.gpus`` that is not a list of texts and ``start_ns`` that is not a time: named among the
    file's problems and left out; an entry no test knows (what a later ddltrace may record) kept as it is."""
    trace = json.loads((tmp_path / "par.json").read_text())
    trace["otherData"]["run"].update({"gpus": [3], "start_ns": "soon", "later_entry": {"a": [1, 2]}})
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(trace))
    capsys.readouterr()
    assert main(["import", str(edited), "--out", str(tmp_path / "edited"), "--progress", "never"]) == 0
    out = capsys.readouterr().out
    assert "otherData.run.gpus '[3]' is not a list of GPU models" in out
    assert "otherData.run.start_ns 'soon' is not a time" in out
    run = TraceStore.open(tmp_path / "edited").run
    assert "gpus" not in run and "start_ns" not in run and run["later_entry"] == {"a": [1, 2]}
    assert run["end_ns"] == TraceStore.open(PAR_W4).run["end_ns"]
