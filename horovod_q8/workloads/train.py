"""`horovod-q8 train mnist|cifar10|imagenet`: Horovod Keras training, as Horovod's examples do
it (broadcast, metric averaging, LR scaled by N with warm-up, rank-0 output, checkpoints and
resume), with any compression. Run it under horovodrun or mpirun.

Resuming from --checkpoint-dir gives the weights of an uninterrupted run, bit for bit: epoch e's
data order, augmentation and dropout masks are functions of (--seed, e) only, and every rank
checkpoints its own compression state (error-feedback residuals differ per rank). Tested for
MNIST-format data and ImageNet JPEG folders; with ImageNet TFRecords a 1-epoch run's epoch 0
differs from a 2-epoch run's (cause not found yet), so a resume there is not bit-identical."""
from __future__ import annotations

import argparse
import functools
import json
import math
import time
from pathlib import Path
from typing import Callable, List, Optional

from horovod_q8.cores import share
from horovod_q8.workloads import checkpoint_errors as ckpt_errors
from horovod_q8.workloads import common
from horovod_q8.workloads.common import (DEFAULTS, HOROVOD_OWN, IMAGENET_CLASSES, IMAGENET_SIZE, MLP_WIDTH, check_args,
                                         compressor_options, epoch_seed, publish_summary, refuse, steady_rate,
                                         weights_sha1)

SHAPES = {"mnist": (28, 28, 1), "cifar10": (32, 32, 3)}
STATE_DIR = "compression_state"  # under --checkpoint-dir: one folder per rank


def build_parser(parser: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    return common.build_parser(parser, description=__doc__)


def input_shape(args: argparse.Namespace) -> tuple:
    size = getattr(args, "image_size", None) or IMAGENET_SIZE
    return SHAPES.get(args.dataset, (size, size, 3))


def build_model(args: argparse.Namespace, classes: int):
    """The dataset's own model, or the one `--model` names, for this dataset's input."""
    from horovod_q8.workloads.models import MODELS, mlp

    shape = input_shape(args)
    if args.model == "mlp":
        return mlp(classes, shape, args.mlp_width or MLP_WIDTH)
    if args.dataset == "imagenet":
        return MODELS["imagenet"](classes, shape)
    return MODELS[args.dataset](classes)


def _load(args, hvd, tf, initial_epoch: int = 0):
    """(train_ds, test_ds, classes, steps_per_epoch) for this rank; train_ds starts at
    `initial_epoch` and holds exactly steps_per_epoch batches per epoch."""
    loaded = _load_arrays(args, hvd)
    return _pipelines(args, hvd, tf, loaded, initial_epoch)


def _load_arrays(args, hvd):
    """What the model needs before a checkpoint is read: ("arrays", data, classes, steps) or,
    for ImageNet files, ("imagenet", epoch 0's (train, test) pipelines, classes, steps)."""
    from horovod_q8.workloads import datasets as D

    shape = input_shape(args)
    if args.dataset == "imagenet" and not args.synthetic:
        if args.data_dir is None:
            raise D.DatasetError("ImageNet needs --data-dir (JPEG folders or TFRecords)")
        train, test, classes, n = _imagenet(args, hvd)
        steps = args.steps_per_epoch or common.whole_steps(args.batch_size, hvd.size(), n)
        _agree(args, hvd, steps, classes)
        return "imagenet", (train, test), classes, steps
    if args.synthetic:
        classes = (args.num_classes or IMAGENET_CLASSES) if args.dataset == "imagenet" else 10
        steps = args.steps_per_epoch or 20
        data = D.synthetic(shape, classes, steps * args.batch_size * hvd.size(), args.batch_size * 2, args.seed)
    else:
        data = D.load_mnist(args.data_dir) if args.dataset == "mnist" else D.load_cifar10(args.data_dir)
        classes = data.classes
        steps = args.steps_per_epoch or common.whole_steps(args.batch_size, hvd.size(), len(data.x_train))
    _agree(args, hvd, steps, classes)
    return "arrays", data, classes, steps


def _agree(args, hvd, steps: int, classes: int) -> None:
    """Stop every rank with one sentence where the ranks' options or data disagree."""
    common.check_ranks_agree(_everyone(common.run_settings(args, steps, classes), "settings"))


def _imagenet(args, hvd):
    from horovod_q8.workloads import datasets as D

    return D.imagenet_datasets(args.data_dir, args.batch_size, hvd.rank(), hvd.size(),
                               input_shape(args)[0], tfrecord_classes=args.num_classes)


def _pipelines(args, hvd, tf, loaded, initial_epoch: int):
    """(train_ds, test_ds, classes, steps) from `_load_arrays`' result."""
    kind, data, classes, steps = loaded
    if kind == "imagenet":
        # epoch e: the first `steps` batches of the stream seeded by (seed, e), built per epoch
        # with a Python seed (the TFRecord pipeline did not trace with a tensor seed in flat_map)
        train_for, test = data
        epochs = [train_for(epoch_seed(args.seed, e)).take(steps)
                  for e in range(initial_epoch, max(args.epochs, initial_epoch + 1))]
        train = functools.reduce(lambda a, b: a.concatenate(b), epochs)
        return train.prefetch(tf.data.AUTOTUNE), test, classes, steps
    # this rank's shard, as Dataset.shard(size, rank) takes it
    x, y = (tf.constant(a[hvd.rank()::hvd.size()]) for a in (data.x_train, data.y_train))
    augment = args.dataset == "cifar10" and not args.synthetic
    train = tf.data.Dataset.counter(initial_epoch).flat_map(
        _epoch_batches(tf, x, y, args.seed, args.batch_size, steps, augment))
    test = (tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test))
            .shard(hvd.size(), hvd.rank()).batch(256).prefetch(tf.data.AUTOTUNE))
    return train.prefetch(tf.data.AUTOTUNE), test, classes, steps


def _epoch_batches(tf, x, y, seed: int, batch_size: int, steps: int, augment: bool) -> Callable:
    """epoch -> that epoch's `steps` batches of (x, y): passes over the shard in permutations
    drawn (like the augmentation) from (seed, epoch, pass) with stateless ops only, so a process
    that starts at epoch e sees what an uninterrupted one saw there. (Seeds [s, -1 - pass] for
    permutations, [s, element] for augmentation: never the same pair.)"""
    from horovod_q8.workloads.datasets import shuffled_passes

    n = int(x.shape[0])

    def batches(epoch):
        s = epoch_seed(seed, epoch)
        order = shuffled_passes(n, s)
        if augment:
            ds = order.enumerate().map(
                lambda k, i: _augment_cifar(tf.gather(x, i), tf.gather(y, i), tf.stack([s, k])),
                num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size, drop_remainder=True)
        else:
            ds = order.batch(batch_size, drop_remainder=True).map(lambda i: (tf.gather(x, i), tf.gather(y, i)))
        return ds.take(steps)
    return batches


def _augment_cifar(x, y, seed):
    """Random flip and crop, stateless: the same (seed, element) gives the same image."""
    import tensorflow as tf

    flip, crop = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    x = tf.image.stateless_random_flip_left_right(x, flip)
    x = tf.image.stateless_random_crop(tf.pad(x, [[4, 4], [4, 4], [0, 0]], mode="REFLECT"),
                                       (32, 32, 3), crop)
    return x, y


def compression_state(optimizer, comp):
    """The CompressionState that reduces `optimizer`'s gradients: its fused reducer's, or on
    the per-tensor path (HOROVOD_Q8_FUSED=0) the compressor's own; None for Horovod's own."""
    from horovod_q8.tensorflow import Q8Compressor, state_of

    try:
        return state_of(optimizer)
    except TypeError:
        return comp.state if isinstance(comp, Q8Compressor) else None


RUN_RECORD = "horovod_q8_run.json"  # under --checkpoint-dir: what the run that wrote it used


def _run_record(directory: str, record: Optional[dict] = None) -> dict:
    """The record of the last run that wrote `directory` ({} if none); written when given."""
    path = Path(directory) / RUN_RECORD
    if record is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
        return record
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


class _EpochCheckpoint:
    """Model, optimizer and epoch, written by rank 0 (the replicas are identical), and each
    rank's CompressionState, written by that rank (its error-feedback residuals are its own).
    Every rank reads both from `directory`, which every rank must see."""

    def __init__(self, tf, hvd, directory: str, model, optimizer, comp):
        self.tf, self.rank, self.size = tf, hvd.rank(), hvd.size()
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=self.epoch)
        self.directory = directory
        self.state = compression_state(optimizer, comp)
        self.state_dir = Path(directory) / STATE_DIR / f"rank{self.rank}-of-{self.size}"
        self.own = tf.train.Checkpoint(state=self.state) if self.state is not None else None
        self.manager = self.own_manager = None  # made by restore(), after the folders are checked

    def _open(self) -> Optional[str]:
        """The managers, once both folders are readable; the latest model checkpoint."""
        ckpt_errors.check_folder(self.directory)
        self.manager = self.tf.train.CheckpointManager(self.ckpt, self.directory, max_to_keep=3)
        if self.own is not None:
            ckpt_errors.check_folder(str(self.state_dir))
            self.own_manager = self.tf.train.CheckpointManager(self.own, str(self.state_dir), max_to_keep=3)
        return self.manager.latest_checkpoint

    def restore(self) -> int:
        """The epoch to start at (0 without a checkpoint), the same on every rank. A damaged or
        missing file stops every rank with one CheckpointError (a rank raising alone would
        leave the others waiting)."""
        problem = None
        try:
            latest = self._open()
            if latest:
                ckpt_errors.verify(latest)
                with ckpt_errors.reading(latest):
                    self.ckpt.restore(latest)
                problem = self._restore_own(latest, int(self.epoch.numpy()))
        except ckpt_errors.CheckpointError as e:
            problem = str(e)
        epochs_and_problems = _everyone((int(self.epoch.numpy()), problem), "restore")
        problems = [p for _, p in epochs_and_problems if p]
        if problems:
            raise ckpt_errors.CheckpointError(problems[0])
        epochs = sorted({e for e, _ in epochs_and_problems})
        if len(epochs) > 1:
            raise ckpt_errors.CheckpointError(
                f"ranks found different checkpoints (epochs {epochs}) in {self.directory}: "
                "--checkpoint-dir must be a folder every rank sees")
        return epochs[0]

    def _restore_own(self, latest: str, epoch: int) -> Optional[str]:
        """Restore this rank's CompressionState of `epoch`; a message when it cannot be."""
        if self.own is None:
            return None
        own = self.state_dir / f"ckpt-{epoch}"
        if Path(f"{own}.index").exists():
            # After the model checkpoint, which holds rank 0's state: the later restore wins.
            ckpt_errors.verify(str(own))
            with ckpt_errors.reading(str(own)):
                self.own.restore(str(own))
            return None
        others = sorted(self.state_dir.parent.glob(f"rank*-of-*/ckpt-{epoch}.index"))
        holding = [str(p)[:-len(".index")] for p in others] + [latest]
        if not any(_holds_residuals(self.tf, path) for path in holding):
            return None  # only step counters, which are the same on every rank
        written = sorted(p.parent.name for p in others)
        return (f"{latest} holds error-feedback residuals, which are per rank, but {own} is "
                f"missing (found {written or 'none'}): resume with the ranks that wrote it, or "
                f"start a new --checkpoint-dir")

    def callback(self, tf):
        outer = self

        class Save(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                outer.save(epoch + 1)
        return Save()

    def save(self, epoch: int) -> None:
        """Every rank's state first, then rank 0's model checkpoint: a model checkpoint of
        epoch e means every rank's state of epoch e is on disk."""
        self.epoch.assign(epoch)
        if self.own_manager is not None:
            self.own_manager.save(checkpoint_number=epoch)
        _everyone(epoch, "saved")
        if self.rank == 0:
            self.manager.save(checkpoint_number=epoch)


def _holds_residuals(tf, path: str) -> bool:
    with ckpt_errors.reading(path):
        return any("/residuals/" in name for name, _ in tf.train.list_variables(path))


# Words of TensorFlow's errors that come from reading bad data, not from the model or Horovod.
DATA_ERROR_WORDS = ("DecodeJpeg", "DecodeImage", "decode_jpeg", "ParseSingleExample", "ParseExample",
                    "corrupted record", "Received a label value", "DataLossError")


def _data_error(error: Exception, data_dir: Optional[str], what: str = "") -> Optional[Exception]:
    """A DatasetError naming the data folder for a training error caused by its files, else None."""
    from horovod_q8.workloads.datasets import DatasetError

    text = what or str(getattr(error, "message", error))
    if not what and not any(w in text or w in type(error).__name__ for w in DATA_ERROR_WORDS):
        return None
    return DatasetError(f"reading the training data under {data_dir} failed: {_reason(text)}; "
                        "check its files (a corrupt image, a label outside the classes, a file that is not what "
                        "its name says)")


def _reason(message: str) -> str:
    """The line of a TensorFlow error that says what went wrong (not where), and its op."""
    noise = ("Graph execution error", "Detected at node", "File ", "<stack", "[[")
    lines = [ln.strip() for ln in message.splitlines() if ln.strip() and not ln.strip().startswith(noise)]
    node = next((ln.split("node ")[1].split()[0] for ln in message.splitlines() if "Detected at node " in ln), None)
    return (lines[0] if lines else message.strip())[:300] + (f" (in {node})" if node else "")


def _everyone(value, name: str) -> list:
    """Every rank's `value`, in rank order (also a barrier)."""
    import horovod.tensorflow as hvd_tf

    return hvd_tf.allgather_object(value, name=f"horovod_q8.train.{name}")


def _random_generators(tf, model) -> list:
    """The tf.random.Generator of every random layer (Dropout, ...) of `model`."""
    found = []
    for layer in model.submodules:
        rng = getattr(layer, "_random_generator", None)  # Keras 2's BaseRandomLayer
        if rng is None or getattr(rng, "_rng_type", None) == "stateless":
            continue
        gen = getattr(rng, "_generator", None)
        if not isinstance(gen, tf.random.Generator):
            raise RuntimeError(f"layer {layer.name} draws from TensorFlow's legacy stateful RNG, "
                               "whose sequence restarts in a resumed process")
        found.append(gen)
    return found


def _reseed_each_epoch(tf, model, seed: int):
    """A callback that reseeds every random layer from (seed, epoch) when an epoch begins, so
    the dropout masks of epoch e are the same whether or not the run was resumed."""
    generators = _random_generators(tf, model)

    class Reseed(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            for k, gen in enumerate(generators):
                gen.reset_from_seed(epoch_seed(seed, epoch) * 256 + k)
    return Reseed()


def state_summary(state) -> Optional[dict]:
    """This rank's CompressionState: residual count, norm and digest, and the step counters."""
    if state is None:
        return None
    import numpy as np

    residuals = [state.residuals[k] for k in sorted(state.residuals)]
    norm = math.sqrt(sum(float(np.sum(np.square(v.numpy(), dtype=np.float64))) for v in residuals))
    return {"residuals": len(residuals), "residual_norm": norm,
            "residual_sha1": weights_sha1(residuals),
            "steps": {k: int(state.steps[k].numpy()) for k in sorted(state.steps)}}


def _step_timer(tf):
    """A callback keeping the end time of every training batch (for steady-state images/s)."""

    class StepTimer(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends: List[List[float]] = []  # per epoch

        def on_epoch_begin(self, epoch, logs=None):
            self.ends.append([])

        def on_train_batch_end(self, batch, logs=None):
            self.ends[-1].append(time.perf_counter())
    return StepTimer()


def _threads(tf, hvd) -> None:
    per_rank = share(hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(per_rank)
    # At least 2 inter-op threads even on one core: a host call holds its thread while it
    # codes, and with one the rest of the step (the backward pass, the next bucket) waits for
    # it (q8's MLP step on a pinned core: 803 ms with 1, 604-615 with 2; measured on 2026-12-02).
    tf.config.threading.set_inter_op_parallelism_threads(max(2, per_rank))
    try:
        import numba
        numba.set_num_threads(min(per_rank, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass


def run(args: argparse.Namespace) -> dict:
    """Train; return (on every rank) the summary that rank 0 prints."""
    if getattr(args, "framework", "tensorflow") == "torch":
        from horovod_q8.workloads import torch_train
        return torch_train.run(args)
    refuse(check_args(args), build_parser)
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from horovod_q8.startup import check_world_size
    from horovod_q8.tensorflow import compressor
    from horovod_q8.tensorflow import keras as q8_keras
    from horovod_q8.tensorflow.traffic import bytes_per_step

    for k, v in DEFAULTS[args.dataset].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    hvd.init()
    check_world_size(hvd.size())
    _threads(tf, hvd)
    tf.keras.utils.set_random_seed(args.seed)
    # Random layers draw from tf.random.Generator, which _reseed_each_epoch can reseed.
    tf.keras.backend.experimental.enable_tf_random_generator()
    loaded = _load_arrays(args, hvd)
    classes, steps = loaded[2], loaded[3]

    model = build_model(args, classes)
    comp = compressor(args.compression, **compressor_options(args)) \
        if args.compression not in HOROVOD_OWN else compressor(args.compression)
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
                     steps_per_epoch=steps, momentum_correction=False, verbose=0),
                 _reseed_each_epoch(tf, model, args.seed)]
    initial_epoch = 0
    if args.checkpoint_dir:
        ckpt = _EpochCheckpoint(tf, hvd, args.checkpoint_dir, model, opt, comp)
        initial_epoch = ckpt.restore()
        if initial_epoch and hvd.rank() == 0:
            print(f"resumed from {args.checkpoint_dir} at epoch {initial_epoch}", flush=True)
            if initial_epoch >= args.epochs:
                print(f"nothing to train: the checkpoint is at epoch {initial_epoch} and --epochs is {args.epochs}; "
                      "give a larger --epochs to train on", flush=True)
            written = _run_record(args.checkpoint_dir).get("compression")
            if written not in (None, args.compression):
                print(f"note: the checkpoint was trained with --compression {written}, this run uses "
                      f"{args.compression} (the weights carry on; another format's error-feedback residuals do not)",
                      flush=True)
        if hvd.rank() == 0:
            _run_record(args.checkpoint_dir, {"compression": args.compression})
        callbacks.append(ckpt.callback(tf))
    train, test, _, _ = _pipelines(args, hvd, tf, loaded, initial_epoch)
    if hvd.rank() == 0 and args.log_dir:
        callbacks.append(tf.keras.callbacks.TensorBoard(args.log_dir))

    timer = _step_timer(tf)
    callbacks.append(timer)
    start = time.perf_counter()
    try:
        hist = model.fit(train, steps_per_epoch=steps, epochs=args.epochs, initial_epoch=initial_epoch,
                         validation_data=test, callbacks=callbacks,
                         verbose=args.verbose if hvd.rank() == 0 else 0)
    except tf.errors.OpError as e:
        raise _data_error(e, args.data_dir) or e
    except ValueError as e:  # Keras' "Unexpected result of train_function (Empty logs)": no batch came
        if "Empty logs" not in str(e):
            raise
        raise _data_error(e, args.data_dir, "no training batch could be read") from None
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
        "initial_epoch": initial_epoch,
        "error_feedback": getattr(comp, "feedback", None),
        "weights_sha1": weights_sha1(model.weights),
        # every rank's, in rank order (residuals differ per rank)
        "compression_state": _everyone(state_summary(compression_state(opt, comp)), "state"),
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


def main(argv: Optional[List[str]] = None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
