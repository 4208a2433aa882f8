"""A small Gluon data-parallel training job on a dist_sync parameter server (MXNet 1.x), written as a user would:
no profiling code. Start it with a DMLC launcher (tools/launch.py, or mxnet_launch.py beside it), which runs this
same script as the scheduler, the server(s) and the workers (DMLC_ROLE); on a server or the scheduler
``import mxnet`` runs the kvstore loop and exits the process when the job is done."""

import argparse
import time

import mxnet as mx
from mxnet import autograd, gluon, nd

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--hidden", type=int, default=512)
args = parser.parse_args()

kv = mx.kv.create("dist_sync")
mx.random.seed(42)  # the same initial weights everywhere
net = gluon.nn.Sequential()
net.add(gluon.nn.Dense(args.hidden, activation="relu"), gluon.nn.Dense(args.hidden, activation="relu"),
        gluon.nn.Dense(10))
net.initialize(mx.init.Xavier())
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9}, kvstore=kv)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

# each worker reads its own shard of a synthetic data set
mx.random.seed(kv.rank)
data = nd.random.normal(shape=(args.steps * args.batch_size, 256))
labels = nd.array([i % 10 for i in range(args.steps * args.batch_size)])
loader = gluon.data.DataLoader(gluon.data.ArrayDataset(data, labels), batch_size=args.batch_size)

start = time.time()
for step, (x, y) in enumerate(loader, 1):
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(args.batch_size)
    if step % 5 == 0:
        print(f"worker {kv.rank}: step {step} loss {loss.mean().asscalar():.4f}", flush=True)
nd.waitall()
print(f"worker {kv.rank}: {step} steps in {time.time() - start:.2f} s", flush=True)
