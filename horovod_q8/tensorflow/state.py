"""`CompressionState`: the error-feedback residuals and step counters of one owner.

An optimizer or gradient tape owns one (through its reducer), so two models never share
state; it is a `tf.Module`, so `tf.train.Checkpoint` (and Keras' optimizer checkpoint) save
and restore it with the model. `hvd.elastic.KerasState` does not: use `elastic_keras_state`.
Variables are made on first use, outside any tf.function, and restored then if a checkpoint
was loaded before. Residuals differ per rank: each rank must save and restore its own.
"""
from __future__ import annotations

import functools
import re
from typing import Dict

import numpy as np
import tensorflow as tf


def _slot(key: str) -> str:
    # checkpoint keys stay readable and free of the separators TF's object graph uses
    return re.sub(r"[^A-Za-z0-9_]", "_", key)


class CompressionState(tf.Module):
    """Residuals and step counters keyed by tensor or bucket (a name identical on every rank)."""

    def __init__(self, name: str = "horovod_q8_state") -> None:
        super().__init__(name=name)
        self.residuals: dict = {}
        self.steps: dict = {}

    def residual(self, key: str, n: int) -> tf.Variable:
        """A float32 variable of n zeros for this key and size, made once (a per-tensor
        compressor may see one graph name with several sizes across tf.functions)."""
        return _variable(self.residuals, _slot(f"{key}_{int(n)}"), lambda: tf.zeros((int(n),), tf.float32))

    def step(self, key: str) -> tf.Variable:
        """The int64 step counter of this key (0 before the first step)."""
        return _variable(self.steps, _slot(key), lambda: tf.constant(0, tf.int64))

    def snapshot(self) -> Dict[str, Dict[str, np.ndarray]]:
        """Host copies of every residual and step counter, by slot (an in-memory commit)."""
        return {"residuals": {k: np.array(v.numpy(), copy=True) for k, v in self.residuals.items()},
                "steps": {k: np.array(v.numpy(), copy=True) for k, v in self.steps.items()}}

    def load(self, snapshot: Dict[str, Dict[str, np.ndarray]]) -> None:
        """Back to `snapshot`: its tables' variables get its values (made if missing) and those
        made since get their first value (zeros), as if they had not run yet."""
        for table, values in ((self.residuals, snapshot.get("residuals")), (self.steps, snapshot.get("steps"))):
            if values is None:
                continue
            for slot, var in table.items():
                if slot not in values:
                    var.assign(tf.zeros_like(var))
            for slot, value in values.items():
                _variable(table, slot, lambda v=value: tf.constant(v)).assign(value)


def _variable(table, slot: str, initial) -> tf.Variable:
    """table[slot], made from initial() outside any tf.function on first use."""
    var = table.get(slot)
    if var is None:
        with tf.init_scope():
            var = tf.Variable(initial(), trainable=False, name=slot,
                              synchronization=tf.VariableSynchronization.NONE)
        table[slot] = var
    return var


def state_of(wrapped) -> CompressionState:
    """The CompressionState of a horovod_q8-reduced optimizer or tape (to checkpoint it): its
    reducer's (fused.FusedReducer) `state`."""
    state = getattr(getattr(wrapped, "_allreduce_grads", None), "state", None)
    if not isinstance(state, CompressionState):
        raise TypeError(f"{type(wrapped).__name__} does not reduce through horovod_q8 "
                        "(build it with compression=a horovod_q8 compressor)")
    return state


def elastic_keras_state(model, optimizer=None, **kwargs):
    """`hvd.elastic.KerasState(model, optimizer, **kwargs)` that also commits and restores the
    optimizer's CompressionState, which Horovod's own leaves out (it saves `model.variables`
    and `optimizer.variables()` only). On sync the step counters come from rank 0 with the
    model, so every rank takes the same branches; residuals stay with their rank."""
    return _elastic_keras_state_class()(model, optimizer=optimizer, **kwargs)


@functools.lru_cache(maxsize=None)
def _elastic_keras_state_class():
    import horovod.tensorflow as hvd
    from horovod.tensorflow.keras.elastic import KerasState

    class Q8KerasState(KerasState):
        """Horovod's KerasState plus the optimizer's CompressionState."""

        def __init__(self, model, optimizer=None, **kwargs):
            self.compression_state = state_of(optimizer or model.optimizer)
            super().__init__(model, optimizer=optimizer, **kwargs)

        def _save_model(self):
            super()._save_model()
            self._saved_compression_state = self.compression_state.snapshot()

        def _load_model(self):
            super()._load_model()
            self.compression_state.load(self._saved_compression_state)

        def sync(self):
            steps = hvd.broadcast_object(self.compression_state.snapshot()["steps"], root_rank=0,
                                         name="horovod_q8.elastic.steps")
            self.compression_state.load({"steps": steps})
            super().sync()

    return Q8KerasState
