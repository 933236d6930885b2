"""Keras' SGD with momentum as a torch optimizer (imports torch: load it lazily).

Keras: v = momentum * v - lr * g; w += v. torch.optim.SGD: b = momentum * b + g; w -= lr * b.
The two agree while the LR is constant; when it changes (Horovod's warm-up), Keras keeps each
gradient at the LR of its own step, torch.optim.SGD rescales the whole history to today's LR."""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch


class KerasSGD(torch.optim.Optimizer):
    """tf.keras.optimizers.SGD(lr, momentum) (nesterov=False, no weight decay), with Keras'
    defaults (hvd.DistributedOptimizer rebuilds it from its param_groups); the velocity is
    state["velocity"]."""

    def __init__(self, params: Iterable, lr: float = 0.01, momentum: float = 0.0) -> None:
        if lr < 0 or not 0 <= momentum < 1:
            raise ValueError(f"lr must be >= 0 and momentum in [0, 1), got {lr}, {momentum}")
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "velocity" not in state:
                    state["velocity"] = torch.zeros_like(p)
                v = state["velocity"]
                v.mul_(group["momentum"]).add_(p.grad, alpha=-group["lr"])
                p.add_(v)
        return loss
