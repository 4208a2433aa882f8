"""Horovod: its own timeline (``HOROVOD_TIMELINE``, written by the coordinator, rank 0, for every rank's tensors)
plus the underlying framework's profiler (PyTorch's, or TensorFlow's when that bootstrap is present) on every rank.

``hvd.init()`` reads ``HOROVOD_TIMELINE``. Every rank must see it set, not only rank 0: a rank with the timeline
on exchanges a longer response-cache bit vector than one without, and Horovod 0.28 then hangs in its first
collective (Gloo: "Timed out waiting 30000ms for recv operation"). So the bootstrap wraps ``HorovodBasics.init``
(shared by horovod.torch / .tensorflow / .mxnet) and sets the variable just before it, in every process that
initialises Horovod (not in the launcher, whose environment the workers inherit). After ``init`` the rank and
size come from Horovod itself. With the PyTorch bootstrap the value is ``DYNAMIC`` and rank 0 (the coordinator,
the only writer) calls ``start_timeline(<its folder>/horovod_timeline.json)`` when the window's first step
begins and ``stop_timeline()`` when its last step ends; otherwise (TensorFlow) it is that file from the start
and the timeline covers the whole run.

PyTorch: a training step is one ``step()`` of Horovod's ``DistributedOptimizer``, counted once (its ``step``
calls the wrapped optimizer's, which fires torch's step hooks a second time), and the optimizer steps that
``hvd.broadcast_optimizer_state`` makes to create the state (before the DistributedOptimizer exists) are not
training steps. A job that never uses a DistributedOptimizer falls back to the PyTorch bootstrap's rule (the
first optimizer that steps). The step's wait for its gradients' allreduces is named (see ``_name_the_wait``).
"""

from __future__ import annotations

import importlib
import os
import time

from _ddltrace_boot import after_import

TIMELINE = "horovod_timeline.json"
OURS = "DDLTRACE_HOROVOD_TIMELINE"  # the value we set: a child that inherits it sets its own
DYNAMIC = "DYNAMIC"
WAIT_NAME = "horovod::allreduce_wait (DistributedOptimizer.synchronize)"


class _Horovod:
    """This process's Horovod: its ``HorovodBasics`` once initialised, and (PyTorch) the profiling that opens
    and closes rank 0's timeline around the step window."""

    def __init__(self, proc):
        self.proc, self.basics, self.profiling, self.timeline = proc, None, None, None
        self.path = os.path.join(proc.folder, TIMELINE)

    def start_window(self) -> None:
        if self.timeline == DYNAMIC and self.basics is not None:
            self.basics.start_timeline(self.path, mark_cycles=False)
            self.proc.add_file(TIMELINE, "horovod")
            self.proc.update(horovod_timeline_from_ns=time.time_ns())
            self.timeline = "recording"

    def end_window(self) -> None:
        if self.timeline == "recording":
            self.basics.stop_timeline()
            self.proc.update(horovod_timeline_until_ns=time.time_ns())
            self.timeline = "done"


def install(proc) -> None:
    state = _Horovod(proc)
    after_import("horovod.common.basics", lambda basics: _wrap_init(state, basics.HorovodBasics))
    try:
        torch_boot = importlib.import_module("_ddltrace_torch")
    except ImportError:
        torch_boot = None
    if torch_boot is not None:
        profiling = _horovod_profiling(torch_boot._Profiling, state)
        after_import("torch", lambda torch: profiling(proc, torch))
        after_import("horovod.torch.optimizer", _name_the_wait)
    try:
        importlib.import_module("_ddltrace_tf").install(proc)
    except ImportError:
        pass


def _wrap_init(state: _Horovod, cls) -> None:
    original, proc = cls.init, state.proc

    def init(self, *args, **kwargs):
        job_timeline = os.environ.get("HOROVOD_TIMELINE")
        ours = job_timeline is None or job_timeline == os.environ.get(OURS)
        if ours:
            # with the PyTorch profiling, rank 0 records the window only (hvd.start_timeline / stop_timeline);
            # else the whole run. Every rank gets the same setting (see above).
            value = DYNAMIC if state.profiling is not None else state.path
            os.makedirs(proc.folder, exist_ok=True)  # the coordinator opens the file during init
            os.environ["HOROVOD_TIMELINE"] = os.environ[OURS] = value
        result = original(self, *args, **kwargs)
        try:
            rank, size = self.rank(), self.size()
        except Exception:  # never break the job's init
            return result
        if proc.meta.get("horovod_rank") is None:
            proc.update(rank=rank, index=rank, world_size=size, horovod_rank=rank,
                        identity_from=proc.meta["from"] or "hvd.rank()")
            if rank == 0 and ours:
                state.basics, state.timeline = self, os.environ["HOROVOD_TIMELINE"]
                if state.timeline != DYNAMIC:
                    proc.add_file(TIMELINE, "horovod")
                    proc.note("the Horovod timeline covers the whole run (rank 0's view of every rank's tensors)")
                elif state.profiling is not None and state.profiling.profiler is not None:
                    state.start_window()  # the window began before hvd.init (--steps 1-...)
            elif rank == 0:
                proc.note(f"HOROVOD_TIMELINE={job_timeline} was set by the job: that timeline is not imported")
        return result

    cls.init = init


def _name_the_wait(module) -> None:
    """``DistributedOptimizer.step`` first waits for its gradients' allreduces (run by Horovod's background
    thread, which torch.profiler does not see): that wait becomes a ``record_function`` named WAIT_NAME, which
    the kineto categories call comm (the communication the step is exposed to)."""
    import torch

    for cls in (getattr(module, "_DistributedOptimizer", None), getattr(module, "_DistributedAdasumOptimizer", None)):
        original = getattr(cls, "synchronize", None)
        if original is None or getattr(original, "_ddltrace", False):
            continue

        def synchronize(self, *args, _original=original, **kwargs):
            with torch.profiler.record_function(WAIT_NAME):
                return _original(self, *args, **kwargs)

        synchronize._ddltrace = True
        cls.synchronize = synchronize


def _is_horovod(optimizer) -> bool:
    # DistributedOptimizer builds a class from _DistributedOptimizer's (or the Adasum one's) dict
    return type(optimizer).__module__.startswith("horovod.") or hasattr(type(optimizer), "_allreduce_grad_async")


def _horovod_profiling(base, state: _Horovod):
    class HorovodProfiling(base):
        def __init__(self, proc, torch):
            state.profiling = self
            super().__init__(proc, torch)

        def count(self, optimizer) -> None:
            if _is_horovod(optimizer) and self.optimizer is not None and not _is_horovod(self.optimizer) \
                    and self.profiler is None:
                # the steps so far were set-up (broadcast_optimizer_state): count from the first real one
                self.optimizer, self.steps = None, 0
            super().count(optimizer)

        def mark(self) -> None:  # the window's first step begins
            super().mark()
            state.start_window()

        def export(self, prof) -> None:  # the window's last step ended
            state.end_window()
            super().export(prof)

        def at_exit(self) -> None:
            state.end_window()
            super().at_exit()

    return HorovodProfiling
