# Is a tf.function call synchronous here, and what does .numpy() add? (session 11)
import time, numpy as np, tensorflow as tf
import horovod.tensorflow as hvd; hvd.init()
x = tf.random.normal([25_600_000])
f = tf.function(lambda t: tf.numpy_function(lambda a: (time.sleep(0.05), a)[1], [t], tf.float32) * 2.0)
g = tf.function(lambda t: hvd.allreduce(t, compression=hvd.Compression.fp16, op=hvd.Average))
for name, fn in [("sleep 50 ms then *2", f), ("hvd fp16 allreduce 1 rank", g)]:
    fn(x)
    a = time.perf_counter(); r = fn(x); b = time.perf_counter(); r.numpy(); c = time.perf_counter()
    print(name, "call ms", round((b - a) * 1e3, 1), "then .numpy() ms", round((c - b) * 1e3, 1), "executing eagerly async:", tf.config.experimental.get_synchronous_execution())
