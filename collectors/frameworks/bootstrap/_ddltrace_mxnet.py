"""MXNet 1.x: ``mx.profiler`` in every DMLC role (worker, server, scheduler), steps counted from outside the job.

Each process configures MXNet's own profiler (``profiler.set_config(profile_all=True, aggregate_stats=False,
filename=<its folder>/profile.json)``) when ``mxnet.profiler`` is imported, i.e. inside ``import mxnet`` and
before ``mxnet.kvstore`` is: with ``DMLC_ROLE=server`` or ``scheduler``, ``import mxnet`` never returns (the
kvstore server loop runs inside the import, then calls ``sys.exit``), so everything is set up by then.
``mxnet.kvstore.base.create`` is wrapped to learn the process's place from the kvstore it makes (a worker's
``kv.rank``; a server's rank once the optimizer arrives: ``kv.rank`` before the loop crashes ps-lite) and, for
a server or the scheduler, to start profiling before the server loop.

Workers: a training step is one ``gluon.Trainer.step`` / ``Trainer.update`` or one ``Module.update`` (the
outermost call, so a BucketingModule's inner module does not count twice). The profiler runs from the end of
step FIRST-1 (so step FIRST's forward and backward are in) to the end of step LAST. MXNet's engine runs
operators after the Python thread has pushed them, and records them only if the profiler runs when they
execute; so, as MXNet's profiling guide does, ``nd.waitall()`` before the start (operators of earlier steps
still queued are not recorded) and after step LAST (the window's operators, its push / pull included, complete
while recorded). The profile is then dumped (a job that ends inside the window is dumped at exit); at exit our
own ``MXNDArrayWaitAll`` call is taken out of the file (its wall interval is in meta.json as
``own_waitall_ns``), so that it does not show as the job's wait.

Servers: with an optimizer on the kvstore (the default for dist kvstores), the server's updater runs once per
key per step; the server counts each key's updates and profiles from the first update of step FIRST to the
first of step LAST+1 after every key has had its update of step LAST. Until an optimizer arrives (and without
one: ``update_on_kvstore=False``) the server profiles from the start of its loop. The scheduler profiles its
whole life (it runs no operators: the file is small). Both dump at exit (``sys.exit`` after the loop runs the
``atexit`` hook, registered after MXNet's own shutdown hook, so before it).

The clock mark is an ``mx.profiler.Event("ddltrace.mark")`` (a ``B``/``E`` pair) recorded when profiling
starts. Standard library only, besides mxnet.
"""

from __future__ import annotations

import atexit
import os
import threading
import time

from _ddltrace_boot import MARK_NAME, after_import

PROFILE = "profile.json"


def install(proc) -> None:
    state = _Profiling(proc)
    after_import("mxnet.profiler", state.on_profiler)
    after_import("mxnet.kvstore.base", state.on_kvstore_base)


class _Profiling:
    def __init__(self, proc):
        self.proc = proc
        self.role = proc.meta.get("role") or "worker"
        self.profiler = None
        self.lock = threading.RLock()
        self.running = False
        self.marked = False
        self.done = False
        self.configured = False
        self.steps = 0
        self.depth = 0
        self.own_wait = None  # (t0, t1) wall ns of the bootstrap's MXNDArrayWaitAll at the window's end
        self.key_steps = {}  # server: updates per key so far
        self.server_window = False  # server: counting steps (an optimizer arrived)

    # -- set-up, inside ``import mxnet`` -------------------------------------------------------------------------
    def on_profiler(self, profiler) -> None:
        self.profiler = profiler
        profiler.set_config(**self.config())
        self.configured = True
        atexit.register(self.at_exit)
        if self.role == "worker":
            self._wrap_steps()
            if self.proc.first == 1:
                self.start()

    def on_kvstore_base(self, base) -> None:
        original = base.create

        def create(*args, **kwargs):
            kv = original(*args, **kwargs)
            try:
                self.on_kvstore(kv)
            except Exception as exc:  # never break the job
                self.proc.note(f"kvstore hook failed: {exc!r}")
            return kv

        create.__doc__, create.__name__ = original.__doc__, original.__name__
        base.create = create

    def on_kvstore(self, kv) -> None:
        kind = str(getattr(kv, "type", ""))
        if "dist" not in kind:
            return
        if self.role == "worker":
            rank = int(kv.rank)
            self.proc.update(rank=rank, index=rank, world_size=int(kv.num_workers), kvstore=kind,
                             identity_from="kvstore rank")
            return
        # server or scheduler: ps-lite starts inside the server loop, and kv.rank before it crashes the process;
        # a server's rank is read once the optimizer arrives (through the loop), the scheduler is alone in its role
        self.proc.update(kvstore=kind, index=0 if self.role == "scheduler" else self.proc.meta.get("index"))
        if self.role == "server" and hasattr(kv, "_set_updater"):
            original = kv._set_updater  # the optimizer sent by the workers arrives through this one

            def _set_updater(updater):
                if self.proc.meta.get("server_rank") is None:
                    rank = int(kv.rank)
                    self.proc.update(server_rank=rank, world_size=int(kv.num_workers), identity_from="kvstore rank",
                                     index=rank if self.proc.meta.get("index") is None else self.proc.meta["index"])
                return original(self.counting(updater))

            kv._set_updater = _set_updater
        self.start()  # the server loop runs next

    # -- step counting -------------------------------------------------------------------------------------------
    def _wrap_steps(self) -> None:
        def wrap_class(module, name, methods):
            cls = getattr(module, name, None)
            for method in methods:
                if cls is not None and method in vars(cls):
                    setattr(cls, method, self.step_wrapper(vars(cls)[method]))

        after_import("mxnet.gluon.trainer", lambda m: wrap_class(m, "Trainer", ("step", "update")))
        after_import("mxnet.module.base_module", lambda m: self._wrap_modules(m))

    def _wrap_modules(self, base_module) -> None:
        """Wrap ``update`` of every Module class (they are imported right after ``base_module``)."""
        def wrap(module):
            for value in list(vars(module).values()):
                if isinstance(value, type) and issubclass(value, base_module.BaseModule) and "update" in vars(value) \
                        and not getattr(vars(value)["update"], "_ddltrace", False):
                    value.update = self.step_wrapper(vars(value)["update"])

        wrap(base_module)
        for name in ("module", "bucketing_module", "sequential_module", "python_module"):
            after_import(f"mxnet.module.{name}", wrap)

    def step_wrapper(self, method):
        state = self

        def step(*args, **kwargs):
            state.depth += 1
            try:
                return method(*args, **kwargs)
            finally:
                state.depth -= 1
                if state.depth == 0:
                    state.on_step()

        step.__doc__, step.__name__, step._ddltrace = method.__doc__, method.__name__, True
        return step

    def on_step(self) -> None:
        self.steps += 1
        if self.done:
            return
        if self.steps == self.proc.first - 1:
            self.start()
        elif self.steps >= self.proc.last and self.running:
            self.finish()

    def counting(self, updater):
        """A server's updater that counts update rounds (one call per key per step)."""
        state = self

        def update(key, recv, stored):
            state.on_update(key)
            return updater(key, recv, stored)

        with self.lock:
            if not self.server_window and not self.done:
                self.server_window = True
                self.steps = 0
                if self.proc.first > 1:  # only set-up was profiled so far: resume at step FIRST
                    self.pause()
        return update

    def on_update(self, key) -> None:
        """Before the update of ``key``: its ``n``-th update is that key's step ``n``. Keys are merged and updated
        in the order all workers' pushes complete, so a step's keys interleave with the next step's."""
        with self.lock:
            if self.done:
                return
            step = self.key_steps[key] = self.key_steps.get(key, 0) + 1
            self.steps = max(self.steps, step)
            if step == self.proc.first and not self.running:
                self.start()
            elif step > self.proc.last and min(self.key_steps.values()) >= self.proc.last:
                self.finish()  # every key has had its update of step LAST (their operators have run)

    # -- profiler ------------------------------------------------------------------------------------------------
    def config(self) -> dict:
        return {"profile_all": True, "aggregate_stats": False, "continuous_dump": False,
                "filename": self.proc.path(PROFILE)}

    def wait_all(self) -> None:
        """Let every operator pushed so far run (the engine runs behind the Python thread)."""
        import mxnet

        mxnet.nd.waitall()

    def start(self) -> None:
        with self.lock:
            if self.running or self.done or not self.configured:
                return
            if self.role == "worker" and self.steps:
                self.wait_all()  # earlier steps' operators, still queued, are not the window's
            self.profiler.set_state("run")
            self.running = True
            self.proc.update(profiler_started_at_step=self.steps)
            if not self.marked:
                self.marked = True
                t0 = time.time_ns()
                event = self.profiler.Event(MARK_NAME)
                event.start()
                event.stop()
                self.proc.add_mark(t0, time.time_ns())

    def stop(self) -> None:
        with self.lock:
            if self.running:
                self.profiler.set_state("stop")
                self.running = False
                self.proc.update(profiler_stopped_at_step=self.steps)

    def pause(self) -> None:
        self.stop()
        self.proc.update(profiler_paused_at_step=self.steps)

    def finish(self, reason: str | None = None) -> None:
        with self.lock:
            if self.done or not self.configured:
                return
            self.done = True
            if self.role == "worker" and self.running:
                # the window's operators run after the Python thread has pushed them: wait for them with the
                # profiler on, or they are lost; that wait is ours, not the job's, and is taken out at exit
                t0 = time.time_ns()
                self.wait_all()
                self.own_wait = (t0, time.time_ns())
                self.proc.update(own_waitall_ns=list(self.own_wait))
            self.stop()
            if not self.marked:
                return  # nothing was ever recorded
            self.profiler.dump(finished=True)
            if self.role == "worker" or self.server_window:
                self.proc.update(profiled_steps=[self.proc.first, min(self.steps, self.proc.last)])
            else:
                self.proc.update(profiled_steps=None, profiled="whole process")
            self.proc.update(profiled_until_ns=time.time_ns())
            if reason:
                self.proc.note(reason)
            self.proc.add_file(PROFILE, "mxnet")

    def scrub(self) -> None:
        """Take the bootstrap's own ``MXNDArrayWaitAll`` call out of the dumped profile (the job did not wait)."""
        import json

        path = self.proc.path(PROFILE)
        lo, hi = self.own_wait[0] // 1000 - 1000, self.own_wait[1] // 1000 + 1000  # µs, 1 ms either side
        with open(path) as fh:
            trace = json.load(fh)
        events = trace.get("traceEvents", [])
        keep = [e for e in events if not (e.get("name") == "MXNDArrayWaitAll" and e.get("ph") in ("b", "e")
                                          and lo <= e.get("ts", 0) <= hi)]
        if len(keep) == len(events):
            return
        trace["traceEvents"] = keep
        with open(path + ".tmp", "w") as fh:
            json.dump(trace, fh)
        os.replace(path + ".tmp", path)
        self.proc.update(own_waitall_removed=len(events) - len(keep))

    def at_exit(self) -> None:
        try:
            if self.done:
                if self.own_wait is not None and self.marked:
                    self.scrub()
                return
            if not self.marked:
                if self.role == "worker" and self.steps:
                    self.proc.note(f"the job ended after step {self.steps}, before the window {self.proc.first}-"
                                   f"{self.proc.last}: nothing profiled")
                return
            reason = None
            if (self.role == "worker" or self.server_window) and self.steps < self.proc.last:
                reason = (f"the job ended after step {self.steps}, inside the window "
                          f"{self.proc.first}-{self.proc.last}")
            self.finish(reason)
            if self.own_wait is not None:
                self.scrub()
        except Exception as exc:
            self.proc.note(f"profile dump at exit failed: {exc!r}")
