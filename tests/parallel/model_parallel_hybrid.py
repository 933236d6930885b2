"""Under horovodrun: one step of the hybrid network (data-parallel conv, model-parallel FC) on
N ranks with b images each computes the gradients of one process on the N·b images.

Uncompressed: to float tolerance. With 8-bit activations: logits within 5%, gradients pointing
the same way (cosine > 0.97 on a 12-image batch: errors add up through three compressed
backward steps, and ReLU masks flip). Prints OK on rank 0.
"""
from __future__ import annotations

import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.tensorflow import compressor
from horovod_q8.tensorflow.layers import local_variables
from horovod_q8.workloads.hybrid import gradient_tape, hybrid_net, reference_net

hvd.init()
N, RANK = hvd.size(), hvd.rank()
B, UNITS, CLASSES = 6, 24, 10
BUDGET = {"none": 1e-4, "q8": 0.05}
MIN_COSINE = 0.97


def rel_err(y, ref) -> float:
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(y - ref).mean() / max(np.abs(ref).mean(), 1e-30))


def cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def check(activations: str, gradients: str) -> None:
    rng = np.random.default_rng(0)
    x_all = rng.random((N * B, 28, 28, 1), dtype=np.float32)
    y_all = rng.integers(0, CLASSES, N * B)
    x, y = x_all[RANK * B: (RANK + 1) * B], y_all[RANK * B: (RANK + 1) * B]
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    tf.keras.utils.set_random_seed(3)
    model = hybrid_net(CLASSES, UNITS, activations)
    model(x)
    tf.keras.utils.set_random_seed(3)
    ref = reference_net(CLASSES, UNITS)
    ref(x_all)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        tape = gradient_tape(tape, model, compressor(gradients), fused=False)
        return logits, tape.gradient(loss, model.trainable_variables)

    logits, grads = step(tf.constant(x), tf.constant(y))
    with tf.GradientTape() as tape:
        ref_logits = ref(x_all)
        loss = loss_fn(y_all, ref_logits)
    ref_grads = {v.ref(): g for v, g in zip(ref.trainable_variables,
                                             tape.gradient(loss, ref.trainable_variables))}
    got = {v.ref(): g for v, g in zip(model.trainable_variables, grads)}
    budget = BUDGET[activations]
    assert rel_err(logits, ref_logits[RANK * B: (RANK + 1) * B]) < budget, activations
    pairs = list(zip(model.features.trainable_variables, ref.layers[0].trainable_variables +
                     ref.layers[2].trainable_variables, [None] * 4))
    for sharded, dense in ((model.fc1, ref.layers[5]), (model.fc2, ref.layers[6])):
        pairs += [(sharded.kernel, dense.kernel, sharded), (sharded.bias, dense.bias, sharded)]
    assert len(pairs) == len(model.trainable_variables) and local_variables(model)
    for mine, theirs, shard in pairs:
        want = ref_grads[theirs.ref()]
        if shard is not None:  # a shard: its columns of the single-process gradient
            want = want[..., shard.start: shard.end]
        g = got[mine.ref()]
        if activations == "none":
            assert rel_err(g, want) < budget, (gradients, mine.name, rel_err(g, want))
        else:
            assert cosine(g, want) > MIN_COSINE, (activations, gradients, mine.name, cosine(g, want))
    print(f"activations={activations} gradients={gradients}: hybrid step = one process on "
          f"{N * B} images", flush=True)


def main() -> None:
    for pair in sys.argv[1].split(","):
        activations, gradients = pair.split(":")
        check(activations, gradients)
    if RANK == 0:
        print("OK", flush=True)


if __name__ == "__main__":
    main()
