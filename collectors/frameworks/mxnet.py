"""MXNet 1.x: ``mx.profiler`` switched on by the bootstrap (bootstrap/_ddltrace_mxnet.py) in every DMLC role.

Workers, servers and the scheduler all run the bootstrap (``tools/launch.py`` starts the same command in each
role, told apart by ``DMLC_ROLE``). When ``mxnet.profiler`` is imported (inside ``import mxnet``, before the
kvstore server loop that a server or the scheduler enters during that import), it calls
``profiler.set_config(profile_all=True, aggregate_stats=False, filename=<process folder>/profile.json)`` and
wraps ``mx.kv.create``: a worker's rank is its kvstore's ``kv.rank``; a server starts profiling before its loop
and counts update rounds to profile the same window of steps; the scheduler is profiled whole. A worker step is
one ``gluon.Trainer.step``/``update`` or ``Module.update``. The profile is dumped (``profiler.dump``) when the
window ends, or at exit. The clock mark is an ``mx.profiler.Event("ddltrace.mark")``.

The only variable set: ``MXNET_PROFILER_AUTOSTART=0``, so that a profiler autostarted from the user's
environment (whole run, ``profile.json`` in the working folder of every process) does not run beside the window.
The DMLC settings are the launcher's and left untouched.
"""

from __future__ import annotations

from pathlib import Path


def env(fw_dir: Path, steps: tuple[int, int]) -> dict[str, str]:
    """``MXNET_PROFILER_AUTOSTART=0``: the bootstrap starts and stops the profiler itself."""
    return {"MXNET_PROFILER_AUTOSTART": "0"}
