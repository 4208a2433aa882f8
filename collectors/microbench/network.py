"""The network probe, iperf's and the OSU benchmarks' way: ``ddltrace probe serve`` on one host, the client
in ``ddltrace calibrate --peer HOST:PORT`` (loopback by default).

Protocol (TCP, big-endian): a request is ``"DDLP", op (1 byte), size (8 bytes), count (8 bytes)``.
- HELLO: the server answers ``"DDLP", version (1 byte), largest ping-pong message (8 bytes)``; a server
  already serving its maximum number of clients answers ``"DDLB"`` in its place and closes.
- PINGPONG: ``count`` times the client sends ``size`` bytes and the server sends them back.
- SINK: the client streams ``size`` bytes; the server answers the byte count it received (8 bytes).
- DUPLEX (version 2): the client streams ``size`` bytes and the server, at the same time, streams ``size`` bytes
  back; once both are through, the server answers the byte count it received (8 bytes).
- BYE: the server closes the connection.

The server listens on loopback unless told otherwise, serves at most ``max_clients`` connections at once,
refuses requests over its limits (it closes the connection), drops a peer idle for ``idle_timeout`` seconds,
and stops cleanly (``stop()``; SIGINT or SIGTERM for ``probe serve``).

What the client measures:
- lat_net: a ping-pong sweep of small messages (1 B to 64 KiB), one-way time = round trip / 2, fitted
  t = lat + r * n (weighted by 1/t, so the small sizes set the intercept): lat_net is the intercept.
- r_net: a streaming sweep (256 KiB to 64 MiB sent with ``sendall`` in 1 MiB pieces, the kernel's own buffer
  sizes, then the server's count back), fitted t = c + r_net * n by ordinary least squares (the large sizes
  dominate): r_net (seconds per payload byte) is the slope, with its standard error. This is TCP
  goodput: on Ethernet with TCP timestamps at most 1448 / 1514 = 0.957 of the line rate.
- Parallel streams: P connections streaming at once, the aggregate bytes per second.
- Both directions at once (a version 2 server): the time to stream ``DUPLEX_SIZE`` bytes each way at once against
  one way alone. On a full-duplex path the two take as long; on a shaped link whose acknowledgements queue behind
  the data going the other way, a direction slows while the other is busy (``suite.record_network``'s
  ``net_duplex``).
- The CPU a byte costs (a version 2 server, loopback too): this process's CPU time (``time.process_time``: user and
  system, and the kernel's packet work where the kernel charges it to the process running when it comes, as it does
  without ``CONFIG_IRQ_TIME_ACCOUNTING``) over streaming ``DUPLEX_SIZE`` bytes each way at once, per byte: one byte
  sent and one received (``net_cpu_per_byte``). On this machine 0.3-0.5 ns over loopback, 3.7-5.6 ns over a veth pair
  between two network namespaces shaped to 200 Mbit/s (tbf, 32 KiB bucket), 11-16 ns between two nodes of the
  simulated cluster so shaped (docs/MODELS.md).
"""

from __future__ import annotations

import math
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddltrace.errors import DdltraceError

if TYPE_CHECKING:  # measure (numpy) is imported where a measurement is made: 'ddltrace probe' starts without it
    from ddltrace.collectors.microbench.measure import LinearFit, Measurement

MAGIC = b"DDLP"
BUSY = b"DDLB"
"""Sent instead of the hello's answer by a server already serving its maximum number of clients."""
VERSION = 2
MAX_CLIENTS = 1024
"""The most connections a server serves at once: one thread each, and the listen backlog."""
IDLE_TIMEOUT_S = (0.001, 86400.0)
"""The idle timeout's range, in s: the kernel's timeval counts microseconds, and a day bounds a silent peer."""
OP_HELLO, OP_PINGPONG, OP_SINK, OP_BYE, OP_DUPLEX = 0, 1, 2, 3, 4
REQUEST = struct.Struct("!4sBQQ")
HELLO_REPLY = struct.Struct("!4sBQ")
COUNT = struct.Struct("!Q")
CHUNK = 1024 * 1024
"""Bytes per send/recv call when streaming."""
MAX_MESSAGE = 64 * 1024 * 1024
"""The largest ping-pong message the server accepts (bytes)."""
MAX_SINK = 1 << 40
"""The most bytes the server accepts in one streaming request."""
MAX_COUNT = 1_000_000
"""The most round trips in one ping-pong request."""
DEFAULT_PORT = 5210

DUPLEX_SIZE = 4 << 20
"""Bytes each way of the both-directions measurement."""
LATENCY_SIZES = (1, 8, 64, 512, 4096, 16384, 65536)
STREAM_SIZES = (256 * 1024, 1 << 20, 4 << 20, 16 << 20, 64 << 20)


# --------------------------------------------------------------------------------------------------- server


def _kernel_timeouts(sock: socket.socket, seconds: float) -> None:
    """Bound every send and receive on ``sock`` by ``seconds`` with the kernel's SO_SNDTIMEO and SO_RCVTIMEO,
    leaving the socket blocking for Python. A Python timeout (``settimeout``) makes the socket non-blocking and
    adds a poll() before every send and recv: about 3 us more per one-way 1-byte message here, both ends on
    one CPU (see docs/CALIBRATION.md). Falls back to ``settimeout`` where the options are refused."""
    sec, usec = int(seconds), min(999_999, int(round((seconds % 1) * 1e6)))
    timeval = struct.pack("@ll", sec, usec if sec or usec else 1)  # a zero timeval would mean: wait forever
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    except OSError:
        sock.settimeout(seconds)
        return
    sock.settimeout(None)


def _recv_exact(sock: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``sock``; False if the peer closed first, TimeoutError when a kernel timeout ends a
    wait."""
    got = 0
    try:
        while got < len(view):
            n = sock.recv_into(view[got:] if got else view)
            if n == 0:
                return False
            got += n
    except BlockingIOError as exc:  # EAGAIN from SO_RCVTIMEO
        raise TimeoutError(str(exc)) from exc
    return True


def _sendall(sock: socket.socket, data) -> None:
    """``sock.sendall``; TimeoutError when SO_SNDTIMEO ends a wait."""
    try:
        sock.sendall(data)
    except BlockingIOError as exc:
        raise TimeoutError(str(exc)) from exc


class ProbeServer:
    """The probe server: ``start()`` listens and serves in background threads, ``stop()`` ends it all.

    ``host``/``port`` where to listen (port 0: any free port, see ``address``), ``max_clients`` connections at
    once (more are closed on arrival), ``idle_timeout`` seconds a connected peer may stay silent.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, max_clients: int = 16,
                 idle_timeout: float = 30.0, log=None):
        if type(max_clients) is not int or not 1 <= max_clients <= MAX_CLIENTS:
            raise ValueError(f"max_clients {max_clients!r}: expected 1 to {MAX_CLIENTS}")
        if not (math.isfinite(idle_timeout) and IDLE_TIMEOUT_S[0] <= idle_timeout <= IDLE_TIMEOUT_S[1]):
            raise ValueError(f"idle_timeout {idle_timeout!r}: expected {IDLE_TIMEOUT_S[0]:g} to "
                             f"{IDLE_TIMEOUT_S[1]:g} s")
        self.host, self.port, self.max_clients, self.idle_timeout = host, port, max_clients, idle_timeout
        self._log = log or (lambda msg: None)
        self._stop = threading.Event()
        self._slots = threading.BoundedSemaphore(max_clients)
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) actually listened on."""
        assert self._listener is not None, "server not started"
        return self._listener.getsockname()[:2]

    def start(self) -> ProbeServer:
        try:
            info = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
            listener = socket.socket(info[0], socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(info[4])
        except OSError as exc:
            raise DdltraceError(f"{self.host}:{self.port}: cannot listen ({exc.strerror or exc})") from exc
        listener.listen(self.max_clients)
        listener.settimeout(0.2)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept_loop, name="probe-accept", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Block until :meth:`stop` (from a signal handler or another thread)."""
        while not self._stop.wait(0.2):
            pass

    def stop(self) -> None:
        """Stop accepting, close every connection, wait for the accept thread."""
        self._stop.set()
        with self._lock:
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._listener is not None:
            self._listener.close()

    def __enter__(self) -> ProbeServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            if not self._slots.acquire(blocking=False):
                self._log(f"refused {peer[0]}:{peer[1]}: already {self.max_clients} clients")
                threading.Thread(target=self._refuse, args=(conn,), daemon=True).start()
                continue
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    @staticmethod
    def _refuse(conn: socket.socket) -> None:
        """Tell a client over the limit that the server is busy, let it read that, close."""
        try:
            conn.settimeout(2.0)
            conn.sendall(HELLO_REPLY.pack(BUSY, VERSION, 0))
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(4096):  # drain its hello so that closing sends no reset
                pass
        except OSError:
            pass
        finally:
            conn.close()

    def _serve(self, conn: socket.socket, peer) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _kernel_timeouts(conn, self.idle_timeout)
        buf = bytearray(CHUNK)
        try:
            while not self._stop.is_set():
                head = bytearray(REQUEST.size)
                if not _recv_exact(conn, memoryview(head)):
                    return
                magic, op, size, count = REQUEST.unpack(head)
                if magic != MAGIC:
                    self._log(f"closed {peer[0]}:{peer[1]}: not a probe client")
                    return
                if op == OP_HELLO:
                    _sendall(conn, HELLO_REPLY.pack(MAGIC, VERSION, MAX_MESSAGE))
                elif op == OP_PINGPONG and 0 < size <= MAX_MESSAGE and 0 < count <= MAX_COUNT:
                    if len(buf) < size:
                        buf = bytearray(size)
                    view = memoryview(buf)[:size]
                    for _ in range(count):
                        if not _recv_exact(conn, view):
                            return
                        _sendall(conn, view)
                elif op in (OP_SINK, OP_DUPLEX) and 0 < size <= MAX_SINK:
                    sender = _streamer(conn, size) if op == OP_DUPLEX else None
                    view, left = memoryview(buf), size
                    while left:
                        n = conn.recv_into(view[:min(left, len(view))])
                        if n == 0:
                            return
                        left -= n
                    if sender is not None:
                        sender.join()
                    _sendall(conn, COUNT.pack(size))
                else:
                    if op != OP_BYE:
                        self._log(f"closed {peer[0]}:{peer[1]}: request over the limits (op {op}, {size} B)")
                    return
        except TimeoutError:
            self._log(f"closed {peer[0]}:{peer[1]}: idle for {self.idle_timeout:g} s")
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()
            self._slots.release()


def _streamer(conn: socket.socket, size: int) -> threading.Thread:
    """A started thread that sends ``size`` zero bytes on ``conn`` (the other direction of a DUPLEX request); a
    connection that fails ends it, and the reader of the request sees the failure."""
    def send() -> None:
        payload, left = memoryview(bytearray(CHUNK)), size
        try:
            while left:
                piece = payload[:min(left, CHUNK)]
                _sendall(conn, piece)
                left -= len(piece)
        except OSError:
            pass

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------------------------------- client


def parse_peer(text: str) -> tuple[str, int]:
    """'HOST:PORT' (or '[v6]:PORT') -> (host, port); DdltraceError if malformed."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DdltraceError(f"--peer {text!r}: expected HOST:PORT with a port in 1..65535")
    return host, int(port)


class ProbeClient:
    """A connection to a probe server; every wait is bounded by ``timeout`` seconds."""

    def __init__(self, host: str, port: int, timeout: float = 5.0):
        self.peer = f"{host}:{port}"
        self.timeout = timeout
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except socket.gaierror as exc:
            raise DdltraceError(f"peer {self.peer}: unknown host ({exc.strerror})") from exc
        except ConnectionRefusedError as exc:
            raise DdltraceError(f"peer {self.peer}: connection refused (is 'ddltrace probe serve' running there?)") \
                from exc
        except TimeoutError as exc:
            raise DdltraceError(f"peer {self.peer}: no answer within {timeout:g} s (unreachable or filtered)") \
                from exc
        except OSError as exc:
            raise DdltraceError(f"peer {self.peer}: cannot connect ({exc.strerror or exc})") from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _kernel_timeouts(self.sock, timeout)
        reply = self._exchange(REQUEST.pack(MAGIC, OP_HELLO, 0, 0), HELLO_REPLY.size, "the hello")
        magic, version, self.max_message = HELLO_REPLY.unpack(reply)
        if magic == BUSY:
            self.close()
            raise DdltraceError(f"peer {self.peer}: busy (already serving its maximum number of clients)")
        if magic != MAGIC:
            self.close()
            raise DdltraceError(f"peer {self.peer}: not a ddltrace probe server (wrong answer to the hello)")
        self.server_version = version

    def _exchange(self, payload: bytes, reply_size: int, what: str) -> bytes:
        reply = bytearray(reply_size)
        try:
            _sendall(self.sock, payload)
            ok = _recv_exact(self.sock, memoryview(reply))
        except TimeoutError as exc:
            self.close()
            raise DdltraceError(f"peer {self.peer}: no answer to {what} within {self.timeout:g} s "
                                "(not a ddltrace probe server, or it hangs)") from exc
        except OSError as exc:
            self.close()
            raise DdltraceError(f"peer {self.peer}: connection lost during {what} ({exc.strerror or exc})") from exc
        if not ok:
            self.close()
            raise DdltraceError(f"peer {self.peer}: closed the connection during {what} "
                                "(not a probe server, or the request is over its limits)")
        return bytes(reply)

    def pingpong(self, size: int, count: int) -> float:
        """Seconds one way for a message of ``size`` bytes: round-trip time / 2, averaged over ``count``."""
        buf = bytearray(size)
        view = memoryview(buf)
        try:
            _sendall(self.sock, REQUEST.pack(MAGIC, OP_PINGPONG, size, count))
            t0 = time.perf_counter()
            for _ in range(count):
                _sendall(self.sock, view)
                if not _recv_exact(self.sock, view):
                    raise DdltraceError(f"peer {self.peer}: closed the connection during a ping-pong of {size} B")
            return (time.perf_counter() - t0) / count / 2
        except TimeoutError as exc:
            self.close()
            raise DdltraceError(f"peer {self.peer}: stopped answering during a ping-pong of {size} B") from exc
        except OSError as exc:
            self.close()
            raise DdltraceError(f"peer {self.peer}: connection lost during a ping-pong of {size} B "
                                f"({exc.strerror or exc}; over the server's limits?)") from exc

    def stream(self, size: int, payload: memoryview | None = None) -> float:
        """Seconds to stream ``size`` bytes and get the server's count back."""
        payload = payload if payload is not None else memoryview(bytearray(CHUNK))

        def send() -> None:
            left = size
            while left:
                piece = payload[:min(left, len(payload))]
                _sendall(self.sock, piece)
                left -= len(piece)

        return self._counted(OP_SINK, size, "a stream", send)

    def duplex(self, size: int) -> float:
        """Seconds to stream ``size`` bytes to the server while it streams ``size`` bytes back, both through and
        its count back (a version 2 server)."""
        inbound = memoryview(bytearray(CHUNK))

        def both() -> None:
            sender = _streamer(self.sock, size)
            left = size
            while left:
                n = self.sock.recv_into(inbound[:min(left, CHUNK)])
                if n == 0:
                    raise DdltraceError(f"peer {self.peer}: closed the connection during a two-way stream of {size} B")
                left -= n
            sender.join()

        return self._counted(OP_DUPLEX, size, "a two-way stream", both)

    def _counted(self, op: int, size: int, what: str, transfer) -> float:
        """Seconds from sending request ``op`` for ``size`` bytes, through ``transfer()`` (which moves them), to the
        server's byte count, which must be ``size``; every failure one error naming the peer and ``what``."""
        try:
            t0 = time.perf_counter()
            _sendall(self.sock, REQUEST.pack(MAGIC, op, size, 0))
            transfer()
            reply = bytearray(COUNT.size)
            if not _recv_exact(self.sock, memoryview(reply)):
                raise DdltraceError(f"peer {self.peer}: closed the connection during {what} of {size} B")
            elapsed = time.perf_counter() - t0
        except TimeoutError as exc:
            self.close()
            raise DdltraceError(f"peer {self.peer}: stopped answering during {what} of {size} B") from exc
        except OSError as exc:
            self.close()
            raise DdltraceError(f"peer {self.peer}: connection lost during {what} of {size} B "
                                f"({exc.strerror or exc})") from exc
        (received,) = COUNT.unpack(reply)
        if received != size:
            raise DdltraceError(f"peer {self.peer}: received {received} B of {size} B")
        return elapsed

    def close(self) -> None:
        try:
            _sendall(self.sock, REQUEST.pack(MAGIC, OP_BYE, 0, 0))
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> ProbeClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class NetworkResult:
    """lat_net (s) and r_net (s/B) with their fits; the sweeps' points; parallel-stream bandwidths (B/s); the
    seconds to stream ``DUPLEX_SIZE`` bytes one way and both ways at once (None from a version 1 server, or where
    not asked for); the CPU per byte exchanged."""

    peer: str
    lat_fit: LinearFit
    bw_fit: LinearFit
    latency_points: list[tuple[int, Measurement]]
    stream_points: list[tuple[int, Measurement]]
    parallel: dict[int, Measurement]
    duplex: tuple[Measurement, Measurement] | None = None
    #: this process's CPU seconds per byte sent and received at once (:func:`cpu_per_byte`); None from a version 1
    #: server
    cpu_per_byte: Measurement | None = None


def latency_sweep(client: ProbeClient, sizes=LATENCY_SIZES, repeats: int = 3, min_time: float = 0.02):
    """[(size, one-way seconds)] from ping-pongs, each repeat lasting about ``min_time``."""
    from ddltrace.collectors.microbench.measure import repeat

    points = []
    for size in sizes:
        once = max(client.pingpong(size, 4), 1e-7)
        count = int(min(MAX_COUNT, max(4, min_time / (2 * once))))
        points.append((size, repeat(lambda s=size, c=count: client.pingpong(s, c), repeats=repeats)))
    return points


def stream_sweep(client: ProbeClient, sizes=STREAM_SIZES, repeats: int = 3):
    """[(size, seconds to stream it)]."""
    from ddltrace.collectors.microbench.measure import repeat

    payload = memoryview(bytearray(CHUNK))
    client.stream(CHUNK, payload)  # warm-up: the congestion window opens
    return [(size, repeat(lambda s=size: client.stream(s, payload), repeats=repeats)) for size in sizes]


def both_ways(client: ProbeClient, size: int = DUPLEX_SIZE, repeats: int = 3):
    """(seconds to stream ``size`` bytes one way, seconds to stream them both ways at once), alternating."""
    from ddltrace.collectors.microbench.measure import repeat

    payload = memoryview(bytearray(CHUNK))
    return (repeat(lambda: client.stream(size, payload), repeats=repeats),
            repeat(lambda: client.duplex(size), repeats=repeats))


def cpu_per_byte(client: ProbeClient, size: int = DUPLEX_SIZE, repeats: int = 3) -> Measurement:
    """This process's CPU seconds (``time.process_time``) per byte while it streams ``size`` bytes to the server
    and receives as many from it at once (a DUPLEX request): the cost of one byte sent plus one received, s/B."""
    from ddltrace.collectors.microbench.measure import repeat

    def once() -> float:
        t0 = time.process_time()
        client.duplex(size)
        return (time.process_time() - t0) / size

    client.duplex(CHUNK)  # warm-up: the congestion window opens
    return repeat(once, repeats=repeats, unit="s/B")


def parallel_streams(host: str, port: int, streams: int, total: int, repeats: int = 3, timeout: float = 5.0):
    """Aggregate bytes per second of ``streams`` connections streaming ``total`` bytes together."""
    from ddltrace.collectors.microbench.measure import repeat

    clients = [ProbeClient(host, port, timeout) for _ in range(streams)]
    try:
        payload = memoryview(bytearray(CHUNK))
        for c in clients:
            c.stream(CHUNK, payload)
        share = max(CHUNK, total // streams)

        def once() -> float:
            errors: list[BaseException] = []

            def send(c):
                try:
                    c.stream(share, payload)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                    errors.append(exc)

            threads = [threading.Thread(target=send, args=(c,)) for c in clients]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            return share * streams / (time.perf_counter() - t0)

        return repeat(once, repeats=repeats, unit="B/s")
    finally:
        for c in clients:
            c.close()


def measure(host: str, port: int, quick: bool = False, timeout: float = 5.0, stream_sizes=None,
            parallel=None, progress=None, duplex: bool = True) -> NetworkResult:
    """The whole network calibration against the probe server at ``host:port``; ``duplex``: also the two
    directions at once (from a version 2 server)."""
    from ddltrace.collectors.microbench.measure import linear_fit

    repeats = 3 if quick else 5
    with ProbeClient(host, port, timeout) as client:
        if progress:
            progress("network latency")
        lat_points = latency_sweep(client, repeats=repeats, min_time=0.01 if quick else 0.05)
        if progress:
            progress("network bandwidth")
        sizes = stream_sizes or STREAM_SIZES
        bw_points = stream_sweep(client, sizes, repeats=repeats)
        times = cpu = None
        if client.server_version >= 2:
            if duplex:
                if progress:
                    progress("network both ways at once")
                times = both_ways(client, repeats=repeats)
            if progress:
                progress("network CPU per byte")
            cpu = cpu_per_byte(client, repeats=repeats)
    lat_fit = linear_fit([s for s, _ in lat_points], [m.value for _, m in lat_points], relative=True)
    bw_fit = linear_fit([s for s, _ in bw_points], [m.value for _, m in bw_points])
    par = {}
    for p in parallel if parallel is not None else ((2,) if quick else (2, 4)):
        if progress:
            progress(f"network {p} streams")
        par[p] = parallel_streams(host, port, p, max(sizes), repeats=repeats, timeout=timeout)
    return NetworkResult(f"{host}:{port}", lat_fit, bw_fit, lat_points, bw_points, par, times, cpu)


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, max_clients: int = 16, idle_timeout: float = 30.0,
          out=None) -> int:
    """Run a probe server until SIGINT or SIGTERM: prints 'listening on HOST:PORT' (flushed) first, then one
    line per refused or dropped peer, and 'stopped' at the end. Returns 0. A server whose output nobody reads any
    more (the calibration that started it on loopback was interrupted before it read the first line) stops: the
    pipe's reader is gone, and so is its client."""
    import os
    import signal
    import sys

    out = out or sys.stdout

    def say(msg: str) -> None:
        try:
            print(msg, file=out, flush=True)
        except BrokenPipeError:
            server._stop.set()
            try:  # what is left in the buffer goes nowhere, not into a traceback at exit (Python's docs' way)
                os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
            except (OSError, ValueError):
                pass

    server = ProbeServer(host, port, max_clients, idle_timeout, log=say).start()
    previous = {sig: signal.signal(sig, lambda *_: server._stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        h, p = server.address
        say(f"listening on {'[' + h + ']' if ':' in h else h}:{p}")
        server.serve_forever()
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        say("stopped")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(serve(sys.argv[1], int(sys.argv[2])))
