"""`ddltrace import` of a damaged IPM XML profile (the shared 64-rank ipm_hunold_1494937738, damaged here; skipped
when absent): the world size is the file's (its tasks' ``mpi_size``, ``<job ntasks=>``), not the tasks read; the
ranks not read are the store's missing ranks, exactly; after an XML error inside a task the reader goes on at the
next ``<task``, the tasks after it hold the intact file's figures, and the import's problem line names the damaged
task. Was: a cut file was a 42-rank job with no rank missing, and one bad byte in the 6th task lost every task after
it (a 5-rank job)."""

from __future__ import annotations

import gzip
import re

import pytest
from shared_data import corpus, needs

from ddltrace.cli import main
from ddltrace.store import TraceStore

IPM = corpus("ipm_hunold_1494937738", "hunold.1494937738.200810.ipm.xml")
pytestmark = needs(IPM)
WORLD = 64


def _starts(data: bytes) -> list[int]:
    return [m.start() for m in re.finditer(rb"<task[\s>/]", data)]


def _damage(data: bytes, how: str) -> tuple[bytes, set[int], list[str]]:
    """The file damaged ``how``, the ranks that stay readable, and what the import's problem line must say."""
    starts = _starts(data)
    assert len(starts) == WORLD
    if how == "cut":  # the QA run's `head -c 1000000`
        cut = data[:1_000_000]
        whole = {rank for rank, start in enumerate(starts) if data.find(b"</task>", start) + 7 <= len(cut)}
        first_lost = min(set(range(WORLD)) - whole)
        assert first_lost == 42  # (the 43rd task)
        return cut, whole, [f'the 43rd task (mpi_rank="{first_lost}" by its opening tag) has no '
                            "</task>", f"{len(whole)} task(s) read in all"]
    if how == "byte":  # the QA run's ipm_corrupt_byte: `<func` -> `<\x00unc` in the 6th task (rank 5)
        at = data.index(b"<func", starts[5]) + 1
        damaged = data[:at] + b"\x00" + data[at + 1:]
        return damaged, set(range(WORLD)) - {5}, ['not read, damaged: the 6th task (mpi_rank="5" by its opening '
                                                  'tag)', "63 task(s) read in all, 58 of them after the error"]
    if how == "endtag":  # the QA run's ipm_corrupt_endtag: a `</hent>` -> `</Xent>` in the 6th task
        at = data.index(b"</hent>", starts[5]) + 2
        damaged = data[:at] + b"X" + data[at + 1:]
        return damaged, set(range(WORLD)) - {5}, ['not read, damaged: the 6th task (mpi_rank="5" by its opening '
                                                  'tag)', "63 task(s) read in all"]
    if how == "no_task_end":  # the 6th task's `</task>` lost: the tasks after it nest in it
        at = data.index(b"</task>", starts[5])
        return data[:at] + data[at + 7:], set(range(WORLD)) - {5}, [
            'the 6th task (mpi_rank="5" by its opening tag) has no </task>', "63 task(s) read in all"]
    if how == "two":  # a bad byte in the 4th and in the 41st task
        damaged = bytearray(data)
        for task in (3, 40):
            damaged[data.index(b"<func", starts[task]) + 1] = 0
        return bytes(damaged), set(range(WORLD)) - {3, 40}, [
            'not read, damaged: the 4th task (mpi_rank="3" by its opening tag), the 41st task (mpi_rank="40" by '
            'its opening tag)', "62 task(s) read in all"]
    raise AssertionError(how)


def _import(path, out) -> TraceStore:
    assert main(["import", str(path), "--out", str(out)]) == 0
    return TraceStore.open(out)


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> TraceStore:
    return _import(IPM, tmp_path_factory.mktemp("ipm_intact") / "store")


def _same_ranks_as_intact(store: TraceStore, intact: TraceStore, ranks: set[int]) -> None:
    """Every rank read holds the intact file's rows and manifest entry (its figures: wall and MPI time, calls,
    host, start, end, rows); only the file named differs."""
    columns = ["rank", "name", "category", "start_ns", "dur_ns", "bytes", "peer"]
    got, want = store.timeline(sorted(ranks)), intact.timeline(sorted(ranks))
    key = ["rank", "start_ns", "name", "peer"]
    got = got[columns].sort_values(key).reset_index(drop=True)
    want = want[columns].sort_values(key).reset_index(drop=True)
    assert len(got) == len(want) > 0
    assert got.astype(str).equals(want.astype(str))
    for rank in ranks:
        mine, theirs = dict(store.rank_info(rank)), dict(intact.rank_info(rank))
        for entry in (mine, theirs):  # (the file imported; where the rank's rows lie in the store's files)
            for key in [k for k in entry if k in ("file", "files", "rows") or k.startswith("timeline")]:
                del entry[key]
        assert mine == theirs, rank


def test_the_intact_file_is_64_ranks_none_missing(intact):
    assert intact.ranks == list(range(WORLD)) and intact.world_size == WORLD
    assert intact.missing() == {} and intact.import_problems == []


@pytest.mark.parametrize("how", ["cut", "byte", "endtag", "no_task_end", "two"])
def test_damaged_file_keeps_every_readable_task_and_its_world(tmp_path, intact, how):
    damaged, readable, said = _damage(IPM.read_bytes(), how)
    path = tmp_path / f"{how}.ipm.xml"
    path.write_bytes(damaged)
    store = _import(path, tmp_path / "store")
    assert store.ranks == sorted(readable)
    assert store.world_size == WORLD  # the file's mpi_size / ntasks, not the tasks read (42, or 5)
    assert set(store.missing()) == set(range(WORLD)) - readable
    _same_ranks_as_intact(store, intact, readable)
    (line,) = [p for p in store.import_problems if "XML broken" in p]  # one line for the damage
    assert line.startswith(f"{path}: XML broken at line ")
    for words in said:
        assert words in line, (words, line)
    assert "kept the" not in line  # (was: "kept the 5 complete task(s) before it")


def test_a_cut_gzip_file_is_read_to_its_last_whole_task(tmp_path, intact):
    """The gzip stream cut (its damage said once), the XML cut inside a task: the whole tasks before it kept,
    the world the file's."""
    data = IPM.read_bytes()
    packed = gzip.compress(data)
    path = tmp_path / "cut.ipm.xml.gz"
    path.write_bytes(packed[:len(packed) * 2 // 3])
    store = _import(path, tmp_path / "store")
    readable = set(store.ranks)
    assert 0 < len(readable) < WORLD and readable == set(range(len(readable)))
    assert store.world_size == WORLD and set(store.missing()) == set(range(len(readable), WORLD))
    _same_ranks_as_intact(store, intact, readable)
    problems = store.import_problems
    assert sum("gzip stream truncated" in p for p in problems) == 1
    assert sum(f'(mpi_rank="{len(readable)}" by its opening tag) has no </task>' in p for p in problems) == 1


def test_tasks_that_disagree_on_the_size_give_what_most_say(tmp_path):
    """One task's mpi_size damaged into another number: the world is what the other tasks say, and a problem
    says they disagree."""
    data = IPM.read_bytes()
    at = data.index(b'mpi_size="64"', _starts(data)[7])
    path = tmp_path / "size.ipm.xml"
    path.write_bytes(data[:at] + b'mpi_size="94"' + data[at + 13:])
    store = _import(path, tmp_path / "store")
    assert store.ranks == list(range(WORLD)) and store.world_size == WORLD and store.missing() == {}
    (line,) = store.import_problems
    assert "disagree on the run's size" in line and "64 (64x), 94 (1x)" in line and "taken as 64" in line
