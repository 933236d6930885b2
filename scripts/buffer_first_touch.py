"""What first-touch page faults cost: a fresh 102 MB array filled against a reused one, median of
7 each, twice: python scripts/buffer_first_touch.py"""
import numpy as np, time
n = 25_600_000
def fresh():
    a = np.empty(n*4+64, np.uint8); a[:] = 1; return a
reuse = np.empty(n*4+64, np.uint8)
def reused():
    reuse[:] = 1; return reuse
for f in (fresh, reused, fresh, reused):
    ts = []
    for _ in range(7):
        t = time.perf_counter(); x = f(); ts.append(time.perf_counter() - t); del x
    print(f.__name__, "%.1f ms" % (1e3 * sorted(ts)[3]))
