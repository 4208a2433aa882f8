"""TensorFlow: the TF2 profiler around the step window, or TF1 ``FULL_TRACE`` timelines for ``Session.run`` jobs,
and the profiler around ``Server.join`` for tasks that only serve (a parameter server). Standard library only,
besides tensorflow.

Steps are counted from outside the job's code:

- TF2 (eager, ``tf.function`` loops, Keras ``fit``): a training step is one call of the outermost ``tf.function``
  whose tracing ran an optimizer's ``apply`` (Keras 3 ``BaseOptimizer.apply``, which ``apply_gradients`` and
  ``fit``'s train step use; or a ``tf.compat.v1.train.Optimizer.apply_gradients`` called eagerly), or, for eager
  code, one such optimizer call outside any ``tf.function``. ``tf.profiler.experimental.start`` runs before the
  window's first step (logdir in this process's own folder), each profiled step runs inside
  ``Trace("train", step_num=n)``, and ``stop`` after the last one writes ``<host>.xplane.pb``, moved to the
  process folder. The mark is a ``Trace("ddltrace.mark")`` right after the start.
- TF1 (``Session.run``, graph mode): a training step is a ``Session.run`` whose fetches hold an op returned by a
  ``tf.compat.v1.train.Optimizer``'s ``apply_gradients`` / ``minimize`` (any ``Session.run`` when the job built
  no such op). Window steps get ``RunOptions(trace_level=FULL_TRACE)`` (merged into the job's own options) and
  each writes ``timeline_step<n>.json`` (``client.timeline`` Chrome JSON of the step's ``step_stats``, the
  format of the tf1 importer). TF1 times are wall-clock microseconds already: the mark is a node
  ``ddltrace.mark`` added to the first window step's stats on this task's device, at the wall time read
  just before that ``Session.run``.
- A process that blocks in ``Server.join()`` (a ``ps`` task; a TF2 ParameterServerStrategy worker) runs the TF2
  profiler while a step-running process of the same run has its window open (it watches the other processes'
  ``meta.json`` in DDLTRACE_FW_DIR), and saves the profile when they close it, or at exit / SIGTERM.

Role and index come from TF_CONFIG; TF1 jobs that pass ``--job_name`` / ``--task_index`` (and
``--worker_hosts``) flags instead are read from ``sys.argv``.
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time

from _ddltrace_boot import MARK_NAME, after_import

PROFILE_DIR = "tfprof"  # the TF2 profiler's logdir inside the process folder (emptied once the file is moved)
POLL_S = 0.02  # how often a serving process looks at the step-running processes' meta.json
SERVER_WAIT_S = 3.0  # at most this long a TF1 worker waits, before its window, for serving processes to profile


def install(proc) -> None:
    _identity_from_argv(proc)
    state = _Profiling(proc)
    after_import("tensorflow", state.on_tensorflow)
    after_import("keras.src.optimizers.base_optimizer", state.on_keras_optimizer)


def _flag(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _identity_from_argv(proc) -> None:
    """TF1 jobs often take the task from flags (``--job_name ps --task_index 0``), not from TF_CONFIG."""
    if proc.meta.get("from") == "TF_CONFIG":
        return
    argv = sys.argv
    job = _flag(argv, "--job_name", "--job-name")
    index = _flag(argv, "--task_index", "--task-index")
    if job is None:
        return
    index = int(index) if index is not None and index.isdigit() else 0
    workers = _flag(argv, "--worker_hosts", "--worker-hosts")
    chiefs = _flag(argv, "--chief_hosts", "--chief-hosts")
    n_chief = len([h for h in (chiefs or "").split(",") if h])
    rank = index if job == "chief" else index + n_chief if job == "worker" else None
    size = (n_chief + len([h for h in workers.split(",") if h])) if workers else None
    proc.meta.update(role=job, index=index, rank=rank, world_size=size, **{"from": "argv (--job_name/--task_index)"})


class _Profiling:
    def __init__(self, proc):
        self.proc = proc
        self.tf = None
        self.lock = threading.RLock()
        self.steps = 0  # training steps completed
        self.step_fn = None  # the outermost tf.function that runs the optimizer
        self.calling: list = []  # outermost tf.function calls in progress (any thread)
        self.eager_depth = threading.local()
        self.train_ops: set = set()  # TF1: ops returned by optimizers, per graph
        self.profiling = False  # TF2 profiler running
        self.done = False
        self.mode = None  # "tf2", "tf1" or "server", once known
        self.sessions = 0  # TF2 profiler sessions saved
        self.start_failures = 0
        self.traced: list = []  # TF1: (step, StepStats) of the window, written when it closes

    # ------------------------------------------------------------------ hooks
    def on_tensorflow(self, tf) -> None:
        self.tf = tf
        from tensorflow.python.client import session
        from tensorflow.python.eager.polymorphic_function import polymorphic_function
        from tensorflow.python.training import optimizer as v1_optimizer
        from tensorflow.python.training import server_lib

        self._wrap_function(polymorphic_function.Function)
        self._wrap_session(session.BaseSession)
        self._wrap_v1_optimizer(v1_optimizer.Optimizer)
        self._wrap_join(server_lib.Server)
        atexit.register(self.at_exit)
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
                signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, self.on_sigterm)

    def on_keras_optimizer(self, module) -> None:
        base = module.BaseOptimizer
        original = base.apply
        owner = self

        def apply(opt, *args, **kwargs):
            depth = getattr(owner.eager_depth, "n", 0)
            owner.eager_depth.n = depth + 1
            try:
                result = original(opt, *args, **kwargs)
            finally:
                owner.eager_depth.n = depth
            if depth == 0:  # LossScaleOptimizer.apply calls its inner optimizer's apply: one step
                owner.on_optimizer()
            return result

        base.apply = apply

    def _wrap_v1_optimizer(self, cls) -> None:
        owner = self
        for name in ("apply_gradients", "minimize"):
            original = getattr(cls, name)

            def wrapper(opt, *args, _original=original, **kwargs):
                result = _original(opt, *args, **kwargs)
                if owner.tf.executing_eagerly():
                    owner.on_optimizer()
                elif result is not None:
                    op = getattr(result, "op", result)
                    owner.train_ops.add((id(op.graph), op.name))
                return result

            setattr(cls, name, wrapper)
        try:  # SyncReplicasOptimizer overrides apply_gradients; the op users fetch is its own
            from tensorflow.python.training import sync_replicas_optimizer

            sync = sync_replicas_optimizer.SyncReplicasOptimizer
            original_sync = sync.apply_gradients

            def sync_apply(opt, *args, **kwargs):
                result = original_sync(opt, *args, **kwargs)
                if result is not None and not owner.tf.executing_eagerly():
                    op = getattr(result, "op", result)
                    owner.train_ops.add((id(op.graph), op.name))
                return result

            sync.apply_gradients = sync_apply
        except (ImportError, AttributeError):
            pass

    # ------------------------------------------------------------------ TF2: tf.function / eager steps
    def _wrap_function(self, cls) -> None:
        original = cls.__call__
        owner = self

        def __call__(fn, *args, **kwargs):
            with owner.lock:
                outer = not owner.calling
                if outer:
                    owner.calling.append(fn)
            if not outer:
                return original(fn, *args, **kwargs)
            is_step = fn is owner.step_fn
            try:
                if is_step:
                    owner.before_step()
                if is_step and owner.profiling:
                    with owner.tf.profiler.experimental.Trace("train", step_num=owner.steps + 1, _r=1):
                        result = original(fn, *args, **kwargs)
                else:
                    result = original(fn, *args, **kwargs)
            finally:
                with owner.lock:
                    owner.calling.remove(fn)
            if fn is owner.step_fn:  # also the call whose tracing found the optimizer
                owner.after_step()
            return result

        cls.__call__ = __call__

    def on_optimizer(self) -> None:
        """An optimizer update ran (eagerly) or was traced (inside a tf.function being called)."""
        with self.lock:
            calling = list(self.calling)
        if calling:
            if self.step_fn is None:
                self.step_fn = calling[0]
                self.mode = self.mode or "tf2"
                if self.proc.first == 1 and self.steps == 0:
                    self.start_tf2()  # cannot start before a step not yet known: step 1 includes its tracing
            return
        if self.step_fn is None:  # eager training loop: the optimizer call is the step's end
            self.mode = self.mode or "tf2"
            self.after_step()
            self.before_step()

    def before_step(self) -> None:
        if not self.done and not self.profiling and self.steps + 1 == self.proc.first:
            self.start_tf2()

    def after_step(self) -> None:
        self.steps += 1
        if self.profiling and self.steps >= self.proc.last:
            self.stop_tf2()

    def start_tf2(self) -> None:
        with self.lock:
            if not self.profiling and not self.done:
                self._start_tf2()

    def _start_tf2(self) -> None:
        tf = self.tf
        options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                           device_tracer_level=1)
        try:
            tf.profiler.experimental.start(self.proc.path(PROFILE_DIR), options=options)
        except Exception as exc:  # another profiler session is running
            if self.mode == "server":
                # a worker's FULL_TRACE RunGraph holds TF's one profiler session for a moment: retry at the
                # next poll (that RunGraph then goes without a device tracer; its step stats do not need one)
                self.start_failures += 1
                if self.start_failures == 1:
                    self.proc.note(f"TF2 profiler start refused ({exc}); retrying every {POLL_S} s")
                return
            self.done = True  # the job's own profiler: leave it alone
            self.proc.note(f"TF2 profiler not started: {exc}")
            return
        self.profiling = True
        t0 = time.time_ns()
        with tf.profiler.experimental.Trace(MARK_NAME):
            pass
        t1 = time.time_ns()
        if self.mode == "server":  # not a window of its own: the step-running processes' windows
            self.proc.update(tf_mode=self.mode, profiling_since_ns=self.proc.meta.get("profiling_since_ns", t0))
        else:
            self.proc.update(tf_mode=self.mode, mechanism="tf.profiler.experimental (XPlane)",
                             profiler_started_at_step=self.steps, window_open_ns=t0)
        self.proc.add_mark(t0, t1)

    def stop_tf2(self, reason: str | None = None, final: bool = True) -> None:
        """Stop the profiler and move its file into the process folder (``final``: no further session)."""
        with self.lock:
            if self.profiling:
                self._stop_tf2(reason, final)

    def _stop_tf2(self, reason: str | None, final: bool) -> None:
        self.profiling = False
        self.done = final
        self.sessions += 1
        try:
            self.tf.profiler.experimental.stop()
        except Exception as exc:
            self.proc.note(f"TF2 profiler stop failed: {exc}")
            return
        closed = time.time_ns()
        found = sorted(glob.glob(os.path.join(self.proc.path(PROFILE_DIR), "plugins", "profile", "*",
                                              "*.xplane.pb")))
        for i, path in enumerate(found):
            name = os.path.basename(path)
            if len(found) > 1 or self.sessions > 1:
                name = f"{self.sessions}-{i}-{name}"
            os.replace(path, self.proc.path(name))
            self.proc.add_file(name, "tf2-xplane")
        shutil.rmtree(self.proc.path(PROFILE_DIR), ignore_errors=True)
        if not found:
            self.proc.note("the TF2 profiler wrote no .xplane.pb")
        if self.mode == "server":
            self.proc.update(profiled_until_ns=closed)
        else:
            self.proc.update(profiled_steps=[self.proc.first, min(self.steps, self.proc.last)],
                             profiled_until_ns=closed, window_closed_ns=closed)
        if reason:
            self.proc.note(reason)

    # ------------------------------------------------------------------ TF1: Session.run
    def _wrap_session(self, cls) -> None:
        original = cls.run
        owner = self

        def run(sess, fetches, feed_dict=None, options=None, run_metadata=None):
            if owner.done or not owner.is_train_run(sess, fetches):
                return original(sess, fetches, feed_dict, options, run_metadata)
            return owner.train_run(original, sess, fetches, feed_dict, options, run_metadata)

        cls.run = run

    def is_train_run(self, sess, fetches) -> bool:
        graph = sess.graph
        if not any(key[0] == id(graph) for key in self.train_ops):
            if self.mode != "tf1-any":  # no optimizer op in this graph: every Session.run is a step
                self.mode = "tf1-any"
                self.proc.note("no tf.compat.v1.train.Optimizer op in the session's graph: every Session.run "
                               "counts as a training step")
            return True
        from tensorflow.python.util import nest

        try:
            flat = nest.flatten(fetches)
        except (TypeError, ValueError):
            flat = [fetches]
        for item in flat:
            op = getattr(item, "op", item)
            name = getattr(op, "name", item if isinstance(item, str) else None)
            if isinstance(name, str) and (id(graph), name.split(":")[0]) in self.train_ops:
                return True
        return False

    def train_run(self, original, sess, fetches, feed_dict, options, run_metadata):
        from tensorflow.core.protobuf import config_pb2

        if self.mode is None:
            self.mode = "tf1"
        step = self.steps + 1
        if not self.proc.first <= step <= self.proc.last:
            result = original(sess, fetches, feed_dict, options, run_metadata)
            self.steps = step
            return result
        traced = config_pb2.RunOptions()
        if options is not None:
            traced.CopyFrom(options)
        traced.trace_level = config_pb2.RunOptions.FULL_TRACE
        metadata = run_metadata if run_metadata is not None else config_pb2.RunMetadata()
        if step == self.proc.first:
            self.proc.update(tf_mode=self.mode, mechanism="Session.run RunOptions(FULL_TRACE) -> client.timeline",
                             window_open_ns=time.time_ns())
            self._wait_for_servers()
        t0 = time.time_ns()
        result = original(sess, fetches, feed_dict, traced, metadata)
        self.steps = step
        stats = self._own_stats(metadata.step_stats, step == self.proc.first)
        if step == self.proc.first:
            self._add_tf1_mark(stats, t0)
        self.traced.append((step, stats))
        if step >= self.proc.last:
            self.close_tf1()
        return result

    def close_tf1(self, reason: str | None = None) -> None:
        """Write the window's timelines (after its last step: converting them does not slow the steps)."""
        self.done = True
        closed = time.time_ns()
        for step, stats in self.traced:
            self._write_timeline(stats, step)
        if self.traced:
            self.proc.update(profiled_steps=[self.traced[0][0], self.traced[-1][0]], profiled_until_ns=closed,
                             window_closed_ns=closed)
        self.traced = []
        if reason:
            self.proc.note(reason)

    def _wait_for_servers(self) -> None:
        """Give this host's serving processes (a ps) time to start their profiler before the first traced step:
        a FULL_TRACE step makes every task it touches hold TF's one profiler session while it runs, and a ps
        started inside the window might never get it."""
        deadline = time.monotonic() + SERVER_WAIT_S
        while time.monotonic() < deadline:
            waiting = [m for m in _metas(self.proc) if m.get("tf_mode") == "server" and not m.get("profiling_since_ns")
                       and not m.get("profiled_until_ns")]
            if not waiting:
                return
            time.sleep(POLL_S)
        self.proc.note(f"serving processes {sorted(m['pid'] for m in waiting)} had not started their profiler "
                       f"{SERVER_WAIT_S} s after this window opened")

    def _own_stats(self, step_stats, first: bool):
        """This task's devices only: the other tasks' (a ps's) work is in their own profile, and would land on
        this process's rank, over its own lanes, when the host merges this process's files."""
        from tensorflow.core.framework import step_stats_pb2

        own = step_stats_pb2.StepStats()
        role, index = self.proc.meta.get("role"), self.proc.meta.get("index")
        if role is None or index is None:
            own.CopyFrom(step_stats)
            return own
        prefix = re.compile(rf"^/job:{re.escape(str(role))}/replica:\d+/task:{index}/")
        others = set()
        for dev in step_stats.dev_stats:
            if prefix.match(dev.device) or not dev.device.startswith("/job:"):
                own.dev_stats.add().CopyFrom(dev)
            else:
                others.add(dev.device)
        if first and others:
            self.proc.update(other_tasks_devices_left_out=sorted(others))
        return own

    def _own_device(self, step_stats) -> str | None:
        role, index = self.proc.meta.get("role"), self.proc.meta.get("index")
        devices = [d.device for d in step_stats.dev_stats]
        if role is not None and index is not None:
            mine = [d for d in devices if f"/job:{role}/" in d and re.search(rf"/task:{index}(/|$)", d)
                    and "/device:CPU:" in d]
            if mine:
                return mine[0]
        counts = {}
        for d in step_stats.dev_stats:
            counts[d.device] = counts.get(d.device, 0) + len(d.node_stats)
        return max(counts, key=counts.get) if counts else None

    def _add_tf1_mark(self, step_stats, t0_ns: int) -> None:
        device = self._own_device(step_stats)
        if device is None:
            self.proc.note("no device in the first traced step: no clock mark")
            return
        stats = next(d for d in step_stats.dev_stats if d.device == device)
        node = stats.node_stats.add()
        node.node_name = MARK_NAME
        node.all_start_micros = t0_ns // 1000
        node.op_start_rel_micros, node.op_end_rel_micros, node.all_end_rel_micros = 0, 1, 1
        node.timeline_label = f"{MARK_NAME} = {MARK_NAME}()"
        self.proc.add_mark(t0_ns // 1000 * 1000, t0_ns // 1000 * 1000 + 1000)
        self.proc.update(mark_device=device)

    def _write_timeline(self, step_stats, step: int) -> None:
        from tensorflow.python.client import timeline

        name = f"timeline_step{step}.json"
        with open(self.proc.path(name), "w") as fh:
            fh.write(timeline.Timeline(step_stats).generate_chrome_trace_format())
        self.proc.add_file(name, "tf1")

    # ------------------------------------------------------------------ serving processes (ps)
    def _wrap_join(self, cls) -> None:
        original = cls.join
        owner = self

        def join(server):
            if owner.mode is not None or owner.done or threading.current_thread() is not threading.main_thread():
                return original(server)
            owner.mode = "server"
            owner.proc.update(tf_mode="server", serving_since_ns=time.time_ns(),
                              mechanism="tf.profiler.experimental around Server.join, while the step-running "
                                        "processes have their window open")
            watcher = threading.Thread(target=owner.watch_windows, name="ddltrace-tf-watch", daemon=True)
            watcher.start()
            # join() blocks in C++ where Python signal handlers cannot run: wait in Python instead, so that a
            # SIGTERM (how ps tasks are usually ended) still saves the profile
            joiner = threading.Thread(target=original, args=(server,), name="ddltrace-tf-join", daemon=True)
            joiner.start()
            while joiner.is_alive():
                joiner.join(0.5)

        cls.join = join

    def _windows(self) -> list[dict]:
        return [m for m in _metas(self.proc) if m.get("window_open_ns") and m.get("tf_mode") != "server"]

    def watch_windows(self) -> None:
        """Profile while the step-running processes of this run are inside their windows: from the first window
        opened until as many processes as the job has workers closed theirs (world size unknown: until none is
        open), in one profiler session (TF1 workers' FULL_TRACE steps would not let a second one start)."""
        expected = self.proc.meta.get("world_size")
        covered: set = set()
        while not self.done:
            windows = self._windows()
            open_now = {m["pid"] for m in windows if not m.get("window_closed_ns")}
            closed = {m["pid"] for m in windows if m.get("window_closed_ns")}
            if not self.profiling and open_now:
                self.start_tf2()
            if self.profiling:
                covered |= open_now
                self.proc.meta["profiled_while"] = sorted(covered | closed)
                if not open_now and (len(closed) >= expected if expected else bool(closed)):
                    self.stop_tf2()
                    return
            time.sleep(POLL_S)

    # ------------------------------------------------------------------ end
    def at_exit(self) -> None:
        if self.traced:
            self.close_tf1(f"the job ended after step {self.steps}, inside the window; timelines written at exit")
        if self.profiling:
            where = "while serving" if self.mode == "server" else f"after step {self.steps}, inside the window"
            self.stop_tf2(f"the process ended {where}; profile saved at exit")
        elif self.steps and self.steps < self.proc.first and self.mode in ("tf2", "tf1", "tf1-any"):
            self.proc.note(f"the job ended after step {self.steps}, before the window {self.proc.first}-"
                           f"{self.proc.last}: nothing profiled")

    def on_sigterm(self, signum, frame) -> None:
        if self.traced:
            self.close_tf1(f"SIGTERM after step {self.steps}, inside the window; timelines written before exiting")
        if self.profiling:
            where = "while serving" if self.mode == "server" else f"after step {self.steps}, inside the window"
            self.stop_tf2(f"SIGTERM {where}; profile saved before exiting")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _metas(proc) -> list[dict]:
    """The meta.json of the run's other TensorFlow processes on this host."""
    found = []
    for path in glob.glob(os.path.join(os.path.dirname(proc.folder), "*", "meta.json")):
        if os.path.dirname(path) == proc.folder:
            continue
        try:
            with open(path) as fh:
                meta = json.load(fh)
        except (OSError, ValueError):
            continue
        if meta.get("framework") == "tf" and meta.get("host") == socket.gethostname():
            found.append(meta)
    return found
