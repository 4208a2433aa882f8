"""QA s20b #2: 'report --model' drew a model fitted to another job (ps-sgd-quota's A: real compute, 1 epoch) beside a
series of ps-sgd's seq runs (emulated compute, 2 epochs), with that job's knee, without a word, where 'model fit'
refuses the same mix of stores. Now one line, exit 2, before the analysis, naming what differs, as the stores'
manifests record it."""

import json
from pathlib import Path

from ddltrace.cli import main

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
SEQ = [str(SAMPLES / "ps-sgd" / f"seq-w{w}" / "store") for w in (1, 2)]
QUOTA = [str(SAMPLES / "ps-sgd-quota" / f"A-compute-w{w}" / "store") for w in (1, 2)]


def _config(store: str) -> dict:
    return json.loads((Path(store) / "manifest.json").read_text())["workload"]["config"]


def test_a_model_of_another_job_is_refused_before_the_analysis(tmp_path, capsys):
    model = tmp_path / "other.json"
    assert main(["model", "fit", *QUOTA, "--out", str(model)]) == 0
    assert main(["model", "fit", *QUOTA, *SEQ]) == 2  # model fit refuses the mix: so does the report
    capsys.readouterr()
    out = tmp_path / "rep"
    assert main(["report", *SEQ, "--model", str(model), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "analysing" not in err[0] and not out.exists(), err
    theirs, mine = _config(SEQ[0]), _config(QUOTA[0])
    assert theirs["compute"] != mine["compute"] and theirs["epochs"] != mine["epochs"]
    assert f"{model}: fitted to another job than {SEQ[0]}'s (and 1 other store(s) given): " in err[0]
    assert f"compute {mine['compute']} (the model's) vs {theirs['compute']}" in err[0]
    assert f"epochs {float(mine['epochs']):g} (the model's) vs {float(theirs['epochs']):g}" in err[0]
    # a model written before it recorded the job's settings: its epochs still tell the jobs apart
    old = json.loads(model.read_text())
    del old["job_settings"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert main(["report", *SEQ, "--model", str(tmp_path / "old.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "epochs 1 (the model's) vs 2" in err and "compute" not in err
    # the series' own model is drawn beside it
    assert main(["model", "fit", *SEQ, "--out", str(tmp_path / "seq.json")]) == 0
    assert json.loads((tmp_path / "seq.json").read_text())["job_settings"]["compute"] == theirs["compute"]
    assert main(["report", *SEQ, "--model", str(tmp_path / "seq.json"), "--out", str(out), "--quiet"]) == 0
    assert "beside the fitted model (dashed)" in (out / "report.html").read_text()
