"""A small DDP training job on one GPU (ResNet-18, synthetic images) with switchable pathologies.

Every rank uses cuda:0 (a one-GPU machine); gloo carries the gradients (NCCL refuses two ranks on one GPU).
Per-step wall times of every rank go to --truth-log (JSON lines) as ground truth; with --kineto, torch.profiler
writes its own trace of steps 5-6 there (tensorboard_trace_handler, gzip).
"""
import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--backend", default="gloo")
p.add_argument("--steps", type=int, default=14)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--straggle-rank", type=int, default=-1)
p.add_argument("--straggle-ms", type=float, default=0.0)
p.add_argument("--host-ms", type=float, default=0.0, help="host-side input delay per step, every rank")
p.add_argument("--truth-log", default="")
p.add_argument("--kineto", default="", help="folder: torch.profiler writes its own trace there (steps 5-6)")
p.add_argument("--active", type=int, default=2, help="with --kineto: the steps profiled, from step 5")
p.add_argument("--record-shapes", action="store_true", help="with --kineto: record each op's input shapes")
p.add_argument("--profile-memory", action="store_true", help="with --kineto: record the allocator's events, and the "
               "allocator's peak over the profiled steps in TRUTH_LOG.memory.rankR.json")
a = p.parse_args()

dist.init_process_group(a.backend)
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
torch.manual_seed(rank)
model = torchvision.models.resnet18(num_classes=100).to(dev)
ddp = nn.parallel.DistributedDataParallel(model, device_ids=[0])
opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
x_host = torch.randn(a.batch, 3, 224, 224).pin_memory()
y_host = torch.randint(0, 100, (a.batch,)).pin_memory()
copy_stream = torch.cuda.Stream()
times = []
prof = None
if a.kineto:
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   schedule=schedule(wait=3, warmup=1, active=a.active), record_shapes=a.record_shapes,
                   profile_memory=a.profile_memory,
                   on_trace_ready=tensorboard_trace_handler(a.kineto, worker_name=f"rank{rank}", use_gzip=True))
    prof.start()
peak = {}
for step in range(1, a.steps + 1):
    if a.profile_memory and step == 5:  # the first profiled step (wait 3, warmup 1)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        peak["allocated_at_start"] = torch.cuda.memory_allocated(dev)
    t0 = time.time_ns()
    if a.host_ms:
        time.sleep(a.host_ms / 1e3)
    if rank == a.straggle_rank:
        time.sleep(a.straggle_ms / 1e3)
    with torch.cuda.stream(copy_stream):
        x = x_host.to(dev, non_blocking=True)
        y = y_host.to(dev, non_blocking=True)
    torch.cuda.current_stream().wait_stream(copy_stream)
    x.record_stream(torch.cuda.current_stream())
    y.record_stream(torch.cuda.current_stream())
    loss = nn.functional.cross_entropy(ddp(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    times.append((step, t0, time.time_ns()))
    if a.profile_memory and step == 4 + a.active:  # the last profiled step
        peak.update(max_allocated=torch.cuda.max_memory_allocated(dev),
                    max_reserved=torch.cuda.max_memory_reserved(dev),
                    allocated_at_end=torch.cuda.memory_allocated(dev), steps=f"5-{4 + a.active}")
    if prof:
        prof.step()
if prof:
    prof.stop()
if a.truth_log and peak:
    with open(f"{a.truth_log}.memory.rank{rank}.json", "w") as f:
        json.dump(peak, f)
if a.truth_log:
    with open(f"{a.truth_log}.rank{rank}.jsonl", "w") as f:
        for s, t0, t1 in times:
            f.write(json.dumps({"rank": rank, "world": world, "step": s, "t0_ns": t0, "t1_ns": t1}) + "\n")
dist.destroy_process_group()
