"""Which difference between a bare model.fit and `horovod-q8 train` costs step time (q8 MLP)."""
import os, sys, time, numpy as np
import tensorflow as tf, horovod.tensorflow.keras as hvd
hvd.init()
from horovod_q8.workloads import train as T
T._threads(tf, hvd)
from horovod_q8.tensorflow import compressor
from horovod_q8.tensorflow import keras as q8_keras
from horovod_q8.workloads.models import mlp
import argparse
comp_name = sys.argv[1]
variants = sys.argv[2].split(",")
steps = 30
def one(v):
    tf.keras.utils.set_random_seed(0)
    model = mlp()
    opt = tf.keras.optimizers.SGD(0.02, momentum=0.9)
    if comp_name == "fp16":
        opt = hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16)
    else:
        opt = q8_keras.DistributedOptimizer(opt, compression=compressor(comp_name))
    model.compile(opt, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"] if "metrics" in v else None)
    cbs = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    if "cbs" in v:
        cbs += [hvd.callbacks.MetricAverageCallback(),
                hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.02, warmup_epochs=0, steps_per_epoch=steps, momentum_correction=False, verbose=0)]
    ends = []
    class CB(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, b, logs=None): ends.append(time.perf_counter())
    cbs.append(CB())
    rng = np.random.default_rng(hvd.rank())
    x = rng.random((16 * steps, 28, 28, 1), dtype=np.float32); y = rng.integers(0, 10, 16 * steps)
    if "tfdata" in v:
        args = argparse.Namespace(dataset="mnist", synthetic=True, steps_per_epoch=steps, batch_size=16, seed=0, image_size=None, data_dir=None)
        loaded = T._load_arrays(args, hvd)
        train, test, _, _ = T._pipelines(args, hvd, tf, loaded, 0)
        model.fit(train, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=cbs)
    else:
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=cbs, shuffle=False)
    d = np.diff(ends[5:])
    return 1e3 * np.median(d)
res = {}
for rep in range(2):
    for v in variants:
        res.setdefault(v, []).append(one(v))
if hvd.rank() == 0:
    for v, r in res.items():
        print(f"{comp_name} {v}: median step ms {[round(a) for a in r]}", flush=True)
