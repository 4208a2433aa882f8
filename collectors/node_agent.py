"""The node agent: on every node of a job started with ``ddltrace run --launcher``, one process samples that
node (its machine, network interfaces and GPUs, and the job's processes on it).

``ddltrace run --launcher L -- CMD`` runs ``L python .../node_agent.py --dir D --hz HZ -- CMD``: every process
the launcher starts first runs this file as a script (os, sys and fcntl only: a few ms), which

1. registers its pid (with its start time, against pid reuse) in ``D/<host>/ranks/``;
2. tries to take the lock ``D/<host>/agent.lock``: the first process of the job on the node wins and
   forks the agent (detached: its own session, re-parented to the node's init);
3. replaces itself with ``CMD`` (exec: the same pid, so the rank's record file names the pid registered).

The agent runs the system sampler over the processes registered on its node and their children, and the GPU
sampler (NVML, where present), until the last registered process has ended; then it writes
``D/<host>/samples.parquet`` (pid or -1 for the machine, name, t_ns, value) and ``D/<host>/agent.json``
(host, its pid, start and end, GPUs, notes), each by an atomic rename, and releases the lock. Meanwhile it saves
the samples taken so far every :data:`CHECKPOINT_S` (``samples-NNNNN.parquet``, beside ``agent.started.json``):
an agent killed, or whose node is lost, leaves them, and :func:`read_nodes` keeps them, saying so. The launching
``ddltrace run`` reads every node's folder after the job (:func:`read_nodes`). ``D`` must be on a file system
every node writes (as the PMPI record folder is). Pids are those of the node's PID namespace, hence the
(host, pid) key.

Test hook: ``DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS="HOST:NS[,HOST:NS]"`` shifts the clock of every collector on
node HOST by NS ns (the PMPI runtime's, the agent's and the framework bootstrap's mark), to test clock
alignment across the simulated cluster's nodes, which share one kernel clock. For tests only.

With ``--link HOST:PORT --token T`` the agent also keeps a TCP link to the launching process: a clock
ping-pong at its start and end, and the node's part sent at the end when the record folder is on the node's
own disk (collectors/node_link.py).
"""

from __future__ import annotations

import fcntl
import os
import sys

NODE_OFFSET_ENV = "DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS"


def node_test_offset_ns(host: str, spec: str | None = None) -> int:
    """The test clock offset of node ``host`` from ``DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS`` (0 if none)."""
    spec = os.environ.get(NODE_OFFSET_ENV, "") if spec is None else spec
    for entry in filter(None, spec.split(",")):
        name, _, ns = entry.rpartition(":")
        if name == host:
            return int(ns)
    return 0


def _start_ticks(pid: int | str) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None if it has
    ended (gone, or a zombie not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return None if fields[0] in (b"Z", b"X") else fields[19].decode()


def registered(folder: str) -> tuple[list[int], int]:
    """(pids of the registered processes still running, how many were registered)."""
    ranks = os.path.join(folder, "ranks")
    alive, names = [], os.listdir(ranks)
    for name in names:
        with open(os.path.join(ranks, name)) as fh:
            ticks = fh.read().strip()
        if _start_ticks(name) == ticks:
            alive.append(int(name))
    return alive, len(names)


USAGE = "usage: node_agent.py --dir FOLDER --hz HZ [--pyspy RATE] [--link HOST:PORT --token T] -- COMMAND..."


def shim(args: list[str]) -> None:
    """What every process of the job runs first (see the module's docstring); does not return."""
    options = {}
    while len(args) >= 2 and args[0] in ("--dir", "--hz", "--pyspy", "--link", "--token"):
        options[args[0]], args = args[1], args[2:]
    if not args or args[0] != "--" or "--dir" not in options or "--hz" not in options:
        sys.exit(USAGE)
    folder = os.path.join(options["--dir"], os.uname().nodename)
    hz, command = float(options["--hz"]), args[1:]
    pyspy_hz = int(options["--pyspy"]) if "--pyspy" in options else None
    if not command:
        sys.exit("node_agent.py: no command after --")
    os.makedirs(os.path.join(folder, "ranks"), exist_ok=True)
    pid = os.getpid()
    with open(os.path.join(folder, "ranks", str(pid)), "w") as fh:
        fh.write(_start_ticks(pid) or "")
    lock = open(os.path.join(folder, "agent.lock"), "w")  # noqa: SIM115 (held by the agent until it ends)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # another process of the job runs this node's agent
        lock.close()
    else:
        link = (options["--link"], options.get("--token", "")) if "--link" in options else None
        _fork_agent(folder, hz, pyspy_hz, lock, link)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.exit(f"node_agent.py: cannot run {command[0]}: {exc.strerror}")


def _fork_agent(folder: str, hz: float, pyspy_hz: int | None, lock, link: tuple[str, str] | None) -> None:
    """Start the agent as a grandchild in its own session (so that it is nobody's child to reap), holding
    ``lock``; the caller goes on at once."""
    child = os.fork()
    if child:
        lock.close()  # the agent's copy holds the lock
        os.waitpid(child, 0)
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        log = os.open(os.path.join(folder, "agent.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        # nothing else the rank was given (the launcher's pipes, the PMI socket) stays open here: its
        # launcher waits for them to close
        keep = lock.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        run_agent(folder, hz, pyspy_hz, link=link)
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _cpu_s() -> float:
    """CPU seconds (user + system) this process has used so far."""
    t = os.times()
    return t.user + t.system


def _python_rank(pid: int) -> bool:
    """Whether ``pid`` runs Python and has left the shim (its exec is done)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return b"python" in os.path.basename(argv[0]).lower() and not any(a.endswith(b"node_agent.py") for a in argv)


#: Every this many seconds the agent saves the samples taken since its last save (``samples-NNNNN.parquet``), so
#: that an agent killed with its node keeps what it sampled up to then (:func:`read_nodes`).
CHECKPOINT_S = 2.0
#: What the agent knows of itself from its start (its ``agent.json`` comes at its end).
STARTED = "agent.started.json"
_CHUNKS = "samples-*.parquet"


class _Checkpoints:
    """The samples of ``samplers`` (each with a ``rows`` list it appends to) saved in chunks, each the rows taken
    since the last (t_ns moved by ``offset``)."""

    def __init__(self, folder: str, offset: int, samplers):
        self.folder, self.offset, self.samplers = folder, offset, samplers
        self.done = [0] * len(samplers)
        self.saved = 0

    def save(self) -> None:
        import pandas as pd

        rows = []
        for i, sampler in enumerate(self.samplers):
            new = sampler.rows[self.done[i]:]  # (a copy: the sampler's thread appends meanwhile)
            self.done[i] += len(new)
            rows += new
        if not rows:
            return
        frame = pd.DataFrame(rows, columns=["pid", "name", "t_ns", "value"])
        frame["t_ns"] = frame["t_ns"].astype("int64") + self.offset
        tmp = os.path.join(self.folder, f".samples-{self.saved:05d}.parquet")
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, os.path.join(self.folder, f"samples-{self.saved:05d}.parquet"))
        self.saved += 1

    def clear(self) -> None:
        """Remove the chunks and the start's description: the agent's samples.parquet and agent.json are written."""
        import contextlib
        import glob

        for path in [*glob.glob(os.path.join(self.folder, _CHUNKS)), os.path.join(self.folder, STARTED)]:
            with contextlib.suppress(OSError):
                os.remove(path)


def run_agent(folder: str, hz: float, pyspy_hz: int | None = None, poll_s: float = 0.1, linger: int = 3,
              link: tuple[str, str] | None = None) -> None:
    """Sample this node until no registered process has run for ``linger`` polls of ``poll_s`` s (a rank
    started a moment after the others ended is still seen), then write its samples; with ``pyspy_hz``, also
    py-spy on each registered Python process (from inside the node: py-spy cannot read a process of another
    PID namespace), its stacks in ``stacks-PID.parquet``. With ``link`` (the launching process's "HOST:PORT"
    and the run's token), a clock ping-pong with it at the start and at the end, and, when the record folder
    is not the launcher's (node-local disk), the node's part sent to it (collectors/node_link.py). Every
    :data:`CHECKPOINT_S` it saves the samples taken since (:class:`_Checkpoints`)."""
    import signal
    import socket
    import threading
    import time

    from ddltrace.collectors.system_sampler import SystemSampler  # psutil only: sampling starts at once

    host = socket.gethostname()
    offset = node_test_offset_ns(host)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    start_ns = time.time_ns() + offset
    records = os.path.dirname(os.path.dirname(folder))  # folder: RECORDS/nodes/HOST
    # the launcher's run description is there unless the record folder is on this node's own disk
    shared = os.path.exists(os.path.join(records, "ddltrace-run.json"))
    cpu0, wall0 = _cpu_s(), time.monotonic()
    system = SystemSampler(hz, roots=lambda: registered(folder)[0]).start()
    from ddltrace.collectors.gpu_sampler import GpuSampler

    gpu = GpuSampler(hz).start()
    pyspy = None
    if pyspy_hz:
        from ddltrace.collectors.pyspy_stacks import PySpyRecorder

        pyspy = PySpyRecorder(os.path.join(folder, "pyspy"), pyspy_hz)
    # the link once sampling runs: a launcher that cannot be reached costs no samples
    node_link, clock, link_notes = _open_link(link, host, records, shared, offset) if link else (None, {}, [])
    _write_json(os.path.join(folder, STARTED), {"host": host, "agent_pid": os.getpid(), "start_ns": start_ns,
                                                 "sample_hz": hz, "test_clock_offset_ns": offset})
    checkpoints, saved_at = _Checkpoints(folder, offset, [system, gpu]), time.monotonic()
    idle, attached = 0, set()
    while not stop.wait(poll_s):
        if time.monotonic() - saved_at >= CHECKPOINT_S:
            checkpoints.save()
            saved_at = time.monotonic()
        alive = registered(folder)[0]
        idle = 0 if alive else idle + 1
        if idle >= linger:
            break
        for pid in alive if pyspy is not None else []:
            if pid not in attached and _python_rank(pid):
                attached.add(pid)
                pyspy.attach(pid)
    if node_link is not None:  # its ranks have ended: the launching process waits while this node writes
        node_link.keep_alive()
    rows = system.stop() + gpu.stop()
    cpu_sampling, wall_sampling = _cpu_s() - cpu0, time.monotonic() - wall0
    stacks = pyspy.stop() if pyspy is not None else {}
    for pid, frame in stacks.items():
        tmp = os.path.join(folder, f".stacks-{pid}.parquet")
        frame.assign(start_ns=frame["start_ns"] + offset).to_parquet(tmp, index=False)
        os.replace(tmp, os.path.join(folder, f"stacks-{pid}.parquet"))
    end_ns = time.time_ns() + offset
    import pandas as pd

    frame = pd.DataFrame(rows, columns=["pid", "name", "t_ns", "value"])
    frame["t_ns"] = frame["t_ns"].astype("int64") + offset
    tmp = os.path.join(folder, f".samples.{os.getpid()}.parquet")
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, os.path.join(folder, "samples.parquet"))
    info = {"host": host, "agent_pid": os.getpid(), "start_ns": start_ns, "end_ns": end_ns, "sample_hz": hz,
            "processes": registered(folder)[1],
            "pids": sorted(int(p) for p in os.listdir(os.path.join(folder, "ranks"))),
            "gpus": gpu.devices, "test_clock_offset_ns": offset,
            "gpu_off": None if gpu.available else gpu.reason,
            "cpu_s_sampling": round(cpu_sampling, 4), "wall_s_sampling": round(wall_sampling, 4),
            "cpu_s_total": round(_cpu_s(), 4),
            "notes": [f"{host}: {note}" for note in (pyspy.notes if pyspy is not None else [])] + link_notes}
    _write_json(os.path.join(folder, "agent.json"), info)
    checkpoints.clear()
    if node_link is not None:
        _report(node_link, clock, records, shared)


def _write_json(path: str, value: dict) -> None:
    """``value`` as JSON at ``path``, by an atomic rename."""
    import json

    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(value, fh)
    os.replace(tmp, path)


def _open_link(link: tuple[str, str], host: str, records: str, shared: bool, offset: int):
    """(the link to the launching process or None, {"clock_start": ...}, notes)."""
    import time

    from ddltrace.collectors.node_link import AgentLink

    try:
        node_link = AgentLink(link[0], link[1], host, os.path.dirname(records), shared,
                              lambda: time.time_ns() + offset, timeout_s=5.0)
        return node_link, {"clock_start": node_link.ping_pong()}, []
    except (OSError, ValueError) as exc:
        stays = "" if shared else f"; this node's part stays in {os.path.dirname(records)}"
        return None, {}, [f"{host}: cannot reach the launching process at {link[0]} ({exc}): no clock ping-pong"
                          f"{stays}"]


def _report(node_link, clock: dict, records: str, shared: bool) -> None:
    """The end of the clock ping-pong and, for a node-local record folder, this node's part (its ranks' record
    files, its agent's folder, its processes' framework profiles) sent to the launching process."""
    clock["clock_end"] = node_link.ping_pong()
    if not shared:
        node_link.send_tree(records, "records")
        framework = os.environ.get("DDLTRACE_FW_DIR")
        if framework and os.path.isdir(framework):
            node_link.send_tree(framework, "framework")
    node_link.finish(clock)


class NodePart:
    """What one node's agent wrote: ``host``, ``samples`` (a DataFrame: pid or -1, name, t_ns, value),
    ``info`` (agent.json), ``stacks`` (pid: py-spy rows lane, name, start_ns, dur_ns). A plain class: the
    shim's imports stay os, sys and fcntl."""

    def __init__(self, host: str, samples, info: dict, stacks: dict | None = None):
        self.host, self.samples, self.info, self.stacks = host, samples, info, stacks or {}


def read_nodes(folder, wait_s: float = 15.0) -> tuple[list[NodePart], list[str]]:
    """Every node's part in ``folder`` (waiting up to ``wait_s`` s for agents still writing), and notes on
    the nodes whose agent left none. ``folder``: a :class:`pathlib.Path`."""
    import json
    import time

    import pandas as pd

    parts, notes = [], []
    deadline = time.monotonic() + wait_s
    for node in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        with open(node / "agent.lock", "a") as lock:
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
        try:
            info = json.loads((node / "agent.json").read_text())
            samples = pd.read_parquet(node / "samples.parquet")
        except (OSError, ValueError) as exc:
            saved = _saved_part(node)
            if saved is None:
                why = (f"no {os.path.basename(exc.filename)}" if isinstance(exc, FileNotFoundError) and exc.filename
                       else f"{type(exc).__name__}: {exc}")
                notes.append(f"node {node.name}: its agent left no samples ({why}); {_log_tail(node / 'agent.log')}")
                continue
            info, samples = saved
            notes.append(f"node {node.name}: its agent ended before writing its samples (killed, or its node lost): "
                         f"the {len(samples):,} it had saved, to {(info['end_ns'] - info['start_ns']) / 1e9:.1f} s "
                         f"after its start, are kept (it saves every {CHECKPOINT_S:g} s; the last are lost)")
        stacks = {int(p.stem.split("-")[1]): pd.read_parquet(p) for p in node.glob("stacks-*.parquet")}
        parts.append(NodePart(node.name, samples, info, stacks))
        notes.extend(info.get("notes", []))
    gpu_off: dict[str, list[str]] = {}
    for part in parts:
        if part.info.get("gpu_off"):
            gpu_off.setdefault(str(part.info["gpu_off"]), []).append(part.host)
    notes += [f"on node(s) {', '.join(hosts)}: {reason}" for reason, hosts in gpu_off.items()]
    return parts, notes


def _saved_part(node) -> tuple[dict, object] | None:
    """(info, samples) from what an agent that did not finish had saved (:class:`_Checkpoints`, :data:`STARTED`):
    its start's description, its end taken as its last sample's time; None where it saved no samples."""
    import json

    import pandas as pd

    chunks = sorted(node.glob(_CHUNKS))
    try:
        info = json.loads((node / STARTED).read_text())
        samples = pd.concat([pd.read_parquet(p) for p in chunks], ignore_index=True) if chunks else None
    except (OSError, ValueError):
        return None
    if samples is None or not len(samples) or not isinstance(info.get("start_ns"), int):
        return None
    ranks = node / "ranks"
    pids = sorted(int(p.name) for p in ranks.iterdir() if p.name.isdigit()) if ranks.is_dir() else []
    return {**info, "end_ns": int(samples["t_ns"].max()), "pids": pids, "saved_only": True}, samples


def _log_tail(log, limit: int = 800) -> str:
    """What a note says of a node agent's log ``log`` (a :class:`pathlib.Path`): its last ``limit`` characters on
    one line (the log goes with the run's records once the store is written: the note keeps what it said)."""
    try:
        text = log.read_text(errors="replace").strip()
    except OSError:
        return "it left no log"
    if not text:
        return "its log is empty"
    return f"its log ended: {' | '.join(line.strip() for line in text[-limit:].splitlines() if line.strip())}"


if __name__ == "__main__":
    del sys.path[0]  # this file's folder: its modules are not top-level ones
    shim(sys.argv[1:])
