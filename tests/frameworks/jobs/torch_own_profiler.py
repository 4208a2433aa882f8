"""A PyTorch script that runs torch.profiler itself, over its steps FIRST to LAST, and writes that trace to PATH
(then prints "job done"). Launch: ``python torch_own_profiler.py FIRST LAST PATH [--steps N]``."""

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("first", type=int)
    parser.add_argument("last", type=int)
    parser.add_argument("path")
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    for step in range(1, args.steps + 1):
        if step == args.first:
            prof.start()
        optimizer.zero_grad()
        model(torch.randn(8, 64)).sum().backward()
        optimizer.step()
        if step == args.last:
            prof.stop()
            prof.export_chrome_trace(args.path)
    print("job done", flush=True)


if __name__ == "__main__":
    main()
