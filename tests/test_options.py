"""Every numeric option of every verb is range-checked when parsed (ddltrace/options.py): NaN, the infinities and
values the code behind them cannot take are one usage line, exit 2, before any work starts."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

import pytest

from ddltrace.cli import build_parser, main

DDLTRACE = [sys.executable, "-m", "ddltrace"]
_NO_OVERRIDE = "-dac_override,-dac_read_search"


def cli(*args, timeout=60, prefix=()):
    return subprocess.run([*prefix, *DDLTRACE, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def numeric_options() -> list[tuple[str, argparse.Action]]:
    """(verb path, action) of every option of every verb whose value is a number."""
    found = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}".strip())
            elif action.type is not None and action.type is not str:
                found.append((path, action))

    walk(build_parser(), "")
    return found


def test_every_numeric_option_is_range_checked():
    options = numeric_options()
    assert len(options) >= 40  # run, probe, calibrate, import, model, optimize, plan, workload
    bare = [f"{verb} {action.option_strings[0]}" for verb, action in options if action.type in (int, float)]
    assert not bare, f"parsed by a bare int/float, unchecked: {bare}"
    for _, action in options:
        for text in ("nan", "inf", "-inf", "1e400"):
            with pytest.raises(argparse.ArgumentTypeError):
                action.type(text)
        if action.default is not None and not isinstance(action.default, str):
            assert action.type(repr(action.default)) == action.default  # the default passes its own check


def assert_usage_line(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("value, words", [
    ("nan", ["--sample-hz: nan is not a finite number (expected 0.01 to 1000 Hz)"]),
    ("inf", ["--sample-hz: inf is not a finite number"]),
    ("1e-300", ["--sample-hz: 1e-300 is out of range (expected 0.01 to 1000 Hz)"]),
])
def test_run_sample_rate_out_of_range_is_refused_before_the_job(tmp_path, value, words):
    marker = tmp_path / "the job ran"
    result = cli("run", "--sample-hz", value, "--out", tmp_path / "s", "--", "touch", marker)
    assert_usage_line(result, "ddltrace run: error: argument", *words)
    assert not marker.exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("option, value, words", [
    ("--max-clients", "10000000000", ["--max-clients: 10000000000 is out of range (expected 1 to 1024)"]),
    ("--idle-timeout", "nan", ["--idle-timeout: nan is not a finite number (expected 0.001 to 86400 s)"]),
    ("--idle-timeout", "inf", ["--idle-timeout: inf is not a finite number"]),
    ("--port", "70000", ["--port: 70000 is out of range (expected 0 to 65535)"]),
])
def test_probe_serve_limits_are_refused_when_parsed(option, value, words):
    try:
        result = cli("probe", "serve", "--port", "0", option, value, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"probe serve {option} {value} was accepted and served on")
    assert_usage_line(result, "ddltrace probe serve: error: argument", *words)


@pytest.mark.parametrize("argv, words", [
    (["import", "x.json", "--out", "s", "--jobs", "0"], ["--jobs: 0 is out of range"]),
    (["calibrate", "--disk-size", "-1"], ["--disk-size: -1 is out of range (expected 1 to 1048576 MiB)"]),
    (["calibrate", "--net-timeout", "nan"], ["--net-timeout: nan is not a finite number"]),
    (["optimize", "--dnn", "alexnet", "--profile", "p.json", "--machines", "4", "--samples", "inf"],
     ["--samples: inf is not a finite number"]),
    (["plan", "gpus", "--overhead-ratio", "1.5"], ["--overhead-ratio: 1.5 is out of range (expected 0 to 1)"]),
    (["plan", "placement", "--dnn", "alexnet", "--batch", "0", "--workers", "2"], ["--batch: 0 is out of range"]),
    (["model", "fit", "--threshold", "nan"],
     ["--threshold: nan is not a finite number (expected above 0 up to 1e+15)"]),
    (["workload", "ps-sgd", "--out", "o", "--lr", "nan"], ["--lr: nan is not a finite number"]),
    (["workload", "ps-sgd", "--out", "o", "--seed", "-1"], ["--seed: -1 is out of range"]),
])
def test_other_verbs_numeric_options(tmp_path, monkeypatch, capsys, argv, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
    for word in ["error: argument", *words]:
        assert word in err, err


def test_model_fix_value_must_be_finite(tmp_path):
    (tmp_path / "m.csv").write_text("w,b,phase_s\n1,64,10\n2,64,6\n4,64,4\n")
    result = subprocess.run([*DDLTRACE, "model", "fit", "--csv", "m.csv", "--fix", "c_p=nan"], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)
    assert_usage_line(result, "ddltrace: error: --fix 'c_p=nan': nan is not a finite number")


def test_samplers_refuse_rates_that_would_kill_or_spin_them():
    from ddltrace.collectors.gpu_sampler import GpuSampler
    from ddltrace.collectors.system_sampler import SystemSampler

    for hz in (float("nan"), float("inf"), 1e-300, 0.0, -1.0, 1e6):
        with pytest.raises(ValueError, match="sample rate"):
            SystemSampler(hz)
        with pytest.raises(ValueError, match="sample rate"):
            GpuSampler(hz)


def test_probe_server_refuses_limits_its_threads_cannot_keep():
    from ddltrace.collectors.microbench.network import ProbeServer

    for clients in (0, 10**10, 2.5):
        with pytest.raises(ValueError, match="max_clients"):
            ProbeServer(port=0, max_clients=clients)
    for seconds in (float("nan"), float("inf"), 0.0, 1e300):
        with pytest.raises(ValueError, match="idle_timeout"):
            ProbeServer(port=0, idle_timeout=seconds)


def test_run_into_a_read_only_folder_is_one_line_before_the_job(tmp_path):
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: a folder's mode cannot be made to apply")
    prefix = ["setpriv", f"--inh-caps={_NO_OVERRIDE}", f"--bounding-set={_NO_OVERRIDE}"] if os.geteuid() == 0 else []
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    marker = tmp_path / "the job ran"
    try:
        result = cli("run", "--out", locked / "store", "--", "touch", marker, prefix=prefix)
    finally:
        locked.chmod(0o755)
    assert_usage_line(result, "ddltrace: error:", f"{locked}: cannot write the store there (Permission denied)")
    assert not marker.exists() and not (locked / "store").exists()


@pytest.mark.parametrize("argv, says", [
    (["--launcher", 'mpiexec -n 2 "unbalanced', "--", "true"],
     "--launcher 'mpiexec -n 2 \"unbalanced': cannot be split into words (No closing quotation)"),
    (["--launcher", " ", "--", "true"], "--launcher: empty"),
    (["--np", "2", "--", "no-such-command-here"], "no-such-command-here: no such command"),
    (["--", "no-such-command-here"], "no-such-command-here: no such command"),
    (["--steps", "1-2", "--", "true"], "--steps: only with --framework"),
    (["--pyspy-rate", "50", "--", "true"], "--pyspy-rate: only with --pyspy"),
    (["--launcher-addr", "10.0.0.1", "--", "true"], "--launcher-addr: only with --launcher"),
    (["--out", "", "--", "true"], "--out: empty"),
])
def test_run_refuses_what_would_fail_or_be_ignored_before_the_job(argv, says, capsys, tmp_path, monkeypatch):
    """QA of 2026-11-26: a launcher with an unbalanced quote was a ValueError traceback; a command that does not
    exist ran under mpiexec (its errors, an empty store, exit 1); options of another option were taken and ignored;
    an empty --out wrote to the default name. Each is one line, exit 2, and no job, no store."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert list(tmp_path.iterdir()) == []
