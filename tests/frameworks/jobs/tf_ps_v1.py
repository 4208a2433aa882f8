"""A small TensorFlow 1.x-style parameter-server job (``tf.compat.v1``, between-graph replication): one ``ps``
task holds the variables, two ``worker`` tasks each run 15 ``Session.run`` training steps of a two-layer
classifier against them. The task comes from ``--job_name`` / ``--task_index`` flags, as TF1 scripts took it.
Written as a user would: nothing here knows about ddltrace."""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--ps_hosts", required=True)
parser.add_argument("--worker_hosts", required=True)
parser.add_argument("--job_name", choices=["ps", "worker"], required=True)
parser.add_argument("--task_index", type=int, default=0)
parser.add_argument("--steps", type=int, default=15)
parser.add_argument("--width", type=int, default=512, help="hidden units: the size of what goes to the ps and back")
parser.add_argument("--batch", type=int, default=64)
args = parser.parse_args()

tf.compat.v1.disable_eager_execution()
cluster = tf.train.ClusterSpec({"ps": args.ps_hosts.split(","), "worker": args.worker_hosts.split(",")})
config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
server = tf.distribute.Server(cluster, job_name=args.job_name, task_index=args.task_index, config=config)
if args.job_name == "ps":
    server.join()


with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
        worker_device=f"/job:worker/task:{args.task_index}", cluster=cluster)):
    x = tf.compat.v1.placeholder(tf.float32, [args.batch, 256])
    y = tf.compat.v1.placeholder(tf.int32, [args.batch])
    w1 = tf.compat.v1.get_variable("w1", [256, args.width])
    b1 = tf.compat.v1.get_variable("b1", [args.width], initializer=tf.compat.v1.zeros_initializer())
    w2 = tf.compat.v1.get_variable("w2", [args.width, 10])
    b2 = tf.compat.v1.get_variable("b2", [10], initializer=tf.compat.v1.zeros_initializer())
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=global_step)
    if args.task_index == 0:
        init = tf.compat.v1.global_variables_initializer()
    else:
        ready = tf.compat.v1.is_variable_initialized(global_step)

rng = np.random.default_rng(args.task_index)
with tf.compat.v1.Session(server.target, config=config) as sess:
    if args.task_index == 0:
        sess.run(init)
    else:
        while not sess.run(ready):  # the chief (worker 0) initialises the variables on the ps
            time.sleep(0.2)
    for _ in range(args.steps):
        features = rng.normal(size=(args.batch, 256)).astype("float32")
        _, value = sess.run([train_op, loss], feed_dict={x: features, y: features[:, :10].argmax(axis=1)})
    print(f"worker {args.task_index}: loss after {args.steps} steps {value:.3f}", flush=True)
