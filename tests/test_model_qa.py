"""Fixes from a QA sweep of the model commands (model fit / predict, optimize, calibrate --compare): each test
fails on the code before its fix."""

from __future__ import annotations

import json

import pytest
from test_models_commands import series  # noqa: F401  (the fixture: a synthetic scaling series and a profile)

from ddltrace.cli import main


@pytest.fixture(scope="module")
def model_file(series, tmp_path_factory):  # noqa: F811
    """A model fitted on the series (batch 64, w = 1, 2, 4, 16), as model.json."""
    out = tmp_path_factory.mktemp("model") / "model.json"
    stores = [str(series / f"run-b64-w{w}") for w in (1, 2, 4, 16)]
    assert main(["model", "fit", *stores, "--dnn", "mlp-2-10k-2", "--out", str(out)]) == 0
    return out


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("change, said", [
    (lambda m: m["knee"].update(batch=-64), "knee batch = -64"),
    (lambda m: m["knee"].update(batch=0), "knee batch = 0: must be > 0"),
    (lambda m: m["workload"].update(d=0), "workload d = 0: must be > 0"),
    (lambda m: m["workload"].update(s=0), "workload s = 0: the bytes per value must be one of 1, 2, 4, 8"),
    (lambda m: m["workload"].update(epochs=0), "workload epochs = 0: must be > 0"),
    (lambda m: m["measurements"][0].update(b=-1), "measurements[0].b = -1: must be > 0"),
    (lambda m: m.update(constants=[["c_p", 1]]), "'constants' must be an object"),
    (lambda m: m.update(workload="x"), "'workload' must be an object"),
    (lambda m: m.update(knee=[1]), "'knee' must be an object"),
])
def test_a_model_file_s_bad_workload_or_knee_batch_is_one_line_not_a_default(model_file, tmp_path, capsys, change,
                                                                             said):
    """QA: knee.batch = -64 raised ValueError with a traceback (exit 1); knee.batch, workload d or s = 0 were replaced
    by defaults unsaid; 'constants' as a list said 'dictionary update sequence element #0'. One line, exit 2."""
    model = json.loads(model_file.read_text())
    change(model)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(model))
    assert main(["model", "predict", str(bad), "--workers", "1,2"]) == 2
    line = _one_error(capsys)
    assert line.startswith(f"ddltrace: error: {bad}: ") and said in line, line
