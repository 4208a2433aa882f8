"""Make small real framework traces for the importer tests (run with the framework's own venv).

    .venvs/torch/bin/python scripts/make_framework_traces.py torch --out tests/data/torch_gloo

    .venvs/mxnet/bin/python scripts/make_framework_traces.py mxnet --out tests/data/mxnet_dist_sync

torch: a 2-process gloo DistributedDataParallel job on 127.0.0.1 (CPU), profiled with torch.profiler for 3 active
steps; each rank writes ``rank<r>.pt.trace.json.gz`` (Kineto JSON, gzip). The venv is made with
``python3 -m venv .venvs/torch && .venvs/torch/bin/pip install torch==2.13.0`` (FORMATS.md section 7).

mxnet: a dist_sync parameter-server job on 127.0.0.1 (scheduler, 1 server, 2 workers), each worker profiling 3
training steps of a small Gluon model with ``mx.profiler``; the profiler's JSON is gzip-compressed afterwards
(``profile_dist_sync_rank<r>.json.gz``). Venv: ``.venvs/mxnet/bin/pip install "numpy<1.24" mxnet==1.9.1``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torch_rank(rank: int, world: int, out: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                                        torch.nn.Linear(128, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(32, 64), torch.randint(0, 10, (32,))) for _ in range(5)]
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3)) as prof:
        for x, y in data:
            with record_function("dataloader_next"):
                x, y = x.clone(), y.clone()
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            dist.barrier()
            prof.step()
    prof.export_chrome_trace(str(Path(out) / f"rank{rank}.pt.trace.json.gz"))
    dist.destroy_process_group()


def make_torch(out: Path) -> None:
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_torch_rank, args=(2, str(out), _free_port()), nprocs=2, join=True)
    for path in sorted(out.glob("rank*.pt.trace.json.gz")):
        print(f"{path}: {path.stat().st_size} bytes")


def _mxnet_worker(out: Path) -> None:
    import mxnet as mx
    from mxnet import autograd, gluon, nd, profiler

    kv = mx.kv.create("dist_sync")
    name = out / f"profile_dist_sync_rank{kv.rank}.json"
    profiler.set_config(profile_all=True, aggregate_stats=False, continuous_dump=False, filename=str(name))
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = nd.random.normal(shape=(32, 32)), nd.array([i % 10 for i in range(32)])
    for step in range(5):
        if step == 2:
            profiler.set_state("run")
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(32)
        nd.waitall()
    profiler.set_state("stop")
    profiler.dump()


def make_mxnet(out: Path) -> None:
    import gzip
    import subprocess

    import mxnet  # noqa: F401  (fail early when it is missing)

    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(_free_port()), DMLC_NUM_SERVER="1",
               DMLC_NUM_WORKER="2", DMLC_NODE_HOST="127.0.0.1", DMLC_INTERFACE="lo", OMP_NUM_THREADS="1")
    roles = [subprocess.Popen([sys.executable, "-c", "import mxnet"], env=dict(env, DMLC_ROLE=role))
             for role in ("scheduler", "server")]
    workers = [subprocess.Popen([sys.executable, __file__, "mxnet-worker", "--out", str(out)],
                                env=dict(env, DMLC_ROLE="worker")) for _ in range(2)]
    try:
        codes = [w.wait(timeout=300) for w in workers]
        for p in roles:
            p.wait(timeout=60)
    finally:
        for p in roles + workers:
            if p.poll() is None:
                p.kill()
    if any(codes):
        sys.exit(f"mxnet workers failed: exit codes {codes}")
    for path in sorted(out.glob("profile_dist_sync_rank*.json")):
        packed = path.with_suffix(".json.gz")
        packed.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        path.unlink()
        print(f"{packed}: {packed.stat().st_size} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", choices=["torch", "mxnet", "mxnet-worker"])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        {"torch": make_torch, "mxnet": make_mxnet, "mxnet-worker": _mxnet_worker}[args.framework](args.out)
    except ImportError as exc:
        sys.exit(f"{args.framework} is not installed in {sys.executable} ({exc}); see this script's docstring")


if __name__ == "__main__":
    main()
