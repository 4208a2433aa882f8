"""Run a job under the job collectors and gather every rank into one trace store.

MPI jobs (``np`` or ``launcher`` given) run through mpiexec (or the user's own launcher command, e.g.
``srun -n 64`` or ``mpiexec -f hosts -n 64``) with the PMPI wrapper preloaded: every rank writes
``rank-NNNNN.pmpi`` into a record folder, in /dev/shm for local ranks (``np``), else beside the store (on a
cluster this must be a shared file system, as the store is). Other jobs run as a process tree with the
samplers only. With ``framework`` set, the framework's own profiler is switched on in every Python process of
the job (ddltrace.collectors.frameworks) and what each process wrote becomes its rank (role recorded).
While the job runs a progress line on stderr shows the elapsed time, the ranks alive and the MPI calls
recorded so far. Ctrl-C (or SIGTERM) stops the job (SIGINT, then SIGTERM after 5 s, SIGKILL after 10 s) and
the store is still written.

Nothing collected is lost on the way to the store: ``--out`` is locked before any work (a second writer stops
at once), the store is built beside its final place, verified, and renamed there in one step, and only then
are the raw records deleted. A signal during the write says what is written and how long it will take; the
next abandons the write. Whatever ends ``run`` before that (a failed or abandoned write, a full disk, SIGKILL)
leaves the records as a record set (``collectors/record_sets.py``) that :func:`recover_store` turns into the
store (``ddltrace recover``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import psutil

from ddltrace.collectors import frameworks, node_agent, node_clock, node_link, record_sets
from ddltrace.collectors.clock import clock_manifest
from ddltrace.collectors.gpu_sampler import GpuSampler
from ddltrace.collectors.mpi_env import find_tool, local_env, mpi_flavour, mpiexec_command
from ddltrace.collectors.pmpi.build import build_wrapper
from ddltrace.collectors.pmpi.records import OUTSIDE_MPI, POLLING, RankRecords, read_records, to_timeline
from ddltrace.collectors.pmpi.table import PSEUDO
from ddltrace.collectors.pyspy_stacks import PySpyRecorder, saved_stacks
from ddltrace.collectors.system_sampler import MACHINE, SystemSampler
from ddltrace.collectors.workloads import ps_sgd_config
from ddltrace.errors import DdltraceError
from ddltrace.merged_manifest import no_record_note
from ddltrace.options import SAMPLE_HZ
from ddltrace.outputs import os_reason
from ddltrace.store import StoreLock, TraceStore, building, publish, verify_written
from ddltrace.summary import ended_first
from ddltrace.timeline import make_counters, make_timeline
from ddltrace.units import format_ns

_GRACE_S = (5.0, 10.0)  # SIGTERM, then SIGKILL, this long after the first interrupt
NODES = "nodes"  # the node agents' folder in the record folder: one folder per host
GATHER_WAIT_S = 15.0  # after the job, how long the nodes' links may stay silent before a node is given up
#: MPICH's shared-memory segments in /dev/shm (its ch4 shm transport), one per node and job.
MPICH_SHM = "mpich_shm_*"
#: The start of the store's note on a run stopped by Ctrl-C, SIGTERM or SIGHUP (:func:`_interrupted_note` says how
#: each rank ended).
INTERRUPTED_NOTE = "interrupted (Ctrl-C / SIGTERM / SIGHUP): the job was stopped"
#: An MPI rank's ``ended`` where its MPI_Finalize returned but began after the interrupt: it ended on its way out of
#: the stopped job (mpi4py turns SIGINT into KeyboardInterrupt, and its exit calls MPI_Finalize), not at the end of
#: its work ("normal": its MPI_Finalize began before the interrupt; "abrupt": it did not return).
ENDED_BY_INTERRUPT = "interrupted"

# timeline rows of the wrapper that are not MPI calls of the job: the gaps between calls, its own clock syncs
NOT_CALLS = (OUTSIDE_MPI, POLLING, *(name for name, _ in PSEUDO))


@dataclass
class RunConfig:
    """What to run and how: ``argv`` the job; ``np`` ranks through local mpiexec, or ``launcher`` a command
    prefix; ``out`` the store folder; ``sample_hz`` system/GPU sampling rate (per s); ``pyspy`` sample stacks;
    ``framework`` switch that framework's profiler on for the training ``steps`` (first, last; from 1);
    ``record_shapes`` have torch.profiler record each op's input shapes (pytorch and horovod only);
    ``launcher_addr`` the address the nodes reach this machine at (the node agents' link; default: its address
    on the default route)."""

    argv: list[str]
    out: Path
    np: int | None = None
    launcher: str | None = None
    sample_hz: float = 10.0
    pyspy: bool = False
    pyspy_rate_hz: int = 100
    progress: bool = True
    framework: str | None = None
    steps: tuple[int, int] = frameworks.DEFAULT_STEPS
    record_shapes: bool = False
    launcher_addr: str | None = None
    stream: object = field(default_factory=lambda: sys.stderr)


@dataclass
class RunResult:
    """What happened: the store, the job's exit code, ranks and how they ended, MPI calls recorded."""

    store: TraceStore
    exit_code: int
    interrupted: bool
    elapsed_ns: int
    ranks: dict[int, str] = field(default_factory=dict)
    calls: int = 0
    notes: list[str] = field(default_factory=list)
    #: the signal that stopped the job (SIGINT, SIGTERM, SIGHUP: the first ddltrace received), 0 where none did
    stop_signal: int = 0


def _header_progress(folder: Path) -> tuple[int, int]:
    """(ranks alive, records so far: MPI calls and the requests their Waitall and kin completed) from the record
    files' headers."""
    alive = calls = 0
    for path in folder.glob("rank-*.pmpi"):
        header = record_sets.peek_header(path)
        if header is None:
            continue
        _rank, _world, pid, n_slots, state = header
        calls += n_slots
        alive += state in record_sets.INSIDE_MPI and psutil.pid_exists(pid)
    return alive, calls


class _Interrupts:
    """SIGINT/SIGTERM/SIGHUP while the job runs: a flag, and escalating signals to the job's process group
    (:meth:`escalate`). Once the store is written (:meth:`start_write`): the first says what is written and
    how long it will take, the next abandons the write (:class:`WriteAbandoned`; the records are kept), and those
    after it are ignored, so that the abandon's own cleanup (the partial store removed) is not cut short. One
    handler for all three, so that no signal falls between them. SIGHUP (the terminal closed, an ssh session lost)
    is an interrupt like the others: before, it killed ddltrace at once, no store, the job left running."""

    def __init__(self, stream=None):
        self.first: float | None = None
        self.first_ns: int | None = None  # the first interrupt's wall-clock time (ns), for the store's run
        self.first_signal = 0  # the first interrupt's signal
        self.sent = 0
        self._old = {}
        self.stream = stream
        self.writing: _WriteProgress | None = None
        self.records: Path | None = None
        self.write_signals = 0

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def start_write(self, out: Path, records: Path) -> _WriteProgress:
        """From now on signals are about the store's write to ``out`` from ``records``."""
        self.records = records
        self.writing = _WriteProgress(out)
        return self.writing

    def _handler(self, signum, frame):
        if self.writing is None:
            if self.first is None:
                self.first, self.first_ns, self.first_signal = time.monotonic(), time.time_ns(), signum
            return
        self.write_signals += 1
        if self.writing.phase == _RENAMING or self.write_signals > 2:  # one step from done, or abandoning already
            return
        if self.write_signals == 2:
            _say(self.stream, "\nddltrace: write abandoned")
            raise WriteAbandoned()
        _say(self.stream, f"\nddltrace: {self.writing.describe()}. Interrupt again to abandon the write and keep the "
                          f"records in {self.records}")

    def escalate(self, proc: subprocess.Popen) -> None:
        """After an interrupt: SIGINT to the job's process group, SIGTERM after 5 s, SIGKILL after 10 s."""
        if self.first is None:
            return
        waited = time.monotonic() - self.first
        step = 0 if waited < _GRACE_S[0] else 1 if waited < _GRACE_S[1] else 2
        if step >= self.sent:
            try:
                os.killpg(proc.pid, (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)[step])
            except ProcessLookupError:
                pass
            self.sent = step + 1


def _remove_left_shm(before: set[Path]) -> int:
    """Remove the MPICH shared-memory files (:data:`MPICH_SHM`) made since ``before`` that no live process maps: a
    rank killed, or stopped by an interrupt, leaves its segment (2-3 MB of memory each, until a reboot). The
    number removed."""
    mapped = ""
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            mapped += maps.read_text()
    removed = 0
    for path in set(record_sets.SHM.glob(MPICH_SHM)) - before:
        if str(path) not in mapped:
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
    return removed


def _say(stream, line: str) -> None:
    """Print ``line`` to ``stream`` where it can still be written (after a SIGHUP the terminal may be gone)."""
    try:
        print(line, file=stream, flush=True)
    except OSError:
        pass


def _python_children(root: int) -> list[int]:
    try:
        procs = psutil.Process(root).children(recursive=True)
        procs.insert(0, psutil.Process(root))
    except psutil.Error:
        return []
    out = []
    for p in procs:
        try:
            if "python" in p.name().lower():
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def _mpicc_of(launcher: str | None) -> str | None:
    """The mpicc beside the launcher's program (the wrapper must be built against the launcher's MPI);
    None: the default (this Python's, else PATH's)."""
    if not launcher or not shlex.split(launcher):
        return None
    program = shutil.which(shlex.split(launcher)[0])
    if program is None:
        return None
    beside = Path(program).parent / "mpicc"
    return str(beside) if beside.exists() else None


def _command(cfg: RunConfig, lib: Path | None, records: Path | None, fw_env: dict[str, str],
             link: tuple[str, str] | None = None) -> tuple[list[str], dict[str, str], str]:
    """Command line, environment and MPI flavour ('' for a non-MPI job). With a launcher, every process it
    starts first runs the node agent's shim (collectors/node_agent.py), which starts one agent per node."""
    if cfg.np is None and not cfg.launcher:
        return list(cfg.argv), {**os.environ, **fw_env}, ""
    extra = {"LD_PRELOAD": ":".join(filter(None, [str(lib or ""), os.environ.get("LD_PRELOAD", "")])),
             "DDLTRACE_PMPI_DIR": str(records)}
    if cfg.launcher:
        prefix = shlex.split(cfg.launcher)
        if not prefix:
            raise DdltraceError("--launcher: empty command")
        flavour = mpi_flavour(shutil.which(prefix[0]) or prefix[0]) if "mpi" in Path(prefix[0]).name else "other"
        shim = [sys.executable, node_agent.__file__, "--dir", str(records / NODES), "--hz", str(cfg.sample_hz)]
        shim += ["--pyspy", str(cfg.pyspy_rate_hz)] * cfg.pyspy
        shim += ["--link", link[0], "--token", link[1]] * (link is not None) + ["--"]
        cmd, env = prefix + shim + list(cfg.argv), local_env(flavour)
    else:
        cmd, env = mpiexec_command(cfg.np, list(cfg.argv))
        flavour = mpi_flavour(cmd[0])
    extra.update(fw_env)
    if flavour == "openmpi":  # Open MPI passes only what -x names to its ranks
        cmd[1:1] = [arg for name in ("LD_PRELOAD", "DDLTRACE_PMPI_DIR", *fw_env) for arg in ("-x", name)]
    env.update(extra)
    return cmd, env, flavour


def run_job(cfg: RunConfig) -> RunResult:
    """Run ``cfg.argv`` under the collectors and write the store at ``cfg.out``."""
    out = Path(cfg.out)
    if out.exists():
        raise DdltraceError(f"{out}: already exists (choose another --out, or remove it)")
    if not cfg.argv:
        raise DdltraceError("command: nothing to run (give it after --)")
    if cfg.np is not None and cfg.np < 1:
        raise DdltraceError(f"--np: must be at least 1, got {cfg.np}")
    if not SAMPLE_HZ[0] <= cfg.sample_hz <= SAMPLE_HZ[1]:  # NaN fails too
        raise DdltraceError(f"--sample-hz {cfg.sample_hz}: expected {SAMPLE_HZ[0]:g} to {SAMPLE_HZ[1]:g} Hz")
    if not out.parent.exists():
        raise DdltraceError(f"{out.parent}: no such folder for the store")
    if cfg.framework is not None:
        cfg.framework = frameworks.canonical(cfg.framework)
    if cfg.record_shapes and cfg.framework not in frameworks.TORCH_PROFILED:
        given = f"--framework {cfg.framework}" if cfg.framework else "no --framework"
        raise DdltraceError(f"--record-shapes: torch.profiler's option, for --framework "
                            f"{' or '.join(frameworks.TORCH_PROFILED)} only (given: {given})")
    with StoreLock(out):  # before any work: a second writer of --out stops here, before its job runs
        mpi = cfg.np is not None or bool(cfg.launcher)
        lib = _wrapper(cfg) if mpi else None
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        # ranks on this machine only (--np): records in shared memory (no disk writes, cheaper page faults);
        # a launcher may start ranks on other nodes: records beside the store, on its (shared) file system
        shm = record_sets.SHM
        local = cfg.np is not None and shm.is_dir() and os.access(shm, os.W_OK)
        records = (Path(tempfile.mkdtemp(prefix=record_sets.SHM_PREFIX, dir=shm)) if local
                   else work / "records")
        records.mkdir(exist_ok=True)
        in_place = False
        try:
            result = _run(cfg, out, mpi, lib, work, records)
            in_place = True
            return result
        finally:
            if in_place or not record_sets.holds_data(records, work):
                record_sets.discard(records, {"work": str(work)})
            else:  # the store is not in place: the records stay the user's data
                print(f"ddltrace: the store was not written; the records are kept in {records}: make the store "
                      f"with `ddltrace recover {records} --out {out}`", file=cfg.stream, flush=True)
                with contextlib.suppress(OSError):  # an empty work folder beside --out (records in /dev/shm)
                    work.rmdir()


def _wrapper(cfg: RunConfig) -> Path | None:
    """The PMPI wrapper for the job's MPI (built on first use); None for a --launcher job where no MPI
    compiler is found (a framework or plain job across nodes need not use MPI: it runs without the wrapper)."""
    mpicc = _mpicc_of(cfg.launcher) or find_tool("mpicc")
    if mpicc is None and cfg.launcher:
        return None
    return build_wrapper(mpicc)


def _run(cfg: RunConfig, out: Path, mpi: bool, lib: Path | None, work: Path, records: Path) -> RunResult:
    fw_env = frameworks.job_env(cfg.framework, work / "framework", cfg.steps, cfg.record_shapes) \
        if cfg.framework else {}
    # the node agents' link: clock ping-pong, and the gather of parts left on node-local disk
    gatherer = node_link.Gatherer({"records": records, "framework": work / "framework"}) if cfg.launcher else None
    link = (f"{cfg.launcher_addr or node_link.default_address()}:{gatherer.port}", gatherer.token) \
        if gatherer is not None else None
    try:
        return _run_job(cfg, out, mpi, lib, work, records, fw_env, gatherer,
                        _command(cfg, lib, records if mpi else None, fw_env, link))
    finally:
        if gatherer is not None:
            gatherer.close()


def _run_job(cfg, out, mpi, lib, work, records, fw_env, gatherer, command) -> RunResult:
    cmd, env, flavour = command
    stream = cfg.stream
    show = cfg.progress and stream.isatty()
    print(f"ddltrace: running {shlex.join(cfg.argv)}" + (f" on {cfg.np} ranks" if cfg.np else "")
          + (f" with the {cfg.framework} profiler on steps {cfg.steps[0]}-{cfg.steps[1]}" if cfg.framework else "")
          + f"; store: {out}", file=stream, flush=True)
    gpu = GpuSampler(cfg.sample_hz) if not cfg.launcher else None
    # with a launcher the node agents run py-spy inside each node (it cannot see into another PID namespace)
    pyspy = PySpyRecorder(work / "pyspy", cfg.pyspy_rate_hz) if cfg.pyspy and not cfg.launcher else None
    start_ns = time.time_ns()
    t_start = time.monotonic()
    job = record_sets.now_job(
        command=list(cfg.argv), launch=cmd, flavour=flavour, np=cfg.np, launcher=cfg.launcher,
        framework=cfg.framework, steps=list(cfg.steps), record_shapes=cfg.record_shapes, sample_hz=cfg.sample_hz,
        pyspy=cfg.pyspy,
        out=str(out.resolve()), work=str(work.resolve()), start_ns=start_ns, host=socket.gethostname())
    if mpi or cfg.framework:
        record_sets.register(records, job)
        print(f"ddltrace: raw records in {records}; if this ddltrace dies before writing the store: "
              f"ddltrace recover {records} --out {out}", file=stream, flush=True)
    shm_before = set(record_sets.SHM.glob(MPICH_SHM)) if mpi else set()
    with _Interrupts(stream) as interrupts:
        try:
            proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        except OSError as exc:
            raise DdltraceError(f"{cmd[0]}: cannot start ({exc.strerror})") from exc
        if mpi or cfg.framework:
            try:
                job.update(job_pid=proc.pid, job_started=psutil.Process(proc.pid).create_time())
                record_sets.register(records, job)
            except psutil.Error:
                pass  # already gone: nothing to wait for
        # with a launcher the node agents sample every node the job runs on (this one too, if it runs here)
        system = SystemSampler(cfg.sample_hz, proc.pid) if not cfg.launcher else None
        if system is not None:
            system.start()
            gpu.start()
        last_shown = last_scan = -1.0
        while proc.poll() is None:
            interrupts.escalate(proc)
            elapsed = time.monotonic() - t_start
            if pyspy is not None and elapsed - last_scan >= 0.5:  # new Python processes (a /proc walk)
                last_scan = elapsed
                for pid in _python_children(proc.pid):
                    pyspy.attach(pid)
            if show and elapsed - last_shown >= 0.5:
                alive, calls = _header_progress(records) if mpi else (1, 0)
                print(f"\rddltrace: {elapsed:7.1f} s elapsed, {alive} ranks alive, {calls:,} MPI records  ",
                      end="", file=stream, flush=True)
                last_shown = elapsed
            try:
                proc.wait(0.1)
            except subprocess.TimeoutExpired:
                pass
        end_ns = time.time_ns()
        interrupted = interrupts.first is not None
        progress = interrupts.start_write(out, records)
        if show:
            print(file=stream)
        print(f"ddltrace: the job ended (exit code {proc.returncode}); writing the store {out}", file=stream,
              flush=True)
        if mpi or cfg.framework:  # what a recovery could not know otherwise
            with contextlib.suppress(OSError):
                record_sets.register(records, {**job, "exit_code": proc.returncode, "end_ns": end_ns,
                                               "interrupted": interrupted, "interrupted_ns": interrupts.first_ns})
        exit_code = proc.returncode
        system_rows = system.stop() if system is not None else []
        gpu_rows = gpu.stop() if gpu is not None else []
        stacks = pyspy.stop() if pyspy is not None else {}
        notes = ([] if gpu is None or gpu.available else [gpu.reason]) + (pyspy.notes if pyspy is not None else [])
        if mpi and lib is None:
            notes.append(f"no MPI compiler (mpicc) beside the launcher, this Python or on PATH: the PMPI wrapper "
                         f"was not built, so MPI calls are not recorded ({cfg.launcher} started the job as it is)")
        left = _remove_left_shm(shm_before) if mpi else 0
        if left:
            notes.append(f"removed {left} MPICH shared-memory file(s) ({MPICH_SHM} in {record_sets.SHM}) the job's "
                         "stopped ranks left, that no process still maps")
        collectors = (["node agents (system, gpu)"] if gpu is None else ["system"] + ["gpu"] * gpu.available) \
            + ["py-spy"] * bool(cfg.pyspy)
        if mpi or cfg.framework:  # what a recovery would otherwise lose, should the write fail or be abandoned
            with contextlib.suppress(OSError):
                record_sets.save_samples(records, system_rows + gpu_rows)
                record_sets.register(records, {**job, "exit_code": proc.returncode, "end_ns": end_ns,
                                               "interrupted": interrupted, "interrupted_ns": interrupts.first_ns,
                                               "collectors": collectors,
                                               "gpus": gpu.devices if gpu is not None else []})
        links = {}
        if gatherer is not None:
            progress.phase = "gathering the nodes' parts"
            links = gatherer.wait(GATHER_WAIT_S)
        result = _gather(cfg, out, mpi, records, cmd, flavour, start_ns, end_ns, exit_code, interrupted,
                         system_rows + gpu_rows, stacks, notes, proc.pid, collectors,
                         gpu.devices if gpu is not None else [], work / "framework", progress, links,
                         interrupts.first_ns)
        result.stop_signal = interrupts.first_signal
        print(summary_line(result), file=stream, flush=True)
    return result


_RENAMING = "renaming the store into place"


class WriteAbandoned(KeyboardInterrupt):
    """The user abandoned the store's write (a second signal during it); the records are kept."""


class _WriteProgress:
    """How far the store's write is: the phase, calls written of all, and since when (monotonic s)."""

    def __init__(self, out: Path):
        self.out = out
        self.phase = "stopping the samplers"
        self.total = self.done = 0
        self.t0 = time.monotonic()
        self.t_writing: float | None = None

    def describe(self) -> str:
        elapsed = time.monotonic() - self.t0
        text = f"writing the store {self.out}: {self.phase}, {elapsed:.1f} s so far"
        if self.total:
            text += f"; {self.done:,} of {self.total:,} MPI calls written"
            if self.done and self.t_writing is not None:
                rate = self.done / max(time.monotonic() - self.t_writing, 1e-3)
                text += f", about {(self.total - self.done) / rate:.0f} s left at {rate:,.0f} calls/s"
            else:
                text += " (time left known once the first rank is written)"
        return text


def _gather(cfg, out, mpi, records, cmd, flavour, start_ns, end_ns, exit_code, interrupted, sample_rows,
            stacks, notes, root_pid, collectors, gpus, fw_dir, progress, links=None,
            interrupted_ns: int | None = None) -> RunResult:
    """Make the store at ``out`` from the records and samples: built beside it, verified, renamed into place.
    ``end_ns`` None (a recovery): the job's end is the last time any rank recorded. ``exit_code`` None: not
    known. ``links``: what the node agents' links said (host: collectors/node_link.py's node dict).
    ``interrupted_ns``: when the first interrupt came (wall clock, ns), where known."""
    rank_records: list[RankRecords] = []
    unreadable: set[int] = set()
    paths = sorted(records.glob("rank-*.pmpi"))
    for i, path in enumerate(paths):
        progress.phase = f"reading record file {i + 1} of {len(paths)}"
        try:
            rank_records.append(rr := read_records(path))
        except DdltraceError as exc:
            rank = int(path.stem.removeprefix("rank-")) if path.stem.removeprefix("rank-").isdigit() else None
            unreadable.add(rank)
            notes.append(f"unreadable record file: {exc}" + ("" if rank is None else f"; rank {rank} left out"))
            continue
        if rr.lost:
            held = len(rr.records) + len(rr.completions)
            notes.append(f"{path}: the file ends before {rr.lost:,} of the {held + rr.lost:,} records (MPI calls "
                         f"and requests completed) rank {rr.rank} wrote (cut short, or its file system full: the file "
                         "could not grow, and they were dropped); "
                         f"the {len(rr.records):,} MPI calls it holds are kept")
    nodes: list[node_agent.NodePart] = []
    if (records / NODES).is_dir():
        progress.phase = "waiting for the node agents"
        nodes, node_notes = node_agent.read_nodes(records / NODES)
        notes.extend(node_notes)
    extra = sorted(records.glob("extra-*.pmpi"))
    if extra:
        notes.append(f"{len(extra)} MPI process(es) outside the job's MPI world (e.g. singletons it started) "
                     "were recorded apart and are not in the store")
    if end_ns is None:
        end_ns = max([start_ns] + [int(max(rr.records["t0"].max(), rr.records["t1"].max())) - rr.test_offset_ns
                                   for rr in rank_records if len(rr.records)])
    try:
        with building(out) as staging:  # a full disk is its one line; the records stay for recover
            store = _write(cfg, staging, mpi, rank_records, cmd, flavour, start_ns, end_ns, exit_code, interrupted,
                           sample_rows, stacks, notes, root_pid, collectors, gpus, fw_dir, progress, nodes,
                           links or {}, unreadable, interrupted_ns)
            progress.phase = "verifying the store"
            verify_written(store, [rr.rank for rr in rank_records])
            progress.phase = _RENAMING
            publish(staging, out)
    except OSError as exc:  # any other write refused
        raise DdltraceError(f"{out}: cannot write the store ({os_reason(exc)})") from exc
    store.path = out
    return RunResult(store=store, exit_code=exit_code, interrupted=interrupted, elapsed_ns=end_ns - start_ns,
                     ranks={r: store.rank_info(r).get("ended", "unknown") for r in store.ranks},
                     calls=store.manifest["run"]["mpi_calls"], notes=notes)


def _write(cfg, path, mpi, rank_records, cmd, flavour, start_ns, end_ns, exit_code, interrupted, sample_rows,
           stacks, notes, root_pid, collectors, gpus, fw_dir, progress, nodes=(), links=None,
           unreadable=frozenset(), interrupted_ns=None) -> TraceStore:
    """Write every rank's timeline and counters, then the manifest, into the new store ``path``; ``nodes``:
    what the node agents sampled; ``links``: what their links to this process said (clock, gather);
    ``unreadable``: ranks whose record file could not be read (the notes name it); ``interrupted_ns``: when the
    first interrupt came (wall clock, ns; None: none came, or not known)."""
    links = links or {}
    interrupted_ns = interrupted_ns if interrupted and _int(interrupted_ns, 0) > 0 else None
    pid_rank = {rr.pid: rr.rank for rr in rank_records}
    fw_parts, fw_ranks = _framework_parts(cfg, fw_dir, set(pid_rank.values()), notes)
    node_clocks = node_clock.NodeClocks(links)
    for part in fw_parts:  # a framework process's events, on its node's clock: onto this machine's
        if part.info.get("host") in node_clocks:
            node_clocks.correct(part.info["host"], part.timeline, "start_ns")
            if part.counters is not None:
                node_clocks.correct(part.info["host"], part.counters, "t_ns")
    pid_rank.update({part.pid: fw_ranks[i] for i, part in enumerate(fw_parts)})
    if not mpi and not fw_parts:
        pid_rank[root_pid] = 0
    hosts = sorted({rr.host for rr in rank_records} | {p.info.get("host") for p in fw_parts if p.info.get("host")}
                   | {node.host for node in nodes} or {socket.gethostname()})
    world = max([rr.world_size for rr in rank_records] + [cfg.np or 0, len(set(fw_ranks.values())),
                                                          0 if mpi or fw_parts else 1])
    run = {
        "command": shlex.join(cfg.argv), "launch": shlex.join(cmd),
        "framework": cfg.framework or ("mpi" if mpi else "process"),
        "world_size": world, "hosts": hosts, "exit_code": exit_code, "interrupted": interrupted,
        "start_ns": start_ns, "end_ns": end_ns, "mpi_flavour": flavour or None,
        "mpi_library": rank_records[0].library if rank_records else None,
        "collectors": ["pmpi"] * mpi + collectors + [f"{cfg.framework} profiler"] * bool(cfg.framework),
        "sample_hz": cfg.sample_hz, "gpus": gpus,
    }
    if interrupted_ns is not None:  # where the job was stopped: its steady state ends there at the latest
        run["interrupted_ns"] = interrupted_ns
    if cfg.framework:  # the window asked for, and what the processes profiled of it (their first to last step)
        run["steps_window"] = list(cfg.steps)
        done = [part.info["profiled_steps"] for part in fw_parts if _step_range(part.info.get("profiled_steps"))]
        run["profiled_steps"] = [min(a for a, _ in done), max(b for _, b in done)] if done else None
        if cfg.framework in frameworks.TORCH_PROFILED:
            run["record_shapes"] = cfg.record_shapes
    if nodes:
        run["nodes"] = [node.host for node in nodes]
        run["gpus"] = {node.host: node.info.get("gpus", []) for node in nodes}
        # what each agent cost: CPU s while it sampled (and wall s), and in all (start-up and writing included)
        run["node_agents"] = {node.host: {k: node.info.get(k) for k in ("cpu_s_sampling", "wall_s_sampling",
                                                                         "cpu_s_total")} for node in nodes}
    if links:
        run["node_links"] = node_clock.link_summary(links)
        for host, node in links.items():  # how a lost link ended (collectors/node_link.py's Gatherer.wait)
            if node.get("lost") and host in run["node_links"]:
                run["node_links"][host]["lost"] = node["lost"]
        notes.extend(_link_notes(links, str(cfg.out)))
        missing = {h: n.get("part") for h, n in links.items() if n.get("state") != "complete" and not n.get("shared")}
        if missing:
            run["missing_nodes"] = missing  # host: the folder on that node holding its part
    clock = clock_manifest(rank_records) if rank_records else None
    if fw_parts:
        clock = _framework_clock(clock, fw_parts, fw_ranks)
    if node_clocks:
        clock = node_clocks.manifest(clock)
    store = TraceStore.create(path, run=run, clock=clock)
    counters = _counters(sample_rows, pid_rank)
    node_offset = _node_offsets(rank_records, clock)
    process_ranks = _process_ranks(nodes) if cfg.launcher and not rank_records and not fw_parts else {}
    rank_of = {(rr.host, rr.pid): rr.rank for rr in rank_records} | process_ranks \
        | {(p.info.get("host"), p.pid): fw_ranks[i] for i, p in enumerate(fw_parts)}
    node_stacks = {}  # rank: py-spy rows taken inside its node (pids repeat across nodes), on the common clock
    for node in nodes:
        for (host, pid), rank in rank_of.items():
            if host == node.host and pid in node.stacks:
                node_stacks[rank] = _on_common_clock(node.host, node.stacks[pid], "start_ns", node_offset,
                                                     node_clocks)
    for rank, frame in _node_counters(nodes, rank_of, node_offset, node_clocks).items():
        counters[rank] = make_counters(pd.concat([counters[rank], frame], ignore_index=True)) if rank in counters \
            else frame
    ranks: dict[int, str] = {}
    seen_after: dict[int, int] = {}  # rank: ns it was seen alive after its last call (_alive_after_last_call)
    calls = 0
    firsts: list[int] = []  # each rank's first event but py-spy's samples: where the store's time span starts
    framework_of = {fw_ranks[i]: part for i, part in enumerate(fw_parts)}
    progress.total = sum(len(rr.records) for rr in rank_records)
    progress.t_writing = time.monotonic()
    for i, rr in enumerate(rank_records):
        progress.phase = f"rank {rr.rank} ({i + 1} of {len(rank_records)} ranks)"
        # a call open at death lasts at most until the job ended (on the rank's own clock)
        timeline = to_timeline(rr, end_ns=end_ns + rr.test_offset_ns if rr.ended != "normal" else None)
        calls += int(((timeline["source"] == "pmpi") & ~timeline["name"].isin(NOT_CALLS)).sum())
        info = {}
        tail = _alive_after_last_call(rr, timeline, counters.get(rr.rank), end_ns)
        if tail is not None:  # (an abrupt rank that stopped outside MPI: its time after its last call, as seen)
            timeline = make_timeline(pd.concat([timeline, tail], ignore_index=True))
            info["seen_alive_until_ns"] = int(tail["start_ns"].iloc[0] + tail["dur_ns"].iloc[0])
            seen_after[rr.rank] = int(tail["dur_ns"].iloc[0])
        if rr.rank in framework_of:  # the same process's framework events, beside its MPI calls
            part = framework_of.pop(rr.rank)
            timeline = make_timeline(pd.concat([timeline, part.timeline.assign(rank=rr.rank)], ignore_index=True))
            info = {f"framework_{k}": v for k, v in part.info.items() if k not in ("pid", "host")}
        if len(timeline):
            firsts.append(int(timeline["start_ns"].min()))
        timeline = _with_stacks(timeline, node_stacks.get(rr.rank, stacks.get(rr.pid)), rr.rank)
        how = _mpi_ended(rr, timeline, interrupted_ns)
        store.add_rank(rr.rank, timeline, counters.get(rr.rank), save=False, host=rr.host, pid=rr.pid,
                       ended=how, state=rr.state, open_calls=rr.open_calls, role="rank", **info)
        ranks[rr.rank] = how
        progress.done += len(rr.records)
    ended = ("unknown" if exit_code is None else "normal" if exit_code >= 0 and not interrupted else "abrupt")
    for rank, part in sorted(framework_of.items()):
        if len(part.timeline):
            firsts.append(int(part.timeline["start_ns"].min()))
        timeline = _with_stacks(part.timeline.assign(rank=rank).astype({"rank": "int32"}), stacks.get(part.pid), rank)
        fw_counters = part.counters.assign(rank=rank).astype({"rank": "int32"}) if part.counters is not None else None
        sampled = counters.get(rank)
        if fw_counters is not None and sampled is not None:
            sampled = make_counters(pd.concat([sampled, fw_counters], ignore_index=True))
        # normal only where the process recorded Python's exit (not by an uncaught exception, or a SIGTERM it
        # caught): a rank killed by a signal, os.abort or os._exit records none, whatever the job's exit code
        clean = part.info.get("exited_ns") and not part.info.get("ended_by") and not interrupted
        how = "normal" if clean else "abrupt"
        store.add_rank(rank, timeline, sampled if sampled is not None else fw_counters, save=False, ended=how,
                       **part.info)
        ranks[rank] = how
    for (host, pid), rank in sorted(process_ranks.items(), key=lambda item: item[1]):
        row = {"rank": [rank], "lane": ["main"], "name": [Path(cfg.argv[0]).name], "category": ["other"],
               "start_ns": [start_ns], "dur_ns": [end_ns - start_ns], "source": ["launcher"]}
        timeline = _with_stacks(make_timeline(row), node_stacks.get(rank), rank)
        store.add_rank(rank, timeline, counters.get(rank), save=False, host=host, pid=pid, ended=ended,
                       role="process")
        ranks[rank] = ended
    if process_ranks:
        store.manifest["run"]["world_size"] = len(process_ranks)
    if not mpi and not fw_parts:
        row = {"rank": [0], "lane": ["main"], "name": [Path(cfg.argv[0]).name], "category": ["other"],
               "start_ns": [start_ns], "dur_ns": [end_ns - start_ns], "source": ["launcher"]}
        timeline = _with_stacks(make_timeline(row), stacks.get(root_pid), 0)
        store.add_rank(0, timeline, counters.get(0), save=False, host=hosts[0], pid=root_pid, ended=ended,
                       role="process", exit_code=exit_code)
        ranks[0] = ended
    kept = {rr.pid for rr in rank_records} | {part.pid for part in fw_parts} | \
        ({root_pid} if not mpi and not fw_parts else set())
    left = sorted(pid for pid, rows in stacks.items() if pid not in kept and rows is not None and len(rows))
    if left:  # py-spy samples every Python process of the job; the store holds the ranks' (and the command's)
        notes.append(f"py-spy stacks of {len(left)} Python process(es) that are not a rank (pid "
                     f"{', '.join(map(str, left[:8]))}{', ...' if len(left) > 8 else ''}: a rank's child, or a "
                     "program the command started) are not kept")
    missing = sorted(set(range(world)) - set(ranks) - set(unreadable)) if mpi or fw_parts else []
    if missing:
        notes.append(no_record_note(missing, world, mpi, run.get("missing_nodes")))
    if interrupted:
        first = int(min(firsts)) if firsts else (start_ns if process_ranks or not (mpi or fw_parts) else None)
        notes.append(_interrupted_note(ranks, interrupted_ns, start_ns, first))
    if seen_after:
        notes.append(f"rank {_rank_list(sorted(seen_after))} ended abruptly outside any MPI call: the time from "
                     "its last call to the last sample that saw its process alive (up to "
                     f"{format_ns(max(seen_after.values()))}; `seen_alive_until_ns` in its entry) is kept as "
                     f"'{OUTSIDE_MPI}' (source launcher), so that its span holds it; when it died after that sample is "
                     "not known (within a sampling interval, unless its node's agent stopped first)")
    if mpi and not rank_records and not fw_parts:
        notes.append("no rank wrote a PMPI record file: the job never called MPI_Init under the wrapper "
                     "(not an MPI program, or a launcher that drops LD_PRELOAD)")
    if MACHINE in counters:
        store.add_counters(counters[MACHINE], save=False)
    if mpi or not (fw_parts or process_ranks):  # the shipped ps-sgd job (also wrapped, or launched; alone in one
        # process without --np, the one rank w = 1 with no server): what it was told, so that nothing infers w
        ps_sgd_config.record(store.manifest, cfg.argv, world, Path(cfg.out))
    store.manifest["notes"].extend(notes)
    store.manifest["run"]["mpi_calls"] = calls
    store.save_manifest()
    return store


def _alive_after_last_call(rr: RankRecords, timeline: pd.DataFrame, counters: pd.DataFrame | None,
                           end_ns: int) -> pd.DataFrame | None:
    """The row that keeps an abrupt rank's time after its last MPI call, where no call was open when it stopped
    (an open call already lasts to the job's end): ``outside MPI`` on its main lane, from its last call's end to the
    last sample that saw its process alive (resident memory above 0: a killed process's zombie has none; at most
    ``end_ns``, the job's end). Before, the rank's span ended at its last call: a node killed 3 s after the ranks'
    last calls left every rank of the run (the other node's too, stopped by the launcher at the job's end) with a
    span of 0.1 s. None where no sample saw the process after its last call (no samples: a recovery without them)."""
    if rr.ended == "normal" or rr.open_calls or counters is None or not len(counters) or not len(timeline):
        return None
    seen = counters.loc[(counters["name"] == "rss_bytes") & (counters["value"] > 0), "t_ns"]
    main = timeline[timeline["lane"] == "main"]
    if not len(seen) or not len(main):
        return None
    last = int((main["start_ns"] + main["dur_ns"]).max())
    alive = min(int(seen.max()), end_ns)
    if alive <= last:
        return None
    return make_timeline(pd.DataFrame({"rank": [rr.rank], "lane": ["main"], "name": [OUTSIDE_MPI],
                                       "category": ["compute"], "start_ns": [last], "dur_ns": [alive - last],
                                       "source": ["launcher"]}))


def _link_notes(links: dict[str, dict], store: str) -> list[str]:
    """A note per node whose link did not complete: a node-local part not gathered
    (:func:`~ddltrace.collectors.node_clock.lost_notes`), or, with the record folder shared, what ended the agent's
    link. Before, the latter read "its agent's link broke" for an agent that was killed (its end closed the
    connection: nothing broke), beside the note that the agent ended before writing its samples."""
    shared = {host: node for host, node in links.items() if node.get("shared") and node.get("state") != "complete"}
    notes = node_clock.lost_notes({h: n for h, n in links.items() if h not in shared}, store)
    kept = "its part is in the shared record folder and is read from there, as every node's"
    for host, node in sorted(shared.items()):
        error, how = node.get("error") or "no reason given", node.get("lost")
        if how == "closed":
            said = (f"its agent ended before it was done: its end of the link to this process closed early ({error}), "
                    "as it does when the agent is killed or dies, or its node goes down")
        elif how == "silent":
            said = f"its agent said nothing after the job ({error}): still writing, stuck, or its node unreachable"
        else:
            said = f"its agent's link to this process failed ({error})"
        notes.append(f"node {host}: {said}; {kept}; the clock measurements the agent sends at its end did not come")
    return notes


def _mpi_ended(rr: RankRecords, timeline: pd.DataFrame, interrupted_ns: int | None) -> str:
    """How an MPI rank ended: its MPI_Finalize returned ("normal"), or did not ("abrupt"); a rank whose
    MPI_Finalize returned but began after the interrupt (``interrupted_ns``, on the common clock) ended because
    the job was stopped (:data:`ENDED_BY_INTERRUPT`)."""
    if rr.ended != "normal" or interrupted_ns is None:
        return rr.ended
    finalize = timeline.loc[(timeline["source"] == "pmpi") & (timeline["name"] == "MPI_Finalize"), "start_ns"]
    return ENDED_BY_INTERRUPT if len(finalize) and int(finalize.min()) >= interrupted_ns else rr.ended


def _interrupted_note(ranks: dict[int, str], interrupted_ns: int | None, start_ns: int,
                      span_start_ns: int | None = None) -> str:
    """The store's note on an interrupted run: when the interrupt came, after ``start_ns`` (ddltrace's launch of the
    job) and into the store's time span (which starts at ``span_start_ns``, the first event: ``info``'s time span),
    and how its ranks ended (``ranks``: rank: ended), each group named."""
    when = ""
    if interrupted_ns is not None:
        when = f" {format_ns(interrupted_ns - start_ns)} after the start (ddltrace's launch of the job)"
        if span_start_ns is not None:
            into = interrupted_ns - span_start_ns
            when += (f", {format_ns(into)} into the store's time span" if into >= 0 else
                     f", {format_ns(-into)} before the store's time span (its first event)")
    said = {"normal": "MPI_Finalize began before the interrupt (work done): ended normal",
            ENDED_BY_INTERRUPT: "MPI_Finalize began after the interrupt (on the way out of the stopped job): "
                                f"ended {ENDED_BY_INTERRUPT}",
            "abrupt": "ended abrupt (records up to the end kept)",
            "unknown": "how it ended is not known"}
    parts = []
    for how, words in said.items():
        group = sorted(r for r, h in ranks.items() if h == how)
        if group:
            parts.append(f"rank {_rank_list(group)}: {words}")
    if interrupted_ns is None and any(h == "normal" for h in ranks.values()):
        parts.append("when the interrupt came is not recorded, so a rank whose MPI_Finalize returned reads normal")
    return INTERRUPTED_NOTE + when + "".join(f"; {p}" for p in parts)


def _rank_list(ranks: list[int], shown: int = 8) -> str:
    return ", ".join(map(str, ranks[:shown])) + (f" and {len(ranks) - shown} more" if len(ranks) > shown else "")


def _framework_parts(cfg: RunConfig, fw_dir: Path, taken: set[int],
                     notes: list[str]) -> tuple[list[frameworks.ProcessPart], dict[int, int]]:
    """What the framework's profiler left in each process, and the rank of each part."""
    if not cfg.framework:
        return [], {}
    from ddltrace.collectors.importers import Categorizer

    module_note = getattr(frameworks.module(cfg.framework), "NOTE", None)
    if module_note:
        notes.append(module_note)
    parts = frameworks.collect(fw_dir, Categorizer(), notes) if fw_dir.is_dir() else []
    if not parts:
        notes.append(f"no process wrote a {cfg.framework} profile: the job did not import the framework in a "
                     f"Python started with the bootstrap, or ended before step {cfg.steps[0]} "
                     f"(try --steps 1-{max(cfg.steps[1] - cfg.steps[0] + 1, 1)})")
    return parts, frameworks.number(parts, taken)


def _framework_clock(clock: dict | None, parts: list, ranks: dict[int, int]) -> dict:
    """The manifest's clock: each framework rank's offset onto the wall clock and how it was found."""
    clock = dict(clock or {"method": "single clock (this host's wall clock)", "offsets_ns": {},
                           "uncertainty_ns": {}})
    methods = {}
    for i, part in enumerate(parts):
        methods.setdefault(part.info["clock_method"], []).append(ranks[i])
        clock.setdefault("framework_offsets_ns", {})[str(ranks[i])] = part.info["clock_offset_ns"]
        if part.info.get("clock_uncertainty_ns") is not None:
            clock.setdefault("framework_uncertainty_ns", {})[str(ranks[i])] = part.info["clock_uncertainty_ns"]
    clock["framework_method"] = "; ".join(f"ranks {sorted(r)}: {m}" for m, r in sorted(methods.items()))
    return clock


def _counters(rows: list[tuple[int, str, int, float]], pid_rank: dict[int, int]) -> dict[int, pd.DataFrame]:
    """Sampler rows keyed by pid (or -1) as counters tables keyed by rank (or -1); other pids are dropped
    (mpiexec and its helpers count in the job_* totals)."""
    by_rank: dict[int, list] = {}
    for key, name, t_ns, value in rows:
        rank = MACHINE if key == MACHINE else pid_rank.get(key)
        if rank is None:
            continue
        by_rank.setdefault(rank, []).append((rank, name, t_ns, value))
    return {rank: make_counters(pd.DataFrame(rs, columns=["rank", "name", "t_ns", "value"]))
            for rank, rs in by_rank.items()}


def _node_offsets(rank_records: list[RankRecords], clock: dict | None) -> dict[str, int]:
    """Per host, the offset (ns) that puts its node agent's times on rank 0's clock: the PMPI offset of the
    node's lowest rank, measured at MPI_Init (none for a host without a measured rank)."""
    offsets = (clock or {}).get("offsets_ns", {})
    node_offset: dict[str, int] = {}
    for rr in sorted(rank_records, key=lambda rr: rr.rank):
        if str(rr.rank) in offsets:
            node_offset.setdefault(rr.host, int(offsets[str(rr.rank)]))
    return node_offset


def _process_ranks(nodes: list[node_agent.NodePart]) -> dict[tuple[str, int], int]:
    """A job with neither MPI nor a framework profile, started by a launcher: each process the launcher started
    (registered by the node agent's shim) is a rank, numbered by host, then pid."""
    started = sorted((node.host, int(pid)) for node in nodes for pid in node.info.get("pids", []))
    return {key: rank for rank, key in enumerate(started)}


def _on_common_clock(host: str, frame: pd.DataFrame, column: str, node_offset: dict[str, int],
                     node_clocks: node_clock.NodeClocks) -> pd.DataFrame:
    """``frame`` with ``column`` (ns on node ``host``'s clock) on the common clock: the PMPI offset of the node's
    lowest rank where there is one, else the node agent's ping-pong with the launching process."""
    frame = frame.copy()
    if host in node_offset or host not in node_clocks:
        frame[column] = frame[column] + node_offset.get(host, 0)
    else:
        node_clocks.correct(host, frame, column)
    return frame


def _node_counters(nodes: list[node_agent.NodePart], rank_of: dict[tuple[str, int], int],
                   node_offset: dict[str, int], node_clocks: node_clock.NodeClocks) -> dict[int, pd.DataFrame]:
    """The node agents' samples as counters tables keyed by rank (or -1): a node's machine counters are
    named ``NAME@HOST``; a process's rows go to the rank ``rank_of`` gives its (host, pid) (others, such as
    hydra's proxies, are dropped). Times are put on the common clock (:func:`_on_common_clock`)."""
    by_rank: dict[int, list[pd.DataFrame]] = {}
    for node in nodes:
        s = node.samples
        if not len(s):
            continue
        machine = s["pid"] == MACHINE
        rank = s["pid"].map(lambda pid, host=node.host: MACHINE if pid == MACHINE else rank_of.get((host, pid)))
        frame = pd.DataFrame({"rank": rank, "name": s["name"].where(~machine, s["name"] + f"@{node.host}"),
                              "t_ns": s["t_ns"], "value": s["value"]})
        frame = _on_common_clock(node.host, frame, "t_ns", node_offset, node_clocks)
        frame = frame[frame["rank"].notna()].astype({"rank": "int32"})
        for r, part in frame.groupby("rank"):
            by_rank.setdefault(int(r), []).append(part)
    return {r: make_counters(pd.concat(parts, ignore_index=True)) for r, parts in by_rank.items()}


def _with_stacks(timeline: pd.DataFrame, stack_rows: pd.DataFrame | None, rank: int) -> pd.DataFrame:
    if stack_rows is None or not len(stack_rows):
        return timeline
    extra = stack_rows.assign(rank=rank, category="other", source="py-spy")
    return make_timeline(pd.concat([timeline, make_timeline(extra)], ignore_index=True))


def summary_line(result: RunResult) -> str:
    """``run``'s last line: the store, its ranks and how they ended, the job's MPI calls, the time from ddltrace's
    launch of the job to its exit (not the store's time span, first event to last: ``info``'s), the exit code; where
    a rank ended abruptly, what the records say of which rank ended first and which ended inside a call
    (:func:`~ddltrace.summary.ended_first`)."""
    stopped = sorted(r for r, how in result.ranks.items() if how == ENDED_BY_INTERRUPT)
    abrupt = sorted(r for r, how in result.ranks.items() if how not in ("normal", ENDED_BY_INTERRUPT))
    normal = len(result.ranks) - len(abrupt) - len(stopped)
    said = [f"{normal} ended normally"] if normal or not (stopped or abrupt) else []
    if stopped:  # their MPI_Finalize began after the interrupt (ENDED_BY_INTERRUPT)
        said.append(f"{len(stopped)} on their way out of the stopped job ({_rank_list(stopped)})")
    if abrupt:
        said.append(f"{len(abrupt)} abruptly ({', '.join(map(str, abrupt[:8]))}{'...' if len(abrupt) > 8 else ''})")
    ended = ", ".join(said)
    exit_code = "unknown" if result.exit_code is None else result.exit_code
    # (a recovery without the job's end: its last call recorded instead, _gather)
    until = "exit" if result.exit_code is not None else "the last call recorded"
    first = ended_first(result.store) if abrupt else None
    evidence = f"; {first.text()}" if first is not None and first.text() else ""
    return (f"ddltrace: wrote {result.store.path}: {len(result.ranks)} ranks ({ended}), {result.calls:,} MPI calls, "
            f"{format_ns(result.elapsed_ns)} from launch to {until}, exit code {exit_code}{evidence}")


def _step_range(value) -> bool:
    """Whether ``value`` is a [first, last] pair of step numbers (a process's ``profiled_steps``)."""
    return isinstance(value, list) and len(value) == 2 and all(type(x) is int for x in value) and value[0] <= value[1]


def _int(value, default: int) -> int:
    """``value`` where it is an int (not a bool), else ``default``: a job file's field read with care."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _strings(value) -> list[str]:
    """``value`` where it is a list of texts, else []: a job file's field read with care."""
    return [str(v) for v in value] if isinstance(value, list) and all(isinstance(v, str) for v in value) else []


def recover_store(path: str | Path, out: str | Path, stream=None, *, local: bool = True) -> RunResult:
    """Make the store ``out`` from the record set at ``path`` that a ``ddltrace run`` left (killed, or its
    write failed or was abandoned), then delete the set. The system and GPU samples it held in memory are lost
    unless it saved them with the records (it does once the job has ended), the py-spy stacks its py-spy processes
    wrote to its work folder are read back, and after a kill during the job its exit code and end are lost; the
    notes say so. ``local`` False: the set was copied from another node, whose processes this machine cannot see (no
    check that the job has ended)."""
    stream = stream if stream is not None else sys.stderr
    rs = record_sets.load(path)
    if local and rs.owner_alive:
        raise DdltraceError(f"{rs.path}: in use by a running `ddltrace run` (pid {rs.job['ddltrace_pid']}), "
                            "which writes its store itself")
    if local and rs.job_alive:
        raise DdltraceError(f"{rs.path}: the job is still running (ranks alive: {rs.live_ranks or 'starting'}); "
                            "recover its records once it has ended")
    out = Path(out)
    if not out.parent.is_dir():
        raise DdltraceError(f"{out.parent}: no such folder for the store")
    job = rs.job
    argv = job.get("command") if isinstance(job.get("command"), list) else ["(unknown command)"]
    steps = tuple(job["steps"]) if isinstance(job.get("steps"), list) and len(job["steps"]) == 2 else \
        frameworks.DEFAULT_STEPS
    cfg = RunConfig(argv=[str(a) for a in argv], out=out, np=job.get("np"), launcher=job.get("launcher"),
                    sample_hz=float(job.get("sample_hz") or 0), pyspy=False, framework=job.get("framework"),
                    steps=steps, record_shapes=job.get("record_shapes") is True, stream=stream)
    work = Path(job["work"]) if job.get("work") else rs.path.parent
    exit_code = job.get("exit_code") if isinstance(job.get("exit_code"), int) else None
    end_ns = job.get("end_ns") if isinstance(job.get("end_ns"), int) else None
    interrupted = job.get("interrupted") is True
    samples, unreadable = record_sets.load_samples(rs.path)
    stacks, stack_notes = saved_stacks(work / "pyspy") if job.get("pyspy") is True else ({}, [])
    lost = ([] if samples else ["the system and GPU samples"]) + ["py-spy stacks"] * (job.get("pyspy") is True
                                                                                       and not stacks)
    if exit_code is None:
        lost.append("the job's exit code, its end (the last call recorded is taken instead)")
    notes = [f"recovered by `ddltrace recover` from {rs.path}: the `ddltrace run` that started the job did not "
             "write the store" + ("; its system and GPU samples were kept with the records" if samples else "")
             + ("; its py-spy stacks were kept in its work folder" if stacks else "")
             + (f"; not recorded: {', '.join(lost)}" if lost else "")] + ([unreadable] if unreadable else []) \
        + stack_notes
    with StoreLock(out):
        with _Interrupts(stream) as interrupts:
            progress = interrupts.start_write(out, rs.path)
            result = _gather(cfg, out, bool(job.get("np") or job.get("launcher") or rs.rank_files), rs.path,
                             job.get("launch") or argv, job.get("flavour") or "", int(job.get("start_ns") or 0),
                             end_ns, exit_code, interrupted, samples, stacks, notes, _int(job.get("job_pid"), -1),
                             _strings(job.get("collectors")), _strings(job.get("gpus")), work / "framework",
                             progress, interrupted_ns=_int(job.get("interrupted_ns"), 0) or None)
        result.store.update_run(recovered_from=str(rs.path))
    record_sets.discard(rs.path, job)
    return result
