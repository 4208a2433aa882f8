"""Outputs that would destroy inputs or other files are refused in one line, exit 2, nothing touched (QA of
2026-11-26: `recover --out` inside the record folder deleted the store it had just written with the records;
`export --chrome STORE/manifest.json --force`, `calibrate --out STORE/manifest.json` and `model fit --out` onto an
input store's manifest destroyed the store; `calibrate` and `model fit` replaced any file)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ddltrace.cli import main

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"


def _refused(capsys, argv, says: str) -> None:
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


@pytest.fixture
def store(tmp_path) -> Path:
    copy = tmp_path / "run" / "store"
    shutil.copytree(SAMPLES / "seq-w1" / "store", copy)
    return copy


def _intact(store: Path, manifest: bytes) -> None:
    assert (store / "manifest.json").read_bytes() == manifest
    assert main(["info", str(store)]) == 0


def test_export_into_the_store_it_reads_is_refused(store, capsys):
    manifest = (store / "manifest.json").read_bytes()
    for target in (store / "manifest.json", store / "timeline" / "x.json", store / "out.json"):
        _refused(capsys, ["export", store, "--chrome", target, "--force"], f"inside {store}, the trace store")
    assert not (store / "out.json").exists() and not (store / "timeline" / "x.json").exists()
    _intact(store, manifest)


def test_calibrate_out_onto_a_store_or_another_file_is_refused_before_measuring(store, tmp_path, capsys):
    manifest = (store / "manifest.json").read_bytes()
    _refused(capsys, ["calibrate", "--quick", "--only", "mem", "--out", store / "manifest.json"],
             f"inside the trace store {store}")
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}')
    _refused(capsys, ["calibrate", "--quick", "--only", "mem", "--out", notes],
             "exists and is not a hardware profile")
    assert notes.read_text() == '{"mine": 1}'
    _intact(store, manifest)


def test_model_fit_out_onto_an_input_or_another_file_is_refused_and_a_model_is_replaced(tmp_path, capsys):
    stores = []
    for w in (1, 2, 4):
        stores.append(tmp_path / f"w{w}" / "store")
        shutil.copytree(SAMPLES / f"par-w{w}" / "store", stores[-1])
    manifest = (stores[-1] / "manifest.json").read_bytes()
    _refused(capsys, ["model", "fit", *stores, "--out", stores[-1] / "manifest.json"],
             f"inside the trace store {stores[-1]}")
    _intact(stores[-1], manifest)
    essay = tmp_path / "essay.json"
    essay.write_text("[1, 2]")
    _refused(capsys, ["model", "fit", *stores, "--out", essay], "exists and is not a fitted model")
    assert essay.read_text() == "[1, 2]"
    model = tmp_path / "project" / "model.json"  # a folder of the user's with a "timeline" folder is not a store
    (tmp_path / "project" / "timeline").mkdir(parents=True)
    for _ in range(2):  # a model it wrote is replaced
        assert main(["model", "fit", *map(str, stores), "--out", str(model)]) == 0
        assert json.loads(model.read_text())["model"]
    capsys.readouterr()


def test_recover_into_its_own_record_folder_is_refused(tmp_path, capsys):
    records = tmp_path / "ddltrace-records-x"
    records.mkdir()
    (records / "job.json").write_text("{}")
    _refused(capsys, ["recover", records, "--out", records / "inside"], f"inside {records}, the record folder")
    assert (records / "job.json").exists() and not (records / "inside").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    _refused(capsys, ["recover", records, "--out", taken], f"{taken}: already exists (choose another --out, or "
             "remove it yourself)")
