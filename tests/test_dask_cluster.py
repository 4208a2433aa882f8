"""``--scheduler ADDRESS``: the per-file (import) and per-rank (analyze, report) work as tasks on a real Dask
distributed cluster (a ``dask scheduler`` and two ``dask worker`` processes on localhost, tests/dask_cluster.py),
giving what the local run gives; a worker killed with SIGKILL while it holds a task changes nothing; a damaged
rank is named and the others reported."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")
from dask_cluster import LocalDaskCluster  # noqa: E402
from mixed_imports import assert_same_stores, mixed_folder  # noqa: E402

import ddltrace
from ddltrace.cli import main
from ddltrace.store import TraceStore

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalDaskCluster(tmp_path_factory.mktemp("dask")) as running:
        yield running


def test_import_on_the_cluster_gives_the_store_of_the_local_import(cluster, tmp_path, capsys, monkeypatch):
    """Files of two formats and a broken one, named by a relative path and read by the cluster's tasks (which are
    given absolute paths): the same ranks, rows, manifest notes and printed summary as --jobs 1 (in this process);
    the broken file's problem names it as the command line did."""
    mixed_folder(tmp_path / "in")
    monkeypatch.chdir(tmp_path)
    printed, stores = {}, {}
    for how in (["--jobs", "1"], ["--scheduler", cluster.address, "--progress", "always"]):
        out = tmp_path / how[0].strip("-")
        assert main(["import", "in", "--out", str(out), *how]) == 0
        captured = capsys.readouterr()
        printed[how[0]] = [line for line in captured.out.splitlines() if not line.startswith("imported")]
        stores[how[0]] = TraceStore.open(out)
    assert "files done on 2 workers of the Dask cluster at " + cluster.address in captured.err
    assert_same_stores(stores["--jobs"], stores["--scheduler"])
    assert printed["--jobs"] == printed["--scheduler"]
    broken = [line for line in printed["--scheduler"] if "broken.pt.trace.json" in line and "problem" in line]
    assert broken and str(tmp_path) not in "".join(printed["--scheduler"])


def test_a_scheduler_that_does_not_answer_is_one_line(tmp_path, capsys, monkeypatch):
    """No scheduler at the address: exit 2, one line naming the address, no store left behind (after 1 s of
    trying to connect here, CONNECT_TIMEOUT_S otherwise)."""
    import socket

    from ddltrace import executor

    monkeypatch.setattr(executor, "CONNECT_TIMEOUT_S", 1)

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "store"
    rc = main(["import", str(DATA / "torch_gloo"), "--out", str(out), "--scheduler", f"tcp://127.0.0.1:{port}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"--scheduler tcp://127.0.0.1:{port}: no Dask scheduler answers" in err[0]
    assert not out.exists() and not list(tmp_path.glob(".store.*"))


def test_the_cli_imports_dask_only_with_scheduler():
    """``import --help`` and a local import load no Dask module (the CLI starts light)."""
    child = subprocess.run([sys.executable, "-c", "import sys; from ddltrace.cli import main\n"
                            "try:\n    main(['import', '--help'])\nexcept SystemExit:\n    pass\n"
                            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip().splitlines()[-1] == "[]"


# -- analyze and report ----------------------------------------------------------------------------------------

MS = 1_000_000


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A 7-rank parameter-server run with a straggler and a sequential start (findings to compare), and a copy
    of it whose rank 2 file is not Parquet."""
    from ddltrace.analyses.synthetic import write_ps_store

    root = tmp_path_factory.mktemp("stores")
    write_ps_store(root / "ps", workers=6, steps=12, init="sequential", read_ns=20 * MS, straggler=3, seed=4)
    shutil.copytree(root / "ps", root / "damaged")
    (root / "damaged" / "timeline" / "rank-00002.parquet").write_bytes(b"not parquet at all")
    return root


def analyze(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["analyze", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_analyze_on_the_cluster_gives_the_findings_and_breakdown_of_the_local_run(cluster, stores, capsys):
    """Text and JSON, byte for byte: the findings (a straggler, a sequential start), the breakdown of every rank,
    the wait states; progress on stderr counts the ranks and events read (the store's rows) and names the
    cluster's two workers."""
    events = len(TraceStore.open(stores / "ps").timeline())
    for form in ([], ["--json"]):
        rc, local, _ = analyze(capsys, stores / "ps", *form)
        assert rc == 0
        rc, remote, err = analyze(capsys, stores / "ps", "--scheduler", cluster.address, *form)
        assert rc == 0 and remote == local
        assert f"7 of 7 ranks read, {events:,} events" in err
        assert f"on 2 workers of the Dask cluster at {cluster.address}" in err
    findings = {f["id"] for f in json.loads(remote)["findings"]}
    assert {"straggler", "sequential_init"} <= findings, findings


def test_a_damaged_rank_is_named_and_the_others_reported_on_the_cluster(cluster, stores, capsys):
    """Rank 2's file is not Parquet: the cluster's run names it (file and problem) and reports the six others,
    as the local run does."""
    rc, local, _ = analyze(capsys, stores / "damaged", "--json")
    rc2, remote, err = analyze(capsys, stores / "damaged", "--json", "--scheduler", cluster.address)
    assert rc == rc2 == 0 and remote == local
    result = json.loads(remote)
    missing = result["stores"][0]["missing_ranks"]
    assert [m["rank"] for m in missing] == [2]
    assert "rank-00002.parquet: corrupt Parquet file" in missing[0]["reason"]
    assert [r["rank"] for r in result["stores"][0]["breakdown_ns"]] == [0, 1, 3, 4, 5, 6]
    assert "rank-00002.parquet: corrupt Parquet file" in err  # the warning, on stderr
    rc, text, _ = analyze(capsys, stores / "damaged", "--scheduler", cluster.address)
    assert "Missing ranks in" in text and "rank 2 (" in text


def test_report_on_the_cluster_gives_the_findings_of_the_local_report(cluster, stores, tmp_path, capsys):
    for how in (["--jobs", "1"], ["--scheduler", cluster.address]):
        assert main(["report", str(stores / "ps"), "--out", str(tmp_path / how[0].strip("-")), *how]) == 0
    err = capsys.readouterr().err
    assert f"on 2 workers of the Dask cluster at {cluster.address}" in err
    local, remote = (json.loads((tmp_path / name / "findings.json").read_text()) for name in ("jobs", "scheduler"))
    local.pop("generated", None), remote.pop("generated", None)
    assert remote == local and remote["findings"]


# -- workers that die ------------------------------------------------------------------------------------------

#: Seconds each task waits before it reads its rank (ddltrace.executor's test hook), so that a worker is killed
#: while it holds one.
TASK_DELAY_S = 0.5


@pytest.fixture(scope="module")
def slow_cluster(tmp_path_factory):
    """Four workers whose tasks each wait TASK_DELAY_S first (the env var is the workers', not this process's); the
    tests below kill one each."""
    from ddltrace.executor import TEST_DELAY_ENV

    with LocalDaskCluster(tmp_path_factory.mktemp("dask-slow"), workers=4,
                          env={TEST_DELAY_ENV: str(TASK_DELAY_S)}) as running:
        yield running


def _run_killing_a_worker(cluster, *argv: str) -> tuple[str, str, str]:
    """``ddltrace ARGV --scheduler`` in its own process; once the scheduler says a worker holds a task, that worker
    is sent SIGKILL. Stdout, stderr, and the dead worker's address."""
    child = subprocess.Popen([sys.executable, "-m", "ddltrace", *argv, "--scheduler", cluster.address],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while (busy := cluster.busy_worker()) is None:
            assert child.poll() is None, "analyze ended before any worker held a task"
            time.sleep(0.05)
        name, address = busy
        assert cluster.kill(name) == -signal.SIGKILL
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    return out, err, address


def _analyze_killing_a_worker(cluster, store: Path) -> tuple[dict, str, str]:
    out, err, address = _run_killing_a_worker(cluster, "analyze", str(store), "--json")
    return json.loads(out), err, address


def _no_retries(cluster) -> None:
    """The scheduler's allowed-failures set to 0: the first death of a worker gives its tasks up."""

    def no_retries(dask_scheduler):  # nested: pickled by value, the scheduler cannot import this module
        dask_scheduler.allowed_failures = 0

    cluster.client.run_on_scheduler(no_retries)


def _differences(remote: dict, local: dict) -> str:
    """The items of two ``analyze --json`` results that differ, in full: of a list, each entry that differs."""
    from itertools import zip_longest

    lines = []
    for key in sorted(remote.keys() | local.keys()):
        a, b = remote.get(key), local.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            lines += [f"{key}[{i}]: on the cluster {json.dumps(x)}, locally {json.dumps(y)}"
                      for i, (x, y) in enumerate(zip_longest(a, b)) if x != y]
        else:
            lines.append(f"{key}: on the cluster {json.dumps(a)}, locally {json.dumps(b)}")
    return "\n".join(lines)


def test_a_worker_killed_while_it_holds_a_task_changes_nothing(slow_cluster, stores, capsys):
    """The dead worker's tasks are run again on the others (the scheduler's doing): the findings, breakdown,
    wait states, ... equal the local run's, and the last progress line of the ranks read counts the workers left."""
    rc, local, _ = analyze(capsys, stores / "ps", "--json")
    result, err, _ = _analyze_killing_a_worker(slow_cluster, stores / "ps")
    assert result == json.loads(local), _differences(result, json.loads(local))
    alive = sum(process.poll() is None for process in slow_cluster.workers.values())
    read = [line for line in err.strip().splitlines() if " ranks read" in line]
    assert read[-1].endswith(f"on {alive} workers of the Dask cluster at {slow_cluster.address}"), read


def test_a_rank_whose_task_the_cluster_gives_up_is_named_and_the_rest_reported(slow_cluster, stores, capsys):
    """With the scheduler's allowed-failures at 0, the first worker death gives its tasks up (KilledWorker): those
    ranks are named as unreadable, with why, and every other rank's breakdown is the local run's."""
    _no_retries(slow_cluster)
    rc, local, _ = analyze(capsys, stores / "ps", "--json")
    result, err, killed = _analyze_killing_a_worker(slow_cluster, stores / "ps")
    missing = result["stores"][0]["missing_ranks"]
    assert 1 <= len(missing) < 7  # the dead worker's tasks (it held one or two), not the others
    for m in missing:
        assert f"rank {m['rank']}: its task was given up by the Dask scheduler: the 1 worker that ran it died " \
               f"while running it (the last {killed};" in m["reason"] and m["reason"] in err
    given_up = {m["rank"] for m in missing}
    expected = [row for row in json.loads(local)["stores"][0]["breakdown_ns"] if row["rank"] not in given_up]
    assert result["stores"][0]["breakdown_ns"] == expected and len(expected) == 7 - len(given_up)


def test_a_file_whose_task_the_cluster_gives_up_is_named_and_the_rest_imported(slow_cluster, tmp_path):
    """import --scheduler with allowed-failures 0, a worker killed while it reads: the files it held are named
    among the problems (unreadable, with the dead worker), and the store holds the other files' rows exactly as a
    local import of those files alone gives them."""
    _no_retries(slow_cluster)
    folder = tmp_path / "in"
    shutil.copytree(DATA / "torch_gloo", folder / "torch")
    shutil.copytree(DATA / "mxnet_dist_sync", folder / "mxnet")
    out, _, killed = _run_killing_a_worker(slow_cluster, "import", str(folder), "--out", str(tmp_path / "remote"))
    lines = out.splitlines()
    given_up = [lines[i - 2].split()[0] for i, line in enumerate(lines)
                if "problem:" in line and f"the task reading it was given up by the Dask scheduler: the 1 worker "
                                          f"that ran it died while running it (the last {killed};" in line]
    assert 1 <= len(given_up) < 4, out
    kept = tmp_path / "kept"
    for path in sorted(folder.rglob("*.gz")):
        if str(path) not in given_up:
            (kept / path.relative_to(folder)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, kept / path.relative_to(folder))
    assert main(["import", str(kept), "--out", str(tmp_path / "local"), "--jobs", "1"]) == 0
    remote, local = TraceStore.open(tmp_path / "remote"), TraceStore.open(tmp_path / "local")
    assert remote.ranks == local.ranks
    for rank in local.ranks:
        assert remote.timeline([rank]).equals(local.timeline([rank])), rank


def test_a_scheduler_lost_mid_run_is_one_line(tmp_path):
    """The scheduler SIGKILLed while a worker holds a task of ``analyze --scheduler``: exit 2 and one line naming
    the address and what happened, no traceback."""
    from ddltrace.analyses.synthetic import write_ps_store
    from ddltrace.executor import TEST_DELAY_ENV

    write_ps_store(tmp_path / "ps", workers=2, steps=4)
    with LocalDaskCluster(tmp_path / "cluster", workers=1, env={TEST_DELAY_ENV: str(TASK_DELAY_S)}) as cluster:
        child = subprocess.Popen([sys.executable, "-m", "ddltrace", "analyze", str(tmp_path / "ps"), "--scheduler",
                                  cluster.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            while cluster.busy_worker() is None:
                assert child.poll() is None, "analyze ended before any worker held a task"
                time.sleep(0.05)
            cluster.scheduler.send_signal(signal.SIGKILL)
            out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    lines = [line for line in err.splitlines() if not line.startswith("ddltrace analyze: ")]  # progress lines
    assert child.returncode == 2 and out == "", err[-2000:]  # a traceback where it is not one line
    assert lines == [f"ddltrace: error: --scheduler {cluster.address}: the connection to the Dask scheduler was lost "
                     "while the tasks ran; run the command again once the scheduler answers"]


def _analyze_with_a_worker_seeing(path, tmp_path, stores):
    """``analyze`` of the ps store on a one-worker cluster whose worker has ``path`` first on its PYTHONPATH: the
    finished command, the cluster (closed) and the worker's address."""
    with LocalDaskCluster(tmp_path / "cluster", workers=1, env={"PYTHONPATH": str(path)}) as cluster:
        child = subprocess.run([sys.executable, "-m", "ddltrace", "analyze", str(stores / "ps"), "--scheduler",
                                cluster.address], capture_output=True, text=True, timeout=120)
        worker = next(iter(cluster.client.scheduler_info()["workers"]))
    return child, cluster, worker


def test_workers_without_ddltrace_are_one_line_before_any_task(tmp_path, stores):
    """Workers whose Python finds another 'ddltrace' first (a package that fails to import, put in front by
    PYTHONPATH): exit 2 and one line naming a worker and what it lacks, before any task is sent (a task sent there
    would break the worker's connection and wait for ever)."""
    fake = tmp_path / "elsewhere" / "ddltrace"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("not this ddltrace")\n')
    child, cluster, worker = _analyze_with_a_worker_seeing(fake.parent, tmp_path, stores)
    assert child.returncode == 2 and child.stdout == ""
    assert child.stderr.splitlines() == [
        f"ddltrace: error: --scheduler {cluster.address}: the worker at {worker} cannot import ddltrace (not this "
        f"ddltrace), while this command runs ddltrace {ddltrace.__version__}: install the same ddltrace with its dask "
        "extra where the scheduler and the workers run"]



def test_a_worker_with_another_cloudpickle_is_one_line_before_any_task(tmp_path, stores):
    """A worker whose installed cloudpickle is another version, as distributed reports it (importlib.metadata: a
    cloudpickle 0.0.1 distribution put in front by PYTHONPATH): exit 2 and one line naming the worker, the package
    and both versions, before any task is sent; distributed's own table of versions is not printed. The check
    compared ddltrace's version alone, and the analysis went ahead."""
    from importlib.metadata import version

    fake = tmp_path / "elsewhere" / "cloudpickle-0.0.1.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: cloudpickle\nVersion: 0.0.1\n")
    child, cluster, worker = _analyze_with_a_worker_seeing(fake.parent, tmp_path, stores)
    assert child.returncode == 2 and child.stdout == ""
    assert child.stderr.splitlines() == [
        f"ddltrace: error: --scheduler {cluster.address}: the worker at {worker} has cloudpickle 0.0.1, while this "
        f"command runs cloudpickle {version('cloudpickle')}: the tasks and their results cross between them pickled, "
        "so the scheduler needs this command's Python (to its minor version), dask, distributed and cloudpickle, and "
        "the workers those and its msgpack, numpy, pandas and pyarrow: install the same versions there"]


def _report(**packages) -> dict:
    """One process's part of ``Client.get_versions()``: this process's, with ``packages`` changed (None: removed)."""
    from distributed.versions import get_versions

    report = get_versions(packages=["pyarrow"])
    for name, value in packages.items():
        report["packages"][name] = value
    return report


def test_versions_are_compared_as_versions_and_only_what_the_tasks_need_stops_the_run():
    """PEP 440 equality (2026.8 is 2026.8.0), Python to its minor version; a worker's pandas matters (it pickles
    the results), the scheduler's does not (never compared); tornado is a note, not a refusal."""
    from ddltrace.dask_versions import ddltrace_differences, differences, same_version

    python = ".".join(map(str, sys.version_info))  # as distributed writes it: "3.11.9.final.0"
    major, minor, patch = sys.version_info[:3]
    assert same_version("python", python, f"{major}.{minor}.{patch + 1}.final.0")
    assert not same_version("python", python, f"{major}.{minor + 1}.0.final.0")
    assert same_version("dask", "2026.8", "2026.8.0") and not same_version("dask", "2026.8.0", "2026.8.1")
    assert same_version("x", "not a version", "not a version") and not same_version("x", "1.0", None)
    assert ddltrace_differences({"the scheduler": "0.1", "the worker at a": "0.1.0"}, "0.1.0") == {}
    assert list(ddltrace_differences({"the worker at b": "0.1.1", "the worker at c": ImportError("x")}, "0.1.0")) == [
        "the worker at b", "the worker at c"]

    client = _report()
    dask = client["packages"]["dask"]
    same = {"client": client, "scheduler": _report(dask=dask + ".0"),  # 2026.8.0.0 is 2026.8.0
            "workers": {"tcp://w1": _report(python=f"{major}.{minor}.{patch + 1}.final.0")}}
    assert differences(same) == []
    found = differences({"client": client, "scheduler": _report(pandas="0.1", tornado="0.1"),
                         "workers": {"tcp://w1": _report(tornado="0.2", pandas=None), "tcp://w2": "UNKNOWN"}})
    assert [(d.where, d.package, d.theirs, d.matters) for d in found] == [
        ("the worker at tcp://w1", "pandas", None, True), ("the scheduler", "tornado", "0.1", False),
        ("the worker at tcp://w1", "tornado", "0.2", False)]
    assert found[0].text() == ("the worker at tcp://w1 has no pandas, while this command runs pandas "
                              f"{client['packages']['pandas']}")


# -- an address where no scheduler is, paths the workers do not see ---------------------------------------------


def _serve(reply: bytes | None) -> tuple[str, object]:
    """A TCP server on localhost that sends ``reply`` to each connection and closes it (None: says nothing and
    keeps it open); its address and a function that stops it."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    held = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed
                return
            if reply is None:
                held.append(conn)
            else:
                with conn:
                    conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()

    def stop() -> None:
        server.close()
        for conn in held:
            conn.close()

    return f"tcp://127.0.0.1:{server.getsockname()[1]}", stop


def test_an_address_where_a_worker_or_no_dask_answers_is_one_line(cluster, stores, capsys):
    """A worker's address instead of the scheduler's, and a server that answers HTTP (a dashboard's port): exit 2,
    one line saying what answers there (the worker's scheduler named), no traceback."""
    worker = next(iter(cluster.client.scheduler_info()["workers"]))
    rc, out, err = analyze(capsys, stores / "ps", "--scheduler", worker)
    assert rc == 2 and out == ""
    assert err.splitlines() == [f"ddltrace: error: --scheduler {worker}: a Dask worker answers there, not the "
                                f"scheduler (its scheduler: {cluster.address})"]
    address, stop = _serve(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
    try:
        rc, out, err = analyze(capsys, stores / "ps", "--scheduler", address)
    finally:
        stop()
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"ddltrace: error: --scheduler {address}: what answers there does not speak Dask's protocol")


def test_a_port_that_accepts_but_never_answers_is_one_line_after_the_timeout(stores):
    """A server that accepts the connection and says nothing (distributed's Client waits for its handshake without
    end): exit 2 and one line once CONNECT_TIMEOUT_S (1 s here) and 2 s more have passed."""
    address, stop = _serve(None)
    code = ("import sys; from ddltrace import executor; executor.CONNECT_TIMEOUT_S = 1\n"
            "from ddltrace.cli import main; sys.exit(main(sys.argv[1:]))")
    try:
        child = subprocess.run([sys.executable, "-c", code, "analyze", str(stores / "ps"), "--scheduler", address],
                               capture_output=True, text=True, timeout=60)
    finally:
        stop()
    assert child.returncode == 2 and child.stdout == ""
    assert child.stderr.splitlines() == [f"ddltrace: error: --scheduler {address}: what answers there does not speak "
                                         "Dask's protocol (it accepts connections, but gave no answer within 3 s)"]


def _can_hide_a_folder() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_hide_a_folder(), reason="needs unshare -rm (a mount namespace of one's own)")
def test_paths_the_workers_cannot_see_are_one_line_naming_them(tmp_path, stores, capsys, monkeypatch):
    """The worker runs with an empty file system mounted over a folder this command reads (a folder local to the
    command's machine): a store there, a trace file there (import: no store left behind), and a trace that analyze
    imports into its temporary folder there are each one line naming the path and the worker, exit 2, before any
    task; a worker would have said 'no such trace store' of a store this command had just read."""
    import tempfile

    here = tmp_path / "only-here"
    here.mkdir()
    hide = ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs none "$0" && exec "$@"', str(here)]
    shutil.copytree(stores / "ps", here / "ps")
    shutil.copytree(DATA / "torch_gloo", here / "trace")
    with LocalDaskCluster(tmp_path / "cluster", workers=1, worker_prefix=hide) as cluster:
        worker = next(iter(cluster.client.scheduler_info()["workers"]))
        blind = f"ddltrace: error: --scheduler {cluster.address}: 1 of 1 workers ({worker}) cannot see"
        rc, out, err = analyze(capsys, here / "ps", "--scheduler", cluster.address)
        assert rc == 2 and out == ""
        assert err.splitlines() == [f"{blind} {here / 'ps'}, which this command sees: every worker must see the "
                                    "store under the same path (a shared file system; docs/CLUSTER.md)"]
        rc = main(["import", str(here / "trace"), "--out", str(tmp_path / "imported"), "--scheduler",
                   cluster.address])
        err = capsys.readouterr().err
        assert rc == 2 and f"{blind} {here / 'trace'}/" in err and "which this command sees" in err, err
        assert len(err.splitlines()) == 1 and not (tmp_path / "imported").exists()
        monkeypatch.setattr(tempfile, "tempdir", str(here))
        rc, out, err = analyze(capsys, here / "trace", "--scheduler", cluster.address, "--quiet")
    assert rc == 2 and out == ""
    assert err.splitlines()[-1].startswith(f"{blind} {here}/ddltrace-analyze-")
    assert err.splitlines()[-1].endswith(f"it is the temporary store this command imported {here / 'trace'} "
                                         "into, on this machine: import it onto a path every worker sees ('ddltrace "
                                         f"import {here / 'trace'} --out SHARED/STORE'), then analyze that")
    assert not list(here.glob("ddltrace-analyze-*"))
