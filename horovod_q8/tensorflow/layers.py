"""Keras layers for model parallelism with compressed activations.

`ShardedDense` splits a fully connected layer's units across the Horovod ranks (tensor
parallelism): rank r holds columns [start_r, end_r) of the kernel and computes that slice of
the output for every row; the slices are then exchanged in the chosen format
(`horovod_q8.tensorflow.activations`). Its input must be the same on every rank, e.g. the
output of `GatherRows` or of another `ShardedDense`.

Gradients follow Horovod's data-parallel convention (each rank differentiates its own loss;
the objective is the sum over ranks): the sharded kernel's and bias's gradients are complete
on their own rank. Register them as local sources of Horovod's tape (`local_variables`), whose
default `scale_local_gradients=True` divides them by N to match `op=Average`:

    tape = hvd.DistributedGradientTape(tape, compression=...)
    for v in local_variables(model):
        tape.register_local_source(v)
"""
from __future__ import annotations

from typing import List

import horovod.tensorflow as hvd
import tensorflow as tf

from horovod_q8.collective import pieces as P
from horovod_q8.tensorflow import activations as A

OUTPUTS = ("all_rows", "own_rows")


class ShardedDense(tf.keras.layers.Layer):
    """A Dense layer whose `units` are split across the ranks (the first units % N ranks get
    one more). Weights start equal to `Dense(units)`'s columns when seeded alike: every rank
    draws the full kernel with the same initializer and keeps its own columns.

    compression: format of the activations and of their gradients ("none", "q8", "q8_linear",
    "q8_mantissa", "q8_static_tree", "q4"). output: "all_rows" gathers the units (every rank
    gets the full output); "own_rows" sends each rank only its own rows of the full output
    (an alltoall; call with `row_counts` from `GatherRows`), N times fewer bytes.
    """

    def __init__(self, units: int, activation=None, use_bias: bool = True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 compression: str = "q8", output: str = "all_rows", **kwargs):
        super().__init__(**kwargs)
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        self.units = int(units)
        self.activation = tf.keras.activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = tf.keras.initializers.get(kernel_initializer)
        self.bias_initializer = tf.keras.initializers.get(bias_initializer)
        self.compression = P.label(P.resolve(compression))
        self.output_mode = output
        n = hvd.size()
        if self.units < n:
            raise ValueError(f"ShardedDense: {self.units} units cannot be split over {n} ranks")
        self.sizes = P.split_sizes(self.units, n)
        starts = P.offsets(self.sizes)
        self.start, self.end = starts[hvd.rank()], starts[hvd.rank() + 1]

    def build(self, input_shape):
        in_dim = int(input_shape[-1])
        s, e = self.start, self.end
        full = self.kernel_initializer((in_dim, self.units), dtype=self.dtype)
        self.kernel = self.add_weight("kernel", shape=(in_dim, e - s), dtype=self.dtype,
                                      initializer=lambda shape, dtype=None, **kw: full[:, s:e])
        self.bias = None
        if self.use_bias:
            full_b = self.bias_initializer((self.units,), dtype=self.dtype)
            self.bias = self.add_weight("bias", shape=(e - s,), dtype=self.dtype,
                                        initializer=lambda shape, dtype=None, **kw: full_b[s:e])
        super().build(input_shape)

    def call(self, inputs, row_counts=None):
        if inputs.shape.rank != 2:
            raise ValueError(f"ShardedDense takes (rows, features) inputs, got shape {inputs.shape}")
        y = tf.matmul(inputs, self.kernel)
        if self.bias is not None:
            y = tf.nn.bias_add(y, self.bias)
        y = self.activation(y)
        if self.output_mode == "all_rows":
            return A.gather_units(y, self.sizes, self.compression)
        if row_counts is None:
            raise ValueError("output='own_rows' needs row_counts (the counts GatherRows returns)")
        return A.to_row_owners(y, row_counts, self.sizes, self.compression)

    @property
    def local_weights(self) -> List[tf.Variable]:
        """This rank's shard: not to be allreduced across ranks."""
        return [w for w in (self.kernel, self.bias) if w is not None]

    def get_config(self) -> dict:
        cfg = super().get_config()
        cfg.update(units=self.units, activation=tf.keras.activations.serialize(self.activation),
                   use_bias=self.use_bias,
                   kernel_initializer=tf.keras.initializers.serialize(self.kernel_initializer),
                   bias_initializer=tf.keras.initializers.serialize(self.bias_initializer),
                   compression=self.compression, output=self.output_mode)
        return cfg


class GatherRows(tf.keras.layers.Layer):
    """Data-parallel features to the model-parallel part: every rank gets all ranks' rows.
    Returns (rows, row counts per rank); the backward reduce-scatters their gradient."""

    def __init__(self, compression: str = "q8", **kwargs):
        super().__init__(**kwargs)
        self.compression = P.label(P.resolve(compression))

    def call(self, inputs):
        return A.gather_rows(inputs, self.compression)

    def get_config(self) -> dict:
        return {**super().get_config(), "compression": self.compression}


def local_variables(model: tf.Module) -> List[tf.Variable]:
    """The variables of every ShardedDense in `model`: register them as local sources."""
    layers = [m for m in model.submodules if isinstance(m, ShardedDense)]
    if isinstance(model, ShardedDense):
        layers.insert(0, model)
    return [w for layer in layers for w in layer.local_weights]


def data_parallel_variables(model: tf.keras.Model) -> List[tf.Variable]:
    """Every other variable of `model` (same on every rank; broadcast and allreduce these)."""
    local = {v.ref() for v in local_variables(model)}
    return [v for v in model.variables if v.ref() not in local]

