"""A rank whose file was given to ``ddltrace import`` and did not read is named so, with the file and why, by
``info`` (was: "not in the files imported, whose run names that world", the file's error only among the problems).

The input: the two ranks of the sample Kineto job h100-ddp/healthy (world size 2 in their distributedInfo), rank 1's
profile cut to its first 100 bytes."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from ddltrace.cli import main
from ddltrace.merged_manifest import unread_note
from ddltrace.store import TraceStore

HEALTHY = Path(__file__).resolve().parent.parent / "sample_traces" / "h100-ddp" / "healthy"


def _job(tmp_path: Path, broken_name: str) -> tuple[Path, Path, int]:
    """Rank 0's profile as it is and rank 1's cut to 100 bytes (named ``broken_name``), and the world size rank 0's
    profile gives."""
    (rank0,) = HEALTHY.glob("rank0.*.pt.trace.json.gz")
    (rank1,) = HEALTHY.glob("rank1.*.pt.trace.json.gz")
    folder = tmp_path / "job"
    folder.mkdir()
    good = folder / rank0.name
    good.write_bytes(rank0.read_bytes())
    broken = folder / broken_name
    broken.write_bytes(gzip.decompress(rank1.read_bytes())[:100])
    info = json.loads(gzip.decompress(rank0.read_bytes()))["distributedInfo"]
    assert info["rank"] == 0 and info["world_size"] == 2
    return good, broken, info["world_size"]


def _not_listed(capsys, store: Path) -> list[str]:
    capsys.readouterr()
    assert main(["info", str(store)]) == 0
    return [line[12:] for line in capsys.readouterr().out.splitlines() if line.startswith("not listed")]


def _problem(store: Path, path: Path) -> str:
    (problem,) = [p for p in TraceStore.open(store).import_problems if p.startswith(f"{path}:")]
    return problem


def test_the_rank_of_a_file_that_did_not_read_is_named_with_the_file_and_why(tmp_path, capsys):
    good, broken, world = _job(tmp_path, "rank1.pt.trace.json")
    out = tmp_path / "store"
    done = subprocess.run([sys.executable, "-m", "ddltrace", "import", str(good), str(broken), "--out", str(out),
                           "--progress", "never"], capture_output=True, text=True)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    problem = _problem(out, broken)  # the file's own error, as the import found it
    assert problem.startswith(f"{broken}: ") and f"problem: {problem}" in done.stdout
    note = unread_note([1], f"its file was given and did not read (rank 1 by its name): {problem}")
    store = TraceStore.open(out)
    assert store.ranks == [0] and store.world_size == world
    assert store.missing() == {1: note}
    assert _not_listed(capsys, out) == [f"rank 1 of the world of {world}: the run's note: {note}, so no timeline here"]


def test_a_file_with_no_rank_number_is_named_for_the_ranks_no_file_gave(tmp_path, capsys):
    good, broken, world = _job(tmp_path, "broken.pt.trace.json")
    out = tmp_path / "store"
    assert main(["import", str(good), str(broken), "--out", str(out), "--progress", "never"]) == 0
    note = unread_note([1], "in no file read; of the files given, 1 did not read and may hold it: "
                            + _problem(out, broken))
    assert TraceStore.open(out).missing() == {1: note}
    assert _not_listed(capsys, out) == [f"rank 1 of the world of {world}: the run's note: {note}, so no timeline here"]


def test_with_rank_from_order_the_files_place_gives_its_rank(tmp_path, capsys):
    good, broken, world = _job(tmp_path, "a_broken.pt.trace.json")  # sorted first in its folder: rank 0
    out = tmp_path / "store"
    assert main(["import", str(good.parent), "--rank-from", "order", "--out", str(out), "--progress", "never"]) == 0
    store = TraceStore.open(out)
    assert store.ranks == [1]
    note = unread_note([0], "its file was given and did not read (rank 0 by its place among the traces given): "
                            + _problem(out, broken))
    assert store.missing() == {0: note}


def test_a_rank_another_file_gave_gets_no_note(tmp_path):
    good, broken, _ = _job(tmp_path, "rank0.cut.pt.trace.json")  # its name says rank 0, which the good file gives
    out = tmp_path / "store"
    assert main(["import", str(good), str(broken), "--out", str(out), "--progress", "never"]) == 0
    store = TraceStore.open(out)
    assert store.ranks == [0] and store.missing().keys() == {1}
    assert not any(n.startswith("ranks [0]") for n in store.notes)
    assert store.missing()[1] == unread_note([1], "in no file read; of the files given, 1 did not read and may hold "
                                                  f"it: {_problem(out, broken)}")
