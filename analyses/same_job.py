"""Which runs are of one job: the scaling series that the scaling table and the across-run detectors compare.

A *series* is the runs of one job at one batch size, whatever their numbers of workers w. Two runs are of one job
when their manifests' ``workload`` entries (the job's name and configuration, which ``ddltrace workload`` and
``ddltrace run`` record) are equal except for :data:`PER_RUN_KEYS`: the worker count, what the job derives from it
(ranks, the learning rate alpha the server scales by w, gradients per update, softsync's n, the server rank, a
lone worker's local update) and where the data set lay (the job makes it from ``samples`` and ``seed``, which are
compared); and when the manifests' commands run the job under the same programs (:func:`wrapper`: a cgroup's
``in-quota`` gives the job another machine, so ``ps-sgd-quota``'s runs on its CPU-quota B are not A's job).
So ``par-w1`` and ``par-w4`` are one job; ``seq-w4`` (``init`` sequential), ``server-saturated-w4``
(``server_cost``), ``straggler-w4`` and the disk runs (``samples``, ``epochs``, ``sample_time``) each another.

A store whose manifest does not describe its job (an imported trace, a synthetic store) has nothing to tell its job
from another's: the undescribed stores of one framework (the manifest's ``run.framework``) given together are
taken, on the user's word, as one job, never as one with a described job nor with another framework's.

The order the runs are given in does not matter: series come sorted by their key, runs within one by w and name.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import PurePath

from ddltrace.analyses.run_analysis import BATCH_KEYS

#: the ``workload.config`` entries that differ between the runs of one job: the worker count, what follows from it,
#: the batch size (the series' other key), and the data set's path
PER_RUN_KEYS = frozenset({"workers", "ranks", "alpha", "gradients_per_update", "softsync_n", "server_rank", "local",
                          "data", *BATCH_KEYS})


def job_of(run) -> dict:
    """What tells ``run``'s job from another's: ``{"job": name, **config}`` without :data:`PER_RUN_KEYS` for a
    described job, ``{"undescribed": framework}`` for a store whose manifest has no ``workload`` entry."""
    workload = run.store.manifest.get("workload")
    config = workload.get("config") if isinstance(workload, dict) else None
    if not isinstance(config, dict):
        return {"undescribed": str(run.store.run.get("framework") or "unknown framework")}
    return {"job": str(workload.get("job") or "unnamed job"), "wrapper": wrapper(run.store.run.get("command")),
            **{k: v for k, v in config.items() if k not in PER_RUN_KEYS}}


def wrapper(command) -> str:
    """The programs ``command`` runs the job under, by name: the words before its Python interpreter that are
    neither options nor numbers (``in-quota``, a cgroup's CPU quota; ``mpiexec``), 'none' for none."""
    try:
        words = shlex.split(command) if isinstance(command, str) else [str(w) for w in command or []]
    except ValueError:  # unbalanced quotes: no wrapper to read
        return "none"
    names = [PurePath(w).name for w in words]
    before = next((i for i, name in enumerate(names) if name.startswith("python")), 0)
    return " ".join(n for n in names[:before] if not n.startswith("-") and not n.isdigit()) or "none"


def series_key(run) -> str:
    """The series ``run`` belongs to, as text (sortable, equal for runs of one job at one batch size)."""
    return json.dumps({"batch": run.batch_size, **job_of(run)}, sort_keys=True, default=str)


def series_of(runs) -> dict[str, list]:
    """``runs`` by series (:func:`series_key`), series in key order, each series' runs by w then name."""
    out: dict[str, list] = {}
    for run in runs:
        out.setdefault(series_key(run), []).append(run)
    return {key: sorted(out[key], key=lambda r: (r.workers, r.name)) for key in sorted(out)}


def series_labels(keys) -> dict[str, str]:
    """A short, distinct name for each series key among ``keys``: the job's name, each configuration entry whose
    value is not the one most of the series given share (``init=sequential``; ``-`` where the job has no such
    entry), and the batch size; ``undescribed (mpi), batch 64`` for undescribed stores."""
    jobs = {key: json.loads(key) for key in keys}
    entries = sorted({k for job in jobs.values() for k in job} - {"job", "batch", "undescribed"})
    usual = {}
    for k in entries:
        (top, n), *rest = Counter(json.dumps(job.get(k, "-")) for job in jobs.values()).most_common()
        if not rest or rest[0][1] < n:  # a value most share, said by the series without it
            usual[k] = top
    labels = {}
    for key, job in jobs.items():
        if "undescribed" in job:
            name = f"undescribed ({job['undescribed']})"
        else:
            name = " ".join([job["job"], *(f"{k}={job.get(k, '-')}" for k in entries
                                           if usual.get(k) != json.dumps(job.get(k, "-")))])
        labels[key] = f"{name}, batch {job['batch'] if job['batch'] is not None else 'unknown'}"
    return labels
