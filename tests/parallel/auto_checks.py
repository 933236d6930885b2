"""Under horovodrun: `Auto` for TensorFlow on real ranks.

argv[1]:
- "train": Keras fit with `hvd.DistributedOptimizer(opt, compression=Auto)` (the fused path)
  and `hvd.allreduce(t, compression=Auto)` per tensor at sizes on both sides of min_size;
  identical weights and sums on every rank, each per-tensor sum equal to the fixed compressor
  Auto chose; saves a checkpoint to argv[2] and prints the plan's fingerprint.
- "resume": restores argv[2] into a fresh optimizer; the plan comes from the checkpoint (no
  measuring) and has the fingerprint "train" printed.
- "forced": HOROVOD_Q8_AUTO=q4 on every rank (and allow none, fp16, q8, q4): every bucket and
  tensor q4; and Auto allowed q4 alone: calibrated, every size q4.
Prints AUTO-FINGERPRINT <json> and OK on rank 0.
"""
from __future__ import annotations

import hashlib
import json
import sys

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.collective import auto as A
from horovod_q8.tensorflow import FusedReducer, compressor

hvd.init()


def same_on_every_rank(arrays, what: str) -> None:
    digest = hashlib.sha1(b"".join(np.asarray(a).tobytes() for a in arrays)).hexdigest()
    everyone = hvd_tf.allgather_object(digest, name=f"check.{what}")
    assert len(set(everyone)) == 1, f"{what} differs between ranks: {everyone}"


def model():
    tf.keras.utils.set_random_seed(1)
    return tf.keras.Sequential([tf.keras.layers.Input((64,)), tf.keras.layers.Dense(512, activation="relu"),
                                tf.keras.layers.Dense(4)])


def optimizer(comp):
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.05), compression=comp)
    assert isinstance(opt._allreduce_grads, FusedReducer), type(opt._allreduce_grads)
    return opt


def fit(m, opt, steps: int = 5) -> float:
    rng = np.random.default_rng(hvd.rank())
    x = rng.standard_normal((steps * 16, 64)).astype(np.float32)
    y = (x[:, :4].argmax(1)).astype(np.int64)
    m.compile(opt, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    same_on_every_rank(m.get_weights(), "weights")
    return h.history["loss"][-1]


def per_tensor(auto) -> None:
    plan = auto.plan()
    for n in (10, 5000, 300_000):
        x = tf.constant(np.random.default_rng(n + hvd.rank()).standard_normal(n).astype(np.float32))
        got = tf.function(lambda t: hvd_tf.allreduce(t, compression=auto, op=hvd_tf.Sum, name=f"auto{n}"))(x)
        chosen = plan.choose(n).name
        fixed = compressor(chosen)
        want = tf.function(lambda t: hvd_tf.allreduce(t, compression=fixed, op=hvd_tf.Sum, name=f"fixed{n}"))(x)
        same_on_every_rank([got.numpy()], f"sum of {n}")
        exact = hvd_tf.allreduce(x, op=hvd_tf.Sum, name=f"exact{n}").numpy()
        err = np.abs(got.numpy() - exact).max() / np.abs(exact).max()
        assert err < {"q4": 0.2}.get(chosen, 0.05), (n, chosen, err)
        np.testing.assert_array_equal(got.numpy(), want.numpy())  # exactly what the chosen one gives
        if hvd.rank() == 0:
            print(f"per tensor n={n}: {chosen}, relative error {err:.2e}", flush=True)


def fingerprint(auto) -> str:
    return json.dumps(auto.plan().fingerprint(), sort_keys=True)


def main() -> None:
    what = sys.argv[1]
    auto = compressor("auto", allow=("none", "fp16", "q8", "q4")) if what == "forced" else compressor("auto")
    m, opt = model(), optimizer(auto)
    if what == "resume":
        tf.train.Checkpoint(optimizer=opt).read(sys.argv[2]).expect_partial()
        opt.build(m.trainable_variables)
    loss = fit(m, opt)
    state = auto.auto_state
    assert state.plan is not None
    restored = state.loaded is not None
    assert restored == (what == "resume"), (what, restored)
    if what == "train":
        per_tensor(auto)
        if hvd.rank() == 0:  # one writer; the calibration saved is the same on every rank
            tf.train.Checkpoint(optimizer=opt).write(sys.argv[2])
        hvd_tf.allgather_object(0, name="written")
    if what == "forced":
        assert [c.name for _, _, c in auto.plan().classes()] == ["none", "q4"]  # below min_size: none
        per_tensor(auto)
        only = compressor("auto", allow=("q4",))  # none not allowed: still timed, as the link
        assert {c.name for _, _, c in only.plan().classes()} == {"q4"}
        per_tensor(only)
    if hvd.rank() == 0:
        print(f"loss {loss:.4f}; calibration {'restored' if restored else 'measured'}", flush=True)
        print("AUTO-FINGERPRINT " + fingerprint(auto), flush=True)
        print("OK", flush=True)


if __name__ == "__main__":
    assert A.DEFAULT_ALLOW == ("none", "fp16", "q8")
    main()
