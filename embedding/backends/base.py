"""One small interface for every lookup backend, and the initial weights they all share.

A backend is built from a workload and per-table fp32 weights; `prepare` turns a Batch into the backend's own input
(outside any timed region), `forward` returns pooled outputs (B, ΣD) in table order, and `train_step` runs forward,
backward of a given output gradient, and the optimizer update.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch

from ..batch import Batch
from ..spec import SpecError, WorkloadSpec

__all__ = ["LookupBackend", "init_weights", "BackendError"]


class BackendError(SpecError):
    """A backend that cannot run this workload here (precision, device, dims); the message says why."""


def init_weights(spec: WorkloadSpec, seed: int | None = None) -> list[torch.Tensor]:
    """Per-table fp32 weights, uniform in ±1/√rows as DLRM initialises them, seeded per table."""
    seed = spec.seed if seed is None else seed
    out = []
    for t, table in enumerate(spec.tables):
        g = torch.Generator().manual_seed(seed * 1_000_003 + t)
        bound = 1.0 / math.sqrt(table.rows)
        out.append(torch.empty(table.rows, table.dim).uniform_(-bound, bound, generator=g))
    return out


class LookupBackend(ABC):
    """Pooled (sum) embedding lookups over all tables of a workload."""

    name: str = "base"
    precisions: tuple[str, ...] = ("fp32",)
    kernel: str = ""  # what actually runs, for the record's method string

    def __init__(self, spec: WorkloadSpec, weights: list[torch.Tensor], device: torch.device,
                 precision: str = "fp32", learning_rate: float = 0.01) -> None:
        if precision not in self.precisions:
            raise BackendError(f"backend {self.name!r} supports precision {list(self.precisions)}, not {precision!r}")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise BackendError(f"backend {self.name!r}: placement asks for CUDA but torch sees no GPU")
        self.spec, self.device, self.precision, self.learning_rate = spec, device, precision, learning_rate
        self.dims = [t.dim for t in spec.tables]

    @abstractmethod
    def prepare(self, batch: Batch) -> Any:
        """Backend input for `batch`, on the backend's device."""

    @abstractmethod
    def forward(self, inputs: Any) -> torch.Tensor:
        """(B, ΣD) pooled sums, tables in workload order."""

    def train_step(self, inputs: Any, grad_output: torch.Tensor) -> None:
        """Forward, backward of `grad_output`, optimizer update (in place)."""
        self.forward(inputs).backward(grad_output)
        self.after_backward()

    def after_backward(self) -> None:  # noqa: B027 (a no-op by default, on purpose)
        """Apply the optimizer once gradients have reached the tables (no-op where the update is fused)."""

    @abstractmethod
    def table_weights(self) -> list[torch.Tensor]:
        """Current fp32 weights per table (copies; for tests and checks)."""

    @property
    def optimizer(self) -> str:
        return "none"
