"""horovod_q8's schedule with the codec overlapped with the wire, as `pipeline_elements` does
in Horovod: the tensor goes as independent pieces; one thread runs the codec (the Numba
kernels release the GIL), the main thread runs the collectives (mpi4py releases it in MPI
calls), so piece k's bytes move while piece k+1 is encoded or piece k-1 decoded.

This is the two-stage pipeline of Horovod's background thread next to TensorFlow's executor,
without their host-call copies. Only the main thread calls MPI.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict

import numpy as np

from horovod_q8.bench.ring import ring_allgatherv
from horovod_q8.collective import plan as P
from horovod_q8.collective.pieces import offsets
from horovod_q8.formats import get


PIPELINED = "/p"  # method-name suffix: the format's schedule in pieces, codec overlapped with the wire


def whole_method(name: str) -> str:
    """The method a (possibly pipelined) benchmark method name runs: "q8/p" -> "q8"."""
    return name[:-len(PIPELINED)] if name.endswith(PIPELINED) else name


class Worker:
    """Runs codec steps on one worker thread and adds up their seconds."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.seconds = 0.0

    def submit(self, fn: Callable, *args, **kwargs):
        def run():
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            self.seconds += time.perf_counter() - t  # one worker: no race
            return out
        return self.pool.submit(run)


def pipelined_sum(comm, x: np.ndarray, name: str, piece: int, buffer: Callable,
                  worker: Worker) -> Dict[str, float]:
    """Sum float32 `x` over `comm` in pieces of `piece` elements into buffer("out");
    returns {"wire": seconds the main thread spent in MPI, "codec": the worker's seconds}."""
    from mpi4py import MPI

    size, rank = comm.Get_size(), comm.Get_rank()
    fmt = get(name)
    sizes = P.pipeline_parts(x.size, piece, fmt.block_size or 1)
    starts = offsets(sizes)
    plans = [P.make_plan(fmt, m, size, rank, shape=(1, m)) for m in sizes]
    out = buffer("out", x.size, np.float32)
    worker.seconds, wire = 0.0, 0.0
    two_phase = plans[0].schedule == P.TWO_PHASE
    encode = P.encode_chunks if two_phase else P.encode_whole
    nbytes = [sum(p.send_splits) if two_phase else p.fmt.nbytes(p.n) for p in plans]
    sent = [worker.submit(encode, p, x[starts[k]:starts[k] + p.n], out=buffer(f"send{k}", nbytes[k], np.uint8))
            for k, p in enumerate(plans)]
    mine = []
    for k, p in enumerate(plans):
        send = sent[k].result()
        if not two_phase:
            mine.append(send)
            continue
        part = p.send_splits[rank]
        received = buffer(f"received{k}", part * size, np.uint8)
        t = time.perf_counter()
        comm.Alltoallv([send, (p.send_splits, offsets(p.send_splits)[:-1]), MPI.BYTE],
                       [received, ([part] * size, offsets([part] * size)[:-1]), MPI.BYTE])
        wire += time.perf_counter() - t
        n_mine = p.chunk_len(rank)
        mine.append(worker.submit(P.reduce_chunk, p, received, work=buffer(f"chunk{k}", n_mine, np.float32),
                                  out=buffer(f"reduced{k}", p.fmt.nbytes(n_mine), np.uint8)))
    done = []
    for k, p in enumerate(plans):
        codes = mine[k].result() if two_phase else mine[k]
        gathered = buffer(f"gathered{k}", sum(p.gathered_sizes), np.uint8)
        t = time.perf_counter()
        ring_allgatherv(comm, codes, gathered, p.gathered_sizes)
        wire += time.perf_counter() - t
        decode = P.decode_gathered if two_phase else P.sum_gathered
        done.append(worker.submit(decode, p, gathered, out=out[starts[k]:starts[k] + p.n]))
    for f in done:
        f.result()
    return {"wire": wire, "codec": worker.seconds}
