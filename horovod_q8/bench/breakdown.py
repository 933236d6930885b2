"""`horovod-q8 bench allreduce --breakdown` (under horovodrun): where the time of one
compressed allreduce goes, on the product path (`hvd.allreduce` inside `tf.function`).

Per compression, in one run: the whole op; the codec kernels (time inside every host call,
recorded by `tensorflow.bridge.PROFILE`); the same byte collectives alone (hvd.alltoall of uint8
buffers of the op's sizes, as the engine sends them); the host calls alone (the same calls
returning buffers of the op's sizes without coding: TensorFlow's boundary and allocation);
and the rest (waiting, scheduling, decompress ops). Every figure is the slowest rank's median;
the whole ops of every row are timed in rounds (`common.rounds`), so their ratios come from
the same minutes of a shared machine.
"""
from __future__ import annotations

import resource
import time
from typing import Callable, Dict, List

import numpy as np

from horovod_q8.bench.common import readback


def _median_slowest(fn: Callable[[], object], repeats: int) -> float:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    fn()  # trace and warm up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    mine = float(np.median(times))
    return float(hvd.allreduce(tf.constant(mine, tf.float64), op=hvd.Max, name="breakdown.max"))


def slowest_per_round(times: Dict[str, List[float]]) -> Dict[str, List[float]]:
    """Every rank's `common.rounds` times -> the slowest rank's time of each name in each round."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    names = list(times)
    if not names:
        return {}
    mine = np.array([times[k] for k in names], dtype=np.float64)
    worst = hvd.allreduce(tf.constant(mine), op=hvd.Max, name=f"bench.rounds.{mine.shape[0]}x{mine.shape[1]}")
    return {k: [float(v) for v in row] for k, row in zip(names, worst.numpy())}


def _page_faults(fn: Callable[[], object], calls: int = 3) -> float:
    """Minor page faults of this process per call of fn (first touches of fresh memory: a
    fresh 100 MB array costs 15-80 ms more than a reused one on this VM)."""
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def _profiled(fn: Callable[[], object]) -> Dict[str, float]:
    """One call of fn, split by its host calls: seconds inside them ("codec"), before the
    first ("head": dispatch), between them ("gaps": collectives and waiting) and after the
    last ("tail": decompress, Horovod's control allreduce, the copy out)."""
    from horovod_q8.tensorflow import bridge

    bridge.PROFILE = []
    try:
        start = time.perf_counter()
        fn()
        end = time.perf_counter()
        records = sorted(bridge.PROFILE, key=lambda r: r[1])
    finally:
        bridge.PROFILE = None
    if not records:
        return {"codec": 0.0, "head": 0.0, "gaps": 0.0, "tail": end - start}
    gaps = sum(max(0.0, b[1] - a[2]) for a, b in zip(records, records[1:]))
    return {"codec": sum(r[2] - r[1] for r in records), "head": records[0][1] - start,
            "gaps": gaps, "tail": end - max(r[2] for r in records)}


def _op(name: str, pipe: int):
    """(compression, its tf.function op) of one row: Horovod's none / fp16 or a horovod_q8 format."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from horovod_q8.tensorflow import compressor

    if name in ("none", "fp16"):
        comp = hvd.Compression.fp16 if name == "fp16" else hvd.Compression.none
    else:
        comp = compressor(name, pipeline_elements=pipe)
    return comp, tf.function(lambda t: hvd.allreduce(t, compression=comp, op=hvd.Average,
                                                     name=f"bd.{name}.{pipe}"))


def compressed_phases(name: str, x, repeats: int, pipe: int, comp, op, total: float,
                      back: str = "one") -> Dict[str, float]:
    """Codec, collectives alone, host calls alone and the rest of one compression (`comp`, as
    `_op` made it with `op`) whose whole op took `total` seconds (in pieces of `pipe` elements when > 0: collectives and host calls
    alone are then those of the whole tensor, and the rest can be negative, the overlap)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from horovod_q8.collective import policy
    from horovod_q8.tensorflow import compressor
    from horovod_q8.tensorflow.transport import HorovodTransport, gather_bytes

    faults = _page_faults(lambda: readback(op(x), back))
    split = [_profiled(lambda: readback(op(x), back)) for _ in range(3)]
    split = {k: float(np.median([d[k] for d in split])) for k in split[0]}
    n = int(x.shape[0])
    req = policy.request(compressor(name), n, "other")
    plan = req.plans(hvd.size(), hvd.rank())[0]
    two_phase = plan.schedule == "two_phase"
    send = tf.zeros(sum(plan.send_splits) if two_phase else plan.fmt.nbytes(n), tf.uint8)
    mine = tf.zeros(plan.gathered_sizes[plan.rank], tf.uint8)

    @tf.function
    def wire():
        outs = [gather_bytes(mine, hvd.size(), f"bd.{name}.ag")]  # as the engine gathers
        if two_phase:
            outs.append(hvd.alltoall(send, splits=plan.send_splits, name=f"bd.{name}.a2a")[0])
        return outs
    collectives = _median_slowest(lambda: readback(wire(), "all"), repeats)  # small uint8 results

    sizes = [send.shape[0], plan.fmt.nbytes(plan.chunk_len(plan.rank)), n] if two_phase else [send.shape[0], n]
    dtypes = [tf.uint8, tf.uint8, tf.float32] if two_phase else [tf.uint8, tf.float32]

    make = HorovodTransport().buffer  # the product's output arrays

    @tf.function
    def boundary(t):
        y = t
        for size, dtype in zip(sizes, dtypes):  # the op's host calls, each producing its output
            y = tf.numpy_function(lambda a, s=int(size), d=dtype.as_numpy_dtype: make("probe", s, d), [y], dtype)
        return y
    host_calls = _median_slowest(lambda: readback(boundary(x), back), repeats)
    kernels = split["codec"]
    return {"total": total, "codec": kernels, "collectives": collectives, "host_calls": host_calls,
            "rest": total - kernels - collectives - host_calls, "head": split["head"],
            "gaps": split["gaps"], "tail": split["tail"], "faults": faults,
            "bytes_sent": float(policy.decide(comp, True, n, hvd.size()).bytes_compressed)}


def baseline_phases(name: str, x, op, back: str = "one") -> Dict[str, float]:
    """Horovod's none / fp16: the whole op only (its phases run inside Horovod)."""
    import horovod.tensorflow as hvd

    from horovod_q8.collective import policy

    return {"faults": _page_faults(lambda: readback(op(x), back)),
            "bytes_sent": policy.ring_bytes(int(x.shape[0]), 2 if name == "fp16" else 4, hvd.size())}


def run(elements: int, names: List[tuple], repeats: int, back: str = "one") -> Dict[str, Dict[str, float]]:
    """Rank 0 prints the table; every rank returns the figures."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from horovod_q8.bench.common import label as row_label
    from horovod_q8.bench.common import machine, markdown, round_ratios, rounds

    x = tf.constant(np.random.default_rng(hvd.rank()).standard_normal(elements).astype(np.float32))
    ops = {row_label(name, pipe): (name, pipe, *_op(name, pipe)) for name, pipe in names}
    totals = slowest_per_round(rounds({k: (lambda op=op: readback(op(x), back)) for k, (*_, op) in ops.items()},
                                      repeats))
    vs16 = round_ratios(totals, "fp16")
    rows = {}
    for label, (name, pipe, comp, op) in ops.items():
        total = float(np.median(totals[label]))
        rows[label] = dict(baseline_phases(name, x, op, back) if name in ("none", "fp16")
                           else compressed_phases(name, x, repeats, pipe, comp, op, total, back), total=total)
    if hvd.rank() == 0:
        print(f"## breakdown: one tensor of {elements} float32, {hvd.size()} ranks, {machine()}\n")
        nan = float("nan")
        phases = ("codec", "collectives", "host_calls", "rest", "head", "gaps", "tail")
        table = [[name, r["total"] * 1e3, *[r.get(k, nan) * 1e3 for k in phases], r["faults"] / 1e3,
                  r["bytes_sent"] / 1e6, *(vs16[name] if vs16 else ("", "", ""))] for name, r in rows.items()]
        print(markdown(["compression", "total ms", "codec kernels ms", "collectives alone ms",
                        "host calls alone ms", "rest ms", "head ms", "gaps ms", "tail ms",
                        "page faults/op (k, rank 0)", "MB sent/rank", "speedup vs fp16",
                        "lowest", "highest"], table), flush=True)
        print(f"\ntotal: the slowest rank's median of {repeats} rounds, every compression once per round "
              f"in an order shuffled each round, each op followed by a read-back of "
              f"{'one element' if back == 'one' else 'its whole result into NumPy'}; speedup vs fp16: the median (lowest, highest) of the ratios within a "
              "round. codec kernels: time inside the host calls; collectives / host calls alone: the same "
              "byte collectives, and the same host calls without coding, each timed by itself; rest: "
              "total minus those three. One profiled call split at its host calls: head (before the "
              "first), gaps (between them: the collectives and any waiting), tail (after the last: "
              "decompress, Horovod's control allreduce, the read-back). Page faults: minor faults of "
              "rank 0's process per op (first touches of fresh memory), mean of 3.", flush=True)
    return rows
