import os, sys, time, numpy as np, tensorflow as tf
intra, inter = int(sys.argv[1]), int(sys.argv[2])
tf.config.threading.set_intra_op_parallelism_threads(intra)
tf.config.threading.set_inter_op_parallelism_threads(inter)
from horovod_q8.workloads.models import mlp
m = mlp()
m.compile(tf.keras.optimizers.SGD(0.01, momentum=0.9), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
x = rng.random((16 * 40, 28, 28, 1), dtype=np.float32); y = rng.integers(0, 10, 16 * 40)
ends = []
cb = tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, l: ends.append(time.perf_counter()))
m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb], shuffle=False)
d = np.diff(ends[5:])
print(f"affinity {sorted(os.sched_getaffinity(0))} intra {intra} inter {inter}: median step {1e3*np.median(d):.0f} ms", flush=True)
