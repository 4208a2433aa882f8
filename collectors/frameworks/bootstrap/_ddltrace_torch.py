"""PyTorch: ``torch.profiler`` around the step window, steps counted from outside the job's code.

A training step is one outermost ``step()`` of the job's first optimizer (global optimizer step pre- and
post-hooks, PyTorch >= 2.0; a wrapper whose step calls the wrapped optimizer's counts once): no ``prof.step()``
needed in the script. The profiler starts one step before the window (one warm-up step, whose events are
dropped, as torch.profiler's schedule does), records the window's steps (with each op's input shapes where
``DDLTRACE_FW_RECORD_SHAPES`` is 1: ``ddltrace run --record-shapes``, which gives gloo's collectives their bytes) and
writes the Kineto trace (``trace.pt.trace.json``) when the window ends or, if the job ends inside it, at exit. Its
``ProfilerStep#N`` spans carry the job's own step numbers (N = 5..9 for the window 5-9). torch opens step N + 1 when
step N ends; where the profiler stops before that step ended (the job's exit, a SIGTERM, the job's own profiler) the
meta's ``unfinished_step`` says N + 1, and the host side drops its span (a 12-step job's window 10-20 read a 13th
step, the final barrier and teardown). The rank is read from the
launcher (torchrun's RANK) or, for jobs that pass it in code, from ``init_process_group``.

Torch has one profiler session per process: a job that runs ``torch.profiler`` (or ``torch.autograd.profiler``)
itself keeps it. The window does not start while the job's profiler runs, and when the job starts its profiler
inside the window the window ends there (its trace is written, up to that point); both are said in the notes.
Two sessions at once crash the process (SIGSEGV in torch 2.13).

A SIGTERM inside the window (how torchrun ends the other workers when one fails) writes the trace, then ends the
process by the signal as before; the handler is installed for the window only, where the job has none.
Standard library only, besides torch.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time

from _ddltrace_boot import MARK_NAME, after_import

TRACE = "trace.pt.trace.json"


def install(proc) -> None:
    after_import("torch", lambda torch: _Profiling(proc, torch))


class _Profiling:
    def __init__(self, proc, torch):
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self.proc, self.torch = proc, torch
        self.steps = 0
        self.depth = 0  # optimizer steps under way: a wrapper's step() calls the wrapped optimizer's
        self.optimizer = None
        self.profiler = None
        self.done = False
        self.unfinished_step = None  # the step under way when the profiler stopped before it ended (job's number)
        self.warmup = 1 if proc.first >= 2 else 0
        self.start_after = proc.first - 1 - self.warmup  # steps completed when the profiler starts
        self.jobs_sessions: set = set()  # the job's own profiler sessions under way (autograd profile objects)
        self.writing = False  # the trace is being written (a SIGTERM then waits for it)
        self.term_pending = False
        register_optimizer_step_pre_hook(self.before_step)
        register_optimizer_step_post_hook(self.on_step)
        self._wrap_init_process_group()
        self._watch_profiler_sessions()
        atexit.register(self.at_exit)
        if self.start_after == 0 and proc.meta["rank"] is not None:
            self.start()

    def _wrap_init_process_group(self) -> None:
        import torch.distributed as dist

        if not dist.is_available():
            return
        original = dist.init_process_group

        def init_process_group(*args, **kwargs):
            result = original(*args, **kwargs)
            self.proc.update(rank=dist.get_rank(), world_size=dist.get_world_size(), backend=str(dist.get_backend()),
                             index=dist.get_rank(), identity_from=self.proc.meta["from"] or "init_process_group")
            return result

        dist.init_process_group = init_process_group
        dist.distributed_c10d.init_process_group = init_process_group

    def _watch_profiler_sessions(self) -> None:
        """Track the job's own profiler sessions: every Python profiler session, ``torch.profiler``'s and
        ``torch.autograd.profiler``'s, is prepared by ``torch.autograd.profiler.profile._prepare_trace`` and ends
        in its ``__exit__``. One of the job's that begins while the window records ends the window first."""
        cls = self.torch.autograd.profiler.profile
        prepare, exit_ = cls._prepare_trace, cls.__exit__
        owner = self

        def _prepare_trace(session, *args, **kwargs):
            if session is not owner.session():
                owner.jobs_sessions.add(session)
                owner.yield_to_job()
            return prepare(session, *args, **kwargs)

        def __exit__(session, *args, **kwargs):
            owner.jobs_sessions.discard(session)
            return exit_(session, *args, **kwargs)

        cls._prepare_trace, cls.__exit__ = _prepare_trace, __exit__

    def session(self):
        """Our profiler's session (its ``torch.autograd.profiler.profile``), None before it is prepared."""
        return getattr(self.profiler, "profiler", None)

    def yield_to_job(self) -> None:
        """The job starts a profiler of its own: end the window now, writing what it recorded (one session at
        a time)."""
        if self.profiler is None or self.done:
            return
        self.proc.note(f"the job started its own torch profiler after step {self.steps}: the window "
                       f"{self.proc.first}-{self.proc.last} ends there")
        self.done = True  # counts no more steps, also when nothing was recorded yet (still warming up)
        self.stop_inside_step()

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        if self.jobs_sessions:
            self.done = True
            self.proc.note(f"the job's own torch profiler runs at step {self.steps + 1}: the window "
                           f"{self.proc.first}-{self.proc.last} is not profiled (one profiler session at a time)")
            return
        activities = [ProfilerActivity.CPU]
        if self.torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        active = self.proc.last - self.proc.first + 1
        offset = self.steps + 1  # the job's number of the step about to begin: ProfilerStep#offset
        self.profiler = profile(activities=activities, on_trace_ready=self.export,
                                record_shapes=os.environ.get("DDLTRACE_FW_RECORD_SHAPES") == "1",
                                schedule=schedule(skip_first=offset, wait=0, warmup=self.warmup, active=active,
                                                  repeat=1))
        # torch names a step ProfilerStep#<step_num> and starts at 0: from the step before ours, started and
        # stepped (the profiler is still off there), the steps carry the job's own numbers
        self.profiler.step_num = offset - 1
        self.profiler.start()
        self.profiler.step()
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
                signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, self.on_sigterm)
        if self.warmup == 0:
            self.mark()
        self.proc.update(profiler_started_at_step=self.steps)

    def mark(self) -> None:
        t0 = time.time_ns()
        with self.torch.profiler.record_function(MARK_NAME):
            pass
        self.proc.add_mark(t0, time.time_ns())

    def before_step(self, optimizer, args, kwargs) -> None:
        self.depth += 1

    def on_step(self, optimizer, args, kwargs) -> None:
        """An optimizer's step() ended: count it if it is the outermost one (not a wrapped optimizer's)."""
        self.depth = max(self.depth - 1, 0)
        if not self.depth:
            self.count(optimizer)

    def count(self, optimizer) -> None:
        """One training step ended: start, step or mark the profiler as the window says."""
        if self.optimizer is None:
            self.optimizer = optimizer
        if optimizer is not self.optimizer or self.done:
            return
        self.steps += 1
        if self.profiler is None:
            if self.steps == self.start_after:
                self.start()
            return
        self.profiler.step()
        if self.steps == self.start_after + self.warmup:  # the first recorded step begins
            self.mark()

    def stop_inside_step(self) -> None:
        """Stop the profiler before the step under way ended (torch opened it when the previous one ended): its
        number is the meta's ``unfinished_step``, a span the host side does not take for a step."""
        self.unfinished_step = self.profiler.step_num
        self.profiler.stop()

    def export(self, prof) -> None:
        """Write the trace (the window's end, the job's exit or a SIGTERM inside it, or the job's own profiler
        starting)."""
        self.writing = True
        prof.export_chrome_trace(self.proc.path(TRACE))
        self.done = True
        last = min(self.steps, self.proc.last)
        self.proc.update(profiled_steps=[self.proc.first, last] if last >= self.proc.first else None,
                         profiled_until_ns=time.time_ns(), unfinished_step=self.unfinished_step)
        self.proc.add_file(TRACE, "kineto")
        self.writing = False
        if signal.getsignal(signal.SIGTERM) == self.on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the window is over: the job's default again
        if self.term_pending:
            self.end_by_sigterm()

    def on_sigterm(self, signum, frame) -> None:
        """SIGTERM inside the window: write the trace (or let the write under way finish), then end by it."""
        if self.writing:
            self.term_pending = True
            return
        if self.profiler is not None and not self.done:
            self.proc.note(f"SIGTERM after step {self.steps}, inside the window {self.proc.first}-{self.proc.last}:"
                           " trace written before exiting")
            self.done = True
            self.stop_inside_step()
        self.end_by_sigterm()

    def end_by_sigterm(self) -> None:
        self.proc.update(ended_by="SIGTERM")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def at_exit(self) -> None:
        if self.profiler is not None and not self.done:
            if self.steps < self.proc.last:
                self.proc.note(f"the job ended after step {self.steps}, inside the window "
                               f"{self.proc.first}-{self.proc.last}")
            self.stop_inside_step()
        elif self.profiler is None and self.steps and not self.done:  # (done: the job's profiler ran instead)
            self.proc.note(f"the job ended after step {self.steps}, before the window {self.proc.first}-"
                           f"{self.proc.last}: nothing profiled")
