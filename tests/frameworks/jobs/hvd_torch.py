"""A plain Horovod + PyTorch training script (CPU, Gloo), as a user writes it: no profiler calls.
Launch: ``horovodrun --gloo -np 2 -H localhost:2 python hvd_torch.py [--steps N] [--width W] [--batch B]
[--layers L]``."""

import argparse
import os

import horovod.torch as hvd
import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2, help="hidden layers of --width neurons")
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(hvd.rank())
    hidden = [m for _ in range(args.layers) for m in (torch.nn.Linear(args.width, args.width), torch.nn.ReLU())]
    model = torch.nn.Sequential(*hidden, torch.nn.Linear(args.width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, args.width), torch.randint(0, 10, (args.batch,))
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    average = hvd.allreduce(loss.detach(), name="final_loss")
    if hvd.rank() == 0:
        print(f"rank 0 of {hvd.size()} (pid {os.getpid()}): final loss {average.item():.3f}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
