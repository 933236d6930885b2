"""`horovod-q8 train mnist --framework torch`: the Keras training of `train.py` in PyTorch with
horovod.torch (same CNN, data shards and order, SGD with momentum, LR scaled by N with Horovod's
warm-up, test accuracy averaged over ranks, the same SUMMARY line). Run it under horovodrun.

Fewer options than the TensorFlow path: MNIST-format data only, no --checkpoint-dir / --log-dir."""
from __future__ import annotations

import argparse
import os
import time
from typing import List

import numpy as np

from horovod_q8.cores import share
from horovod_q8.workloads import common

# (option, value it must keep): TensorFlow-only options, refused when given.
UNSUPPORTED = (("checkpoint_dir", None), ("log_dir", None), ("model", None))


def check_args(args: argparse.Namespace) -> List[str]:
    """common.check_args, plus what the PyTorch path does not do."""
    problems = common.check_args(args)
    if args.dataset != "mnist":
        problems.append(f"--framework torch trains mnist only, not {args.dataset}")
    problems += [f"{common.flag(dest)} is TensorFlow-only (--framework tensorflow)"
                 for dest, default in UNSUPPORTED if getattr(args, dest, default) != default]
    return problems


def mnist_cnn(classes: int = 10):
    """models.mnist_cnn in torch, with Keras' initialisation (Glorot-uniform weights, zero biases)."""
    import torch.nn as nn

    model = nn.Sequential(
        nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(800, 128), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(128, classes))
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def warmup_lr(scaled_lr: float, size: int, warmup_epochs: int, epoch: int, batch: int, steps: int) -> float:
    """Horovod's LearningRateWarmupCallback (momentum_correction=False): before batch `batch`,
    scaled_lr / size * (e * (size - 1) / warmup_epochs + 1) with e = epoch + (batch + 1) / steps
    (Horovod's 1/steps shift: the warm-up's last batch runs at scaled_lr), then scaled_lr."""
    if epoch >= warmup_epochs:
        return scaled_lr
    frac = epoch + (batch + 1) / steps
    return scaled_lr / size * (frac * (size - 1) / warmup_epochs + 1)


def make_compression(args: argparse.Namespace):
    """hvd.Compression.none / fp16, or a horovod_q8 compressor with the train options."""
    from horovod_q8.torch import compressor

    if args.compression in common.HOROVOD_OWN:
        return compressor(args.compression)
    return compressor(args.compression, **common.compressor_options(args))


def _evaluate(model, hvd, torch, x: np.ndarray, y: np.ndarray) -> float:
    """This rank's test-shard accuracy, averaged over ranks (Keras' MetricAverageCallback)."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), 256):
            logits = model(torch.from_numpy(x[i:i + 256]))
            correct += int((logits.argmax(1) == torch.from_numpy(y[i:i + 256])).sum())
    model.train()
    acc = torch.tensor([correct / max(1, len(x))], dtype=torch.float64)
    return float(hvd.allreduce(acc, name="horovod_q8.train.val_accuracy", op=hvd.Average))


def run(args: argparse.Namespace) -> dict:
    """Train; return (on every rank) the summary that rank 0 prints."""
    common.refuse(check_args(args), common.build_parser)
    import horovod.torch as hvd
    import torch

    from horovod_q8.collective import policy
    from horovod_q8.startup import check_world_size
    from horovod_q8.torch import Q8Compressor
    from horovod_q8.torch.optimizer import DEFAULT_FUSION_BYTES
    from horovod_q8.workloads import datasets as D
    from horovod_q8.workloads.torch_sgd import KerasSGD

    for k, v in common.DEFAULTS[args.dataset].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    hvd.init()
    check_world_size(hvd.size())
    torch.set_num_threads(share(hvd.local_size()))
    torch.manual_seed(args.seed)
    if args.synthetic:
        steps = args.steps_per_epoch or 20
        data = D.synthetic((28, 28, 1), 10, steps * args.batch_size * hvd.size(), args.batch_size * 2, args.seed)
    else:
        data = D.load_mnist(args.data_dir)
        steps = args.steps_per_epoch or common.whole_steps(args.batch_size, hvd.size(), len(data.x_train))
    common.check_ranks_agree(hvd.allgather_object(common.run_settings(args, steps, data.classes),
                                                  name="horovod_q8.train.settings"))
    to_nchw = lambda a: np.ascontiguousarray(a.transpose(0, 3, 1, 2))  # noqa: E731
    x, y = to_nchw(data.x_train[hvd.rank()::hvd.size()]), data.y_train[hvd.rank()::hvd.size()]
    xt, yt = to_nchw(data.x_test[hvd.rank()::hvd.size()]), data.y_test[hvd.rank()::hvd.size()]

    model = mnist_cnn(data.classes)
    comp = make_compression(args)
    scaled_lr = args.lr * hvd.size()
    # Keras' momentum (v = 0.9 v - lr g; w += v), not torch.optim.SGD's: they differ while the
    # warm-up changes the LR.
    opt = KerasSGD(model.parameters(), lr=scaled_lr, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=comp)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    loss_fn = torch.nn.CrossEntropyLoss()

    ends: List[List[float]] = []  # batch end times, per epoch
    losses, accs = [], []
    start = time.perf_counter()
    for epoch in range(args.epochs):
        ends.append([])
        seed = common.epoch_seed(args.seed, epoch)
        torch.manual_seed(seed)  # dropout masks: a function of (seed, epoch)
        order = np.random.default_rng(seed).permutation(len(x))
        order = np.concatenate([order] * -(-steps * args.batch_size // len(x)))  # passes, as TF's
        total = 0.0
        for b in range(steps):
            for g in opt.param_groups:
                g["lr"] = warmup_lr(scaled_lr, hvd.size(), args.warmup_epochs, epoch, b, steps)
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            opt.zero_grad()
            loss = loss_fn(model(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
            loss.backward()
            opt.step()
            total += float(loss)
            ends[-1].append(time.perf_counter())
        loss_avg = float(hvd.allreduce(torch.tensor([total / steps]), name=f"horovod_q8.train.loss{epoch}"))
        losses.append(loss_avg)
        accs.append(_evaluate(model, hvd, torch, xt, yt))
        if hvd.rank() == 0 and args.verbose:
            print(f"epoch {epoch + 1}/{args.epochs} loss={loss_avg:.4f} val_accuracy={accs[-1]:.4f}", flush=True)
    wall = time.perf_counter() - start

    ours = isinstance(comp, Q8Compressor) and os.environ.get("HOROVOD_Q8_FUSED", "1") != "0"
    setting = comp if isinstance(comp, Q8Compressor) else ("fp16" if comp is hvd.Compression.fp16 else "none")
    shapes = [tuple(p.shape) for p in model.parameters()][::-1]  # backprop order, as the buckets
    summary = {
        "framework": "torch", "dataset": args.dataset, "compression": args.compression, "fused": ours,
        "ranks": hvd.size(), "seed": args.seed, "epochs": args.epochs,
        "test_accuracy": accs[-1] if accs else None, "val_accuracy_per_epoch": accs,
        "loss_per_epoch": losses, "wall_s": wall,
        "images_per_s": args.epochs * steps * args.batch_size * hvd.size() / wall if wall else 0.0,
        "steady_images_per_s": common.steady_rate(ends, args.batch_size * hvd.size()),
        "bytes_per_step": policy.bytes_per_step(shapes, setting, hvd.size(), fused=ours,
                                                fusion_bytes=DEFAULT_FUSION_BYTES),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "weights_sha1": common.weights_sha1([p.detach().numpy() for p in model.state_dict().values()]),
    }
    if hvd.rank() == 0:
        acc = summary["test_accuracy"]
        common.publish_summary(
            summary, f"framework=torch compression={args.compression} fused={ours} ranks={hvd.size()} "
            f"test_accuracy={acc if acc is None else round(acc, 4)} wall_s={wall:.1f} "
            f"images_per_s={summary['images_per_s']:.0f} "
            f"steady_images_per_s={summary['steady_images_per_s']:.1f} "
            f"bytes_per_step={summary['bytes_per_step']:.0f}", args.results_json)
    return summary
