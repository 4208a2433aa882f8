"""A small TensorFlow 2 job on MultiWorkerMirroredStrategy with a custom training loop (Keras 3's ``fit`` does
not run under MultiWorkerMirroredStrategy in TF 2.21): each worker reads its task from TF_CONFIG (set by the
launcher), builds a three-layer classifier in the strategy's scope and trains it for 15 steps on synthetic data,
a ``tf.function`` step that all-reduces the gradients (``--width`` sets the all-reduce's size, ``--batch`` the
computation's). Written as a user would: nothing here knows about ddltrace."""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=15)
parser.add_argument("--width", type=int, default=512)
parser.add_argument("--batch", type=int, default=64, help="global batch (split between the workers)")
args = parser.parse_args()

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
strategy = tf.distribute.MultiWorkerMirroredStrategy()

rng = np.random.default_rng(0)
x = rng.normal(size=(2 * args.batch, 256)).astype("float32")
y = x[:, :10].argmax(axis=1).astype("int64")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch).repeat()
batches = iter(strategy.experimental_distribute_dataset(data))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((256,)), tf.keras.layers.Dense(args.width, activation="relu"),
                                 tf.keras.layers.Dense(args.width, activation="relu"), tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.SGD(0.05)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def replica_step(features, labels):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(loss_fn(labels, model(features, training=True)),
                                          global_batch_size=args.batch)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905
    return loss


@tf.function
def train_step(batch):
    losses = strategy.run(replica_step, args=batch)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


for _ in range(args.steps):
    loss = train_step(next(batches))
task = strategy.cluster_resolver.task_id
print(f"worker {task}: loss after {args.steps} steps {float(loss):.3f}", flush=True)
