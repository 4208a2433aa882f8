"""What ``info`` and ``analyze`` must say of a store's clock alignment, computed from its manifest (the PMPI
collector's clock entry, collectors/clock.py): used by tests/test_clock_alignment.py and tests/test_detectors.py."""

from __future__ import annotations

import json
from pathlib import Path

from ddltrace.cli import main
from ddltrace.units import format_ns


def cli_output(capsys, *args) -> str:
    """What ``ddltrace ARGS`` prints (it must exit 0)."""
    assert main([*map(str, args)]) == 0
    return capsys.readouterr().out


def expected_rank_clocks(clock: dict) -> list[dict]:
    """Per rank, what the manifest's clock entry says (the PMPI collector's keys), in rank order."""
    ranks = sorted(clock["offsets_ns"], key=int)
    return [{"who": r, "offset_ns": clock["offsets_ns"][r], "uncertainty_ns": clock["uncertainty_ns"].get(r),
             "end_offset_ns": clock.get("finalize_offsets_ns", {}).get(r),
             "end_uncertainty_ns": clock.get("finalize_uncertainty_ns", {}).get(r),
             "drift_ppm": clock.get("drift_ppm", {}).get(r)} for r in ranks]


def check_rank_clocks(capsys, store: Path) -> None:
    """``info --json``, ``info`` and ``analyze`` give each rank's offset and uncertainty as the manifest has them."""
    clock = json.loads((store / "manifest.json").read_text())["clock"]
    expected = expected_rank_clocks(clock)
    doc = json.loads(cli_output(capsys, "info", store, "--json"))["clock"]
    assert doc["aligned"] and doc["method"] == clock["method"]
    ranks = doc["groups"][0]
    assert ranks["kind"] == "rank" and ranks["offsets"] == expected
    assert ranks["reference"] == f"rank {clock['reference_rank']}'s clock"
    largest = max(abs(v) for e in expected for v in (e["offset_ns"], e["end_offset_ns"]) if v is not None)
    bound = max(v for e in expected for v in (e["uncertainty_ns"], e["end_uncertainty_ns"]) if v is not None)
    assert (ranks["max_abs_offset_ns"], ranks["max_uncertainty_ns"]) == (largest, bound)
    assert bound == clock["max_uncertainty_ns"]

    summary = (f"{len(expected)} rank offset(s) onto rank {clock['reference_rank']}'s clock, max |offset| "
               f"{format_ns(largest)}, max uncertainty ±{format_ns(bound)}")
    text = cli_output(capsys, "info", store)
    assert f"clocks      {summary}" in text and clock["method"] in text
    rows = {tuple(line.split()) for line in text.splitlines()}
    for e in expected:
        row = (e["who"], format_ns(e["offset_ns"]), f"±{format_ns(e['uncertainty_ns'])}")
        if e["end_offset_ns"] is not None:
            row += (format_ns(e["end_offset_ns"]), f"±{format_ns(e['end_uncertainty_ns'])}", f"{e['drift_ppm']:g}",
                    "ppm")
        assert tuple(" ".join(row).split()) in rows, (row, text)

    analysis = cli_output(capsys, "analyze", store)
    assert any(line.startswith(f"  clocks: {summary}") for line in analysis.splitlines())  # (then the nodes')
    assert json.loads(cli_output(capsys, "analyze", store, "--json"))["stores"][0]["clock"] == doc


