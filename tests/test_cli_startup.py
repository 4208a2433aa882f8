"""The CLI starts light: ``ddltrace --help``, ``--version`` and every verb's (and sub-verb's) ``--help`` import
none of the heavy libraries (they load where the work is done), and the light tables the verbs' help is built from
agree with the modules they stand in for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ddltrace.cli import build_parser

HEAVY = ("pandas", "pyarrow", "scipy", "matplotlib", "numpy")

# In a fresh interpreter: run main() on each command line (argparse exits after printing help or the version),
# then report the exit codes, how much text each printed, and which heavy libraries are in sys.modules.
_CHILD = r"""
import contextlib, io, json, sys
from ddltrace.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv)
            code = None
        except SystemExit as exc:
            code = exc.code
    results.append({"argv": argv, "code": code, "chars": len(out.getvalue())})
heavy = sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)
print(json.dumps({"results": results, "heavy": heavy}))
"""


def _help_command_lines() -> list[list[str]]:
    """``--help``, ``--version``, and ``--help`` of every verb and of every verb's sub-verbs."""
    lines = [["--help"], ["--version"]]
    verbs = build_parser()._subparsers._group_actions[0].choices
    for verb, parser in verbs.items():
        lines.append([verb, "--help"])
        for action in parser._actions:
            if hasattr(action, "choices") and isinstance(action.choices, dict):  # a verb's sub-verbs
                lines.extend([verb, sub, "--help"] for sub in action.choices)
    return lines


def test_help_and_version_import_no_heavy_library():
    lines = _help_command_lines()
    assert ["import", "--help"] in lines and ["model", "fit", "--help"] in lines
    child = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(lines), json.dumps(HEAVY)],
                           capture_output=True, text=True, check=True)
    report = json.loads(child.stdout.strip().splitlines()[-1])
    for result in report["results"]:  # each really printed its help (or the version) and exited 0
        assert result["code"] == 0 and result["chars"] > 0, result
    assert report["heavy"] == [], f"imported by the CLI's help: {report['heavy']}"


def test_version_imports_no_heavy_library_in_importtime():
    """The installed entry point, as a user runs it: python -X importtime lists every module it loads."""
    child = subprocess.run([sys.executable, "-X", "importtime", "-m", "ddltrace", "--version"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.startswith("ddltrace ")
    loaded = {line.rsplit("|", 1)[-1].strip() for line in child.stderr.splitlines() if line.startswith("import time")}
    assert "ddltrace.cli" in loaded
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}


def test_import_format_table_matches_the_registry():
    from ddltrace.collectors.importers import REGISTRY
    from ddltrace.commands.import_trace import FORMATS

    assert dict(FORMATS) == {i.name: i.description for i in REGISTRY}
    assert len(dict(FORMATS)) == len(FORMATS)


def test_light_constants_match_their_modules():
    from ddltrace.analyses import phases
    from ddltrace.commands import analyze, model, optimize, plan
    from ddltrace.models import hashemi, ralp, yan

    assert analyze.PHASES == phases.PHASES
    assert model.STORAGE_KINDS == hashemi.STORAGE_KINDS
    assert optimize.READ_BOUNDS == yan.READ_BOUNDS
    assert plan.DEFAULT_K == ralp.DEFAULT_K


_IMPORT_CHILD = r"""
import json, sys
from ddltrace.cli import main
code = main(["import", sys.argv[1], "--out", sys.argv[2]])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _write_kineto(path) -> None:
    """A one-rank Kineto trace: a CPU op and the kernel it launched (device 0, stream 7)."""
    path.write_text(json.dumps({
        "schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12, "dur": 3,
             "args": {"device": 0, "stream": 7, "correlation": 1}}]}))


def test_a_verb_run_loads_only_its_own_module_and_what_its_work_needs(tmp_path):
    """``ddltrace import`` of a Kineto file: no other verb's module (the verb ``import`` lives in ``import_trace``:
    the lookup by name once missed it and registered all 14 verbs, analyses and models included), and none of
    the libraries only other formats or analyses need."""
    trace = tmp_path / "rank0.pt.trace.json"
    _write_kineto(trace)
    child = subprocess.run([sys.executable, "-c", _IMPORT_CHILD, str(trace), str(tmp_path / "store")],
                           capture_output=True, text=True, check=True)
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["code"] == 0 and (tmp_path / "store" / "manifest.json").exists()
    modules = set(report["modules"])
    assert {m for m in modules if m.startswith("ddltrace.commands.")} == {"ddltrace.commands.import_trace"}
    unneeded = {"pandas", "scipy", "matplotlib", "ddltrace.analyses", "ddltrace.models", "xml.etree.ElementTree",
                "sqlite3", "numpy.ma"}
    assert modules & unneeded == set()



_INFO_CHILD = r"""
import contextlib, io, json, sys
from ddltrace.cli import main
printed = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    printed.append({"code": code, "out": out.getvalue()})
heavy = sorted(m for m in ("pandas", "scipy", "matplotlib") if m in sys.modules)
print(json.dumps({"printed": printed, "heavy": heavy}))
"""


def test_info_reads_a_store_without_pandas(tmp_path, capsys):
    """``ddltrace info`` (text and --json) of a real MPI run's store (machine counters: a row per node; clock offsets)
    and of a Kineto trace's (a device's lanes: host and device rows) reads the manifest and the Parquet files through
    pyarrow and NumPy: pandas (0.2 s of its 0.4-0.6 s) is never imported, and it prints what the in-process command
    prints."""
    from shared_data import REPO

    from ddltrace.cli import main

    trace = tmp_path / "rank0.pt.trace.json"
    _write_kineto(trace)
    assert main(["import", str(trace), "--out", str(tmp_path / "kineto")]) == 0
    run = REPO / "sample_traces" / "ps-sgd" / "par-w4" / "store"
    lines = [[*verb, str(store)] for store in (run, tmp_path / "kineto") for verb in (["info"], ["info", "--json"])]
    child = subprocess.run([sys.executable, "-c", _INFO_CHILD, json.dumps(lines)], capture_output=True, text=True,
                           check=True)
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["heavy"] == [], f"imported by info: {report['heavy']}"
    capsys.readouterr()
    for argv, printed in zip(lines, report["printed"], strict=True):
        assert main(argv) == 0 and printed == {"code": 0, "out": capsys.readouterr().out}
    run_text, kineto_text = report["printed"][0]["out"], report["printed"][2]["out"]
    assert "per node (machine counters" in run_text and "clocks      5 rank offset(s)" in run_text
    assert [line.split()[:2] for line in kineto_text.splitlines() if line.split()[:1] == ["0"]] == [
        ["0", "host"], ["0", "device"]]


def _command(tmp_path, before: str, *argv: str) -> subprocess.CompletedProcess:
    """``ddltrace ARGV`` through :func:`ddltrace.cli.command` in a fresh interpreter, after ``before`` ran."""
    code = (f"import sys\n{before}\nfrom ddltrace.cli import command\n"
            f"sys.argv = ['ddltrace', *{list(argv)!r}]\ncommand()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_the_command_exits_after_its_exit_handlers_ran_and_its_output_was_flushed(tmp_path):
    """The command ends without Python's teardown (os._exit), but only after the exit handlers (a quota's cgroup
    removal, temporary folders) ran and the output was flushed: a handler's file is written, the whole output of
    ``import`` (printed through a pipe, so block-buffered) arrives, and the exit code is the verb's."""
    from shared_data import REPO

    trace = REPO / "tests" / "data" / "torch_gloo" / "rank0.pt.trace.json.gz"
    done = _command(tmp_path, "import atexit; atexit.register(lambda: open('handler-ran', 'w').write('yes'))",
                    "import", str(trace), "--out", "s", "--progress", "never")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "handler-ran").read_text() == "yes"
    assert done.stdout.startswith("imported 1 file(s)") and "clock:" in done.stdout.splitlines()[-1]
    bad = _command(tmp_path, "", "info", "no-such-store")
    assert bad.returncode == 2 and bad.stderr.startswith("ddltrace: error:")


def test_the_command_waits_for_a_thread_still_running(tmp_path):
    """A thread still running when the verb returns is waited for (Python's own exit), not cut off (it sleeps 1.5
    s: the verb returns in about 0.3 s)."""
    done = _command(tmp_path, "import threading, time\n"
                    "threading.Thread(target=lambda: (time.sleep(1.5), open('thread-done', 'w').write('yes'))).start()",
                    "info", "no-such-store")  # (a verb that returns: --version exits inside argparse)
    assert done.returncode == 2 and done.stderr.startswith("ddltrace: error:")
    assert (tmp_path / "thread-done").read_text() == "yes"


def test_output_that_cannot_be_written_is_an_error_not_a_silent_success(tmp_path):
    """stdout on a full disk (/dev/full): the final flush fails, and the command says so and exits 120 (Python's
    own code for it), never 0 with the output cut."""
    import os

    from shared_data import REPO

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    code = ("import sys\nfrom ddltrace.cli import command\n"
            f"sys.argv = ['ddltrace', 'info', {str(REPO / 'sample_traces' / 'ps-sgd' / 'seq-w2' / 'store')!r}]\n"
            "command()")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # (block-buffered: written at the end)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-c", code], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 120, done.stderr
    assert "the output could not be written" in done.stderr


def test_output_that_fails_during_the_command_is_one_line_not_a_traceback(tmp_path):
    """stdout on a full disk, written to while the command runs (analyze --json writes more than a buffer): the
    command finishes, says once that the output could not be written and exits 120 (QA: a traceback from the write)."""
    import os

    from shared_data import REPO

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    store = REPO / "sample_traces" / "ps-sgd" / "seq-w2" / "store"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "ddltrace", "analyze", str(store), "--json"], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 120 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("the output could not be written (No space left on device)") == 1
