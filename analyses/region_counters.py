"""Hardware counters (PAPI and other OTF2 metrics) per region: what each function cost in cycles, cache misses, ...

The OTF2 importer (``collectors/importers/otf2_archive.py``) keeps an archive's Metric records as the rank's counters,
one series per metric member and location, and writes in the rank's manifest entry what each series is
(``counter_series``: unit, OTF2 mode, description, meaning) and, for counts sampled at every region enter and leave
(Score-P's PAPI counters: ACCUMULATED_START, SYNCHRONOUS_STRICT), the counts per region (``region_counters``). This
module reads them back and prints them.

Definitions (one rank, one metric; counts in the member's unit, ``#`` = events):

* **window count** (:func:`series_totals`): the count over the rank's traced window, from the series' first sample
  to its last: last minus first value of a cumulative series (ACCUMULATED_START), the sum of the samples after the
  first of a per-interval ACCUMULATED_LAST series (each covers the stretch since the one before), of the samples
  before the last of an ACCUMULATED_NEXT one; none for a value at an instant (ABSOLUTE, RELATIVE, ACCUMULATED_POINT).
  ``final``: the last sample as recorded (of a cumulative series: the count since the counters started, which Score-P
  does at its initialisation, before main's Enter).
* **inclusive** (:func:`region_table`): per region name, the count between each call's Enter and its Leave (its
  callees included), summed over the calls; a call inside a call of the same name (recursion) is not counted again.
* **exclusive**: each call's inclusive count less its callees' inclusive counts, summed over the calls (so the
  exclusive counts of a rank's regions add up to its outermost calls' inclusive counts).
* ``calls``: the region's calls on the rank (Leaves); ``measured_calls``: those with the metric sampled at both
  their Enter and Leave (all of them for a SYNCHRONOUS_STRICT metric); ``exclusive_calls``: those whose callees were
  all measured too. Sums are over the measured calls only, summed over the rank's locations (threads).
* ``share``: the inclusive count over the rank's window count.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ddltrace.units import counted, format_count, format_ns, format_percent

#: How many regions per rank the text shows (most inclusive cycles, or of the rank's first metric, first).
REGIONS_SHOWN = 10

#: Columns of :func:`region_table` and :func:`series_totals`.
REGION_COLUMNS = ["rank", "region", "metric", "unit", "calls", "measured_calls", "inclusive", "exclusive",
                  "exclusive_calls", "share"]
SERIES_COLUMNS = ["rank", "series", "metric", "unit", "mode", "location", "samples", "first_ns", "last_ns", "first",
                  "final", "window_count", "meaning", "description"]

#: The metric the regions are ordered by where a rank has it (cycles: where the time went, in the CPU's terms).
ORDER_BY = "PAPI_TOT_CYC"


def _entries(store, key: str) -> dict[int, object]:
    """Per rank, its manifest entry's ``key`` where it has one."""
    out = {}
    for rank in store.ranks:
        value = store.rank_info(rank).get(key)
        if value:
            out[rank] = value
    return out


def _window_count(mode: str, values: np.ndarray) -> float:
    """A series' count over its first to its last sample, by its OTF2 mode (NaN where its values are no counts)."""
    if not len(values):
        return math.nan
    if mode == "ACCUMULATED_START":
        return float(values[-1] - values[0])
    if mode == "ACCUMULATED_LAST":
        return float(values[1:].sum())
    if mode == "ACCUMULATED_NEXT":
        return float(values[:-1].sum())
    return math.nan


def series_totals(store) -> pd.DataFrame:
    """Per rank and counter series the importer described (``counter_series``), its samples and window count
    (:data:`SERIES_COLUMNS`; times in ns on the store's clock)."""
    described = _entries(store, "counter_series")
    rows = []
    if described:
        counters = store.counters(sorted(described))
        for rank, series in sorted(described.items()):
            mine = counters[counters["rank"] == rank]
            for name, meaning in sorted(series.items()):
                samples = mine[mine["name"] == name].sort_values("t_ns", kind="stable")
                values = samples["value"].to_numpy(np.float64)
                times = samples["t_ns"].to_numpy(np.int64)
                rows.append([rank, name, meaning.get("metric", name), meaning.get("unit", ""), meaning.get("mode", ""),
                             meaning.get("location", ""), len(values),
                             int(times[0]) if len(times) else None, int(times[-1]) if len(times) else None,
                             float(values[0]) if len(values) else math.nan,
                             float(values[-1]) if len(values) else math.nan,
                             _window_count(meaning.get("mode", ""), values), meaning.get("meaning", ""),
                             meaning.get("description", "")])
    return pd.DataFrame(rows, columns=SERIES_COLUMNS)


def region_table(store) -> pd.DataFrame:
    """Per rank, region and metric the importer's region counts (:data:`REGION_COLUMNS`): calls, measured calls,
    inclusive and exclusive counts, and the inclusive count's share of the rank's window count of that metric
    (summed over the rank's series of the metric)."""
    sums = _entries(store, "region_counters")
    if not sums:
        return pd.DataFrame(columns=REGION_COLUMNS)
    totals = series_totals(store)
    window = totals.groupby(["rank", "metric"])["window_count"].sum(min_count=1)
    rows = []
    for rank, entries in sorted(sums.items()):
        for e in entries:
            whole = window.get((rank, e["metric"]), math.nan)
            share = e["inclusive"] / whole if whole and not math.isnan(whole) else math.nan
            rows.append([rank, e["region"], e["metric"], e.get("unit", ""), e["calls"], e["measured_calls"],
                         e["inclusive"], e["exclusive"], e["exclusive_calls"], share])
    return pd.DataFrame(rows, columns=REGION_COLUMNS)


def _unit(unit: str) -> str:
    return "events" if unit in ("#", "") else unit


def _series_line(s) -> str:
    """One series: its window count, window, samples and mode; a value at an instant: its mode and last value."""
    said = f"  rank {s['rank']} {s['series']}: "
    about = f"; {s['description']}" if s["description"] and s["description"] != s["metric"] else ""
    if math.isnan(s["window_count"]):
        return (said + f"{s['mode']}, {s['meaning']}: no count over a window; {counted(s['samples'], 'sample')}, the "
                f"last {format_count(s['final'])} {s['unit']}".rstrip() + about)
    last = (f"final value {format_count(s['final'])}, the count since the counters started"
            if s["mode"] == "ACCUMULATED_START" else f"last sample {format_count(s['final'])}")
    return (said + f"{format_count(s['window_count'])} {_unit(s['unit'])} in the "
            f"{format_ns(s['last_ns'] - s['first_ns'])} from its first sample to its last ("
            f"{counted(s['samples'], 'sample')}, {s['mode']}: {s['meaning'].split(':')[0]}; {last})" + about)


def _cell(cells: pd.DataFrame, region: str, metric: str, kind: str) -> str:
    """A region's inclusive or exclusive count of a metric, '*' where not every call's is known, '-' where none is."""
    if (region, metric) not in cells.index:
        return "-"
    c = cells.loc[(region, metric)]
    known = c["measured_calls"] if kind == "inclusive" else c["exclusive_calls"]
    if not known:
        return "-"
    return format_count(c[kind]) + ("*" if known < c["calls"] else "")


def render(store, shown: int = REGIONS_SHOWN) -> list[str]:
    """The text: per rank, each series' window count, then its regions with the most inclusive cycles (of
    :data:`ORDER_BY`, else of the rank's first metric by name) and their inclusive and exclusive counts of every
    metric; a count not measured on every call is marked '*' and said under the table. Empty where the store has
    no region counts."""
    table = region_table(store)
    if not len(table):
        return []
    totals = series_totals(store)
    out = ["hardware counters per region (OTF2 Metric records; counts in each metric's unit, '#' = events; per rank, "
           "summed over the region's calls on all its threads; incl: each call's count from its Enter to its Leave, "
           "callees included, a call inside a call of the same name not counted again; excl: less its callees' "
           "counts; share: incl over the rank's count from its first sample to its last)"]
    for rank, mine in table.groupby("rank", sort=True):
        metrics = sorted(mine["metric"].unique())
        first = ORDER_BY if ORDER_BY in metrics else metrics[0]
        metrics = [first, *(m for m in metrics if m != first)]
        out.extend(_series_line(s) for _, s in totals[totals["rank"] == rank].iterrows())
        cells = mine.set_index(["region", "metric"])
        calls = mine.groupby("region")["calls"].max()
        order = cells.xs(first, level="metric")["inclusive"].sort_values(ascending=False, kind="stable").index
        header = ["region", "calls", f"{first} share", *[f"{m} {k}" for m in metrics for k in ("incl", "excl")]]
        rows, partial = [], []

        for region in order[:shown]:
            rows.append([region, format_count(calls[region]),
                         format_percent(cells.loc[(region, first), "share"]),
                         *[_cell(cells, region, m, k) for m in metrics for k in ("inclusive", "exclusive")]])
            partial += [f"    * {region}, {m}: sampled at the Enter and Leave of {format_count(c['measured_calls'])} "
                        f"of its {counted(c['calls'], 'call')}, the sums are theirs; exclusive known for "
                        f"{format_count(c['exclusive_calls'])} (all its callees measured too)"
                        for m in metrics if (region, m) in cells.index
                        for c in [cells.loc[(region, m)]] if c["exclusive_calls"] < c["calls"]]
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        out.append(f"  rank {rank}, regions by {first} incl:")
        out.append("    " + "  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                                      for i, (h, w) in enumerate(zip(header, widths, strict=True))))
        out.extend("    " + "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                                      for i, (v, w) in enumerate(zip(r, widths, strict=True))) for r in rows)
        out.extend(partial)
        if len(order) > shown:
            out.append(f"    ({len(order) - shown} more regions)")
    return out
