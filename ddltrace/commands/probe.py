"""``ddltrace probe serve``: the network probe's server, for ``ddltrace calibrate --peer HOST:PORT``."""

from __future__ import annotations

from ddltrace.collectors.microbench import network
from ddltrace.options import integer, number


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "probe", help="network probe server for 'calibrate --peer'",
        description="Run the network probe's server on this host; on another host, "
                    "'ddltrace calibrate --only net --peer THIS_HOST:PORT' measures latency and bandwidth to it.")
    sub = p.add_subparsers(dest="probe_verb", metavar="ACTION", required=True)
    s = sub.add_parser("serve", help="listen for probe clients until Ctrl-C or SIGTERM",
                       description="Listen for probe clients until Ctrl-C or SIGTERM. Listens on loopback unless "
                                   "--host says otherwise (0.0.0.0: every interface).")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    s.add_argument("--port", type=integer(0, 65535), default=network.DEFAULT_PORT,
                   help=f"TCP port (default: {network.DEFAULT_PORT}; 0: any free port, printed)")
    s.add_argument("--max-clients", type=integer(1, network.MAX_CLIENTS), default=16,
                   help=f"connections served at once, 1 to {network.MAX_CLIENTS} (default: 16)")
    s.add_argument("--idle-timeout", type=number(*network.IDLE_TIMEOUT_S, unit="s"), default=30.0,
                   help=f"seconds a silent peer is kept before it is dropped, {network.IDLE_TIMEOUT_S[0]:g} "
                        f"to {network.IDLE_TIMEOUT_S[1]:g} (default: 30 s)")
    s.set_defaults(func=run)


def run(args) -> int:
    return network.serve(args.host, args.port, args.max_clients, args.idle_timeout)
