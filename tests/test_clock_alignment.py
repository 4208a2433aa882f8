"""How the ranks' clocks were put on one clock, printed by ``info`` (text and JSON) and ``analyze`` (one line, and
the JSON) from the store's manifest: on a real MPI run (the committed ps-sgd sample, made by ``ddltrace workload
ps-sgd`` under mpiexec; tests/test_detectors.py checks a fresh run's too), on a trace imported with its clocks
aligned by matched messages, and on a foreign trace imported as it is (no offsets: the trace's own clocks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clock_truth import check_rank_clocks, cli_output

from ddltrace.units import format_ns

ROOT = Path(__file__).parent.parent
PMPI_RUN = ROOT / "sample_traces" / "ps-sgd" / "par-w4" / "store"
DATA = Path(__file__).parent / "data"


def test_a_real_mpi_runs_offsets_are_printed_as_the_manifest_has_them(capsys):
    check_rank_clocks(capsys, PMPI_RUN)


def test_analyze_compares_the_waits_between_ranks_with_the_clocks_uncertainty(capsys):
    """The wait states between ranks of the real run: their count and mean from analyze's own JSON, the bound twice
    the largest uncertainty of the manifest."""
    clock = json.loads((PMPI_RUN / "manifest.json").read_text())["clock"]
    analysis = cli_output(capsys, "analyze", PMPI_RUN)
    line = next(line for line in analysis.splitlines() if line.startswith("  waits between ranks: "))
    assert f"known to within ±{format_ns(2 * clock['max_uncertainty_ns'])} " in line
    assert "may be clock error" not in line  # mean waits of ms against a bound of tens of us


def test_a_foreign_trace_says_its_clocks_are_the_traces(tmp_path, capsys):
    """An import with no offsets (the PyTorch profiler's traces, each on its host's wall clock): info and analyze
    say that the times are taken as the trace gives them, and which clock that is."""
    store = tmp_path / "store"
    cli_output(capsys, "import", DATA / "torch_gloo", "--out", store)
    clock = json.loads((store / "manifest.json").read_text())["clock"]
    assert clock["offsets_ns"] == {}
    said = f"taken as the trace gives them, no offsets applied ({clock['method']})"
    assert f"clocks      {said}" in cli_output(capsys, "info", store)
    doc = json.loads(cli_output(capsys, "info", store, "--json"))["clock"]
    assert doc["aligned"] is False and doc["groups"] == [] and doc["method"] == clock["method"]
    assert f"  clocks: {said}" in cli_output(capsys, "analyze", store).splitlines()


@pytest.mark.parametrize("entry", [None, [1, 2], {"offsets_ns": {"0": 0, "1": "x", "2": 5}, "method": 3}])
def test_a_damaged_clock_entry_is_named_not_a_traceback(entry):
    """A clock entry that is missing or not a table is said to be unknown; offsets that are not integers are left
    out and the others shown."""
    from ddltrace.clock_alignment import clock_alignment

    manifest = {"clock": entry} if entry is not None else {}
    clock = clock_alignment(manifest)
    if isinstance(entry, dict):
        assert [o.who for o in clock.groups[0].offsets] == ["0", "2"] and clock.groups[0].max_abs_offset_ns == 5
        assert clock.groups[0].max_uncertainty_ns is None and "max uncertainty not given" in clock.summary()
    else:
        assert clock.problem and clock.summary().startswith("not known (the manifest")
