"""The ps-sgd job's configuration in a store's manifest (collectors/workloads/ps_sgd_config.py): the committed stores
of benchmarks/new_hardware.py's runs (sample_traces/ps-sgd-disk, ps-sgd-quota, made by a plain ``ddltrace run`` that
did not record it) carry the one their command line gives, equal to the ground truth the job wrote beside them, and
read as the job's w with one server; a store that records neither configuration nor roles says how w was got.
The real run that records it: tests/test_new_hardware.py::test_a_wrapped_run_of_the_job_records_its_configuration."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddltrace.analyses.detect_ps_saturation import server_load
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.collectors.workloads import ps_sgd_config
from ddltrace.store import TraceStore

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"
KEPT = sorted([*(SAMPLES / "ps-sgd-disk").glob("*/store"), *(SAMPLES / "ps-sgd-quota").glob("*/store")])


def _truth(store: Path) -> dict:
    return json.loads((store.parent / "ground_truth.json").read_text())


def test_kept_stores_hold_the_configuration_their_command_gives_and_their_ground_truth_wrote():
    assert len(KEPT) == 9
    for store in KEPT:
        manifest = json.loads((store / "manifest.json").read_text())
        args = ps_sgd_config.job_arguments(manifest["run"]["command"])
        derived = ps_sgd_config.run_config(args, manifest["run"]["world_size"])
        config = manifest["workload"]["config"]
        assert config == derived, store
        written = _truth(store)["config"]  # what the job itself wrote: every value the same
        assert {k: config[k] for k in written} == written, store
        assert manifest["workload"]["ground_truth"] == "../ground_truth.json"
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import annotate_workload_stores
    finally:
        sys.path.remove(str(REPO / "scripts"))
    assert annotate_workload_stores.main(["--check"]) == 0  # every sample store of the job has it


def test_the_disk_series_reads_w_1_2_4_with_one_server_and_its_servers_busy_fraction():
    """Before: the w = 1 store read as two workers and no server (a 2-rank run shows no star), the series as
    w = 2, 2, 4; the server's busy fraction counted its blocking MPI_Probe (--server-receive probe) as work
    (99.6 % at w = 1 against the job's 6.8 %)."""
    for w in (1, 2, 4):
        store = SAMPLES / "ps-sgd-disk" / f"A-cold-init-w{w}" / "store"
        run = analyze_store(store)
        truth = _truth(store)
        assert run.workers == truth["config"]["workers"] == w
        assert run.server_ranks == [truth["config"]["server_rank"]] == [0]
        assert run.worker_ranks == list(range(1, w + 1))
        assert run.workers_inferred is None
        assert server_load(run, 0)["busy_fraction"] == pytest.approx(truth["server"]["busy_fraction"], abs=0.02)


def _bare(tmp_path: Path, name: str) -> Path:
    """A copy of a kept store with neither the job's configuration nor its command line."""
    out = tmp_path / name
    shutil.copytree(SAMPLES / "ps-sgd-disk" / name / "store", out)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["workload"]
    for key in ("command", "launch"):
        del manifest["run"][key]
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_a_store_without_configuration_or_roles_says_how_w_was_got(tmp_path, capsys):
    two, three = _bare(tmp_path, "A-cold-init-w1"), _bare(tmp_path, "A-cold-init-w2")
    assert main(["analyze", str(two), str(three)]) == 0
    out = capsys.readouterr().out
    assert (f"Breakdown of {two} (w = 2 workers, 2 ranks; shares of the whole run)\n"
            "  w and roles unknown: every rank counted as a worker (no job configuration or roles in the manifest; "
            "fewer than three ranks exchange point-to-point messages in their steady states: no star to see)\n") in out
    assert (f"Breakdown of {three} (w = 2 workers, 3 ranks; shares of the whole run)\n"
            "  w and roles inferred: the ranks other than the server, rank 0, the centre of a star of steady-state "
            "messages (no job configuration or roles in the manifest)\n") in out
    assert main(["analyze", str(two), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["stores"]
    assert doc["workers"] == 2 and doc["workers_inferred"].startswith("w and roles unknown")
    # the kept stores, with the job's configuration, say nothing of the kind
    assert main(["analyze", str(SAMPLES / "ps-sgd-disk" / "A-cold-init-w1" / "store")]) == 0
    out = capsys.readouterr().out
    assert "w = 1 worker, 2 ranks" in out and "w and roles" not in out
    # info names the job's workers where the manifest has them, and prints no w where it does not
    assert main(["info", str(SAMPLES / "ps-sgd-disk" / "A-cold-init-w1" / "store")]) == 0
    assert ("job         ps-sgd: w = 1 worker, server rank 0 (the job's configuration), async, emulated compute\n"
            in capsys.readouterr().out)
    assert main(["info", str(two)]) == 0
    assert "job  " not in capsys.readouterr().out
    # model fit says which runs' w it inferred (the star of a 2-rank run: either rank; its fit takes rank 0)
    four = _bare(tmp_path, "A-cold-init-w4")
    assert main(["model", "fit", str(two), str(three), str(four), "--n-w", "40000", "--batch", "64",
                 "--samples", "8192", "--epochs", "1"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if " w = " in line]
    assert notes == [f"  - {store}: w = {w:g} inferred: rank 0 is the server, the centre of a star of messages (no "
                     "job configuration or roles in the manifest; give --servers N)"
                     for store, w in ((two, 1), (three, 2), (four, 4))]


def test_the_job_alone_in_one_process_records_one_worker_and_no_server(tmp_path):
    """``ddltrace run`` with no ``--np`` (one process, no MPI launcher): the job runs alone, w = 1 with no server
    (it updates its own weights), and the store records that configuration, as its ground truth does (it had
    no workload entry: only MPI runs recorded one), so that analyze reads w and roles instead of guessing."""
    store = tmp_path / "store"
    done = subprocess.run([str(Path(sys.executable).parent / "ddltrace"), "run", "--no-progress", "--out", str(store),
                           "--", sys.executable, "-m", ps_sgd_config.JOB_MODULE, "--out", str(tmp_path / "job"),
                           "--samples", "512", "--epochs", "1", "--batch", "64", "--hidden", "10", "--compute",
                           "emulated", "--sample-time", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    truth = json.loads((tmp_path / "job" / "ground_truth.json").read_text())
    opened = TraceStore.open(store)
    assert opened.run["world_size"] == 1 and opened.manifest["workload"]["config"] == truth["config"]
    assert (truth["config"]["workers"], truth["config"]["server_rank"]) == (1, None)
    assert opened.manifest["workload"]["ground_truth"] == "../job/ground_truth.json"
    run = analyze_store(opened)
    assert (run.workers, run.server_ranks, run.worker_ranks, run.workers_inferred) == (1, [], [0], None)
