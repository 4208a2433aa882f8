"""A simulated cluster on one Linux machine, for tests and demos of multi-node jobs (needs root and iproute2).

Node ``i`` is a set of namespaces: network (its own ``eth0``, address ``10.A.B.(i+2)/24``), UTS (its own host
name ``<prefix><i>``), PID (its own process tree: one node's sampler cannot see another node's processes),
IPC and mount (its own ``/dev/shm`` and a ``/proc`` of its PID namespace). Each node's ``eth0`` is one end of
a veth pair whose other end is on a bridge in this machine's namespace, which has address ``10.A.B.1``: the
launching process (``ddltrace run``, ``mpiexec``) runs here, as on a cluster's login node, and reaches the
nodes by name (lines added to /etc/hosts between markers). A node's link can be shaped to a rate in bit/s
with ``tc qdisc tbf`` on both ends of its veth (both directions; ``netem``, hence a delay, is not available).

Each node has a long-lived init process (``unshare --pid --fork``; PID 1 of the node, it reaps orphans);
everything started on the node enters its namespaces with ``nsenter -t INIT -n -u -p -i -m``. The script
:attr:`Cluster.enter_script` does that with ssh's arguments (``SCRIPT [options] HOST COMMAND...``), so
MPICH's hydra enters the nodes as it would a real cluster's: ``mpiexec -launcher ssh -launcher-exec SCRIPT``
(:meth:`Cluster.mpiexec` gives the whole launcher command, with MPICH's ofi network module on TCP between
nodes).

Every namespace, link, the bridge, the /etc/hosts lines and the processes left inside the nodes (``ip netns
pids``) are removed when the ``with`` block ends, at interpreter exit if it never ends, and, for a cluster
whose owner process died (SIGKILL), by the next cluster made on this machine.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ddltrace.collectors.scoped import Scoped
from ddltrace.errors import DdltraceError

HOSTS_FILE = Path("/etc/hosts")
_PREFIX = "ddlc"  # every namespace and link name starts with this, then the owner's pid
_NAME = re.compile(rf"^({_PREFIX}([0-9a-f]+)-[0-9a-f]+)(?:n\d+|br)?$")  # tag: prefix, owner pid, sequence (hex)
_MARK = "# ddltrace simulated cluster"
TOOLS = ("ip", "tc", "unshare", "nsenter")
#: A shaped link's tbf bucket by default, in seconds of its rate (:meth:`Cluster.shape`).
BURST_S = 0.001
_SEQUENCE = itertools.count()

# the init of a node: set its host name, mount its own /dev/shm, say it is ready, then reap orphans forever
_INIT = r"""
import os, socket, subprocess, sys, time
socket.sethostname(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", "/dev/shm"], check=True)
os.write(1, b"ready\n")
os.close(1)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.5)
"""

# what hydra's ssh launcher runs: SCRIPT [ssh options] HOST COMMAND... (COMMAND is run by a shell, as ssh does)
_ENTER = """#!/bin/sh
# ddltrace simulated cluster {tag}: enter a node's namespaces instead of ssh (SCRIPT [ssh options] HOST CMD...)
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
case "$1" in
{cases}
  *) echo "ddltrace cluster: no node named '$1' (nodes: {names})" >&2; exit 255 ;;
esac
shift
exec nsenter -t "$pid" -n -u -p -i -m -- /bin/sh -c "$*"
"""


def missing_tools() -> str | None:
    """Why a cluster cannot be made here (not root, a tool missing), or None."""
    if os.geteuid() != 0:
        return "a simulated cluster needs root (network, PID and mount namespaces)"
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"a simulated cluster needs {', '.join(absent)} (Debian: iproute2, util-linux)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise DdltraceError(f"cluster: `{shlex.join(argv)}` failed: {proc.stderr.strip() or proc.returncode}")
    return proc


@dataclass
class Node:
    """One simulated node: ``host`` its host name, ``addr`` its eth0 address, ``netns`` its network namespace,
    ``veth`` the bridge end of its link, ``init_pid`` its PID 1 as seen from this machine."""

    index: int
    host: str
    addr: str
    netns: str
    veth: str
    init_pid: int = 0

    def enter(self, argv: list[str], cwd: str | os.PathLike | None = None) -> list[str]:
        """The command line that runs ``argv`` on this node (in ``cwd``, default this process's)."""
        return ["nsenter", "-t", str(self.init_pid), "-n", "-u", "-p", "-i", "-m",
                f"--wd={os.fspath(cwd or os.getcwd())}", "--", *argv]

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        """Start ``argv`` on this node (keyword arguments as :class:`subprocess.Popen`'s)."""
        return subprocess.Popen(self.enter(argv, kw.pop("cwd", None)), **kw)

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` on this node to its end (keyword arguments as :func:`subprocess.run`'s)."""
        return subprocess.run(self.enter(argv, kw.pop("cwd", None)), **kw)

    def pids(self) -> list[int]:
        """The processes in this node's network namespace, as seen from this machine (``ip netns pids``)."""
        return [int(p) for p in _run("ip", "netns", "pids", self.netns, check=False).stdout.split()]


class Cluster(Scoped):
    """``n`` simulated nodes, made on ``with`` and removed after it (also at exit, also when a test fails).

    ``rates_bit`` maps a node's index to the rate of its link in bit/s (tbf, both directions); ``prefix`` is
    the start of the host names (``node`` gives node0, node1, ...; the owner's pid is added so that clusters
    of concurrent processes do not collide)."""

    def __init__(self, n: int, rates_bit: dict[int, float] | None = None, prefix: str | None = None):
        if n < 1:
            raise DdltraceError(f"cluster: at least one node, got {n}")
        why = missing_tools()
        if why:
            raise DdltraceError(why)
        pid, seq = os.getpid(), next(_SEQUENCE)
        self.tag = f"{_PREFIX}{pid:x}-{seq:x}"  # at most 12 characters: with v99, 15 (Linux's longest link name)
        self.bridge = f"{self.tag}br"
        key = pid * 16 + seq % 16
        net = f"10.{200 + (key // 250) % 50}.{key % 250}"
        self.host_addr = f"{net}.1"
        prefix = prefix or f"{self.tag}n"
        self.nodes = [Node(i, f"{prefix}{i}", f"{net}.{i + 2}", f"{self.tag}n{i}", f"{self.tag}v{i}")
                      for i in range(n)]
        self.rates_bit = dict(rates_bit or {})
        self._inits: list[subprocess.Popen] = []
        self._dir: Path | None = None
        self.enter_script: Path | None = None

    # -- making and removing ------------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        remove_stale()
        atexit.register(self.close)
        return super().__enter__()

    def _make(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.host_addr}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for node in self.nodes:
            _run("ip", "netns", "add", node.netns)
            _run("ip", "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
            _run("ip", "link", "set", node.veth, "master", self.bridge, "up")
            _run("ip", "-n", node.netns, "addr", "add", f"{node.addr}/24", "dev", "eth0")
            _run("ip", "-n", node.netns, "link", "set", "eth0", "up")
            _run("ip", "-n", node.netns, "link", "set", "lo", "up")
            _run("ip", "-n", node.netns, "route", "add", "default", "via", self.host_addr)
            node.init_pid = self._start_init(node)
        for index, rate in self.rates_bit.items():
            self.shape(index, rate)
        _edit_hosts(self.tag, [f"{node.addr} {node.host}" for node in self.nodes])
        self._dir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
        self.enter_script = self._dir / "enter-node"
        cases = "\n".join(f"  {node.host}|{node.addr}) pid={node.init_pid} ;;" for node in self.nodes)
        self.enter_script.write_text(_ENTER.format(tag=self.tag, cases=cases,
                                                   names=" ".join(n.host for n in self.nodes)))
        self.enter_script.chmod(0o755)

    def _start_init(self, node: Node) -> int:
        proc = subprocess.Popen(["ip", "netns", "exec", node.netns, "unshare", "--uts", "--pid", "--fork", "--ipc",
                                 "--mount", "--mount-proc", "--propagation", "private",
                                 sys.executable, "-c", _INIT, node.host],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        self._inits.append(proc)
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if ready else b""
        if line != b"ready\n":
            proc.kill()
            err = proc.stderr.read().decode(errors="replace").strip() if proc.poll() is not None else "no answer"
            raise DdltraceError(f"cluster: node {node.host} did not start ({err[-300:]})")
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        if len(children) != 1:
            raise DdltraceError(f"cluster: node {node.host}: cannot find its init process")
        return int(children[0])

    def close(self) -> None:
        """Remove everything this cluster made (safe to call twice)."""
        atexit.unregister(self.close)
        for node in self.nodes:
            _kill_netns(node.netns)
        for proc in self._inits:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
            for fh in (proc.stdout, proc.stderr):
                if fh is not None:
                    fh.close()
        self._inits = []
        _remove(self.tag, [n.netns for n in self.nodes])
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # -- using ----------------------------------------------------------------------------------------------

    def shape(self, index: int, rate_bit: float, burst: int | None = None) -> None:
        """Limit node ``index``'s link to ``rate_bit`` bit/s in both directions (tbf). ``burst``: the bucket in
        bytes, by default :data:`BURST_S` of the rate (at least 16 KiB): what may pass at once faster than the
        rate after a silence, so a message much larger than it sees the rate (a 10 ms bucket, 125 kB at 100
        Mbit/s, let a 320 kB message through at twice the rate). The queue holds 4 buckets, at least 256 KiB."""
        node = self.nodes[index]
        burst = burst or max(16 * 1024, int(rate_bit / 8 * BURST_S))
        tbf = ["tbf", "rate", f"{int(rate_bit)}bit", "burst", str(burst), "limit", str(4 * max(burst, 64 * 1024))]
        _run("tc", "qdisc", "replace", "dev", node.veth, "root", *tbf)
        _run("ip", "netns", "exec", node.netns, "tc", "qdisc", "replace", "dev", "eth0", "root", *tbf)
        self.rates_bit[index] = rate_bit

    def unshape(self, index: int) -> None:
        """Remove the rate limit of node ``index``'s link."""
        node = self.nodes[index]
        _run("tc", "qdisc", "del", "dev", node.veth, "root", check=False)
        _run("ip", "netns", "exec", node.netns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        self.rates_bit.pop(index, None)

    def local_disk(self, path: str | os.PathLike) -> list[Path]:
        """Give every node a disk of its own at ``path`` (a folder that exists here): a folder of this machine
        per node, bind-mounted over ``path`` in the node's mount namespace, so that what a node writes there
        is seen by no other node nor by this machine, and stays after the node is killed (its disk). The
        nodes' disk folders, by node index (removed with the cluster)."""
        disks = []
        for node in self.nodes:
            disk = self._dir / f"disk-{node.index}"
            disk.mkdir(exist_ok=True)
            _run("nsenter", "-t", str(node.init_pid), "-m", "--", "mount", "--bind", str(disk), os.fspath(path))
            disks.append(disk)
        return disks

    def kill(self, index: int) -> None:
        """Node ``index`` crashes: every process on it is killed (SIGKILL), its init too, so nothing can enter
        it any more; its link, its address and its disk (:meth:`local_disk`) stay."""
        _kill_netns(self.nodes[index].netns)

    def mpiexec(self, mpiexec: str, ppn: int, hosts: list[str] | None = None, netmod: str = "ofi") -> str:
        """The launcher command for ``ppn`` ranks on each node (or on ``hosts``) with MPICH's ``mpiexec``:
        hydra enters the nodes through :attr:`enter_script` and advertises this machine's bridge address to its
        proxies; ranks on different nodes talk TCP over the nodes' eth0 (shared memory within a node).

        ``netmod`` is MPICH's network module between nodes: ``ofi`` (default; libfabric's ``tcp`` provider)
        or ``ucx`` (UCX's TCP transport, which loses small messages sent back to back here: docs/COLLECTORS.md,
        scripts/cluster_any_source.py)."""
        hosts = hosts or [n.host for n in self.nodes]
        env = {"ofi": {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "eth0"},
               "ucx": {"MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "tcp,self,sm", "UCX_NET_DEVICES": "eth0"}}
        if netmod not in env:
            raise DdltraceError(f"cluster: netmod {netmod!r} is not one of {', '.join(env)}")
        genv = [arg for name, value in env[netmod].items() for arg in ("-genv", name, value)]
        return shlex.join([mpiexec, "-launcher", "ssh", "-launcher-exec", str(self.enter_script),
                           "-iface", self.bridge, "-hosts", ",".join(hosts), "-ppn", str(ppn),
                           "-n", str(ppn * len(hosts)), *genv])


def _kill_netns(netns: str) -> None:
    """SIGKILL every process in ``netns`` (a node's init first: its PID namespace's processes die with it)."""
    for _ in range(5):
        pids = _run("ip", "netns", "pids", netns, check=False).stdout.split()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(["sleep", "0.1"], timeout=5)


def _remove(tag: str, netns: list[str]) -> None:
    for name in netns:
        _run("ip", "netns", "del", name, check=False)
    _run("ip", "link", "del", f"{tag}br", check=False)
    _edit_hosts(tag, [])


def _edit_hosts(tag: str, lines: list[str]) -> None:
    """Replace the /etc/hosts lines of cluster ``tag`` with ``lines`` (none: remove them). Rewritten in place
    (it is often a bind mount, which a rename cannot replace), under a lock shared by all clusters."""
    if not HOSTS_FILE.exists() and not lines:
        return
    with open("/run/ddltrace-cluster-hosts.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(HOSTS_FILE, "r+") as fh:
            kept = [line for line in fh.read().splitlines() if not line.endswith(f"{_MARK} {tag}")]
            kept += [f"{line} {_MARK} {tag}" for line in lines]
            fh.seek(0)
            fh.write("\n".join(kept) + "\n")
            fh.truncate()


def remove_stale() -> list[str]:
    """Remove what clusters of processes that no longer exist left behind (namespaces, bridges, /etc/hosts
    lines); the tags removed."""
    names = set(_run("ip", "netns", "list", check=False).stdout.split())
    names |= {m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", _run("ip", "-o", "link", check=False).stdout,
                                              re.M)}
    if HOSTS_FILE.exists():
        names |= {line.rsplit(" ", 1)[1] for line in HOSTS_FILE.read_text().splitlines() if _MARK in line}
    stale: dict[str, list[str]] = {}
    for name in names:
        found = _NAME.match(name)
        if found and not _alive(int(found.group(2), 16)):
            stale.setdefault(found.group(1), []).append(name)
    for tag, members in stale.items():
        netns = [m for m in members if re.search(r"-[0-9a-f]+n\d+$", m)]
        for name in netns:
            _kill_netns(name)
        _remove(tag, netns)
        for folder in Path(tempfile.gettempdir()).glob(f"{tag}-*"):
            shutil.rmtree(folder, ignore_errors=True)
    return sorted(stale)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
