"""ResNet-18 on one GPU, eager and with its forward and backward as CUDA graphs (torch.cuda.make_graphed_callables),
each profiled by torch.profiler for 3 steps, with per-step wall times as truth: the launch-bound advice ('capture
the step in CUDA graphs') tried. Usage: python graphs_job.py eager|graphs OUT_DIR"""
import json
import sys
import time

import torch
import torch.nn as nn
import torchvision
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

mode, out = sys.argv[1], sys.argv[2]
dev = torch.device("cuda", 0)
model = torchvision.models.resnet18(num_classes=100).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(32, 3, 224, 224, device=dev)
y = torch.randint(0, 100, (32,), device=dev)


def train_step():
    opt.zero_grad(set_to_none=False)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


if mode == "graphs":  # the module's forward and backward captured as CUDA graphs (the optimizer step stays eager)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up on a side stream, as make_graphed_callables asks
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    model = torch.cuda.make_graphed_callables(model, (x,))
prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(wait=8, warmup=1, active=3),
               on_trace_ready=tensorboard_trace_handler(out, worker_name=mode, use_gzip=True))
prof.start()
truth = []
for step in range(1, 13):
    t0 = time.time_ns()
    train_step()
    torch.cuda.synchronize()
    truth.append({"step": step, "t0_ns": t0, "t1_ns": time.time_ns()})
    prof.step()
prof.stop()
with open(f"{out}/truth.{mode}.jsonl", "w") as f:
    for t in truth:
        f.write(json.dumps(t) + "\n")
