"""A plain PyTorch DistributedDataParallel training script (gloo, CPU), as a user writes it: no profiler
calls. Launch: ``torchrun --nproc-per-node 2 torch_ddp.py [--steps N] [--width W] [--batch B] [--layers L]``."""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2, help="hidden layers of --width neurons")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    hidden = [m for _ in range(args.layers) for m in (torch.nn.Linear(args.width, args.width), torch.nn.ReLU())]
    model = DistributedDataParallel(torch.nn.Sequential(*hidden, torch.nn.Linear(args.width, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
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
