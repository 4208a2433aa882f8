"""How much does a stream between two other simulated nodes slow a compute-bound process? (issue 17; docs/MODELS.md,
"What the link-CPU model still misses")

The compute: the reference job's MLP (2-10000-2, batch 64, doubles, one BLAS thread as the job's ranks run it),
forward and backward, timed per batch (wall and this process's CPU, the median over ``--seconds``). Beside it:
``--spinners`` busy loops (the job's other ranks, which poll) and, in turn, nothing; a TCP stream from node 1 to node 2
of a 3-node simulated cluster (:mod:`ddltrace.collectors.cluster`) whose links are shaped as the net B's (200 Mbit/s,
tbf, 32 KiB bucket), the compute in the root namespace with the machine's cores; and the same bytes a second over
loopback (A's path). Printed per run: the batch's wall and CPU time (µs), the machine's softirq time over the run
(cores, ``/proc/stat``) and the stream's rate and its two processes' own CPU time (s, ``getrusage``).

Run (root, iproute2, tc; about 1 minute a round): ``.venv/bin/python benchmarks/link_interference.py [--rounds 2]
[--spinners 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

COMPUTE = r"""
import json, sys, time
import numpy as np
rng = np.random.default_rng(0)
x, w1, w2 = rng.standard_normal((64, 2)), rng.standard_normal((2, 10000)) * 0.1, rng.standard_normal((10000, 2)) * 0.01
end, walls, cpus = time.perf_counter() + float(sys.argv[1]), [], []
while time.perf_counter() < end:
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(20):
        h = np.tanh(x @ w1); dy = h @ w2 - 1.0
        g2 = h.T @ dy; g1 = x.T @ ((dy @ w2.T) * (1 - h * h))
    walls.append((time.perf_counter() - w0) / 20); cpus.append((time.process_time() - c0) / 20)
print(json.dumps({"wall_us": 1e6 * float(np.median(walls)), "cpu_us": 1e6 * float(np.median(cpus))}))
"""
RECEIVER = r"""
import resource, socket, sys
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1); print(s.getsockname()[1], flush=True)
c, _ = s.accept()
while c.recv(1 << 20):
    pass
r = resource.getrusage(resource.RUSAGE_SELF); print(r.ru_utime + r.ru_stime, flush=True)
"""
SENDER = r"""
import resource, socket, sys, time
host, port, seconds, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
s = socket.create_connection((host, port)); chunk, sent, t0 = b"x" * 65536, 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    s.sendall(chunk); sent += len(chunk)
    if rate > 0 and sent / rate > time.perf_counter() - t0:
        time.sleep(sent / rate - (time.perf_counter() - t0))
s.close(); r = resource.getrusage(resource.RUSAGE_SELF)
print(sent / (time.perf_counter() - t0), r.ru_utime + r.ru_stime, flush=True)
"""
SPIN = "import sys, time\nend = time.perf_counter() + float(sys.argv[1])\nwhile time.perf_counter() < end:\n    pass\n"


def softirq_s() -> float:
    """The machine's softirq time so far (s, /proc/stat's seventh field)."""
    with open("/proc/stat") as fh:
        return int(fh.readline().split()[7]) / os.sysconf("SC_CLK_TCK")


def one_run(label: str, stream, spinners: int, seconds: float) -> dict:
    """The compute timed beside ``spinners`` busy loops and ``stream`` (receiver and sender command lines, the
    sender's last two arguments its seconds and rate, the receiver's port put before them; None: no stream)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    receiver = sender = None
    if stream:
        receiver = subprocess.Popen(stream[0], stdout=subprocess.PIPE, text=True, env=env)
        port = receiver.stdout.readline().strip()
        sender = subprocess.Popen([*stream[1][:-2], port, *stream[1][-2:]], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
    spin = [subprocess.Popen([sys.executable, "-c", SPIN, str(seconds + 1)]) for _ in range(spinners)]
    before = softirq_s()
    done = subprocess.run([sys.executable, "-c", COMPUTE, str(seconds)], capture_output=True, text=True, env=env,
                          check=True)
    out = {"run": label, "spinners": spinners, **json.loads(done.stdout),
           "softirq_cores": (softirq_s() - before) / seconds}
    for p in spin:
        p.wait()
    if sender:
        rate, sender_cpu = (float(v) for v in sender.stdout.readline().split())
        sender.wait()
        receiver_cpu = float(receiver.stdout.readline())
        receiver.wait(timeout=30)
        out.update(stream_mb_per_s=rate / 1e6, stream_processes_cpu_s=sender_cpu + receiver_cpu)
    return out


def main() -> int:
    from ddltrace.collectors import cluster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--spinners", type=int, default=2, help="busy loops beside the compute (the polling ranks)")
    parser.add_argument("--seconds", type=float, default=6.0, help="each run's compute time")
    args = parser.parse_args()
    py, stream_s = sys.executable, str(args.seconds + 1.5)
    with cluster.Cluster(3) as c:
        for index in range(3):
            c.shape(index, 200e6, 32768)
        one, two = c.nodes[1], c.nodes[2]
        shaped = (two.enter([py, "-c", RECEIVER, two.addr]), one.enter([py, "-c", SENDER, two.addr, stream_s, "0"]))
        loopback = ([py, "-c", RECEIVER, "127.0.0.1"], [py, "-c", SENDER, "127.0.0.1", stream_s, "25e6"])
        for _ in range(args.rounds):
            for label, stream in (("alone", None), ("stream between two shaped nodes", shaped),
                                  ("loopback at 25 MB/s", loopback)):
                print(json.dumps(one_run(label, stream, args.spinners, args.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
