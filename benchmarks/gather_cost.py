"""The gather of node-local parts (collectors/node_link.py): time and peak memory of the launching process to
gather ``--nodes`` nodes' parts of ``--events`` MPI call records each, against `cp -r` of the same bytes.

Each part is what a node keeps: a record file of EVENTS records of the PMPI record size (64 bytes each, filled
with random bytes: the gather moves bytes and does not read them) plus its agent's folder, made in a fresh
folder per node. One sender process per node (a node agent's :class:`AgentLink`, over TCP on this machine's
loopback: the simulated cluster's veths would measure the same kernel copies) sends its part to one
:class:`Gatherer` in this process, all nodes at once, as at the end of a job. Reported: wall time of the
gather (from the senders' start to the last part written), its throughput, the gathering process's highest
resident memory during it (sampled every 5 ms) above what it had before listening, and the wall time of
``cp -r`` of the same folders to the same disk (the page cache dropped for neither: both read what was just
written); medians of ``--repeat`` runs of each, alternated. Ratio = gather time / cp time.

    .venv/bin/python benchmarks/gather_cost.py [--nodes 4] [--events 1000000] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddltrace.collectors.node_link import AgentLink, Gatherer
from ddltrace.collectors.pmpi.records import HEADER_SIZE, RECORD_DTYPE


def make_part(root: Path, host: str, events: int) -> int:
    """A node's part under ``root``: its record file and agent folder; its size in bytes."""
    records = root / "records"
    (records / "nodes" / host / "ranks").mkdir(parents=True)
    size = HEADER_SIZE + events * RECORD_DTYPE.itemsize
    with open(records / "rank-00000.pmpi", "wb") as fh:
        left = size
        while left:
            piece = os.urandom(min(left, 1 << 24))
            fh.write(piece)
            left -= len(piece)
    agent = json.dumps({"host": host}).encode()
    (records / "nodes" / host / "agent.json").write_bytes(agent)
    return size + len(agent)


def send(address: str, token: str, host: str, part: str) -> None:
    link = AgentLink(address, token, host, part, False, time.time_ns)
    link.send_tree(os.path.join(part, "records"), "records")
    link.finish({})


class RssWatch:
    """The highest resident memory of this process (bytes), sampled every 5 ms in a thread until stopped."""

    def __init__(self):
        import threading

        import psutil

        self.proc, self.peak, self.done = psutil.Process(), 0, threading.Event()
        self.start_rss = self.proc.memory_info().rss
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.005):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def stop(self) -> tuple[int, int]:
        self.done.set()
        self.thread.join()
        return self.start_rss, max(self.peak, self.proc.memory_info().rss)


def gather(dest: str, nodes: int, pipe) -> None:
    """The launching process's side, in a fresh interpreter: listen, say where, wait for every node's part;
    send back (seconds, resident memory before listening, the highest during the gather, the nodes)."""
    watch = RssWatch()
    gatherer = Gatherer({"records": Path(dest) / "records", "framework": Path(dest) / "framework"},
                        bind="127.0.0.1")
    pipe.send((f"127.0.0.1:{gatherer.port}", gatherer.token))
    pipe.recv()  # the senders are starting
    t0 = time.perf_counter()
    while len(gatherer.nodes) < nodes and time.perf_counter() - t0 < 30:
        time.sleep(0.001)
    result = gatherer.wait(30.0)
    seconds = time.perf_counter() - t0
    pipe.send((seconds, *watch.stop(), result))


def gather_once(parts: Path, dest: Path, hosts: list[str]) -> tuple[float, int, int, int]:
    """One gather of the parts into ``dest``: (seconds, resident bytes before, highest during, bytes)."""
    dest.mkdir()
    here, there = multiprocessing.Pipe()
    launcher = multiprocessing.get_context("spawn").Process(target=gather, args=(str(dest), len(hosts), there))
    launcher.start()
    address, token = here.recv()
    senders = [multiprocessing.get_context("fork").Process(target=send, args=(address, token, h, str(parts / h)))
               for h in hosts]
    here.send("go")
    for p in senders:
        p.start()
    seconds, rss0, rss1, nodes = here.recv()
    for p in [*senders, launcher]:
        p.join()
    if sorted(n for n, v in nodes.items() if v["state"] == "complete") != hosts:
        raise SystemExit(f"gather incomplete: {nodes}")
    return seconds, rss0, rss1, sum(v["bytes"] for v in nodes.values())


def cp_once(parts: Path, dest: Path, hosts: list[str]) -> float:
    dest.mkdir()
    t0 = time.perf_counter()
    subprocess.run(["cp", "-r", *(str(parts / h) for h in hosts), str(dest)], check=True)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--events", type=int, default=1_000_000, help="MPI call records per node (default 1M)")
    ap.add_argument("--repeat", type=int, default=3, help="gathers and copies, alternated (default 3)")
    ap.add_argument("--dir", default=None, help="folder for the parts and copies (default: a temporary one)")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="gather_cost-", dir=args.dir))
    gathers, copies = [], []
    try:
        hosts = [f"node{i}" for i in range(args.nodes)]
        total = sum(make_part(base / "parts" / h, h, args.events) for h in hosts)
        for i in range(args.repeat):
            gathers.append(gather_once(base / "parts", base / f"gathered{i}", hosts))
            copies.append(cp_once(base / "parts", base / f"copied{i}", hosts))
            shutil.rmtree(base / f"gathered{i}")
            shutil.rmtree(base / f"copied{i}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    mb = total / 1e6
    g = statistics.median(s for s, *_ in gathers)
    c = statistics.median(copies)
    growth = max(rss1 - rss0 for _, rss0, rss1, _ in gathers)
    print(f"gather of {args.nodes} nodes' parts, {args.events:,} MPI call records each ({mb:.0f} MB in all; "
          f"{gathers[0][3] / 1e6:.0f} MB gathered), {args.nodes} sender processes over TCP on loopback, one disk; "
          f"median of {args.repeat}:")
    print(f"  gather: {g:.2f} s wall ({mb / g:.0f} MB/s; runs {', '.join(f'{s:.2f}' for s, *_ in gathers)} s); "
          f"the gathering process's resident memory grew by at most {growth / 1e6:.1f} MB (sampled every 5 ms; "
          f"its buffers: 1 MiB per node), to {max(r for _, _, r, _ in gathers) / 1e6:.0f} MB")
    print(f"  cp -r of the same folders: {c:.2f} s wall ({mb / c:.0f} MB/s; runs "
          f"{', '.join(f'{s:.2f}' for s in copies)} s)")
    print(f"  ratio gather / cp (time, medians): {g / c:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
