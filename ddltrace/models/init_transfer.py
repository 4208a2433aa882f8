"""B's initialisation carried from A's runs through the disks' read time per byte, r_d (issue 17; docs/MODELS.md,
"The disk B").

Hashemi et al.'s initialisation is ``T_init(w) = m(w) T_disk``, T_disk a worker's read of the whole data set and
m(w) the storage kind's count (section 5.3: shared w, local 1, partitioned 1 / w). A fit of A's initialisations with
r_d free (A's profile without a disk section) learns ``T_disk(A) = r_d s n_f d`` (seconds): a worker's whole read as
the job does it, its read calls and its parsing of the file together, which on a fast disk outweigh the device by
orders of magnitude. On B the reader is taken as A's (the same code on the same kind of CPU) and only the device
differs, so each byte the device serves costs ``r_d(B) - r_d(A)`` more:

    T_disk(B) = T_disk(A) + (r_d(B) - r_d(A)) D

with r_d(A), r_d(B) calibrate's disk sections (O_DIRECT sequential reads, seconds per byte) and D the bytes a
worker fetched from the device for the whole data set on A (the job's own record, ``device_bytes`` of its
ground_truth.json ``init`` entries, the median over A's workers; a partitioned read's bytes times its run's w).
Scaling the fitted r_d by r_d(B) / r_d(A), as the transfer does for a profile's r_d, would take the parsing for
disk time; it is given beside (``scaled_s``) to show by how much. The interval: the fit's r_d interval and both
r_d's uncertainties (the model's confidence as a normal quantile, independent).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ddltrace.errors import DdltraceError
from ddltrace.models import hashemi

#: Where a model keeps what this carry needs besides its fitted r_d (``model fit --disk-profile``).
KEY = "disk"
#: m(w), the reads of the whole data set in T_init(w) = m(w) T_disk, for each storage kind (section 5.3).
READS = {"shared": "w", "local": "1", "partitioned": "1/w"}


def disk_r_d(profile: Any, source: str) -> dict:
    """``{"r_d", "uncertainty", "source"}`` (seconds per byte) from a calibrate profile's disk section; a profile
    without one is a DdltraceError naming the file."""
    table = profile.get("constants", profile) if isinstance(profile, Mapping) else None
    entry = table.get("r_d") if isinstance(table, Mapping) else None
    value = entry.get("value") if isinstance(entry, Mapping) else entry
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise DdltraceError(f"{source}: no disk section (r_d, s/B; 'ddltrace calibrate --only disk' measures it)")
    uncertainty = entry.get("uncertainty", 0.0) if isinstance(entry, Mapping) else 0.0
    if not isinstance(uncertainty, int | float) or not math.isfinite(uncertainty) or uncertainty < 0:
        uncertainty = 0.0
    return {"r_d": float(value), "uncertainty": float(uncertainty), "source": str(source)}


def device_bytes(stores: Iterable[str | Path], storage: str = "shared") -> dict | None:
    """The bytes a worker fetched from the device for the whole data set on A: the median over the workers of A's
    runs of the ``device_bytes`` the job recorded in the ground_truth.json beside each store (times the run's
    workers for a partitioned read, where a worker reads d / w samples). None where no run recorded any (the job
    did not read cold, or keeps no such record)."""
    values, runs = [], 0
    for store in stores:
        path = Path(store).parent / "ground_truth.json"
        try:
            truth = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        entries = [r for r in truth.get("init") or [] if isinstance(r, Mapping)
                   and isinstance(r.get("device_bytes"), int | float) and r.get("role", "worker") == "worker"]
        workers = sum(1 for r in truth.get("init") or [] if isinstance(r, Mapping) and r.get("role") == "worker")
        scale = max(workers, 1) if storage == "partitioned" else 1
        values += [float(r["device_bytes"]) * scale for r in entries]
        runs += bool(entries)
    if not values:
        return None
    return {"bytes": float(statistics.median(values)), "workers": len(values), "runs": runs,
            "from": "the job's ground_truth.json beside A's stores (init records' device_bytes)"}


def missing(model: Mapping) -> str | None:
    """Why ``model`` cannot carry its initialisation to another disk, or None: it needs r_d fitted from A's
    initialisations, A's disk section and the device's bytes (``model fit --disk-profile A-disk.json``)."""
    entry = (model.get("constants") or {}).get("r_d") or {}
    if entry.get("source") != "fitted":
        if entry.get("source") == "profile":
            return ("r_d was held at the fit's profile (the device alone), so the model's T_init is not A's measured "
                    "read: fit A's runs with a profile without the disk section and give that section apart "
                    "('model fit --disk-profile A-disk.json')")
        return ("the model has no initialisation fitted from A's runs (r_d not fitted: the runs recorded no "
                "initialisation, or the model lacks n_f)")
    disk = model.get(KEY) or {}
    if not disk.get("a"):
        return ("the model has no disk section of A (r_d of A's device): fit with 'model fit --disk-profile "
                "A-disk.json' ('ddltrace calibrate --only disk' on A)")
    if not disk.get("device_bytes"):
        return ("A's runs recorded no bytes fetched from the device (device_bytes in the job's ground_truth.json "
                "beside each store: the job did not read cold)")
    return None


def init_on_b(model: Mapping, r_d_b: Mapping, workers: Iterable[int]) -> dict:
    """Per w, B's initialisation (s) with its interval at the model's confidence: ``T_init(w) = m(w) (T_disk(A) +
    (r_d(B) - r_d(A)) D)`` (module docstring). ``r_d_b``: :func:`disk_r_d` of B's disk section. A model that
    cannot be carried (:func:`missing`) is a DdltraceError saying what is missing."""
    why = missing(model)
    if why:
        raise DdltraceError(f"B's initialisation: {why}")
    entry, workload, disk = model["constants"]["r_d"], model.get("workload") or {}, model[KEY]
    d = workload.get("d") or statistics.median(float(r["d"]) for r in model.get("measurements") or []
                                               if r.get("d") is not None)
    model_bytes = float(workload.get("s") or 8.0) * float(workload["n_f"]) * float(d)
    storage = workload.get("storage") or "shared"
    ra, ua = disk["a"]["r_d"], disk["a"]["uncertainty"]
    rb, ub = float(r_d_b["r_d"]), float(r_d_b["uncertainty"])
    device = float(disk["device_bytes"]["bytes"])
    z = statistics.NormalDist().inv_cdf(0.5 + float(model.get("confidence") or 0.95) / 2)
    delta, delta_err = rb - ra, z * math.hypot(ua, ub)
    ci = entry.get("ci") or [None, None]
    lo, hi = (float(x) if x is not None else float(entry["value"]) for x in ci)
    t_disk = float(entry["value"]) * model_bytes
    rows = []
    for w in sorted(set(workers)):
        m = hashemi.reads(w, storage)
        rows.append({"w": w, "predicted_s": m * (t_disk + delta * device),
                     "low_s": m * (lo * model_bytes + (delta - delta_err) * device),
                     "high_s": m * (hi * model_bytes + (delta + delta_err) * device),
                     "scaled_s": m * t_disk * rb / ra})
    return {"storage": storage, "t_disk_a_s": t_disk, "r_d_fit": float(entry["value"]), "r_d_fit_ci": [lo, hi],
            "model_bytes": model_bytes, "r_d_a": ra, "r_d_a_uncertainty": ua, "r_d_a_from": disk["a"]["source"],
            "r_d_b": rb, "r_d_b_uncertainty": ub, "r_d_b_from": r_d_b["source"], "device_bytes": device,
            "confidence": float(model.get("confidence") or 0.95), "rows": rows}


def describe(result: Mapping) -> list[str]:
    """The text lines of :func:`init_on_b`'s result, each number with its unit."""
    pct = int(round(100 * result["confidence"]))
    lines = [f"initialisation on B (storage {result['storage']}: T_init = "
             f"{READS[result['storage']]} x T_disk), carried "
             f"through r_d: T_disk(B) = T_disk(A) + (r_d(B) - r_d(A)) D",
             f"  T_disk(A) = {1e3 * result['t_disk_a_s']:.4g} ms (the fit of A's initialisations: r_d "
             f"{result['r_d_fit']:.4g} s/B x s n_f d = {result['model_bytes']:.0f} B); r_d(A) {result['r_d_a']:.4g} "
             f"s/B ({result['r_d_a_from']}), r_d(B) {result['r_d_b']:.4g} s/B ({result['r_d_b_from']}, "
             f"{1 / result['r_d_b'] / 2**10:.4g} KiB/s); D = {result['device_bytes']:.0f} B a worker fetched from "
             "A's device",
             f"  {'workers':>7}  {'on B':>10}  {f'{pct} % interval':>23}  {'r_d x B/A (whole read scaled)':>30}"]
    for row in result["rows"]:
        span = f"[{row['low_s']:.4g} s, {row['high_s']:.4g} s]"
        lines.append(f"  {row['w']:>7}  {row['predicted_s']:>8.4g} s  {span:>23}  {row['scaled_s']:>28.4g} s")
    return lines
