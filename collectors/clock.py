"""Clock alignment across ranks: what the PMPI runtime measured, as the store's ``clock`` manifest entry.

Each rank measures its offset to rank 0 by ping-pong (10 rounds, the shortest round trip kept) on a private
communicator, at MPI_Init and again at MPI_Finalize. The offset at a time between the two is interpolated
linearly (drift); the uncertainty of one measurement is half its round trip (the one-way delays are not
known to be equal), in ns. A rank that never reached MPI_Finalize keeps its init offset.
"""

from __future__ import annotations

from collections.abc import Iterable

from ddltrace.collectors.pmpi.records import RankRecords

METHOD = "PMPI ping-pong to rank 0 at MPI_Init and MPI_Finalize (min round trip of 10), linear drift in between"


def clock_manifest(ranks: Iterable[RankRecords]) -> dict:
    """The manifest's ``clock`` dict: method, offsets_ns and uncertainty_ns (at init, by rank), the same at
    finalize where measured, drift in ppm, and the largest uncertainty (all times in ns)."""
    offsets, uncert, fin_offsets, fin_uncert, drift = {}, {}, {}, {}, {}
    for rr in ranks:
        key = str(rr.rank)
        if not rr.syncs:
            continue
        offsets[key] = rr.syncs[0].offset_ns
        uncert[key] = rr.syncs[0].uncertainty_ns
        if len(rr.syncs) > 1:
            fin_offsets[key] = rr.syncs[1].offset_ns
            fin_uncert[key] = rr.syncs[1].uncertainty_ns
        if rr.drift_ppm is not None:
            drift[key] = round(rr.drift_ppm, 3)
    every = list(uncert.values()) + list(fin_uncert.values())
    return {
        "method": METHOD,
        "reference_rank": 0,
        "offsets_ns": offsets,
        "uncertainty_ns": uncert,
        "finalize_offsets_ns": fin_offsets,
        "finalize_uncertainty_ns": fin_uncert,
        "drift_ppm": drift,
        "max_uncertainty_ns": max(every) if every else 0,
    }
