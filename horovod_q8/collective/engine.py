"""The compressed allreduce, written once for every frontend and transport.

    two_phase: encode chunks -> alltoallv -> sum my chunk in rank order, re-encode -> allgatherv -> decode
    allgather: encode whole  -> allgatherv -> sum every copy in rank order

Codes are never added by a collective. With pieces (`Request.piece_elements`), a tensor
goes as independent block-aligned pieces, staged so that a transport with a codec thread
(or TensorFlow's executor) codes one piece while another's bytes are on the wire.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import numpy as np

from horovod_q8.collective import plan as P
from horovod_q8.collective.transport import ResidualStore, Transport
from horovod_q8.formats import Format


@dataclass(frozen=True)
class Request:
    """One compressed sum: the resolved format (layer group chosen), the size and the knobs.

    key names the collectives and the state of this tensor or bucket: the same on every rank.
    """

    fmt: Format
    n: int
    schedule: str = "auto"
    error_feedback: bool = False
    piece_elements: int = 0
    key: str = "q8"

    def __post_init__(self) -> None:
        if self.fmt.level_groups:
            raise ValueError(f"{self.fmt.name}: choose the layer group first (fmt.for_group(...))")

    @property
    def keeps_residual(self) -> bool:
        return self.error_feedback or self.fmt.uses_residual

    def piece_sizes(self) -> List[int]:
        return P.pipeline_parts(self.n, self.piece_elements, self.fmt.block_size or 1)

    def plans(self, size: int, rank: int) -> List[P.Plan]:
        schedule = P.choose_schedule(self.schedule, size)
        return [P.Plan(self.fmt, m, size, rank, schedule) for m in self.piece_sizes()]


def compressed_sum(t: Transport, req: Request, flat: Any, residuals: Optional[ResidualStore] = None,
                   seed_of: Callable[[int], Any] = lambda k: k, scale: Any = None) -> Any:
    """The float32 sum over every rank of `flat` (req.n elements), identical bits on every rank.

    flat: one tensor, or a bucket's members as `Parts` (req.n elements with their padding),
    which the first local step reads in place instead of a concatenation (one piece only);
    residuals: the owner of error-feedback state (None: no state is kept, as in eager calls);
    seed_of(k): piece k's stochastic-rounding seed for this step; scale: a factor the last
    local step applies (the op's 1/N, prescale, postscale), a float or the transport's
    scalar; None for 1, with no extra input.
    """
    plans = req.plans(t.size, t.rank)
    sizes = [p.n for p in plans]
    slots = None
    if isinstance(flat, P.Parts):
        if len(plans) > 1:
            raise ValueError("a bucket read in place goes as one piece: concatenate it for pieces")
        xs, slots = [flat.arrays], flat.slots
    else:
        xs = [[flat]] if len(plans) == 1 else [[x] for x in t.split(flat, sizes)]
    keys = [req.key] if len(plans) == 1 else [f"{req.key}.part{k}" for k in range(len(plans))]
    fb = req.error_feedback
    extra = [] if scale is None else [scale]

    def state(key: str, n: int):
        if not req.keeps_residual or n == 0 or residuals is None:
            return None
        return residuals.residual(key, n)

    if plans[0].schedule == P.ALLGATHER:
        sent = [t.local("q8_encode", _encode_whole(t, p, k, fb, slots), x, (p.fmt.nbytes(p.n), np.uint8),
                        state(f"{k}/residual", p.n), seed_of(i))
                for i, (p, x, k) in enumerate(zip(plans, xs, keys))]
        gathered = [t.allgatherv(s, p.gathered_sizes, f"{k}.allgather")
                    for p, s, k in zip(plans, sent, keys)]
        return t.finish("q8_sum", [(_into(P.sum_gathered, p), [g, *extra]) for p, g in zip(plans, gathered)],
                        sizes, req.key)

    sent = [t.local("q8_encode_chunks", _encode_chunks(t, p, k, fb, slots), x,
                    (sum(p.send_splits), np.uint8), state(f"{k}/residual", p.n), seed_of(i))
            for i, (p, x, k) in enumerate(zip(plans, xs, keys))]
    mine = []
    for i, (p, s, k) in enumerate(zip(plans, sent, keys)):
        part = p.send_splits[p.rank]
        received = t.alltoallv(s, p.send_splits, [part] * p.size, f"{k}.alltoall")
        n_mine = p.chunk_len(p.rank)
        mine.append(t.local("q8_reduce_chunk", _reduce_chunk(t, p, k, fb), [received],
                            (p.fmt.nbytes(n_mine), np.uint8), state(f"{k}/server_residual", n_mine),
                            seed_of(i)))
    gathered = [t.allgatherv(m, p.gathered_sizes, f"{k}.allgather") for p, m, k in zip(plans, mine, keys)]
    return t.finish("q8_decode", [(_into(P.decode_gathered, p), [g, *extra]) for p, g in zip(plans, gathered)],
                    sizes, req.key)


# The local steps, bound to their plan and to the transport's reused buffers.

def _flat(xs: tuple, slots: Optional[List[int]]):
    """An encode's input: one array, or a bucket's members in their slots (Parts)."""
    return xs[0] if slots is None else P.Parts(xs, slots)


def _encode_whole(t: Transport, p: P.Plan, key: str, fb: bool, slots: Optional[List[int]]) -> Callable:
    return lambda *a: P.encode_whole(p, _flat(a[:-2], slots), a[-2], a[-1], fb,
                                     out=t.buffer(f"{key}.send", p.fmt.nbytes(p.n), np.uint8))


def _encode_chunks(t: Transport, p: P.Plan, key: str, fb: bool, slots: Optional[List[int]]) -> Callable:
    return lambda *a: P.encode_chunks(p, _flat(a[:-2], slots), a[-2], a[-1], fb,
                                      out=t.buffer(f"{key}.send", sum(p.send_splits), np.uint8))


def _reduce_chunk(t: Transport, p: P.Plan, key: str, fb: bool) -> Callable:
    n_mine = p.chunk_len(p.rank)
    return lambda x, r, s: P.reduce_chunk(p, x, r, s, fb, work=t.buffer(f"{key}.chunk", n_mine, np.float32),
                                          out=t.buffer(f"{key}.reduced", p.fmt.nbytes(n_mine), np.uint8))


def _into(last_step: Callable, p: P.Plan) -> Callable:
    """A piece's last step (sum_gathered or decode_gathered) as Transport.finish calls it:
    fn(out, gathered[, scale])."""
    return lambda out, g, *scale: last_step(p, g, out=out, scale=float(scale[0]) if scale else 1.0)


def bytes_sent(req: Request, size: int, rank: int = 0) -> int:
    """Bytes one rank puts on the wire for this request (its own data excluded)."""
    return sum(p.bytes_sent() for p in req.plans(size, rank))
