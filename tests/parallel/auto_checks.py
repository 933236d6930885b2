"""Under horovodrun: `Auto` for TensorFlow on real ranks.

argv[1]:
- "train": Keras fit with `hvd.DistributedOptimizer(opt, compression=Auto)` (the fused path)
  and `hvd.allreduce(t, compression=Auto)` per tensor at sizes on both sides of min_size;
  identical weights and sums on every rank, each per-tensor sum equal to the fixed compressor
  Auto chose; a step whose buckets go differently (a saved calibration of a slow link: the small
  bucket through Horovod's own path, the large one as q8), each bucket's sum what its choice alone gives;
  saves a checkpoint to argv[2] and prints the plan's fingerprint.
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


def slow_link(auto) -> dict:
    """A saved calibration: 1 Gbit/s links, fp16's and q8's paths 2 ms dearer than their model
    (host calls, extra collectives), so a step's small buckets go through Horovod's own path
    (none, or fp16 as its share of Horovod's fused message) and large ones as q8."""
    bw = 1e9 / 8
    cal = A.Calibration(hvd.size(), 50e-6, bw, bw, (("fp16", 2e9, 2e9, 2e9), ("q8", 1e9, 1e9, 1e9)))
    plan = A.AutoPlan(A.Auto(auto.allow, auto.min_size, auto.options), cal)
    small = tuple((nm, plan.model(nm, A.SMALL) + (0.0 if nm == "none" else 2e-3)) for nm in auto.allow)
    return {"auto": auto.fingerprint(), "calibration": A.Calibration(hvd.size(), 50e-6, bw, bw, cal.rates,
                                                                     small).to_dict()}


def mixed_buckets() -> None:
    """The fused reducer with buckets sent differently in one step: the small bucket's tensors are
    Horovod's own average (none or fp16), the q8 bucket's what a fixed q8 reducer gives for it."""
    auto = compressor("auto", min_size=512)  # a setting of its own: not the trained model's plan
    auto.load_state_dict(slow_link(auto))
    shapes = [(300,), (40, 17), (400_000,)]  # buckets in backprop order: [2], then [1, 0]
    grads = [tf.constant(np.random.default_rng(10 * i + hvd.rank()).standard_normal(s).astype(np.float32))
             for i, s in enumerate(shapes)]
    reducer = FusedReducer("mixed", auto, False, hvd_tf.Average, 1.0, fusion_bytes=1 << 20)
    got = [t.numpy() for t in reducer(grads)]
    large, small = (c.name for c in auto.plan().choose_step([400_000, 980]))
    assert large == "q8" and small in ("none", "fp16"), (large, small)
    for i in (0, 1):
        want = hvd_tf.allreduce(grads[i], op=hvd_tf.Average, compression=auto.compressors[small],
                                name=f"mixed.plain{i}").numpy()
        np.testing.assert_array_equal(got[i], want)
    fixed = FusedReducer("mixed_q8", compressor("q8"), False, hvd_tf.Average, 1.0, fusion_bytes=1 << 20)
    np.testing.assert_array_equal(got[2], fixed([grads[2]])[0].numpy())
    exact = hvd_tf.allreduce(grads[2], op=hvd_tf.Average, name="mixed.exact").numpy()
    assert 0 < np.abs(got[2] - exact).max() < 0.05 * np.abs(exact).max()  # quantized, within q8's error
    same_on_every_rank(got, "mixed buckets")


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
        mixed_buckets()
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
