"""The product's compressed schedule as `bench transfer` times it: `collective.engine` over
`collective.mpi.MpiTransport`, whole or in pieces. In pieces (method names ending in /p),
a codec thread codes one piece while the main thread moves another's bytes, the two-stage
pipeline of Horovod's background thread next to TensorFlow's executor, without their
host-call copies."""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from horovod_q8.collective import engine
from horovod_q8.collective.mpi import MpiTransport
from horovod_q8.formats import get

PIPELINED = "/p"  # method-name suffix: the format's schedule in pieces, codec overlapped with the wire


def whole_method(name: str) -> str:
    """The method a (possibly pipelined) benchmark method name runs: "q8/p" -> "q8"."""
    return name[:-len(PIPELINED)] if name.endswith(PIPELINED) else name


def product_sum(t: MpiTransport, x: np.ndarray, name: str, piece: int = 0) -> Tuple[np.ndarray, Dict[str, float]]:
    """(the sum of float32 `x` over t's ranks, {"wire": s in MPI, "codec": s in local steps}).

    The gradient is quantized as a dense layer's (the q4_threshold group); no residuals are
    kept, so every call sends the same tensor the same way.
    """
    req = engine.Request(get(name).for_group("dense"), x.size, "auto", False, piece, f"bench.{name}.{piece}")
    t.reset()
    total = engine.compressed_sum(t, req, x)
    return total, dict(t.seconds)
