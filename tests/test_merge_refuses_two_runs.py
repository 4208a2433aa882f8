"""``ddltrace merge`` refuses stores that are evidently of two runs (ddltrace/merged_manifest.py's ``not_one_run``):
their world sizes, their runs' commands or their job configurations (workload entries) differ where both record
one. QA (qa-s20b #1): ranks 0-1 of par-w4 (w = 4) and ranks 5-8 of par-w8 (w = 8), which started 6 s after par-w4
ended, were merged with exit 0 (the wall-clock test wants an hour apart), and ``analyze`` read the gap as a 12.7 s
sequential initialisation. Now: exit 2, one line naming both stores and the evidence, nothing written;
``--as-one-run`` merges them anyway, with a note saying what differed. The parts of one run (exports of some of its
ranks imported apart; imports of a rank's files each, whose own ``ddltrace import`` commands differ) still merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddltrace.cli import main
from ddltrace.errors import StoreError
from ddltrace.store import TraceStore, _wall_span, merge_stores, two_runs_apart, write_store
from ddltrace.timeline import make_timeline

PS_SGD = Path(__file__).resolve().parents[1] / "sample_traces" / "ps-sgd"


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict[str, Path]:
    """Stores imported from exports of some ranks: ``w4-0-1`` (par-w4's ranks 0-1), ``w4-2-4`` (par-w4's 2-4),
    ``w8-5-8`` (par-w8's 5-8), as qa-s20b made them."""
    folder = tmp_path_factory.mktemp("runs")
    made = {}
    for name, run, ranks in (("w4-0-1", "par-w4", "0,1"), ("w4-2-4", "par-w4", "2-4"), ("w8-5-8", "par-w8", "5-8")):
        export = folder / f"{name}.json"
        assert main(["export", str(PS_SGD / run / "store"), "--ranks", ranks, "--chrome", str(export), "--quiet"]) == 0
        made[name] = folder / name
        assert main(["import", str(export), "--out", str(made[name]), "--quiet"]) == 0
    return made


def test_a_w4_and_a_w8_run_seconds_apart_are_refused_on_one_line_naming_the_evidence(parts, tmp_path, capsys):
    a, b = TraceStore.open(parts["w4-0-1"]), TraceStore.open(parts["w8-5-8"])
    # what the old check saw: the runs are seconds apart, not an hour, and their ranks do not overlap
    assert two_runs_apart(_wall_span(a), _wall_span(b)) == 0 and not set(a.ranks) & set(b.ranks)
    # the evidence, read from the stores themselves
    wa, wb = a.run["world_size"], b.run["world_size"]
    workers = a.manifest["workload"]["config"]["workers"], b.manifest["workload"]["config"]["workers"]
    assert (wa, wb) == (workers[0] + 1, workers[1] + 1) and wa != wb
    out = tmp_path / "ab"
    capsys.readouterr()
    assert main(["merge", str(a.path), str(b.path), "--out", str(out)]) == 2  # (was 0: "wrote ab: 6 ranks")
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ddltrace: error: {b.path}: not a part of {a.path}'s run")
    line = lines[0]
    assert f"world size {wb} vs {wa}" in line
    assert f"config.workers {workers[1]} vs {workers[0]}" in line
    assert "command word" in line and "--as-one-run" in line
    assert not out.exists() and not list(tmp_path.iterdir())  # nothing written, no staging folder left
    # either way round
    assert main(["merge", str(b.path), str(a.path), "--out", str(out)]) == 2
    assert f"world size {wa} vs {wb}" in capsys.readouterr().err and not out.exists()
    # the Python API refuses as the command does
    with pytest.raises(StoreError, match=r"not a part of .*'s run"):
        merge_stores(a, b, out)
    assert not out.exists()


def test_as_one_run_merges_them_anyway_and_says_what_differed(parts, tmp_path, capsys):
    a, b = TraceStore.open(parts["w4-0-1"]), TraceStore.open(parts["w8-5-8"])
    out = tmp_path / "ab"
    capsys.readouterr()
    assert main(["merge", str(a.path), str(b.path), "--out", str(out), "--as-one-run"]) == 0
    err = capsys.readouterr()
    merged = TraceStore.open(out)
    assert merged.ranks == [*a.ranks, *b.ranks]
    said = [n for n in merged.manifest["notes"] if n.startswith("merged as one run on the user's word")]
    assert len(said) == 1 and f"world size {b.run['world_size']} vs {a.run['world_size']}" in said[0]
    assert f"ddltrace: note: {said[0]}" in err.err.splitlines()


def test_parts_of_one_run_still_merge_with_nothing_said_of_two_runs(parts, tmp_path, capsys):
    a, b = TraceStore.open(parts["w4-0-1"]), TraceStore.open(parts["w4-2-4"])
    original = TraceStore.open(PS_SGD / "par-w4" / "store")
    out = tmp_path / "ab"
    assert main(["merge", str(a.path), str(b.path), "--out", str(out)]) == 0
    merged = TraceStore.open(out)
    assert merged.ranks == original.ranks and merged.world_size == original.world_size
    assert not [n for n in merged.manifest["notes"] if "merged as one run" in n]


def _rows(rank: int) -> list[dict]:
    t0 = 1_800_000_000 * 10**9
    return [{"rank": rank, "lane": "cpu", "name": "compute", "category": "compute", "start_ns": t0 + i * 1000,
             "dur_ns": 500} for i in range(3)]


def _store(path: Path, ranks: range, **run) -> TraceStore:
    return write_store(path, make_timeline([row for r in ranks for row in _rows(r)]), run=run)


def test_what_counts_as_evidence(tmp_path, capsys):
    """Stores written directly (one job's times): a world size counted from the ranks a store holds (an import of
    files that do not say it: ranks 0-3 a world of 4, ranks 4-7 of 8) is no evidence; the world a run records
    with its command, or one reaching past the ranks held, is, and so is another rank past it; commands that differ
    are, an import's own ``ddltrace import FILE`` is not."""
    cases = [  # (first store's run and ranks, second's, refused with)
        (({"world_size": 4}, range(0, 4)), ({"world_size": 8}, range(4, 8)), None),
        (({"world_size": 8}, range(0, 4)), ({"world_size": 12}, range(4, 8)), "world size 12 vs 8"),  # the runs'
        (({"world_size": 8}, range(0, 4)), ({"world_size": 12}, range(4, 12)), "holds rank 11, past"),
        (({"world_size": 8}, range(0, 4)), ({"world_size": 10}, range(8, 10)), "holds rank 9, past"),
        (({"command": "python job.py --w 4"}, range(0, 2)), ({"command": "python job.py --w 8"}, range(2, 4)),
         "command word 4 8 vs 4"),
        (({"command": "ddltrace import r0.json", "imported_files": 1}, range(0, 1)),
         ({"command": "ddltrace import r1.json", "imported_files": 1}, range(1, 2)), None),
    ]
    for i, ((run_a, ranks_a), (run_b, ranks_b), refused) in enumerate(cases):
        a, b = _store(tmp_path / f"a{i}", ranks_a, **run_a), _store(tmp_path / f"b{i}", ranks_b, **run_b)
        out = tmp_path / f"m{i}"
        capsys.readouterr()
        rc = main(["merge", str(a.path), str(b.path), "--out", str(out)])
        err = capsys.readouterr().err
        assert rc == (2 if refused else 0), (i, err)
        assert out.exists() == (not refused)
        if refused:
            assert refused in err and len(err.strip().splitlines()) == 1, (i, err)
            assert main(["merge", str(a.path), str(b.path), "--out", str(out), "--as-one-run"]) == 0


def test_the_gap_refusal_names_the_option_and_the_help_describes_it(tmp_path, capsys):
    a = _store(tmp_path / "a", range(0, 2), command="job")
    b = write_store(tmp_path / "b", make_timeline([{**row, "start_ns": row["start_ns"] + 48 * 3600 * 10**9}
                                                   for row in _rows(2)]), run={"command": "job"})
    with pytest.raises(StoreError, match=r"apart from .* on the wall clock: not a part of its run .*--as-one-run"):
        merge_stores(a, b, tmp_path / "m")
    merged = merge_stores(a, b, tmp_path / "m", as_one_run=True)
    assert any("apart on the wall clock" in n and "merged as one run" in n for n in merged.manifest["notes"])
    with pytest.raises(SystemExit):
        main(["merge", "--help"])
    assert "--as-one-run" in capsys.readouterr().out
