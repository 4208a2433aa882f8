"""The manifest's ``workload`` entry (the job's configuration: ``collectors/workloads/ps_sgd_config.py``,
docs/WORKLOAD.md) in a store made from others by ``ddltrace merge``: its ground truth's path, relative to the store
that holds the entry, made relative to the new store; and the one entry the merged stores share, or none and why.

Two stores of one run carry the same entry (the same command on the same world size); stores of different runs,
or of which only one recorded the job's configuration, have no one configuration that holds for the merged store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def ground_truth(entry: dict, store: Path) -> Path | None:
    """The absolute path of the ground truth ``entry`` (of the store at ``store``) names, or None where it names
    none that can be a path."""
    truth = entry.get("ground_truth")
    if not isinstance(truth, str) or not truth or "\0" in truth:
        return None
    try:
        return (store / truth).resolve()
    except OSError:  # a name too long for the file system, a loop of links: kept as the manifest has it
        return None


def relocated(entry: dict, store: Path, out: Path) -> dict:
    """``entry`` of the store at ``store`` for the store at ``out``: its ground truth's path made relative to
    ``out``."""
    truth = ground_truth(entry, store)
    return dict(entry) if truth is None else {**entry, "ground_truth": os.path.relpath(truth, out.resolve())}


def merged_workload(first: tuple[Path, Any], second: tuple[Path, Any], out: Path) -> tuple[Any, str | None]:
    """The ``workload`` entry of the store at ``out`` merged from two stores, each given as (its folder, its
    manifest's entry or None): the entry both carry (their ground truths' paths compared as the files they name),
    relocated to ``out`` (one that is not a mapping kept as it is, for the analyses to name); else None, with the
    note saying why (the stores named, and the fields that differ), or with no note where neither store has one."""
    (a, entry_a), (b, entry_b) = first, second
    if entry_a is None and entry_b is None:
        return None, None
    if entry_a is None or entry_b is None:
        has, lacks = (a, b) if entry_b is None else (b, a)
        return None, (f"no workload entry (the job's configuration): {has} has one, {lacks} has none (not one run, "
                      "or one store did not record it); the merged store keeps none")
    located = [_located(entry, store) for entry, store in ((entry_a, a), (entry_b, b))]
    fields = _differing(*located)
    if not fields:
        return (relocated(entry_a, a, out) if isinstance(entry_a, dict) else entry_a), None
    return None, (f"no workload entry (the job's configuration): those of {a} and {b} differ in "
                  f"{', '.join(fields)} (not one run); the merged store keeps neither")


def _located(entry: Any, store: Path) -> Any:
    """``entry`` with its ground truth's path absolute, to compare entries of stores in different folders."""
    truth = ground_truth(entry, store) if isinstance(entry, dict) else None
    return entry if truth is None else {**entry, "ground_truth": str(truth)}


def _differing(a: Any, b: Any, prefix: str = "") -> list[str]:
    """The dotted names of the fields whose values differ between ``a`` and ``b`` (``workload`` for the entries
    themselves where one is not a mapping), sorted."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return [] if a == b else [prefix or "workload"]
    return sorted(field for key in set(a) | set(b)
                  for field in _differing(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else str(key)))
