"""Diagnostic: where one MLP training step's time goes (host calls vs the rest), per step."""
import os, sys, time, numpy as np
import tensorflow as tf, horovod.tensorflow.keras as hvd
hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(int(os.environ.get("TFT", "2")))
tf.config.threading.set_inter_op_parallelism_threads(int(os.environ.get("INTER", "2")))
from horovod_q8.tensorflow import bridge, compressor
from horovod_q8.tensorflow import keras as q8_keras
from horovod_q8.workloads.models import mlp
comp_name = sys.argv[1]
model = mlp()
opt = tf.keras.optimizers.SGD(0.01, momentum=0.9)
if comp_name in ("none", "fp16"):
    opt = hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16 if comp_name == "fp16" else hvd.Compression.none)
else:
    opt = q8_keras.DistributedOptimizer(opt, compression=compressor(comp_name, pipeline_elements=int(os.environ.get("PIPE", "0"))))
model.compile(opt, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(hvd.rank())
x = rng.random((16 * 30, 28, 28, 1), dtype=np.float32); y = rng.integers(0, 10, 16 * 30)
marks = []
class CB(tf.keras.callbacks.Callback):
    def on_train_batch_begin(self, b, logs=None):
        if b == 8: bridge.PROFILE = []
        marks.append(("begin", b, time.perf_counter()))
    def on_train_batch_end(self, b, logs=None):
        marks.append(("end", b, time.perf_counter()))
model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), CB()], shuffle=False)
prof = bridge.PROFILE or []
ends = {b: t for k, b, t in marks if k == "end"}; begins = {b: t for k, b, t in marks if k == "begin"}
steps = [ends[b] - ends[b - 1] for b in range(10, 29)]
if hvd.rank() == 0:
    print(f"{comp_name} PIPE={os.environ.get('PIPE','0')} TFT={os.environ.get('TFT','2')} INTER={os.environ.get('INTER','2')}: median step {1e3*np.median(steps):.0f} ms (steps 10-28)")
    for b in (12, 13):
        t0 = ends[b - 1]
        ev = [(n, 1e3 * (a - t0), 1e3 * (e - a)) for n, a, e in prof if t0 <= a < ends[b]]
        print(f"  step {b}: {1e3*(ends[b]-t0):.0f} ms; host calls (label, start ms, dur ms): " + ", ".join(f"{n}@{s:.0f}+{d:.0f}" for n, s, d in ev))
