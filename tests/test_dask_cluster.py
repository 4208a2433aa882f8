"""``--scheduler ADDRESS``: the per-file (import) and per-rank (analyze, report) work as tasks on a real Dask
distributed cluster (a ``dask scheduler`` and two ``dask worker`` processes on localhost, tests/dask_cluster.py),
giving what the local run gives; a worker killed with SIGKILL while it holds a task changes nothing; a damaged
rank is named and the others reported."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dask_cluster import LocalDaskCluster  # skips the module when distributed is not installed

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
    folder = tmp_path / "in"
    shutil.copytree(DATA / "torch_gloo", folder / "torch")
    shutil.copytree(DATA / "mxnet_dist_sync", folder / "mxnet")
    (folder / "broken.pt.trace.json").write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "na')
    monkeypatch.chdir(tmp_path)
    printed, stores = {}, {}
    for how in (["--jobs", "1"], ["--scheduler", cluster.address, "--progress", "always"]):
        out = tmp_path / how[0].strip("-")
        assert main(["import", "in", "--out", str(out), *how]) == 0
        captured = capsys.readouterr()
        printed[how[0]] = [line for line in captured.out.splitlines() if not line.startswith("imported")]
        stores[how[0]] = TraceStore.open(out)
    assert "files done on 2 workers of the Dask cluster at " + cluster.address in captured.err
    local, remote = stores["--jobs"], stores["--scheduler"]
    assert local.ranks == remote.ranks and len(local.ranks) >= 2
    for rank in local.ranks:
        a, b = local.timeline([rank]), remote.timeline([rank])
        assert len(a) > 10 and a.equals(b), rank
        assert local.rank_info(rank) == remote.rank_info(rank)
    assert local.manifest["notes"] == remote.manifest["notes"]
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
