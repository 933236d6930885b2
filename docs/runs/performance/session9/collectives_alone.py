import time, numpy as np, horovod.tensorflow as hvd, tensorflow as tf
hvd.init()
for mb in (4.2, 25.7):
    n = int(mb * 1e6)
    x = tf.constant(np.ones(n, np.uint8))
    f = tf.function(lambda t: hvd.allgather(t, name=f"ag{n}"))
    ts = []
    for r in range(8):
        t0 = time.perf_counter(); f(x).numpy(); ts.append(time.perf_counter() - t0)
    a = tf.constant(np.ones(n // 2, np.uint8))
    g = tf.function(lambda t: hvd.alltoall(t, name=f"a2a{n}")[0])
    ts2 = []
    for r in range(8):
        t0 = time.perf_counter(); g(tf.concat([a, a], 0)).numpy(); ts2.append(time.perf_counter() - t0)
    if hvd.rank() == 0:
        wire = n * 8 / 1e9 * 1e3
        print(f"{mb} MB per rank: allgather median {1e3*np.median(ts[2:]):.1f} ms, alltoall(2x half) {1e3*np.median(ts2[2:]):.1f} ms, wire at 1 Gbit/s {wire:.1f} ms ({wire/2:.1f} for the alltoall)", flush=True)
