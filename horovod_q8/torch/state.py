"""`TorchResiduals`: error-feedback residuals and step counters as torch tensors, owned by a
DDP hook state or an optimizer wrapper and saved in its `state_dict`.

Residuals differ per rank: each rank saves and restores its own (as with optimizer state).
"""
from __future__ import annotations

from typing import Dict

import torch

from horovod_q8.torch.tensors import as_array


class TorchResiduals:
    """Residuals by key (a name identical on every rank), made as zeros on first use."""

    def __init__(self, device="cpu") -> None:
        self.device = torch.device(device)
        self.tensors: Dict[str, torch.Tensor] = {}
        self.steps: Dict[str, int] = {}

    def residual(self, key: str, n: int):
        """The engine's view (NumPy or CuPy) of the float32 residual of `key`; a residual of
        another size (the bucket was rebuilt) starts again from zeros."""
        t = self.tensors.get(key)
        if t is None or t.numel() != n:
            t = self.tensors[key] = torch.zeros(int(n), dtype=torch.float32, device=self.device)
        return as_array(t)

    def step(self, key: str) -> int:
        """This key's step, counting from 1, advanced by each call."""
        self.steps[key] = self.steps.get(key, 0) + 1
        return self.steps[key]

    def state_dict(self) -> dict:
        return {"residuals": {k: t.detach().clone() for k, t in self.tensors.items()},
                "steps": dict(self.steps)}

    def load_state_dict(self, state: dict) -> None:
        self.tensors = {k: t.detach().to(self.device, torch.float32).clone()
                        for k, t in state.get("residuals", {}).items()}
        self.steps = {k: int(v) for k, v in state.get("steps", {}).items()}

    def to(self, device) -> None:
        """Move every residual to `device` (a checkpoint loaded on another device)."""
        self.device = torch.device(device)
        self.tensors = {k: t.to(self.device) for k, t in self.tensors.items()}
