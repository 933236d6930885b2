"""`horovod-q8 hybrid`: data-parallel convolutions, model-parallel fully connected layers.

The hybrid of Krizhevsky's "one weird trick" and Dettmers' 8-bit paper, on MNIST-format
data, under horovodrun. Rank r holds its own batch of b images and the convolution weights
(replicated, data-parallel). Per step:

1. rank r computes its conv features F_r (b x 800);
2. `GatherRows`: every rank gets F = [F_0; ...; F_{N-1}] (N·b rows), sent in the
   activation format;
3. `ShardedDense(fc_units, relu)`: rank r holds columns r of the kernel and computes them
   for all N·b rows; the column slices are allgathered (activation format);
4. `ShardedDense(classes, output="own_rows")`: rank r computes its class columns for all
   rows; an alltoall hands each rank its own b rows of all classes (N times fewer bytes
   than an allgather);
5. rank r's loss is the mean cross-entropy of its own b rows.

Gradients. The objective is the mean over ranks of the per-rank losses: the mean over all
N·b images. Backward, step 4's alltoall is reversed, and the allgathers of steps 3 and 2
become reduce-scatters (alltoall of codes, float32 sum in rank order), so rank r's gradient
of a sharded weight is the sum over every rank's loss: complete, but N times the mean's.
Horovod's tape treats these as local sources (never allreduced) and its
`scale_local_gradients` divides them by N; the conv gradients are rank r's own term and are
averaged over ranks by the usual (optionally compressed) allreduce. Uncompressed, one step on
N ranks computes the same gradients as one process on the N·b images (tested).

Activations and their gradients use `--activation-compression`; the conv gradients use
`--compression`. No dropout: every rank computes the same replicated activations, and
independent dropout masks would make them differ.
"""
from __future__ import annotations

import argparse
import time
from typing import List, Optional

from horovod_q8.formats import COMPRESSION_NAMES, CODEBOOK, get
from horovod_q8.workloads.common import number_problems, refuse

ACTIVATION_NAMES = ("none", *[n for n in COMPRESSION_NAMES[2:] if get(n).kind == CODEBOOK])
MINIMUMS = (("epochs", 1, "0 trains and evaluates nothing"), ("batch_size", 1, ""),
            ("steps_per_epoch", 1, "leave it out for whole epochs"), ("warmup_epochs", 0, ""),
            ("fc_units", 1, ""))


def build_parser(parser: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="horovod-q8 hybrid", description=__doc__.split("\n")[0])
    p.add_argument("--compression", default="none", choices=COMPRESSION_NAMES,
                   help="conv (data-parallel) gradients")
    p.add_argument("--activation-compression", default="q8", choices=ACTIVATION_NAMES,
                   help="activations of the model-parallel layers and their gradients")
    p.add_argument("--fused", action="store_true", help="bucketed fast path for the conv gradients")
    p.add_argument("--fc-units", type=int, default=256, help="units of the sharded hidden layer")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by the number of ranks")
    p.add_argument("--warmup-epochs", type=float, default=1.0, help="linear LR warm-up")
    p.add_argument("--lr-decay", default="none", choices=("none", "linear"),
                   help="after warm-up: constant LR, or linear decay to 0 at the last step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None, help="MNIST-format IDX folder; default: Keras download")
    p.add_argument("--synthetic", action="store_true", help="random data of MNIST's shape")
    p.add_argument("--steps-per-epoch", type=int, default=None)
    p.add_argument("--results-json", default=None, help="rank 0 writes the summary here")
    p.add_argument("--verbose", type=int, default=1)
    return p


def check_args(args: argparse.Namespace) -> List[str]:
    """Everything wrong with `horovod-q8 hybrid`'s arguments (empty when they make sense)."""
    return number_problems(args, MINIMUMS)


def _conv_features():
    """Two small convolutions (the MNIST CNN's), flattened: 800 features."""
    import tensorflow as tf

    L = tf.keras.layers
    return [L.Conv2D(16, 3, activation="relu"), L.MaxPooling2D(),
            L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(), L.Flatten()]


def hybrid_net(classes: int, fc_units: int, activation_compression: str):
    """The conv features (data-parallel) and two sharded dense layers (model-parallel)."""
    import tensorflow as tf

    from horovod_q8.tensorflow.layers import GatherRows, ShardedDense

    class HybridNet(tf.keras.Model):
        def __init__(self):
            super().__init__(name="hybrid_net")
            self.features = tf.keras.Sequential(_conv_features(), name="features")
            self.gather = GatherRows(activation_compression, name="gather_rows")
            self.fc1 = ShardedDense(fc_units, "relu", compression=activation_compression, name="fc1")
            self.fc2 = ShardedDense(classes, compression=activation_compression, output="own_rows",
                                    name="fc2")

        def call(self, x, training=False):
            rows, counts = self.gather(self.features(x, training=training))
            return self.fc2(self.fc1(rows), row_counts=counts)

    return HybridNet()


def reference_net(classes: int, fc_units: int):
    """The same network in one process (plain Dense layers); equal weights when seeded alike."""
    import tensorflow as tf

    L = tf.keras.layers
    return tf.keras.Sequential([*_conv_features(), L.Dense(fc_units, activation="relu"),
                                L.Dense(classes)])


def gradient_tape(tape, model, compression, fused: bool):
    """Horovod's tape over the conv gradients; the sharded weights registered as local."""
    import horovod.tensorflow as hvd

    from horovod_q8.tensorflow.tape import DistributedGradientTape
    from horovod_q8.tensorflow.layers import local_variables

    dtape = (DistributedGradientTape if fused else hvd.DistributedGradientTape)(tape, compression=compression)
    for v in local_variables(model):
        dtape.register_local_source(v)
    return dtape


def activation_bytes_per_step(model, batch: int, ranks: int, rank: int, fmt) -> int:
    """Bytes one rank sends for activations and their gradients in one training step."""
    from horovod_q8.collective import pieces as P

    counts = [batch] * ranks
    features = int(model.fc1.kernel.shape[0])
    total = sum(P.gather_rows_bytes(fmt, counts, features, rank))
    total += sum(P.gather_units_bytes(fmt, batch * ranks, model.fc1.sizes, rank))
    return total + sum(P.to_row_owners_bytes(fmt, counts, model.fc2.sizes, rank))


def lr_schedule(lr: float, warmup_steps: int, total_steps: int = 0):
    """Linear warm-up to `lr` over warmup_steps; then constant, or (total_steps > 0) a linear
    decay reaching 0 after total_steps, which keeps the last steps' noise out of the result."""
    import tensorflow as tf

    class WarmupDecay(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            s = tf.cast(step + 1, tf.float32)
            rate = lr * tf.minimum(1.0, s / float(max(warmup_steps, 1)))
            if total_steps > warmup_steps:
                left = (float(total_steps) - s + 1) / float(total_steps - warmup_steps)
                rate *= tf.clip_by_value(left, 0.0, 1.0)
            return rate

        def get_config(self):
            return {"lr": lr, "warmup_steps": warmup_steps, "total_steps": total_steps}
    return WarmupDecay()


def run(args: argparse.Namespace) -> dict:
    """Train and evaluate; return (on every rank) the summary that rank 0 prints."""
    refuse(check_args(args), build_parser)
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from horovod_q8.collective import pieces as P
    from horovod_q8.startup import check_world_size
    from horovod_q8.tensorflow import activations as A
    from horovod_q8.tensorflow import compressor
    from horovod_q8.tensorflow.layers import data_parallel_variables
    from horovod_q8.tensorflow.traffic import bytes_per_step
    from horovod_q8.workloads.common import publish_summary
    from horovod_q8.workloads.train import _load, _threads

    hvd.init()
    check_world_size(hvd.size())
    _threads(tf, hvd)
    tf.keras.utils.set_random_seed(args.seed)
    data_args = argparse.Namespace(dataset="mnist", image_size=28, **vars(args))
    train, test, classes, steps = _load(data_args, hvd, tf)
    test_batches = int(test.cardinality())
    if len(set(hvd.allgather_object(test_batches))) != 1:
        raise ValueError("ranks hold different numbers of test batches; use a test set whose "
                         "size divides evenly")

    model = hybrid_net(classes, args.fc_units, args.activation_compression)
    x0, _ = next(iter(train))
    model(x0)  # builds every rank's weights from the same seed: conv replicas start equal
    comp = compressor(args.compression)
    total = args.epochs * steps if args.lr_decay == "linear" else 0
    opt = tf.keras.optimizers.SGD(lr_schedule(args.lr * hvd.size(), int(args.warmup_epochs * steps), total),
                                  momentum=0.9)
    hvd.broadcast_variables(data_parallel_variables(model), root_rank=0)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = gradient_tape(tape, model, comp, args.fused).gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def eval_step(x, y):
        pred = tf.argmax(model(x), axis=-1, output_type=tf.int64)
        return tf.reduce_sum(tf.cast(tf.equal(pred, tf.cast(y, tf.int64)), tf.float32))

    def evaluate() -> float:
        correct, seen = 0.0, 0
        for x, y in test:
            correct += float(eval_step(x, y))
            seen += int(y.shape[0])
        counts = hvd.allreduce(tf.constant([correct, float(seen)]), op=hvd.Sum)
        return float(counts[0] / counts[1])

    it = iter(train)
    losses, accs, train_bytes, start = [], [], 0, time.perf_counter()
    for epoch in range(args.epochs):
        total = 0.0
        A.reset_bytes_sent()
        for _ in range(steps):
            x, y = next(it)
            total += float(train_step(x, y))
        train_bytes += sum(A.bytes_sent().values())
        losses.append(float(hvd.allreduce(tf.constant(total / steps), op=hvd.Average)))
        accs.append(evaluate())
        if hvd.rank() == 0 and args.verbose:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {losses[-1]:.4f} test accuracy "
                  f"{accs[-1]:.4f} ({time.perf_counter() - start:.0f} s)", flush=True)
    wall = time.perf_counter() - start
    fmt = P.resolve(args.activation_compression)
    train_sent = activation_bytes_per_step(model, args.batch_size, hvd.size(), hvd.rank(), fmt)
    dp_shapes = [tuple(v.shape) for v in data_parallel_variables(model) if v.trainable]
    summary = {
        "dataset": "mnist", "model": "hybrid", "compression": args.compression,
        "activation_compression": args.activation_compression, "fused": args.fused,
        "ranks": hvd.size(), "seed": args.seed, "epochs": args.epochs, "steps_per_epoch": steps,
        "lr_decay": args.lr_decay, "warmup_epochs": args.warmup_epochs,
        "batch_size": args.batch_size, "fc_units": args.fc_units,
        "test_accuracy": accs[-1] if accs else None,
        "val_accuracy_per_epoch": accs, "loss_per_epoch": losses, "wall_s": wall,
        "bytes_per_step": train_sent,
        "activation_bytes_per_step_measured": train_bytes / max(args.epochs * steps, 1),
        "gradient_bytes_per_step": bytes_per_step(dp_shapes, comp, hvd.size(), fused=args.fused),
        "parameters": int(sum(int(tf.size(v)) for v in model.trainable_variables)),
    }
    if hvd.rank() == 0:
        publish_summary(
            summary, f"compression={args.compression} activation_compression="
            f"{args.activation_compression} ranks={hvd.size()} test_accuracy="
            f"{summary['test_accuracy'] if not accs else round(accs[-1], 4)} wall_s={wall:.1f} "
            f"activation_bytes_per_step={train_sent}", args.results_json)
    return summary


def main(argv: Optional[List[str]] = None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
