import time, os, resource
import numpy as np
import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
x = tf.constant(np.zeros(1000, np.uint8))
hvd.allgather(x, name="warm").numpy()
t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
if hvd.rank() == 0:
    time.sleep(3)
hvd.allgather(x, name="late").numpy()
t1, c1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
print(f"rank {hvd.rank()} waited {t1-t0:.2f} s wall, cpu user {c1.ru_utime-c0.ru_utime:.2f} sys {c1.ru_stime-c0.ru_stime:.2f}", flush=True)
