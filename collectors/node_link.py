"""The TCP link between each node agent and the launching ``ddltrace run``: a clock ping-pong at the start and
at the end of the job, and the gather of a node's part when the record folder is on node-local disk.

Why a TCP connection of our own and not the job's launcher: a launcher (hydra, srun, torchrun's agent) runs the
job's command and nothing after it, and a node agent outlives the ranks it samples; a connection that the
agent opens at its start also tells the launching process, the moment it breaks, that a node is gone. One
connection per node (a few hundred bytes while the job runs); the launching process reads every connection
in a thread of its own and writes what arrives straight to disk through one buffer of :data:`CHUNK` bytes per
node (the memory of a gather does not grow with the parts' size), and gives up on a node that sends nothing
for :data:`IDLE_S` s.

Messages: a 4-byte big-endian length, then a JSON header; a ``file`` header is followed by its ``size`` raw
bytes. The agent sends ``hello`` (host, token, where its part lies, whether the launcher's record folder is
visible there), pings (``P``, answered by the launcher's clock as 8 bytes), ``alive`` every :data:`ALIVE_S` s
from the end of its ranks until it is done (writing a long run's samples may take longer than the launcher
waits for a silent node), its files, and ``done`` with both clock measurements; the launcher answers ``done``
with ``ok``.

Clock: the agent sends ``P`` at its time t1, the launcher answers its time t2, the agent receives at t3:
offset = t2 - (t1 + t3) / 2 is the launcher's clock minus the node's (ns), uncertain by half the round trip;
of :data:`ROUNDS` rounds the shortest round trip is kept, at the start (after the agent started) and at
the end (after the node's last rank ended); drift = change of offset / time between the two. The agent side
uses the standard library only (it runs in the shim's fork).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from pathlib import Path

CHUNK = 1 << 20  # bytes per read and write of a file in transit (the bounded buffer)
IDLE_S = 30.0  # a node that sends nothing for this long during the gather is given up
ALIVE_S = 2.0  # while a node writes its part, it says so this often
ROUNDS = 10
_LEN = struct.Struct(">I")
_NS = struct.Struct(">q")


# -- both sides ---------------------------------------------------------------------------------------------

def _send(sock: socket.socket, header: dict) -> None:
    data = json.dumps(header).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        piece = sock.recv(n - len(buf))
        if not piece:
            raise ConnectionError("connection closed")
        buf += piece
    return bytes(buf)


def _recv(sock: socket.socket) -> dict:
    (size,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    return json.loads(_recv_exact(sock, size))


# -- the node agent's side ----------------------------------------------------------------------------------

class AgentLink:
    """The agent's connection to the launching process (``address`` "HOST:PORT"); ``clock`` is the agent's
    clock in ns (its wall clock plus the test hook's offset)."""

    def __init__(self, address: str, token: str, host: str, part: str, shared: bool, clock,
                 timeout_s: float = 10.0):
        name, _, port = address.rpartition(":")
        self.sock = socket.create_connection((name, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.clock = clock
        self._lock = threading.Lock()  # one message at a time: the keep-alive thread sends too
        self._quiet = threading.Event()
        self._alive: threading.Thread | None = None
        _send(self.sock, {"op": "hello", "token": token, "host": host, "part": part, "shared": shared})

    def keep_alive(self, every_s: float = ALIVE_S) -> None:
        """Say every ``every_s`` s that this node is still at work (writing its part after its ranks ended),
        until :meth:`finish`: the launching process waits for a node as long as it hears from it."""
        def beat() -> None:
            while not self._quiet.wait(every_s):
                with self._lock:
                    _send(self.sock, {"op": "alive"})

        self._alive = threading.Thread(target=beat, daemon=True)
        self._alive.start()

    def ping_pong(self, rounds: int = ROUNDS) -> dict:
        """The launcher's clock minus this node's (ns), from the round with the shortest round trip."""
        best = None
        for _ in range(rounds):
            with self._lock:
                t1 = self.clock()
                self.sock.sendall(b"P")
                (t2,) = _NS.unpack(_recv_exact(self.sock, _NS.size))
                t3 = self.clock()
            if best is None or t3 - t1 < best[2] - best[0]:
                best = (t1, t2, t3)
        t1, t2, t3 = best
        return {"offset_ns": t2 - (t1 + t3) // 2, "uncertainty_ns": (t3 - t1 + 1) // 2, "at_ns": (t1 + t3) // 2}

    def send_tree(self, root: str, tag: str) -> tuple[int, int]:
        """Send every file under ``root`` as ``tag/relative path``; (files, bytes) sent."""
        files = size = 0
        for folder, _, names in os.walk(root):
            for name in sorted(names):
                path = os.path.join(folder, name)
                try:
                    fh = open(path, "rb")  # noqa: SIM115 (closed below; a file may vanish meanwhile)
                except OSError:
                    continue
                with fh, self._lock:
                    length = os.fstat(fh.fileno()).st_size
                    rel = os.path.relpath(path, root)
                    _send(self.sock, {"op": "file", "name": f"{tag}/{rel}", "size": length})
                    # the kernel copies (zero-copy where it can); a count of 0 would mean "to the end of the file"
                    sent = self.sock.sendfile(fh, 0, length) if length else 0
                    if sent < length:  # the file was cut meanwhile: keep the framing
                        self.sock.sendall(b"\0" * (length - sent))
                files, size = files + 1, size + length
        return files, size

    def finish(self, summary: dict) -> None:
        """Say the node's part is complete (with ``summary``: the clock measurements) and wait for the ack."""
        self._quiet.set()
        if self._alive is not None:
            self._alive.join()
        self.sock.settimeout(IDLE_S)
        _send(self.sock, {"op": "done", **summary})
        if _recv(self.sock).get("op") != "ok":
            raise ConnectionError("the launcher did not acknowledge the part")
        self.sock.close()


# -- the launching process's side ---------------------------------------------------------------------------

class Gatherer:
    """Listens for the node agents of one run: answers their pings and writes their files under ``roots``
    (tag: folder; a file ``tag/rel`` goes to ``roots[tag]/rel``). ``nodes``: host: what is known of it."""

    def __init__(self, roots: dict[str, Path], bind: str = "0.0.0.0"):
        self.roots = {tag: Path(p) for tag, p in roots.items()}
        self.token = os.urandom(16).hex()
        self.nodes: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._server = socket.create_server((bind, 0), backlog=128)
        self._threads: list[threading.Thread] = []
        self._greeting = 0  # connections accepted whose hello is not read yet
        self._closing = False
        self.port = self._server.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, peer = self._server.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn, peer[0]), daemon=True)
            with self._lock:
                self._threads.append(thread)
                self._greeting += 1
            thread.start()

    def _serve(self, conn: socket.socket, peer: str) -> None:
        node: dict = {"peer": peer, "state": "connected", "files": 0, "bytes": 0, "heard": 0}
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(CHUNK)
        greeting = True
        try:
            conn.settimeout(IDLE_S)
            hello = _recv(conn)
            if hello.get("op") != "hello" or hello.get("token") != self.token:
                return  # not one of this run's agents
            node.update(host=str(hello["host"]), part=hello.get("part"), shared=bool(hello.get("shared")),
                        state="running")
            with self._lock:
                self.nodes[node["host"]] = node
                self._greeting -= 1
                greeting = False
            conn.settimeout(None)  # the job may run for days: the connection idles until the node's end
            while True:
                op = conn.recv(1, socket.MSG_PEEK)
                if not op:
                    raise ConnectionError("the node closed the connection before its part was complete")
                if op == b"P":
                    conn.recv(1)
                    conn.sendall(_NS.pack(time.time_ns()))
                    continue
                conn.settimeout(IDLE_S)
                header = _recv(conn)
                node["heard"] += 1
                if header.get("op") == "file":
                    node["state"] = "gathering"
                    self._receive_file(conn, node, str(header["name"]), int(header["size"]), buf)
                elif header.get("op") == "done":
                    node.update(state="complete", clock_start=header.get("clock_start"),
                                clock_end=header.get("clock_end"))
                    _send(conn, {"op": "ok"})
                    return
        except (OSError, ValueError, KeyError, ConnectionError) as exc:
            if node["state"] not in ("complete", "lost"):
                # closed: the node's end closed it (the agent ended: killed, died, its node down), or reset it;
                # refused: it sent what this process does not take; error: this side failed (a file not written)
                lost = "closed" if isinstance(exc, ConnectionError) else \
                    "refused" if isinstance(exc, (ValueError, KeyError)) else "error"
                node.update(state="lost", lost=lost,
                            error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        finally:
            if greeting:
                with self._lock:
                    self._greeting -= 1
            conn.close()

    def _receive_file(self, conn: socket.socket, node: dict, name: str, size: int, buf: bytearray) -> None:
        tag, _, rel = name.partition("/")
        root = self.roots.get(tag)
        target = (root / rel).resolve() if root is not None else None
        if target is None or root.resolve() not in target.parents:
            raise ValueError(f"a file outside the run's folders: {name!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        view = memoryview(buf)
        # written beside the target and renamed once whole: a connection cut mid-file leaves no truncated
        # record file for the recovery to take as the rank's (the whole part stays on the node's disk)
        partial = target.with_name(f".{target.name}.partial")
        try:
            with open(partial, "wb") as fh:
                left = size
                while left:
                    n = conn.recv_into(view[:min(CHUNK, left)])
                    if not n:
                        raise ConnectionError(f"connection closed in the middle of {name}")
                    fh.write(view[:n])
                    left -= n
                    node["heard"] += 1
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        node["files"] += 1
        node["bytes"] += size

    def wait(self, timeout_s: float) -> dict[str, dict]:
        """Wait until every node that said hello has completed or is lost, at most ``timeout_s`` s without
        word from the pending nodes (a message, a piece of a file, a keep-alive); then stop listening. The
        nodes, by host: a lost one has ``error`` (what happened) and ``lost``, how: "closed" (its end closed or
        reset the connection: the agent ended before it was done, killed or dead, or its node went down),
        "silent" (no word for ``timeout_s``), "refused" (it sent what is not taken), "error" (this side failed)."""
        deadline = time.monotonic() + timeout_s
        last = -1
        while time.monotonic() < deadline:
            with self._lock:
                pending = [n for n in self.nodes.values() if n["state"] in ("running", "gathering")] \
                    or self._greeting
                progress = sum(n["heard"] for n in self.nodes.values())
            if not pending:
                break
            if progress != last:
                last, deadline = progress, time.monotonic() + timeout_s
            time.sleep(0.05)
        self.close()
        with self._lock:
            for node in self.nodes.values():
                if node["state"] in ("running", "gathering"):
                    node.update(state="lost", lost="silent",
                                error=f"no word from the node for {timeout_s:g} s after the job")
            return {host: {k: v for k, v in node.items() if k != "heard"} for host, node in self.nodes.items()}

    def close(self) -> None:
        self._closing = True
        self._server.close()


def default_address() -> str:
    """This machine's address on its default route (no packet is sent), else its host name."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routing only
            return probe.getsockname()[0]
        except OSError:
            return socket.gethostname()
