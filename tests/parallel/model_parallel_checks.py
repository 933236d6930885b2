"""Under horovodrun: compressed activation collectives and ShardedDense against one process.

Every rank holds the same input; rank r's loss is sum(y * C_r) with its own cotangent C_r, so
the objective is sum_r sum(y * C_r) and a single-process Dense with cotangent sum_r C_r is the
reference. Checks forward output and gradients (input, kernel, bias) within each format's
budget (float tolerance uncompressed), identical output bits on all ranks, exact byte counts,
uneven units, batch 1, uneven rows per rank. Prints OK on rank 0 when every check passed.
"""
from __future__ import annotations

import hashlib
import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.collective import pieces as P
from horovod_q8.tensorflow import activations as A
from horovod_q8.tensorflow.layers import ShardedDense

hvd.init()
N, RANK = hvd.size(), hvd.rank()
# mean |error| / mean |exact| of forward outputs and gradients of Gaussian data; twice the
# allreduce budgets, as some checked tensors have only a few elements
BUDGET = {"none": 1e-6, "q8": 0.06, "q8_linear": 0.06, "q8_mantissa": 0.08,
          "q8_static_tree": 0.2, "q4": 0.5}
CASES = [(32, 64, 16, None), (20, 7, 5, "relu"), (16, 9, 1, None)]  # in, units, batch, activation


def same_on_all_ranks(t) -> bool:
    digest = hashlib.sha1(np.ascontiguousarray(np.asarray(t)).tobytes()).hexdigest()
    return len(set(hvd.allgather_object(digest))) == 1


def normal(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def rel_err(y, ref) -> float:
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(y - ref).mean() / max(np.abs(ref).mean(), 1e-30))


def close(name: str, what: str, y, ref) -> None:
    if name == "none":
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6, err_msg=what)
    else:
        err = rel_err(y, ref)
        assert err < BUDGET[name], (name, what, err)


def cotangent_sum(shape, seed: int) -> np.ndarray:
    total = np.zeros(shape, np.float32)
    for r in range(N):  # float32, rank order: as the reduce-scatter adds
        total += normal(shape, seed + r)
    return total


def check_layer(name: str) -> None:
    for in_dim, units, batch, act in CASES:
        x = tf.constant(normal((batch, in_dim), 1))
        init = dict(kernel_initializer=tf.keras.initializers.GlorotUniform(seed=7),
                    bias_initializer=tf.keras.initializers.RandomNormal(seed=8), activation=act)
        ref, layer = tf.keras.layers.Dense(units, **init), ShardedDense(units, compression=name, **init)
        ref(x), layer(x)
        s, e = layer.start, layer.end
        np.testing.assert_array_equal(layer.kernel.numpy(), ref.kernel.numpy()[:, s:e])
        np.testing.assert_array_equal(layer.bias.numpy(), ref.bias.numpy()[s:e])

        @tf.function
        def step(x, c):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x)
                loss = tf.reduce_sum(y * c)
            return (y, *tape.gradient(loss, [x, layer.kernel, layer.bias]))

        c_mine = tf.constant(normal((batch, units), 100 + RANK))
        y, dx, dk, db = step(x, c_mine)
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(ref(x) * cotangent_sum((batch, units), 100))
        rdx, rdk, rdb = tape.gradient(loss, [x, ref.kernel, ref.bias])
        case = f"{name} in={in_dim} units={units} batch={batch}"
        assert same_on_all_ranks(y), case
        close(name, case + " forward", y, ref(x))
        close(name, case + " d kernel", dk, rdk.numpy()[:, s:e])
        close(name, case + " d bias", db, rdb.numpy()[s:e])
        # each rank holds its part of d input; the objective's gradient is their sum
        close(name, case + " d input", hvd.allreduce(dx, op=hvd.Sum), rdx)
        y2, *_ = step(x, c_mine)
        np.testing.assert_array_equal(y.numpy(), y2.numpy())  # deterministic
    print(f"{name}: ShardedDense forward and gradients match Dense, identical bits", flush=True)


def check_unseeded_init() -> None:
    tf.keras.utils.set_random_seed(5)
    ref = tf.keras.layers.Dense(13)
    ref.build((None, 6))
    tf.keras.utils.set_random_seed(5)
    layer = ShardedDense(13)
    layer.build((None, 6))
    np.testing.assert_array_equal(layer.kernel.numpy(), ref.kernel.numpy()[:, layer.start:layer.end])
    assert layer.sizes == P.split_sizes(13, N) and sum(layer.sizes) == 13


def check_rows(name: str) -> None:
    """gather_rows with different rows per rank, and to_row_owners (the alltoall)."""
    counts = [3 + 2 * r for r in range(N)]
    x = tf.constant(normal((counts[RANK], 4, 5), 200 + RANK))
    total_rows = sum(counts)

    @tf.function
    def gather(x, c):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, got = A.gather_rows(x, name)
            loss = tf.reduce_sum(y * c)
        return y, got, tape.gradient(loss, x)

    y, got, dx = gather(x, tf.constant(normal((total_rows, 4, 5), 300 + RANK)))
    assert list(got.numpy()) == counts, got
    everyone = np.concatenate([normal((counts[r], 4, 5), 200 + r) for r in range(N)])
    close(name, "gather_rows forward", y, everyone)
    assert same_on_all_ranks(y)
    start = sum(counts[:RANK])
    close(name, "gather_rows grad", dx, cotangent_sum((total_rows, 4, 5), 300)[start: start + counts[RANK]])

    sizes = P.split_sizes(7, N)
    cols = P.offsets(sizes)
    full = normal((total_rows, 7), 400)  # rank r holds columns of rank r

    @tf.function
    def owners(x, c, cnt):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = A.to_row_owners(x, cnt, sizes, name)
            loss = tf.reduce_sum(y * c)
        return y, tape.gradient(loss, x)

    mine = tf.constant(full[:, cols[RANK]: cols[RANK + 1]])
    grads = [normal((counts[r], 7), 500 + r) for r in range(N)]
    y, dx = owners(mine, tf.constant(grads[RANK]), tf.constant(counts, tf.int32))
    close(name, "to_row_owners forward", y, full[start: start + counts[RANK]])
    close(name, "to_row_owners grad", dx, np.concatenate(grads)[:, cols[RANK]: cols[RANK + 1]])
    print(f"{name}: gather_rows (uneven rows) and to_row_owners ok", flush=True)


def check_bytes(names) -> None:
    """Bytes counted while the ops ran equal the static formula; 8-bit sends ~4x fewer."""
    rows, units, in_dim = 64, 256, 32
    x = tf.constant(normal((rows, in_dim), 9))
    sent = {}
    for name in names:
        layer = ShardedDense(units, compression=name)
        layer(x)

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(layer(x))
            return tape.gradient(loss, layer.kernel)

        A.reset_bytes_sent()
        step(x)
        got = A.bytes_sent()
        fmt = P.resolve(name)
        want = P.gather_units_bytes(fmt, rows, layer.sizes, RANK)
        assert (got["forward"], got["backward"]) == want, (name, got, want)
        sent[name] = sum(want)
    for name in names:
        if name != "none":
            ratio = sent["none"] / sent[name]
            expect = 32 / P.resolve(name).bits
            assert 0.98 * expect < ratio <= expect, (name, ratio)
    if RANK == 0:
        print("bytes per step (forward + backward): " + ", ".join(f"{k} {v}" for k, v in sent.items()),
              flush=True)


def main() -> None:
    names = sys.argv[1].split(",")
    check_unseeded_init()
    for name in names:
        check_layer(name)
        check_rows(name)
    check_bytes(["none", *[n for n in names if n != "none"]])
    if RANK == 0:
        print("OK", flush=True)


if __name__ == "__main__":
    main()
