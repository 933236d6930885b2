"""Under horovodrun: a small Keras model trained K steps per compression, per-tensor and fused paths.

Checks: identical weights on every rank; final loss close to the uncompressed run's.
Prints one line per case, then OK.
"""
from __future__ import annotations

import hashlib
import sys

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.tensorflow import FusedReducer, compressor
from horovod_q8.tensorflow.horovod_api import reducer_options

hvd.init()
STEPS = 30


def data(seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((STEPS * 32, 16, 16, 1)).astype(np.float32)
    w = np.random.default_rng(0).standard_normal((256, 4))
    y = np.argmax(x.reshape(len(x), -1) @ w, axis=1)
    return x, y


def model():
    tf.keras.utils.set_random_seed(1)
    return tf.keras.Sequential([
        tf.keras.layers.Input((16, 16, 1)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(4)])


def train(name: str, fused: bool, backward_passes: int = 1) -> tuple:
    m = model()
    comp = compressor(name)
    opt = tf.keras.optimizers.SGD(0.05 * hvd.size())
    # the stock optimizer reduces in fused buckets too; per_tensor builds Horovod's own path
    with reducer_options(per_tensor=not fused):
        opt = hvd.DistributedOptimizer(opt, compression=comp, backward_passes_per_step=backward_passes,
                                       average_aggregated_gradients=True)
    assert isinstance(opt._allreduce_grads, FusedReducer) == (fused and name != "none"), name
    m.compile(opt, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data(hvd.rank())
    hist = m.fit(x, y, batch_size=32, epochs=1, verbose=0,
                 callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    digest = hashlib.sha1(b"".join(w.tobytes() for w in m.get_weights())).hexdigest()
    return hist.history["loss"][-1], digest


def main() -> None:
    names = sys.argv[1].split(",")
    base_loss, _ = train("none", False)
    for name in names:
        for fused in (False, True):
            bpps = 2 if fused and name == "q8" else 1
            loss, digest = train(name, fused, bpps)
            digests = hvd_tf.allgather_object(digest)
            assert len(set(digests)) == 1, f"{name} fused={fused}: weights differ across ranks {digests}"
            tol = 0.15 if name.startswith("q8") else 0.5
            assert abs(loss - base_loss) < tol * base_loss + 0.05, (name, fused, loss, base_loss)
            if hvd.rank() == 0:
                print(f"{name} fused={fused} bpps={bpps} loss={loss:.4f} fp32={base_loss:.4f} "
                      f"identical-weights", flush=True)
    if hvd.rank() == 0:
        print("OK")


if __name__ == "__main__":
    main()
