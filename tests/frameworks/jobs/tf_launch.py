"""Start a TensorFlow cluster on 127.0.0.1 the way a cluster manager would: one process per task, each with its
TF_CONFIG (``mwms``: 2 workers running tf_mwms.py) or its ``--job_name/--task_index`` flags (``ps``: 1 ps and
2 workers running tf_ps_v1.py). Waits for the workers, then stops the parameter server (SIGTERM), as a cluster
manager does when the job is over. Usage: python tf_launch.py mwms|ps [job options...]"""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def main(kind, options):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    servers = []
    if kind == "mwms":
        hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
        workers = [subprocess.Popen([sys.executable, str(HERE / "tf_mwms.py"), *options], env=dict(
            env, TF_CONFIG=json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}})))
            for i in range(2)]
    else:
        ps, w0, w1 = (f"127.0.0.1:{p}" for p in free_ports(3))
        cluster = ["--ps_hosts", ps, "--worker_hosts", f"{w0},{w1}"]

        def task(job, index):
            return subprocess.Popen([sys.executable, str(HERE / "tf_ps_v1.py"), *cluster, "--job_name", job,
                                     "--task_index", str(index), *options], env=env)

        servers = [task("ps", 0)]
        workers = [task("worker", 0), task("worker", 1)]
    try:
        codes = [w.wait(timeout=300) for w in workers]
    finally:
        for p in servers + workers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in servers + workers:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    return 1 if any(codes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "mwms", sys.argv[2:]))
