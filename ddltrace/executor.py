"""Where the per-rank (``analyze``, ``report``) and per-file (``import``) work runs: on this machine's cores, or as
tasks on an existing Dask distributed cluster (``--scheduler ADDRESS``).

A mapper is called like :func:`map`: ``mapper(fn, *iterables)`` yields ``fn(*args)`` for each ``args`` of
``zip(*iterables)``, in that order whatever order the work finishes in (``ordered=False``: as each finishes, so
that a slow item holds no other back; ``analyze``'s reduce takes the ranks in any order). ``fn`` and its
arguments must pickle (a module-level function; a store's path, not an open store). At most a few tasks per worker
are out at a time, finished results held back included, so memory never holds more than those few. Two kinds:

- :class:`LocalMapper`: ``jobs`` forked processes of this machine (``jobs`` 1: in this process, one item after the
  other).
- :class:`DaskMapper`: tasks on the cluster whose scheduler answers at ``address`` (``dask scheduler`` /
  ``dask worker``, dask-jobqueue, dask-kubernetes, ...). Every worker must see the paths handed to it (a shared
  file system); the store is read by the workers, not sent by this process.

Progress: ``progress(done, total, where)`` is called at most every :data:`PROGRESS_EVERY_S` while tasks run and
once at the end; ``where`` says where the tasks run ("in 2 processes of this machine", "on 3 workers of the Dask
cluster at tcp://...", counted when called: workers come and go).

A worker that dies: on a Dask cluster the scheduler notices the lost connection (or the nanny's report), and
runs every task that worker held again on the workers left; a task whose workers die more than
``distributed.scheduler.allowed-failures`` times (Dask's default: 3) is given up with ``KilledWorker``. An
exception raised by ``fn`` itself is not retried (ours return a damaged rank or file instead of raising). With
``on_failure`` (given when the mapper is made), a task the cluster gives up is not an error: its place in the
results is ``on_failure(args, why)`` (``analyze`` names such a rank as unreadable and reports the others); without,
it is a :class:`~ddltrace.errors.DdltraceError` naming the call. Of the local processes, a dead one breaks the pool
and every task out in it: that is a :class:`~ddltrace.errors.DdltraceError` naming the call waited for.

Test hook: ``DDLTRACE_TEST_TASK_DELAY_S=SECONDS`` in a worker's environment makes each task wait that long before
``fn`` runs (the tests kill a worker while it holds a task); never set it otherwise.
"""

from __future__ import annotations

import math
import os
import queue
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ddltrace.errors import DdltraceError

#: Seconds between two calls of ``progress`` while tasks run.
PROGRESS_EVERY_S = 0.5
#: Tasks out at a time per worker (process or Dask thread): enough to keep each busy between two hand-backs.
TASKS_PER_WORKER = 2
#: Seconds to wait for a Dask scheduler to answer.
CONNECT_TIMEOUT_S = 10
TEST_DELAY_ENV = "DDLTRACE_TEST_TASK_DELAY_S"

Progress = Callable[[int, int, str], None]
OnFailure = Callable[[tuple, str], Any]


def run_task(fn: Callable, *args):
    """What each task runs: ``fn(*args)``, after the test hook's delay when it is set."""
    delay = os.environ.get(TEST_DELAY_ENV)
    if delay:
        time.sleep(float(delay))
    return fn(*args)


class _Mapper:
    """The ordered, bounded map shared by both kinds: subclasses submit a task and tell when one is given up."""

    #: Whether the tasks run on other machines (a cluster's workers), which read the paths they are given.
    remote = False

    def __init__(self, progress: Progress | None = None, on_failure: OnFailure | None = None, ordered: bool = True):
        self.progress, self.on_failure, self.ordered = progress, on_failure, ordered

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release the processes or the connection."""

    @property
    def where(self) -> str:
        raise NotImplementedError

    @property
    def slots(self) -> int:
        """How many tasks run at once."""
        raise NotImplementedError

    def _begin(self, count: int) -> None:
        """Called with the number of tasks before the first is submitted."""

    def check_visible(self, paths: Iterable[str], hint: Callable[[str], str] | None = None) -> None:
        """That the processes running the tasks see ``paths``: this machine's do."""

    def _submit(self, fn: Callable, args: tuple):
        """A future (``result()``, ``done()``, ``add_done_callback()``) of ``run_task(fn, *args)``."""
        raise NotImplementedError

    def _given_up(self, exc: BaseException) -> str | None:
        """Why the task was given up, when ``exc`` says the cluster gave it up (its workers died), else None."""
        return None

    def _broken(self, exc: BaseException, call: str) -> str | None:
        """The one line saying what broke, when ``exc`` says the processes running the tasks (or the connection to
        them) are gone, else None; ``call`` is the call waited for (``summarise_rank(/store, 3)``)."""
        return None

    def __call__(self, fn: Callable, *iterables: Iterable) -> Iterator:
        items = list(zip(*iterables, strict=False))
        self._begin(len(items))
        # each task says when it is done through a callback, not result(timeout=...): distributed's timed result()
        # can lose a result that arrives as the timeout ends (an UnboundLocalError inside distributed.utils.sync)
        finished: queue.SimpleQueue[int] = queue.SimpleQueue()
        running: dict[int, Any] = {}  # futures of the tasks out, by item
        held: dict[int, Any] = {}  # results finished before an earlier item's (ordered only)
        submitted = handed = done = 0
        last = sized = -math.inf
        while handed < len(items):
            if time.monotonic() - sized >= PROGRESS_EVERY_S:  # workers come and go: the window follows them
                window, sized = max(1, self.slots * TASKS_PER_WORKER), time.monotonic()
            while submitted < len(items) and len(running) + len(held) < window:
                future = self._submit(fn, items[submitted])
                running[submitted] = future
                future.add_done_callback(lambda _, index=submitted: finished.put(index))
                submitted += 1
            try:
                index = finished.get(timeout=PROGRESS_EVERY_S)
            except queue.Empty:
                last = self._report(done, len(items), last)
                continue
            result = self._outcome(fn, items[index], running.pop(index))
            done += 1
            last = self._report(done, len(items), last, final=done == len(items))
            if not self.ordered:
                handed += 1
                yield result
                continue
            held[index] = result
            while handed in held:
                handed += 1
                yield held.pop(handed - 1)

    def _outcome(self, fn: Callable, args: tuple, future):
        """The result of a finished task, ``on_failure``'s for one the cluster gave up; else the error."""
        try:
            return future.result()
        except Exception as exc:
            broken = self._broken(exc, _call_text(fn, args))
            if broken is not None:
                raise DdltraceError(broken) from exc
            why = self._given_up(exc)
            if why is None:
                raise
            if self.on_failure is None:
                raise DdltraceError(f"{_call_text(fn, args)}: {why}") from exc
            return self.on_failure(args, why)

    def _report(self, done: int, total: int, last: float, final: bool = False) -> float:
        now = time.monotonic()
        if self.progress is not None and (final or now - last >= PROGRESS_EVERY_S):
            self.progress(done, total, self.where)
            return now
        return last


def _call_text(fn: Callable, args: tuple) -> str:
    """``summarise_rank(/path/to/store, 3)``: the call a task made, for a message."""
    bound = getattr(fn, "args", ())  # a functools.partial's
    name = getattr(getattr(fn, "func", fn), "__name__", repr(fn))
    return f"{name}({', '.join(str(a) for a in (*bound, *args))})"


class _InProcess:
    """A finished 'future' of a call made in this process."""

    def __init__(self, fn: Callable, args: tuple):
        self._value = run_task(fn, *args)

    def result(self):
        return self._value

    def done(self) -> bool:
        return True

    def add_done_callback(self, callback: Callable) -> None:
        callback(self)


class LocalMapper(_Mapper):
    """``jobs`` processes of this machine, forked when the tasks start (they share the modules already loaded);
    ``jobs`` 1, or no ``fork`` on this system: in this process."""

    def __init__(self, jobs: int, progress: Progress | None = None, on_failure: OnFailure | None = None,
                 ordered: bool = True):
        import multiprocessing

        super().__init__(progress, on_failure, ordered)
        self.jobs = jobs if "fork" in multiprocessing.get_all_start_methods() else 1
        self._pool = None
        self._here = self.jobs <= 1

    @property
    def where(self) -> str:
        return "in this process" if self._here else f"in {self.jobs} processes of this machine"

    @property
    def slots(self) -> int:
        # in this process a task runs when submitted: one out at a time keeps memory at one result
        return 1 if self._here else self.jobs

    def _begin(self, count: int) -> None:
        self._here = self.jobs <= 1 or count <= 1  # one task: no process to start for it

    def _submit(self, fn: Callable, args: tuple):
        if self._here:
            return _InProcess(fn, args)
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=multiprocessing.get_context("fork"))
        return self._pool.submit(run_task, fn, *args)

    def _broken(self, exc: BaseException, call: str) -> str | None:
        from concurrent.futures.process import BrokenProcessPool

        if isinstance(exc, BrokenProcessPool):
            return (f"{call}: a worker process died without a word while this task or one beside it ran (a library "
                    "crashed, or memory ran out); --jobs 1 runs the tasks one by one in this process")
        return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


class DaskMapper(_Mapper):
    """Tasks on the Dask distributed cluster whose scheduler answers at ``address`` (``tcp://host:8786``, or any
    address ``distributed.Client`` takes). Dask is imported here only: the CLI starts without it."""

    remote = True

    def __init__(self, address: str, progress: Progress | None = None, on_failure: OnFailure | None = None,
                 ordered: bool = True):
        super().__init__(progress, on_failure, ordered)
        self.address = address
        try:
            from distributed import Client
            from distributed.versions import VersionMismatchWarning
        except ImportError as exc:
            raise DdltraceError("--scheduler needs Dask distributed: pip install '<ddltrace checkout>[dask]', or "
                                "make install in the checkout") from exc
        import logging

        # distributed's own log lines (a lost connection's traceback as the client closes) would bury the one line
        # this command says about it: only its critical ones are shown while the client lives
        self._levels = {name: logging.getLogger(name).level for name in list(logging.root.manager.loggerDict)
                        if name.split(".")[0] == "distributed"}
        for name in self._levels:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        try:
            _check_scheduler(address)
            with warnings.catch_warnings():  # its table of versions: _check_versions says what differs, in a line
                warnings.simplefilter("ignore", VersionMismatchWarning)
                self.client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except DdltraceError:
            self._restore_logging()
            raise
        except Exception as exc:  # distributed's own (OSError, TimeoutError, ...), the scheduler gone since the check
            self._restore_logging()
            raise DdltraceError(f"--scheduler {address}: no Dask scheduler answers there ({_text(exc)})") from exc
        try:
            self._check_versions()
        except BaseException:
            self.close()
            raise

    def _check_versions(self) -> None:
        """The scheduler and every worker import this ddltrace's version, and have the Python and packages that
        carry the tasks and their results as this command has them (:mod:`ddltrace.dask_versions`): a worker that
        cannot import ddltrace would break its connection on the first task, and the tasks would wait for ever; one
        whose pickles differ fails them. A difference in a package the tasks do not need is one line on stderr."""
        from ddltrace import __version__
        from ddltrace.dask_versions import EXTRA_PACKAGES, ddltrace_differences, differences

        # a lambda is pickled by value: it reaches a process without ddltrace, and says so there
        def version():
            return __import__("ddltrace").__version__

        found = {}
        try:
            found["the scheduler"] = self.client.run_on_scheduler(version)
            found.update({f"the worker at {a}": v for a, v in self.client.run(version, on_error="return").items()})
        except Exception as exc:  # the scheduler's
            found["the scheduler"] = exc
        wrong = ddltrace_differences(found, __version__)
        if wrong:
            where, what = next(iter(wrong.items()))
            what = f"cannot import ddltrace ({what})" if isinstance(what, BaseException) else f"has ddltrace {what}"
            more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
            raise DdltraceError(f"--scheduler {self.address}: {where}{more} {what}, while this command runs ddltrace "
                                f"{__version__}: install the same ddltrace with its dask extra where the scheduler "
                                "and the workers run")
        other = differences(self.client.get_versions(packages=list(EXTRA_PACKAGES)))
        needed = [d for d in other if d.matters]
        if needed:
            more = f" (and {len(needed) - 1} more)" if len(needed) > 1 else ""
            raise DdltraceError(f"--scheduler {self.address}: {needed[0].text()}{more}: the tasks and their results "
                                "cross between them pickled, so the scheduler needs this command's Python (to its "
                                "minor version), dask, distributed and cloudpickle, and the workers those and its "
                                "msgpack, numpy, pandas and pyarrow: install the same versions there")
        if other:
            more = f" (and {len(other) - 1} more)" if len(other) > 1 else ""
            print(f"ddltrace: note: --scheduler {self.address}: {other[0].text()}{more}; the tasks do not depend on "
                  "it", file=sys.stderr, flush=True)

    def check_visible(self, paths: Iterable[str], hint: Callable[[str], str] | None = None) -> None:
        """Every worker sees each of ``paths`` (made absolute, as the tasks get them), else one line naming the first
        one and the workers that do not see it; ``hint(path)``: what to do about it (default: a shared file system).
        Workers that join later are not asked."""
        paths = [os.path.abspath(p) for p in paths]

        def unseen(paths: list[str]) -> list[str]:  # pickled by value: the worker's ddltrace may be another build
            return [p for p in paths if not __import__("os").path.exists(p)]

        blind: dict[str, list[str]] = {}
        for worker, missing in self.client.run(unseen, paths, on_error="return").items():
            for path in missing if isinstance(missing, list) else ():
                blind.setdefault(path, []).append(worker)
        if not blind:
            return
        path, workers = next(iter(blind.items()))
        count = len(self._threads()) or len(workers)
        more = f" (and {len(blind) - 1} more of the {len(paths)} paths)" if len(blind) > 1 else ""
        advice = hint(path) if hint else ("every worker must see it under the same path (a shared file system; "
                                          "docs/CLUSTER.md)")
        raise DdltraceError(f"--scheduler {self.address}: {len(workers)} of {count} workers ({', '.join(workers)}) "
                            f"cannot see {path}{more}, which this command sees: {advice}")

    def _threads(self) -> dict:
        """Threads per worker address, as the scheduler knows them now (none once the connection is gone: the client
        may still say "running" while the scheduler's socket closes, and the futures out are then cancelled with the
        reason :meth:`_broken` names)."""
        if self.client.status != "running":
            return {}
        try:
            return self.client.nthreads()
        except OSError:  # distributed's CommClosedError: the scheduler went away between the status and the call
            return {}

    @property
    def where(self) -> str:
        count = len(self._threads())
        return f"on {count} worker{'s' if count != 1 else ''} of the Dask cluster at {self.address}"

    @property
    def slots(self) -> int:
        return max(1, sum(self._threads().values()))

    def _submit(self, fn: Callable, args: tuple):
        # pure=False: each call is its own task, run again if asked again (a store may change between runs)
        return self.client.submit(run_task, fn, *args, pure=False)

    def _given_up(self, exc: BaseException) -> str | None:
        from distributed.scheduler import KilledWorker

        if isinstance(exc, KilledWorker):
            tries = exc.allowed_failures + 1
            last = getattr(exc.last_worker, "address", exc.last_worker)
            return (f"was given up by the Dask scheduler: the {tries} worker{'s' if tries != 1 else ''} that ran it "
                    f"died while running it (the last {last}; distributed.scheduler.allowed-failures "
                    f"{exc.allowed_failures})")
        return None

    def _broken(self, exc: BaseException, call: str) -> str | None:
        from distributed.client import FutureCancelledError

        if not isinstance(exc, FutureCancelledError):
            return None
        if exc.reason == "scheduler-connection-lost":
            return (f"--scheduler {self.address}: the connection to the Dask scheduler was lost while the tasks ran; "
                    "run the command again once the scheduler answers")
        return f"--scheduler {self.address}: the tasks were cancelled on the cluster ({exc.reason})"

    def close(self) -> None:
        self.client.close()
        self._restore_logging()

    def _restore_logging(self) -> None:
        import logging

        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)


def _check_scheduler(address: str) -> None:
    """Ask what answers at ``address`` (Dask's ``identity``), within :data:`CONNECT_TIMEOUT_S` + 2 s in all: a Dask
    worker, or a server that accepts the connection but does not speak Dask (an HTTP port, the dashboard's), is one
    line here; ``distributed.Client`` would wait for their handshake without end, or fail with a traceback."""
    import asyncio

    from distributed.comm import connect
    from distributed.security import Security

    async def identity():
        comm = await connect(address, timeout=CONNECT_TIMEOUT_S, **Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    alien = f"--scheduler {address}: what answers there does not speak Dask's protocol"
    try:  # connect() gives up on a port that accepts nothing after CONNECT_TIMEOUT_S: this waits a little longer
        info = asyncio.run(asyncio.wait_for(identity(), CONNECT_TIMEOUT_S + 2))
    except TimeoutError as exc:  # (an OSError too) connected, but no handshake or no answer
        raise DdltraceError(f"{alien} (it accepts connections, but gave no answer within {CONNECT_TIMEOUT_S + 2} "
                            "s)") from exc
    except (OSError, ValueError, TypeError) as exc:  # refused, no such host, a bad address, tls:// without TLS set up
        raise DdltraceError(f"--scheduler {address}: no Dask scheduler answers there ({_text(exc)})") from exc
    except Exception as exc:  # what it sent is not Dask's (a length of exabytes read from an HTTP reply)
        raise DdltraceError(f"{alien} ({_text(exc)})") from exc
    kind = info.get("type") if isinstance(info, dict) else None
    if kind == "Scheduler":
        return
    if not kind:
        raise DdltraceError(f"{alien} (its answer to 'identity': {str(info)[:200]})")
    of = f" (its scheduler: {info['scheduler']})" if info.get("scheduler") else ""
    raise DdltraceError(f"--scheduler {address}: a Dask {kind.lower()} answers there, not the scheduler{of}")


def _text(exc: BaseException) -> str:
    """An exception as a few words: its message, or its type's name when it has none."""
    return str(exc) or type(exc).__name__


def mapper_for(scheduler: str | None, jobs: int, progress: Progress | None = None,
               on_failure: OnFailure | None = None, ordered: bool = True) -> _Mapper:
    """The Dask mapper of ``--scheduler`` when given, else ``jobs`` local processes."""
    if scheduler:
        return DaskMapper(scheduler, progress, on_failure, ordered)
    return LocalMapper(jobs, progress, on_failure, ordered)


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
