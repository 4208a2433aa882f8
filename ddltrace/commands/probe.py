"""``ddltrace probe serve``: the network probe's server, for ``ddltrace calibrate --peer HOST:PORT``."""

from __future__ import annotations

from ddltrace.collectors.microbench import network


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
    s.add_argument("--port", type=int, default=network.DEFAULT_PORT,
                   help=f"TCP port (default: {network.DEFAULT_PORT}; 0: any free port, printed)")
    s.add_argument("--max-clients", type=int, default=16, help="connections served at once (default: 16)")
    s.add_argument("--idle-timeout", type=float, default=30.0,
                   help="seconds a silent peer is kept before it is dropped (default: 30 s)")
    s.set_defaults(func=run)


def run(args) -> int:
    from ddltrace.errors import DdltraceError

    if not 0 <= args.port < 65536:
        raise DdltraceError(f"--port {args.port}: expected 0..65535")
    if args.max_clients < 1 or args.idle_timeout <= 0:
        raise DdltraceError("--max-clients and --idle-timeout must be positive")
    return network.serve(args.host, args.port, args.max_clients, args.idle_timeout)
