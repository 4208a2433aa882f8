"""A plain PyTorch DistributedDataParallel training script (gloo, CPU), as a user writes it: no profiler
calls. Launch: ``torchrun --nproc-per-node 2 torch_ddp.py [--steps N] [--width W] [--batch B] [--layers L]``.
``--fail-at S``: rank 1 raises at the start of step S while rank 0 computes for 3 s there (a crash on one rank
that torchrun answers by SIGTERMing the others)."""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2, help="hidden layers of --width neurons")
    parser.add_argument("--fail-at", type=int, default=0, help="rank 1 raises at this step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    hidden = [m for _ in range(args.layers) for m in (torch.nn.Linear(args.width, args.width), torch.nn.ReLU())]
    model = DistributedDataParallel(torch.nn.Sequential(*hidden, torch.nn.Linear(args.width, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, args.steps + 1):
        if step == args.fail_at and dist.get_rank() == 1:
            raise RuntimeError(f"rank 1 fails at step {step}")
        if step == args.fail_at:
            time.sleep(3)  # busy elsewhere when rank 1 fails: torchrun's SIGTERM comes here
        x, y = torch.randn(args.batch, args.width), torch.randint(0, 10, (args.batch,))
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(f"rank 0 of {dist.get_world_size()} (pid {os.getpid()}): final loss {loss.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
