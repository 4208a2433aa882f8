"""Make small real framework traces for the importer tests (run with the framework's own venv).

    .venvs/torch/bin/python scripts/make_framework_traces.py torch --out tests/data/torch_gloo

torch: a 2-process gloo DistributedDataParallel job on 127.0.0.1 (CPU), profiled with torch.profiler for 3 active
steps; each rank writes ``rank<r>.pt.trace.json.gz`` (Kineto JSON, gzip). The venv is made with
``python3 -m venv .venvs/torch && .venvs/torch/bin/pip install torch==2.13.0`` (FORMATS.md section 7).
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", choices=["torch"])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        {"torch": make_torch}[args.framework](args.out)
    except ImportError as exc:
        sys.exit(f"{args.framework} is not installed in {sys.executable} ({exc}); see this script's docstring")


if __name__ == "__main__":
    main()
