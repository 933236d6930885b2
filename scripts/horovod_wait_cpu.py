"""What waiting costs in CPU on shared cores: rank 0 sleeps 3 s before an allgather that rank 1
has already entered; each rank prints its wall and CPU time (getrusage) over those 3 s.

    horovod-q8 cluster --hosts 2 --bandwidth 1gbit --timeout 300 -- python scripts/horovod_wait_cpu.py
"""
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
