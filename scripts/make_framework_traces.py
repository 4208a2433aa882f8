"""Make small real framework traces for the importer tests (run with the framework's own venv).

    .venvs/torch/bin/python scripts/make_framework_traces.py torch --out tests/data/torch_gloo
    .venvs/torch/bin/python scripts/make_framework_traces.py torch --record-shapes --out tests/data/torch_gloo_shapes
    .venvs/torch/bin/python scripts/make_framework_traces.py torch --profile-memory --out tests/data/torch_gloo_memory
    .venvs/torch/bin/python scripts/make_framework_traces.py torch-collectives --out tests/data/torch_gloo_collectives

    .venvs/mxnet/bin/python scripts/make_framework_traces.py mxnet --out tests/data/mxnet_dist_sync
    .venvs/tf/bin/python scripts/make_framework_traces.py tf1 --out tests/data/tf1_ps
    .venvs/tf/bin/python scripts/make_framework_traces.py tf2 --out tests/data/tf2_profile
    .venvs/xprof/bin/python scripts/make_framework_traces.py tf2-json --from tests/data/tf2_profile \
        --out tests/data/tf2_trace_viewer
    .venvs/horovod/bin/python scripts/make_framework_traces.py horovod --out tests/data/horovod_gloo

torch: a 2-process gloo DistributedDataParallel job on 127.0.0.1 (CPU), profiled with torch.profiler for 3 active
steps; each rank writes ``rank<r>.pt.trace.json.gz`` (Kineto JSON, gzip); ``--record-shapes`` profiles with
torch.profiler's ``record_shapes`` (each op's input shapes and types: gloo's all-reduce spans then give their
bytes); ``--profile-memory`` with its ``profile_memory`` (an instant ``[memory]`` event per allocation and free of
the CPU allocator, with its totals). The model, Linear(64, 128) + Linear(128, 10), has 9,610 float32 parameters:
one DDP bucket, all-reduced once a step (38,440 bytes). The venv is made with
``python3 -m venv .venvs/torch && .venvs/torch/bin/pip install torch==2.13.0`` (FORMATS.md section 7).

torch-collectives: a 2-process gloo job on 127.0.0.1 that runs each collective of torch.distributed once (no
model), profiled with ``record_shapes``: all_gather (a list), all_gather_into_tensor, gather, scatter,
reduce_scatter (a list), reduce_scatter_tensor, all_to_all (lists), all_to_all_single, all_reduce, broadcast,
reduce, then all_gather on a second process group of both ranks (``new_group``), each on a tensor of its own
size and element type (:data:`COLLECTIVE_CALLS`); ``rank<r>.pt.trace.json.gz``.

mxnet: a dist_sync parameter-server job on 127.0.0.1 (scheduler, 1 server, 2 workers), each worker profiling 3
training steps of a small Gluon model with ``mx.profiler``; the profiler's JSON is gzip-compressed afterwards
(``profile_dist_sync_rank<r>.json.gz``). Venv: ``.venvs/mxnet/bin/pip install "numpy<1.24" mxnet==1.9.1``.

tf1: a TensorFlow 1.x-style parameter-server job (``tf.compat.v1``; 1 ps + 2 workers on 127.0.0.1); each worker runs
3 FULL_TRACE steps and writes the last step's ``timeline.Timeline(...).generate_chrome_trace_format()`` as
``timeline_worker<k>.json.gz`` (gzip-compressed after). Venv: ``.venvs/tf/bin/pip install tensorflow-cpu``.
With ``--step-stats`` each worker writes instead ``str(run_metadata.step_stats)`` (protobuf text, which keeps
RecvTensor's bytes and peers) as ``step_stats_worker<k>.pbtxt.gz``, and the same step's ``RunMetadata`` as binary
protobuf (``run_metadata.SerializeToString()``) as ``run_metadata_worker<k>.pb.gz``.

tf2: the TensorFlow 2 profiler (``tf.profiler.experimental``, host tracer level 2) around 3 steps of a small Keras
model's ``tf.function`` training step, each in a ``Trace("train", step_num=i)``; the XPlane file is copied to
``worker0/<host>.xplane.pb``.

tf2-json: the trace-viewer JSON that TensorBoard's profile plugin shows, made from those XPlane files by xprof's own
converter (``xspace_to_tool_data(..., "trace_viewer")``, FORMATS.md section 2), gzip-compressed, one
``<worker>/<host>.trace.json.gz`` per ``--from`` XPlane. Venv: ``.venvs/xprof/bin/pip install xprof``.

horovod: rank 0's Horovod timeline (``HOROVOD_TIMELINE``) of a 2-rank Gloo job under ``horovodrun``
(``tests/frameworks/jobs/hvd_torch.py``, 3 steps), gzip-compressed, as ``horovod_timeline.json.gz``. Venv:
``scripts/build_horovod_venv.sh`` (Horovod 0.28.1 on torch 2.13.0).

``make framework-traces`` runs them all with their venvs.
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


def _torch_rank(rank: int, world: int, out: str, port: int, record_shapes: bool, profile_memory: bool) -> None:
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
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
                 record_shapes=record_shapes, profile_memory=profile_memory) as prof:
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


def make_torch(out: Path, record_shapes: bool = False, profile_memory: bool = False) -> None:
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_torch_rank, args=(2, str(out), _free_port(), record_shapes, profile_memory), nprocs=2, join=True)
    for path in sorted(out.glob("rank*.pt.trace.json.gz")):
        print(f"{path}: {path.stat().st_size} bytes")


#: The calls of the torch-collectives job: (call, elements of each rank's part, element type), in order.
COLLECTIVE_CALLS = (("all_gather", 100, "float32"), ("all_gather_into_tensor", 120, "float32"),
                    ("gather", 60, "float64"), ("scatter", 70, "int64"), ("reduce_scatter", 50, "float32"),
                    ("reduce_scatter_tensor", 40, "float32"), ("all_to_all", 30, "float32"),
                    ("all_to_all_single", 32, "float32"), ("all_reduce", 100, "float32"),
                    ("broadcast", 90, "float32"), ("reduce", 80, "float32"), ("all_gather_subgroup", 7, "float32"))


def _torch_collectives_rank(rank: int, world: int, out: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    both = dist.new_group(list(range(world)))
    root = rank == 0
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for call, n, kind in COLLECTIVE_CALLS:
            dtype = getattr(torch, kind)
            part = torch.ones(n, dtype=dtype)
            parts = [torch.ones(n, dtype=dtype) for _ in range(world)]
            if call == "all_gather":
                dist.all_gather(parts, part)
            elif call == "all_gather_into_tensor":
                dist.all_gather_into_tensor(torch.empty(n * world, dtype=dtype), part)
            elif call == "gather":
                dist.gather(part, parts if root else None, dst=0)
            elif call == "scatter":
                dist.scatter(part, parts if root else None, src=0)
            elif call == "reduce_scatter":
                dist.reduce_scatter(part, parts)
            elif call == "reduce_scatter_tensor":
                dist.reduce_scatter_tensor(part, torch.ones(n * world, dtype=dtype))
            elif call == "all_to_all":
                dist.all_to_all([torch.empty(n, dtype=dtype) for _ in range(world)], parts)
            elif call == "all_to_all_single":
                dist.all_to_all_single(torch.empty(n * world, dtype=dtype), torch.ones(n * world, dtype=dtype))
            elif call == "all_gather_subgroup":
                dist.all_gather(parts, part, group=both)
            else:
                getattr(dist, call)(part, *((0,) if call in ("broadcast", "reduce") else ()))
    prof.export_chrome_trace(str(Path(out) / f"rank{rank}.pt.trace.json.gz"))
    dist.destroy_process_group()


def make_torch_collectives(out: Path) -> None:
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_torch_collectives_rank, args=(2, str(out), _free_port()), nprocs=2, join=True)
    for path in sorted(out.glob("rank*.pt.trace.json.gz")):
        print(f"{path}: {path.stat().st_size} bytes")


def _mxnet_worker(out: Path) -> None:
    import mxnet as mx
    from mxnet import autograd, gluon, nd, profiler

    kv = mx.kv.create("dist_sync")
    name = out / f"profile_dist_sync_rank{kv.rank}.json"
    profiler.set_config(profile_all=True, aggregate_stats=False, continuous_dump=False, filename=str(name))
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = nd.random.normal(shape=(32, 32)), nd.array([i % 10 for i in range(32)])
    for step in range(5):
        if step == 2:
            profiler.set_state("run")
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(32)
        nd.waitall()
    profiler.set_state("stop")
    profiler.dump()


def make_mxnet(out: Path) -> None:
    import gzip
    import subprocess

    import mxnet  # noqa: F401  (fail early when it is missing)

    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(_free_port()), DMLC_NUM_SERVER="1",
               DMLC_NUM_WORKER="2", DMLC_NODE_HOST="127.0.0.1", DMLC_INTERFACE="lo", OMP_NUM_THREADS="1")
    roles = [subprocess.Popen([sys.executable, "-c", "import mxnet"], env=dict(env, DMLC_ROLE=role))
             for role in ("scheduler", "server")]
    workers = [subprocess.Popen([sys.executable, __file__, "mxnet-worker", "--out", str(out)],
                                env=dict(env, DMLC_ROLE="worker")) for _ in range(2)]
    try:
        codes = [w.wait(timeout=300) for w in workers]
        for p in roles:
            p.wait(timeout=60)
    finally:
        for p in roles + workers:
            if p.poll() is None:
                p.kill()
    if any(codes):
        sys.exit(f"mxnet workers failed: exit codes {codes}")
    for path in sorted(out.glob("profile_dist_sync_rank*.json")):
        packed = path.with_suffix(".json.gz")
        packed.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        path.unlink()
        print(f"{packed}: {packed.stat().st_size} bytes")


def _tf1_task(job: str, index: int, out: Path, ports: list[int], step_stats: bool = False) -> None:
    import gzip

    import tensorflow as tf
    from tensorflow.python.client import timeline

    tf.compat.v1.disable_eager_execution()
    cluster = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ports[0]}"],
                                    "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"]})
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    server = tf.distribute.Server(cluster, job_name=job, task_index=index, config=config)
    if job == "ps":
        server.join()
        return
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}",
                                                                      cluster=cluster)):
        x = tf.compat.v1.placeholder(tf.float32, [32, 64])
        y = tf.compat.v1.placeholder(tf.int32, [32])
        w1 = tf.compat.v1.get_variable("w1", [64, 128])
        b1 = tf.compat.v1.get_variable("b1", [128], initializer=tf.compat.v1.zeros_initializer())
        w2 = tf.compat.v1.get_variable("w2", [128, 10])
        b2 = tf.compat.v1.get_variable("b2", [10], initializer=tf.compat.v1.zeros_initializer())
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
        uninitialized = tf.compat.v1.report_uninitialized_variables()
    import time

    import numpy as np

    with tf.compat.v1.Session(server.target, config=config) as sess:
        if index == 0:
            sess.run(init)
        else:
            while len(sess.run(uninitialized)):
                time.sleep(0.2)
        feed = {x: np.random.rand(32, 64).astype("float32"), y: np.arange(32) % 10}
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        for _ in range(3):
            metadata = tf.compat.v1.RunMetadata()
            sess.run(train, feed_dict=feed, options=options, run_metadata=metadata)
        if step_stats:  # the same step as text and as the binary RunMetadata
            (out / f"step_stats_worker{index}.pbtxt.gz").write_bytes(
                gzip.compress(str(metadata.step_stats).encode(), mtime=0))
            (out / f"run_metadata_worker{index}.pb.gz").write_bytes(
                gzip.compress(metadata.SerializeToString(), mtime=0))
            return
        trace = timeline.Timeline(metadata.step_stats).generate_chrome_trace_format(show_dataflow=True)
        (out / f"timeline_worker{index}.json.gz").write_bytes(gzip.compress(trace.encode(), mtime=0))


def make_tf1(out: Path, step_stats: bool = False) -> None:
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    ports = [str(_free_port()) for _ in range(3)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")

    def task(job, index):
        return subprocess.Popen([sys.executable, __file__, "tf1-task", "--out", str(out), "--task", f"{job},{index}",
                                 "--ports", ",".join(ports)] + (["--step-stats"] if step_stats else []), env=env)

    ps = task("ps", 0)
    workers = [task("worker", 0), task("worker", 1)]
    try:
        codes = [w.wait(timeout=550) for w in workers]
    finally:
        for p in [ps, *workers]:
            if p.poll() is None:
                p.kill()
    if any(codes):
        sys.exit(f"tf1 workers failed: exit codes {codes}")
    for path in sorted(out.glob("*_worker*.pb*.gz" if step_stats else "timeline_worker*.json.gz")):
        print(f"{path}: {path.stat().st_size} bytes")


def make_tf2(out: Path) -> None:
    import shutil
    import tempfile

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(128, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = tf.random.normal((32, 64)), tf.range(32) % 10

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))  # noqa: B905
        return loss

    step(), step()
    with tempfile.TemporaryDirectory() as logdir:
        options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                           device_tracer_level=0)
        tf.profiler.experimental.start(logdir, options=options)
        for i in range(3):
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                step()
        tf.profiler.experimental.stop()
        (out / "worker0").mkdir(parents=True, exist_ok=True)
        for path in Path(logdir).rglob("*.xplane.pb"):
            target = out / "worker0" / path.name
            shutil.copy(path, target)
            print(f"{target}: {target.stat().st_size} bytes")


def make_tf2_json(xplanes: Path, out: Path) -> None:
    import gzip
    import shutil
    import tempfile

    from xprof.convert import raw_to_tool_data

    found = sorted(xplanes.rglob("*.xplane.pb"))
    if not found:
        sys.exit(f"{xplanes}: no *.xplane.pb files")
    for path in found:
        with tempfile.TemporaryDirectory() as tmp:  # the converter writes cache files beside its input
            copy = Path(tmp) / path.name
            shutil.copy(path, copy)
            text, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "trace_viewer", {})
        target = out / path.parent.relative_to(xplanes) / (path.name.removesuffix(".xplane.pb") + ".trace.json.gz")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gzip.compress(text.encode() if isinstance(text, str) else text, mtime=0))
        print(f"{target}: {target.stat().st_size} bytes")


def make_horovod(out: Path) -> None:
    import gzip
    import subprocess

    venv = Path(sys.executable).parent
    job = Path(__file__).resolve().parents[1] / "tests" / "frameworks" / "jobs" / "hvd_torch.py"
    out.mkdir(parents=True, exist_ok=True)
    timeline = out / "horovod_timeline.json"
    env = {**os.environ, "HOROVOD_TIMELINE": str(timeline)}
    subprocess.run([str(venv / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2", sys.executable, str(job),
                    "--steps", "3", "--width", "64", "--batch", "32"], env=env, check=True)
    target = out / "horovod_timeline.json.gz"
    target.write_bytes(gzip.compress(timeline.read_bytes(), mtime=0))
    timeline.unlink()
    print(f"{target}: {target.stat().st_size} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", choices=["torch", "torch-collectives", "mxnet", "tf1", "tf2", "tf2-json",
                                              "horovod", "mxnet-worker", "tf1-task"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--from", dest="source", type=Path, help="tf2-json: the folder of XPlane files to convert")
    parser.add_argument("--step-stats", action="store_true",
                        help="tf1: write each worker's RunMetadata.step_stats as protobuf text instead of the timeline")
    parser.add_argument("--record-shapes", action="store_true",
                        help="torch: profile with record_shapes (input shapes and types of each op)")
    parser.add_argument("--profile-memory", action="store_true",
                        help="torch: profile with profile_memory (the allocator's events)")
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        if args.framework == "tf1-task":
            job, index = args.task.split(",")
            _tf1_task(job, int(index), args.out, [int(p) for p in args.ports.split(",")], args.step_stats)
            return
        if args.framework == "tf1":
            make_tf1(args.out, args.step_stats)
            return
        if args.framework == "torch":
            make_torch(args.out, args.record_shapes, args.profile_memory)
            return
        if args.framework == "tf2-json":
            make_tf2_json(args.source or args.out, args.out)
            return
        makers = {"torch-collectives": make_torch_collectives, "mxnet": make_mxnet, "tf1": make_tf1, "tf2": make_tf2,
                  "horovod": make_horovod, "mxnet-worker": _mxnet_worker}
        makers[args.framework](args.out)
    except ImportError as exc:
        sys.exit(f"{args.framework} is not installed in {sys.executable} ({exc}); see this script's docstring")


if __name__ == "__main__":
    main()
