"""TensorFlow: the TF2 profiler, TF1 ``FULL_TRACE`` timelines or the profiler around ``Server.join``, all started
by the bootstrap (bootstrap/_ddltrace_tf.py); nothing to set in the environment.

Once ``tensorflow`` is imported in a process of the job, the bootstrap wraps, at class level, the calls that
mark a training step and the calls that serve:

- TF2 (eager, ``tf.function`` loops, Keras): an optimizer update (Keras 3 ``BaseOptimizer.apply``, which
  ``apply_gradients`` and ``fit`` use) traced inside a ``tf.function`` makes that outermost function the step;
  each of its calls is one step (eager code: each update is one). ``tf.profiler.experimental.start`` before
  the window's first step, ``Trace("train", step_num=n)`` around each profiled step, ``stop`` after the last:
  one ``<host>.xplane.pb`` per process (tf2-xplane importer). The clock mark is a ``Trace("ddltrace.mark")``.
- TF1 (``Session.run``): a run that fetches an op made by a ``tf.compat.v1.train.Optimizer`` is a step; the
  window's runs get ``RunOptions(trace_level=FULL_TRACE)`` and each writes ``timeline_step<n>.json``
  (``client.timeline``, tf1 importer) of this task's own devices.
- A task that only serves (``server.join()``: a ``ps``) runs the TF2 profiler while a step-running process of
  the same run has its window open, and saves it when they close it, at exit or on SIGTERM.

Role and index: TF_CONFIG, else the ``--job_name`` / ``--task_index`` flags of TF1 scripts.
"""

from __future__ import annotations

from pathlib import Path


def env(fw_dir: Path, steps: tuple[int, int]) -> dict[str, str]:
    """No variables: the bootstrap does it all (TF_CPP_MIN_LOG_LEVEL is the job's own business)."""
    return {}
