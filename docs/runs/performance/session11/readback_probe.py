# Does .numpy() of a 100 MB result copy it? (session 11; run with the venv python)
import time, numpy as np, tensorflow as tf
import horovod.tensorflow as hvd; hvd.init()
from horovod_q8.tensorflow.transport import HorovodTransport
make = HorovodTransport().buffer
n = 25_600_000
x = tf.random.normal([n])
buf = make("p", n, np.float32)
f1 = tf.function(lambda t: tf.numpy_function(lambda a: buf, [t], tf.float32))
f2 = tf.function(lambda t: tf.identity(tf.numpy_function(lambda a: buf, [t], tf.float32)))
f3 = tf.function(lambda t: t * 2.0)
for name, f in [("numpy_function", f1), ("identity", f2), ("tf op", f3)]:
    r = f(x); v = r.numpy()
    print(name, "shares memory with buf:", np.shares_memory(v, buf), end="; ")
    ts = []
    for _ in range(9):
        r = f(x); a = time.perf_counter(); r.numpy(); ts.append(time.perf_counter() - a)
    print(".numpy() ms", round(np.median(ts) * 1e3, 2))
