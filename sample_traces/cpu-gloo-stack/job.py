"""A two-rank PyTorch DDP job over gloo on the CPU, one rank sleeping 40 ms a step, profiled by torch.profiler
with and without Python stacks (``with_stack``): make_runs.sh runs it. Rank 1 sleeps in ``time.sleep`` before
its forward; rank 0 waits for it inside DistributedDataParallel.forward (the buffers' broadcast) while gloo's
threads run the collective."""

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule

SLEEP_S = 0.04
STEPS = 6

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 30 * 30, 10))
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
out = os.environ["OUTDIR"]
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
             with_stack=os.environ.get("STACK") == "1",
             on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/rank{rank}.pt.trace.json")) as prof:
    for _ in range(STEPS):
        if rank == 1:
            time.sleep(SLEEP_S)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()
dist.destroy_process_group()
