"""A small JAX training job on one GPU, profiled by jax.profiler (XPlane), with per-step wall times as truth."""
import json
import sys
import time

import jax
import jax.numpy as jnp

out = sys.argv[1]
key = jax.random.PRNGKey(0)
sizes = [1024, 4096, 4096, 1024]
params = [jax.random.normal(k, (a, b)) * 0.01
          for k, a, b in zip(jax.random.split(key, 3), sizes[:-1], sizes[1:], strict=True)]
x = jax.random.normal(key, (512, 1024))
y = jax.random.normal(key, (512, 1024))


def loss(ps, x, y):
    h = x
    for w in ps[:-1]:
        h = jax.nn.relu(h @ w)
    return jnp.mean((h @ ps[-1] - y) ** 2)


@jax.jit
def step(ps, x, y):
    g = jax.grad(loss)(ps, x, y)
    return [w - 1e-3 * gw for w, gw in zip(ps, g, strict=True)]


params = step(params, x, y)  # compile
jax.block_until_ready(params)
truth = []
jax.profiler.start_trace(out)
for i in range(10):
    t0 = time.time_ns()
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        params = step(params, x, y)
        jax.block_until_ready(params)
    truth.append({"step": i, "t0_ns": t0, "t1_ns": time.time_ns()})
jax.profiler.stop_trace()
with open(f"{out}/truth.jsonl", "w") as f:
    for t in truth:
        f.write(json.dumps(t) + "\n")
print(jax.__version__, jax.devices())
