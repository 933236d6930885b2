"""`CompressionState`: the error-feedback residuals and step counters of one owner.

An optimizer or gradient tape owns one (through its reducer), so two models never share
state; it is a `tf.Module`, so `tf.train.Checkpoint` (and Keras' optimizer checkpoint, and
`hvd.elastic`'s state) save and restore it with the model. Variables are made on first use,
outside any tf.function, and restored then if a checkpoint was loaded before.
"""
from __future__ import annotations

import re

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
        slot = _slot(f"{key}_{int(n)}")
        var = self.residuals.get(slot)
        if var is None:
            with tf.init_scope():
                var = tf.Variable(tf.zeros((int(n),), tf.float32), trainable=False, name=slot,
                                  synchronization=tf.VariableSynchronization.NONE)
            self.residuals[slot] = var
        return var

    def step(self, key: str) -> tf.Variable:
        """The int64 step counter of this key (0 before the first step)."""
        slot = _slot(key)
        var = self.steps.get(slot)
        if var is None:
            with tf.init_scope():
                var = tf.Variable(tf.constant(0, tf.int64), trainable=False, name=slot,
                                  synchronization=tf.VariableSynchronization.NONE)
            self.steps[slot] = var
        return var
