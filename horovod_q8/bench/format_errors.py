"""`horovod-q8 bench formats`: error and speed of every format, beside fp16 and a plain copy.

Errors on Gaussian, heavy-tailed (Laplace x lognormal) and real gradients (a small CNN on
Fashion-MNIST); encode/decode speed on one 25M-element float32 tensor, in one run.
"""
from __future__ import annotations

import argparse
from typing import Dict, List, Optional

import numpy as np

from horovod_q8 import backends
from horovod_q8.formats import get, names


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 bench formats", description=__doc__)
    p.add_argument("--elements", type=int, default=25_000_000, help="tensor size for the speed columns")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                   help="MNIST-format data for the real-gradient column ('' to skip)")
    p.add_argument("--backend", default=None, help="reference, cpu or cuda (default: fastest here)")
    return p


def real_gradients(data_dir: str, steps: int = 40) -> List[np.ndarray]:
    """Gradients of the MNIST CNN, captured every 10 steps of SGD on real data."""
    import tensorflow as tf

    from horovod_q8.workloads.datasets import load_mnist
    from horovod_q8.workloads.models import mnist_cnn

    data = load_mnist(data_dir)
    tf.keras.utils.set_random_seed(0)
    model = mnist_cnn()
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    out = []
    for step in range(steps):
        x, y = data.x_train[step * 64:(step + 1) * 64], data.y_train[step * 64:(step + 1) * 64]
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if step % 10 == 9:
            out += [g.numpy() for g in grads]
    return out


def errors(fmt_name: str, block: Optional[int], tensors: List[np.ndarray], be) -> tuple:
    """(mean |err| / mean |x|, max |err| / max |x|) over tensors quantized one by one."""
    abs_err, abs_x, max_err, max_x = 0.0, 0.0, 0.0, 0.0
    for t in tensors:
        fmt = get(fmt_name, **({} if block is None else {"block_size": block})).for_shape(t.shape)
        x = np.ascontiguousarray(t, np.float32).reshape(-1)
        r = np.zeros_like(x) if fmt.uses_residual else None
        y = be.decode(be.encode(x, fmt, residual=r), fmt, x.size)
        e = np.abs(y.astype(np.float64) - x)
        abs_err += e.sum()
        abs_x += np.abs(x).sum()
        max_err, max_x = max(max_err, e.max()), max(max_x, np.abs(x).max())
    return abs_err / abs_x, max_err / max_x


def run(args: argparse.Namespace) -> None:
    from horovod_q8.bench.common import machine, markdown, timeit

    be = backends.get(args.backend) if args.backend else backends.for_array(np.zeros(1))
    rng = np.random.default_rng(0)
    datasets: Dict[str, List[np.ndarray]] = {
        "gaussian": [rng.standard_normal(1 << 20).astype(np.float32)],
        "heavy-tailed": [(rng.laplace(size=1 << 20) * rng.lognormal(0, 2, 1 << 20)).astype(np.float32)],
    }
    if args.data_dir:
        datasets["real grads"] = real_gradients(args.data_dir)

    n = args.elements
    x = rng.standard_normal(n).astype(np.float32)
    y = np.empty_like(x)
    copy_t = timeit(lambda: np.copyto(y, x), args.repeats)
    gb = x.nbytes / 1e9
    fp16_tf_t = _tf_fp16_roundtrip(x, args.repeats)
    fp16_np_t = timeit(lambda: x.astype(np.float16).astype(np.float32), args.repeats)

    print(f"# formats benchmark: backend {be.__name__.rsplit('.', 1)[-1]}, {machine()}\n")
    header = ["format", "block", "bits"] + [f"{d} mean rel err" for d in datasets] + \
             [f"{d} max err" for d in datasets] + ["encode GB/s", "decode GB/s", "enc+dec ms",
                                                   "vs TF fp16 time"]
    rows = []
    for name in names():
        if name == "q8_dynamic_tree":
            continue  # same as q8
        for block in ((None, 0) if get(name).kind == "codebook" else (None,)):
            fmt = get(name, **({} if block is None else {"block_size": block})).for_shape((n,))
            buf = np.empty(fmt.nbytes(n), np.uint8)
            r = np.zeros_like(x) if fmt.uses_residual else None
            enc = timeit(lambda: be.encode(x, fmt, residual=r, out=buf), args.repeats)
            dec = timeit(lambda: be.decode(buf, fmt, n, out=y), args.repeats)
            errs = [errors(name, block, ts, be) for ts in datasets.values()]
            label = "tensor" if block == 0 else (fmt.block_size if fmt.kind == "codebook" else "-")
            rows.append([name, label, fmt.bits] + [e[0] for e in errs] + [e[1] for e in errs] +
                        [gb / enc, gb / dec, (enc + dec) * 1e3, (enc + dec) / fp16_tf_t])
    fp16_err = [_fp16_err(ts) for ts in datasets.values()]
    rows.append(["fp16 (TF cast)", "-", 16] + [e[0] for e in fp16_err] + [e[1] for e in fp16_err] +
                ["", "", fp16_tf_t * 1e3, 1.0])
    rows.append(["fp16 (NumPy astype)", "-", 16] + [""] * (2 * len(datasets)) +
                ["", "", fp16_np_t * 1e3, fp16_np_t / fp16_tf_t])
    rows.append(["copy", "-", 32] + [0.0] * (2 * len(datasets)) +
                [gb / copy_t, gb / copy_t, 2 * copy_t * 1e3, 2 * copy_t / fp16_tf_t])
    print(f"Speed columns: one tensor of {n} float32 ({x.nbytes / 1e6:.0f} MB), median of "
          f"{args.repeats}. Max err is relative to the largest |x|. Threshold formats: one step "
          "from a zero residual (their error is carried to the next step, not lost).\n")
    print(markdown(header, rows))


def _fp16_err(tensors: List[np.ndarray]) -> tuple:
    x = np.concatenate([t.reshape(-1) for t in tensors]).astype(np.float32)
    e = np.abs(x.astype(np.float16).astype(np.float64) - x)
    return e.sum() / np.abs(x).sum(), e.max() / np.abs(x).max()


def _tf_fp16_roundtrip(x: np.ndarray, repeats: int) -> float:
    """Horovod's fp16 compression on CPU: tf.cast to float16 and back."""
    import tensorflow as tf

    from horovod_q8.bench.common import timeit

    xt = tf.constant(x)
    f = tf.function(lambda a: tf.cast(tf.cast(a, tf.float16), tf.float32))
    return timeit(lambda: f(xt).numpy(), repeats)


def main(argv=None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
