"""Who owns the compression state: checks that raise on failure (the verdict is the exit code).

    state_checks.py leak alone|after OUT.json [--per-tensor|--tape]   (under horovodrun -np 2)
        Model B (two steps) with each compressor; "after" trains model A (same architecture,
        layer names, optimizer name and compressor settings) first in the same process.
        Rank 0 writes B's weight digests after each step to OUT.json; tests/test_resume.py
        compares "alone" (a fresh process) with "after". In-process checks: the two optimizers
        never share a CompressionState, B's residuals are non-zero (so a leak would show), and
        training B leaves A's state as it was.
    state_checks.py elastic                                    (any number of ranks, 1 too)
        `elastic_keras_state` commit -> change -> restore brings residuals and step counters
        back; sync keeps each rank's residuals and takes rank 0's step counters.
"""
from __future__ import annotations

import hashlib
import json
import sys
from typing import Callable, Dict, List

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.tensorflow import FusedReducer, compressor, state_of
from horovod_q8.tensorflow.horovod_api import reducer_options
from horovod_q8.tensorflow.state import elastic_keras_state

hvd.init()

# Equal settings, built separately for A and B (as two scripts or two models would).
SETTINGS: Dict[str, Callable] = {
    "q8_feedback": lambda: compressor("q8", error_feedback=True),
    "twobit": lambda: compressor("twobit"),
    "q8_warmup": lambda: compressor("q8", error_feedback=True, warmup_steps=1),  # shows step leaks
}
IN, HIDDEN, OUT = 32, 64, 10  # 2762 parameters: one compressed bucket (min_size 1024)


def net() -> tf.keras.Model:
    """The same names every time: equal gradient names and shapes for A and B."""
    return tf.keras.Sequential([tf.keras.layers.Input((IN,)),
                                tf.keras.layers.Dense(HIDDEN, activation="relu", name="hidden"),
                                tf.keras.layers.Dense(OUT, name="logits")], name="net")


def initial_weights(m: tf.keras.Model, seed: int) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.3 * rng.standard_normal(w.shape)).astype(np.float32) for w in m.get_weights()]


def batch(step: int):
    """This rank's batch of a step: different on every rank, so residuals differ per rank."""
    rng = np.random.default_rng(1000 * hvd.rank() + step)
    return rng.standard_normal((16, IN)).astype(np.float32), rng.integers(0, OUT, 16)


def digest(arrays) -> str:
    h = hashlib.sha1()
    for a in arrays:
        h.update(np.asarray(a).tobytes())
    return h.hexdigest()


def build(setting: str, per_tensor: bool, weights_seed: int):
    m = net()
    m.set_weights(initial_weights(m, weights_seed))
    with reducer_options(per_tensor=per_tensor):
        opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1, momentum=0.9),
                                       compression=SETTINGS[setting]())
    m.compile(opt, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m, opt


def train(m: tf.keras.Model, steps: int, first: int = 0) -> List[str]:
    """Weight digests after each step."""
    out = []
    for s in range(first, first + steps):
        m.train_on_batch(*batch(s))
        out.append(digest(m.get_weights()))
    return out


def state_digest(opt) -> str:
    st = state_of(opt)
    return digest([st.residuals[k].numpy() for k in sorted(st.residuals)]
                  + [st.steps[k].numpy() for k in sorted(st.steps)])


def residual_norm(opt) -> float:
    st = state_of(opt)
    return float(np.sqrt(sum(np.sum(np.square(v.numpy(), dtype=np.float64)) for v in st.residuals.values())))


def leak(mode: str, out: str, per_tensor: bool) -> None:
    results = {}
    for setting in SETTINGS:
        a_opt = None
        if mode == "after":
            a, a_opt = build(setting, per_tensor, weights_seed=7)
            train(a, 3, first=100)
        b, b_opt = build(setting, per_tensor, weights_seed=1)
        if per_tensor:
            assert not isinstance(b_opt._allreduce_grads, FusedReducer), "per-tensor path expected"
        if a_opt is not None:
            assert state_of(a_opt) is not state_of(b_opt), f"{setting}: A and B share a CompressionState"
            a_before = state_digest(a_opt)
        results[setting] = train(b, 2)
        norm = residual_norm(b_opt)
        assert norm > 0, f"{setting}: B's residuals are all zero; a leak could not show"
        if a_opt is not None:
            assert state_digest(a_opt) == a_before, f"{setting}: training B changed A's state"
        print(f"rank {hvd.rank()} {setting}: B residual norm {norm:.4g}, digests {results[setting]}", flush=True)
    everyone = hvd_tf.allgather_object(results)
    assert all(r == everyone[0] for r in everyone), f"ranks disagree on B's weights: {everyone}"
    if hvd.rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


def elastic() -> None:
    m, opt = build("q8_feedback", False, weights_seed=1)
    m.train_on_batch(*batch(0))  # optimizer slots exist, as in a real commit
    st = state_of(opt)
    res, step = st.residual("check", 5), st.step("check")
    res.assign(np.arange(5, dtype=np.float32) + hvd.rank())
    step.assign(3 + hvd.rank())

    horovods_own = hvd.elastic.KerasState(m, optimizer=opt)
    horovods_own.commit()
    res.assign(tf.fill((5,), -1.0))
    horovods_own.restore()
    print(f"rank {hvd.rank()}: hvd.elastic.KerasState alone restores the residual: "
          f"{bool(np.all(res.numpy() >= 0))}", flush=True)

    res.assign(np.arange(5, dtype=np.float32) + hvd.rank())
    state = elastic_keras_state(m, optimizer=opt)
    kernel = m.weights[0]
    committed = (res.numpy().copy(), int(step.numpy()), kernel.numpy().copy())
    state.commit()
    res.assign(tf.fill((5,), -1.0))
    step.assign(99)
    kernel.assign(tf.zeros_like(kernel))
    later = st.residual("made_after_commit", 3)
    later.assign(tf.ones(3))
    state.restore()
    assert np.array_equal(res.numpy(), committed[0]), f"residual not restored: {res.numpy()}"
    assert int(step.numpy()) == committed[1], f"step not restored: {step.numpy()}"
    assert np.array_equal(kernel.numpy(), committed[2]), "model weights not restored"
    assert not np.any(later.numpy()), f"a residual made after the commit kept {later.numpy()}"

    state.sync()
    assert np.array_equal(res.numpy(), committed[0]), f"sync changed this rank's residual: {res.numpy()}"
    assert int(step.numpy()) == 3, f"sync did not take rank 0's step counter: {step.numpy()}"
    steps = hvd_tf.allgather_object({k: int(v.numpy()) for k, v in st.steps.items()})
    assert all(s == steps[0] for s in steps), f"step counters differ after sync: {steps}"
    res.assign(tf.fill((5,), -1.0))
    state.restore()  # sync committed: restore goes back to the synced state
    assert np.array_equal(res.numpy(), committed[0]), "restore after sync lost the residual"
    print(f"rank {hvd.rank()}: elastic OK", flush=True)


def tape_trainer(m: tf.keras.Model, setting: str) -> Callable:
    """Steps through hvd.DistributedGradientTape, rebuilt inside every traced step as users
    write it, with a compressor built there too (equal settings for A and B)."""
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = m(x, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        tape = hvd_tf.DistributedGradientTape(tape, compression=SETTINGS[setting]())
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables))

    def train_steps(steps: int, first: int = 0) -> List[str]:
        out = []
        for s in range(first, first + steps):
            step(*batch(s))
            out.append(digest(m.get_weights()))
        return out
    return train_steps


def tape_leak(mode: str, out: str) -> None:
    """As leak(), through gradient tapes: B's weights must not depend on A having trained."""
    results = {}
    for setting in SETTINGS:
        if mode == "after":
            a = net()
            a.set_weights(initial_weights(a, 7))
            tape_trainer(a, setting)(3, first=100)
        b = net()
        b.set_weights(initial_weights(b, 1))
        results[setting] = tape_trainer(b, setting)(2)
    everyone = hvd_tf.allgather_object(results)
    assert all(r == everyone[0] for r in everyone), f"ranks disagree on B's weights: {everyone}"
    if hvd.rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


def main(argv: List[str]) -> None:
    if argv[0] == "leak" and "--tape" in argv[3:]:
        tape_leak(argv[1], argv[2])
    elif argv[0] == "leak":
        leak(argv[1], argv[2], "--per-tensor" in argv[3:])
    elif argv[0] == "elastic":
        elastic()
    else:
        raise SystemExit(f"unknown check {argv[0]!r}")
    print("OK", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
