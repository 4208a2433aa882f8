"""Start an MXNet parameter-server job on this machine, as ``tools/launch.py --launcher local`` does: the same
command runs as the scheduler, the servers and the workers, told apart by DMLC_ROLE; all talk over 127.0.0.1.

    python mxnet_launch.py -n 2 -s 1 python train.py --steps 20
"""

import argparse
import os
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--num-workers", type=int, required=True)
    parser.add_argument("-s", "--num-servers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if not args.command:
        parser.error("no command to run")
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(free_port()),
               DMLC_NUM_WORKER=str(args.num_workers), DMLC_NUM_SERVER=str(args.num_servers),
               DMLC_NODE_HOST="127.0.0.1", DMLC_INTERFACE="lo", DMLC_JOB_CLUSTER="local")
    roles = ["scheduler"] + ["server"] * args.num_servers + ["worker"] * args.num_workers
    procs = [subprocess.Popen(args.command, env=dict(env, DMLC_ROLE=role)) for role in roles]
    deadline = time.monotonic() + args.timeout
    try:  # like the DMLC tracker: one failed process ends the job
        while any(p.poll() is None for p in procs) and not any(p.poll() for p in procs):
            if time.monotonic() > deadline:
                print(f"mxnet_launch: the job ran past {args.timeout:.0f} s", file=sys.stderr)
                break
            time.sleep(0.1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    failed = [(role, proc.returncode) for role, proc in zip(roles, procs, strict=True) if proc.returncode]
    if failed:
        print(f"mxnet_launch: failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
