"""Eager against traced `hvd.allreduce` of none and q8 at 4K to 16M elements: best and median
of 5 timed calls after a warm-up, each after a barrier, printed on rank 0:
    horovodrun -np 2 -H localhost:2 --gloo python scripts/eager_vs_traced.py
What an eager call costs beside a `tf.function` one (docs/design.md, docs/auto.md)."""
import time
from typing import Callable, List, Tuple

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_q8.collective.auto import probe_values
from horovod_q8.tensorflow import compressor

SIZES = (4096, 1 << 20, 1 << 22, 1 << 24)
REPEATS = 5


def timed(fn: Callable[[], None]) -> Tuple[float, float]:
    """(best, median) ms of fn over REPEATS calls after one warm-up, each after a barrier."""
    fn()
    times = []
    for _ in range(REPEATS):
        hvd.allreduce(tf.constant(0.0), name="eager_vs_traced.barrier").numpy()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3, float(np.median(times)) * 1e3


def main() -> None:
    hvd.init()
    rows: List[tuple] = []
    for n in SIZES:
        x = tf.constant(probe_values(n))
        for name in ("none", "q8"):
            comp = compressor(name)
            traced = tf.function(lambda t, c=comp, key=f"tr.{name}.{n}":
                                 hvd.allreduce(t, compression=c, op=hvd.Sum, name=key))
            calls = {"eager": lambda c=comp, key=f"eg.{name}.{n}":
                     hvd.allreduce(x, compression=c, op=hvd.Sum, name=key).numpy(),
                     "traced": lambda f=traced: f(x).numpy()}
            rows += [(n, name, label, *timed(fn)) for label, fn in calls.items()]
    if hvd.rank() == 0:
        for row in rows:
            print("n=%9d %5s %6s best %.2f ms median %.2f ms" % row)


if __name__ == "__main__":
    main()
