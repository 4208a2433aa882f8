"""The printed forms of durations, byte counts and rates: three significant digits, never Python's exponent form
at a unit's edge ('1e+03 ms' was printed for a 999.6 ms barrier wait, '1.02e+03 KiB' for 1023.95 KiB)."""

from __future__ import annotations

import pytest

from ddltrace.analyses.findings import format_quantity
from ddltrace.units import format_bytes, format_ns, three_digits


@pytest.mark.parametrize(("ns", "shown"), [
    (812, "812 ns"), (999.4, "999 ns"), (999.6, "1 us"), (3.4e3, "3.4 us"), (999.7e3, "1 ms"), (12.5e6, "12.5 ms"),
    (999.6e6, "1 s"), (4.2e9, "4.2 s"), (99.96e9, "100 s"), (3725e9, "1 h 02 min"), (-999.6e6, "-1 s")])
def test_durations_change_unit_where_the_rounding_crosses_it(ns, shown):
    assert format_ns(ns) == shown


@pytest.mark.parametrize(("n", "shown"), [
    (512, "512 B"), (1536, "1.5 KiB"), (1000 * 1024, "0.977 MiB"), (1023.95 * 1024, "1 MiB"),
    (3.2 * 2**20, "3.2 MiB"), (2000 * 2**40, "2000 TiB")])
def test_byte_counts_never_print_an_exponent(n, shown):
    assert format_bytes(n) == shown


def test_rates_and_plain_quantities_keep_three_digits_without_an_exponent():
    assert three_digits(1234.4) == "1234" and three_digits(999.4) == "999" and three_digits(0.01234) == "0.0123"
    assert format_quantity(2345.6, "GB/s") == "2346 GB/s" and format_quantity(12.345, "GB/s") == "12.3 GB/s"
    assert "e+" not in format_quantity(1.5e3, "1")


def test_a_rank_in_the_evidence_reads_as_a_rank_not_a_count():
    """Evidence naming a rank (the straggler's slowest_rank, the GPU host-bound's host_wait_max_rank) printed
    '1 rank' beside 'workers: 2 ranks', a count: it is 'rank 1'."""
    from ddltrace.analyses.findings import Quantity

    assert format_quantity(1, "rank") == "rank 1" and str(Quantity(0, "rank")) == "rank 0"
    assert format_quantity(2, "ranks") == "2 ranks"
    # a count of one takes its noun's singular (it printed '1 devices')
    assert [format_quantity(1, u) for u in ("devices", "launches", "gaps", "ratio", "MB/s")] \
        == ["1 device", "1 launch", "1 gap", "1 ratio", "1 MB/s"]
    assert format_quantity(1.5, "workers") == "1.5 workers" and format_quantity(0, "devices") == "0 devices"


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_the_thresholds_under_help_print_no_exponent(command, capsys):
    from ddltrace.analyses.thresholds import DEFAULTS
    from ddltrace.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "gpu.busbw_min_bytes=1048576" in text and "e+" not in text  # (it read 1.04858e+06)
    assert all(f"{key}=" in text for key in DEFAULTS)


def test_a_count_with_its_noun_prints_no_exponent():
    from ddltrace.units import counted

    assert [counted(1, "rank"), counted(4.0, "rank"), counted(1048576, "matched message"), counted(2.5, "worker")] \
        == ["1 rank", "4 ranks", "1,048,576 matched messages", "2.5 workers"]  # (the third read 1.04858e+06)
