"""`horovod-q8 train mnist|cifar10|imagenet`: Horovod Keras training, as Horovod's examples do
it (broadcast, metric averaging, LR scaled by N with warm-up, rank-0 output, checkpoints and
resume), with any compression. Run it under horovodrun or mpirun."""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from horovod_q8.formats import CODEBOOK, COMPRESSION_NAMES, get, names

DATASETS = ("mnist", "cifar10", "imagenet")
DEFAULTS = {"mnist": dict(batch_size=64, lr=0.02, epochs=3),
            "cifar10": dict(batch_size=128, lr=0.05, epochs=30),
            "imagenet": dict(batch_size=64, lr=0.0125, epochs=90)}
SHAPES = {"mnist": (28, 28, 1), "cifar10": (32, 32, 3)}
HOROVOD_OWN = ("none", "fp16")
SEED_MAX = 2 ** 32 - 1  # numpy's and TensorFlow's seed range
# (option, smallest value, why): numbers that mean nothing below their minimum.
MINIMUMS: Tuple[Tuple[str, float, str], ...] = (
    ("epochs", 1, "0 trains and evaluates nothing"),
    ("batch_size", 1, ""),
    ("steps_per_epoch", 1, "leave it out for whole epochs"),
    ("warmup_epochs", 0, ""),
    ("num_classes", 1, ""),
    ("image_size", 1, ""),
)


def build_parser(parser: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="horovod-q8 train", description=__doc__)
    p.add_argument("dataset", choices=DATASETS)
    p.add_argument("--compression", default="q8", choices=COMPRESSION_NAMES)
    p.add_argument("--fused", action="store_true", help="bucketed fast path (horovod_q8's optimizer)")
    p.add_argument("--block-size", type=int, default=None, help="elements per scale; 0 = whole tensor")
    p.add_argument("--threshold", type=float, default=None, help="twobit / q4_threshold top level")
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch-size", type=int, help="per rank")
    p.add_argument("--lr", type=float, help="per rank; scaled by the number of ranks")
    p.add_argument("--warmup-epochs", type=int, default=1, help="LR warm-up (whole epochs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None, help="dataset folder; default: Keras download")
    p.add_argument("--checkpoint-dir", default=None, help="checkpoints (rank 0) and resume")
    p.add_argument("--log-dir", default=None, help="TensorBoard logs (rank 0)")
    p.add_argument("--synthetic", action="store_true", help="random data of the dataset's shape")
    p.add_argument("--steps-per-epoch", type=int, default=None)
    p.add_argument("--num-classes", type=int, default=1000, help="ImageNet TFRecords only")
    p.add_argument("--image-size", type=int, default=224, help="ImageNet input size")
    p.add_argument("--results-json", default=None, help="rank 0 writes the summary here")
    p.add_argument("--verbose", type=int, default=1)
    return p


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def number_problems(args: argparse.Namespace, minimums: Sequence[Tuple[str, float, str]]) -> List[str]:
    """A line per number option (given, not None) that is non-finite or below its minimum,
    and for --lr (must be > 0) and --seed (0 to 2**32-1)."""
    out = []
    for dest, low, why in minimums:
        value = getattr(args, dest, None)
        if value is not None and (not math.isfinite(value) or value < low):
            out.append(f"{_flag(dest)} must be >= {low}{f' ({why})' if why else ''}, got {value}")
    lr = getattr(args, "lr", None)
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        out.append(f"--lr must be a finite number > 0, got {lr}")
    seed = getattr(args, "seed", None)
    if seed is not None and not 0 <= seed <= SEED_MAX:
        out.append(f"--seed must be from 0 to {SEED_MAX}, got {seed}")
    return out


def compression_problems(compression: str, block_size: Optional[int],
                         threshold: Optional[float]) -> List[str]:
    """A line per compression option that does not apply to `compression` or has a bad value."""
    given = {"--block-size": block_size, "--threshold": threshold}
    if compression in HOROVOD_OWN:
        return [f"{flag} does not apply to --compression {compression} (Horovod's own)"
                for flag, value in given.items() if value is not None]
    codebook = get(compression).kind == CODEBOOK
    wrong = "--threshold" if codebook else "--block-size"
    if given[wrong] is not None:
        others = [n for n in names() if (get(n).kind == CODEBOOK) != codebook]
        return [f"{wrong} does not apply to --compression {compression}; it applies to "
                f"{', '.join(others)}"]
    try:
        get(compression, block_size=block_size, threshold=threshold)
    except ValueError as e:
        return [str(e)]
    return []


def refuse(problems: List[str], parser: Callable[[], argparse.ArgumentParser]) -> None:
    """Exit 2 with argparse's usage line and every problem, before TensorFlow is imported."""
    if problems:
        parser().error("; ".join(problems))


def check_args(args: argparse.Namespace) -> List[str]:
    """Everything wrong with `horovod-q8 train`'s arguments (empty when they make sense)."""
    return (number_problems(args, MINIMUMS)
            + compression_problems(args.compression, args.block_size, args.threshold))


def _load(args, hvd, tf):
    """(train_ds, test_ds, classes, steps_per_epoch) for this rank."""
    from horovod_q8.workloads import datasets as D

    shape = SHAPES.get(args.dataset, (args.image_size, args.image_size, 3))
    if args.dataset == "imagenet" and not args.synthetic:
        if args.data_dir is None:
            raise D.DatasetError("ImageNet needs --data-dir (JPEG folders or TFRecords)")
        train, test, classes, n = D.imagenet_datasets(args.data_dir, args.batch_size, hvd.rank(),
                                                      hvd.size(), args.seed, args.image_size,
                                                      tfrecord_classes=args.num_classes)
        return train.repeat(), test, classes, args.steps_per_epoch or n // (args.batch_size * hvd.size())
    if args.synthetic:
        classes = 1000 if args.dataset == "imagenet" else 10
        steps = args.steps_per_epoch or 20
        data = D.synthetic(shape, classes, steps * args.batch_size, args.batch_size * 2, args.seed)
    else:
        data = D.load_mnist(args.data_dir) if args.dataset == "mnist" else D.load_cifar10(args.data_dir)
        classes = data.classes
    train = (tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
             .shard(hvd.size(), hvd.rank())
             .shuffle(10000, seed=args.seed, reshuffle_each_iteration=True))
    if args.dataset == "cifar10" and not args.synthetic:
        train = train.map(_augment_cifar, num_parallel_calls=tf.data.AUTOTUNE)
    train = train.repeat().batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    test = (tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test))
            .shard(hvd.size(), hvd.rank()).batch(256).prefetch(tf.data.AUTOTUNE))
    steps = args.steps_per_epoch or len(data.x_train) // (args.batch_size * hvd.size())
    return train, test, classes, steps


def _augment_cifar(x, y):
    import tensorflow as tf

    x = tf.image.random_flip_left_right(x)
    x = tf.image.random_crop(tf.pad(x, [[4, 4], [4, 4], [0, 0]], mode="REFLECT"), (32, 32, 3))
    return x, y


class _EpochCheckpoint:
    """tf.train.Checkpoint of model, optimizer and epoch; written by rank 0, read by all."""

    def __init__(self, tf, directory: str, model, optimizer):
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=self.epoch)
        self.manager = tf.train.CheckpointManager(self.ckpt, directory, max_to_keep=3)

    def restore(self) -> int:
        if self.manager.latest_checkpoint:
            self.ckpt.restore(self.manager.latest_checkpoint)
        return int(self.epoch.numpy())

    def callback(self, tf, rank: int):
        outer = self

        class Save(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                outer.epoch.assign(epoch + 1)
                if rank == 0:
                    outer.manager.save(checkpoint_number=epoch + 1)
        return Save()


def _step_timer(tf):
    """A callback keeping the end time of every training batch (for steady-state images/s)."""

    class StepTimer(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends: List[float] = []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())
    return StepTimer()


def steady_rate(ends: List[float], images_per_step: int, skip: int = 2) -> float:
    """Images/s over the batches after the first `skip` (graph tracing, warm-up)."""
    if len(ends) <= skip + 1:
        return 0.0
    return (len(ends) - 1 - skip) * images_per_step / (ends[-1] - ends[skip])


def _threads(tf, hvd) -> None:
    cores = os.cpu_count() or 1
    per_rank = max(1, cores // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(per_rank)
    tf.config.threading.set_inter_op_parallelism_threads(per_rank)
    try:
        import numba
        numba.set_num_threads(min(per_rank, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass


def run(args: argparse.Namespace) -> dict:
    """Train; return (on every rank) the summary that rank 0 prints."""
    refuse(check_args(args), build_parser)
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from horovod_q8.startup import check_world_size
    from horovod_q8.tensorflow import compressor
    from horovod_q8.tensorflow import keras as q8_keras
    from horovod_q8.tensorflow.traffic import bytes_per_step
    from horovod_q8.workloads.models import MODELS

    for k, v in DEFAULTS[args.dataset].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    hvd.init()
    check_world_size(hvd.size())
    _threads(tf, hvd)
    tf.keras.utils.set_random_seed(args.seed)
    train, test, classes, steps = _load(args, hvd, tf)

    model = (MODELS[args.dataset](classes) if args.dataset != "imagenet"
             else MODELS["imagenet"](classes, (args.image_size, args.image_size, 3)))
    options = {"block_size": args.block_size} if args.block_size is not None else {}
    if args.threshold is not None:
        options["threshold"] = args.threshold
    comp = compressor(args.compression, **options) if args.compression not in ("none", "fp16") \
        else compressor(args.compression)
    scaled_lr = args.lr * hvd.size()
    opt = tf.keras.optimizers.SGD(scaled_lr, momentum=0.9)
    wrap = q8_keras.DistributedOptimizer if args.fused else hvd.DistributedOptimizer
    opt = wrap(opt, compression=comp)
    model.compile(opt, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(
                     initial_lr=scaled_lr, warmup_epochs=args.warmup_epochs,
                     steps_per_epoch=steps, momentum_correction=False, verbose=0)]
    initial_epoch = 0
    if args.checkpoint_dir:
        ckpt = _EpochCheckpoint(tf, args.checkpoint_dir, model, opt)
        initial_epoch = ckpt.restore()
        if initial_epoch and hvd.rank() == 0:
            print(f"resumed from {args.checkpoint_dir} at epoch {initial_epoch}", flush=True)
        callbacks.append(ckpt.callback(tf, hvd.rank()))
    if hvd.rank() == 0 and args.log_dir:
        callbacks.append(tf.keras.callbacks.TensorBoard(args.log_dir))

    timer = _step_timer(tf)
    callbacks.append(timer)
    start = time.perf_counter()
    hist = model.fit(train, steps_per_epoch=steps, epochs=args.epochs, initial_epoch=initial_epoch,
                     validation_data=test, callbacks=callbacks,
                     verbose=args.verbose if hvd.rank() == 0 else 0)
    wall = time.perf_counter() - start
    epochs_run = max(0, args.epochs - initial_epoch)
    shapes = [tuple(v.shape) for v in model.trainable_variables]
    summary = {
        "dataset": args.dataset, "compression": args.compression, "fused": args.fused,
        "ranks": hvd.size(), "seed": args.seed, "epochs": args.epochs,
        "test_accuracy": float(hist.history["val_accuracy"][-1]) if epochs_run else None,
        "val_accuracy_per_epoch": [float(a) for a in hist.history.get("val_accuracy", [])],
        "loss_per_epoch": [float(a) for a in hist.history.get("loss", [])],
        "wall_s": wall,
        "images_per_s": epochs_run * steps * args.batch_size * hvd.size() / wall if wall else 0.0,
        "steady_images_per_s": steady_rate(timer.ends, args.batch_size * hvd.size()),
        "bytes_per_step": bytes_per_step(shapes, comp, hvd.size(), fused=args.fused),
        "parameters": int(sum(int(tf.size(v)) for v in model.trainable_variables)),
    }
    if hvd.rank() == 0:
        acc = summary["test_accuracy"]
        publish_summary(
            summary, f"compression={args.compression} fused={args.fused} ranks={hvd.size()} "
            f"test_accuracy={acc if acc is None else round(acc, 4)} wall_s={wall:.1f} "
            f"images_per_s={summary['images_per_s']:.0f} "
            f"steady_images_per_s={summary['steady_images_per_s']:.1f} "
            f"bytes_per_step={summary['bytes_per_step']:.0f}", args.results_json)
    return summary


def publish_summary(summary: dict, line: str, results_json: Optional[str]) -> None:
    """Rank 0's ending: the SUMMARY line on stdout, the whole summary as JSON if asked."""
    print(f"SUMMARY {line}", flush=True)
    if results_json:
        Path(results_json).parent.mkdir(parents=True, exist_ok=True)
        Path(results_json).write_text(json.dumps(summary, indent=1))


def main(argv: Optional[List[str]] = None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
