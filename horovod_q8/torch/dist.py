"""The engine's transport over a torch.distributed process group (Gloo on CPU, NCCL on GPU).

Bytes move through `all_to_all_single` and an allgather, never through a reduction. Gloo has
no `all_gather_into_tensor` in the torch releases Horovod builds against, so there the
allgather is `all_gather` into views of one buffer. Collectives are matched by call order:
the caller must reduce tensors in the same order on every rank (DDP's buckets are).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from horovod_q8.collective.transport import ArrayTransport, wait
from horovod_q8.torch.tensors import TensorBuffers, as_tensor


class DistTransport(ArrayTransport):
    """One rank of a process group; buffers are torch tensors on `device`, reused across calls."""

    def __init__(self, group=None, device="cpu", buffers: Optional[TensorBuffers] = None) -> None:
        super().__init__(buffers or TensorBuffers(torch.device(device)))
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.into_tensor = dist.get_backend(group) == "nccl"

    def alltoallv(self, buf, send_splits: Sequence[int], recv_splits: Sequence[int], name):
        buf = wait(buf)
        received = self.buffer(f"{name}.received", sum(recv_splits), np.uint8)
        dist.all_to_all_single(as_tensor(received), as_tensor(buf), [int(s) for s in recv_splits],
                               [int(s) for s in send_splits], group=self.group)
        return received

    def allgatherv(self, buf, sizes: Sequence[int], name):
        buf = wait(buf)
        sizes = [int(s) for s in sizes]
        width = max(sizes) if sizes else 0
        gathered = self.buffer(f"{name}.gathered", sum(sizes), np.uint8)
        if all(s == width for s in sizes):
            self._gather(as_tensor(buf), as_tensor(gathered), width)
            return gathered
        # Unequal blocks (the last chunks of two-phase): gather padded blocks, then close the gaps.
        send = self.buffer(f"{name}.padded_send", width, np.uint8)
        send[: buf.size] = buf
        padded = self.buffer(f"{name}.padded", width * self.size, np.uint8)
        self._gather(as_tensor(send), as_tensor(padded), width)
        offset = 0
        for r, s in enumerate(sizes):
            gathered[offset: offset + s] = padded[r * width: r * width + s]
            offset += s
        return gathered

    def _gather(self, src: torch.Tensor, dst: torch.Tensor, width: int) -> None:
        if width == 0:
            return
        if self.into_tensor:
            dist.all_gather_into_tensor(dst, src, group=self.group)
        else:
            dist.all_gather([dst[r * width:(r + 1) * width] for r in range(self.size)], src, group=self.group)
