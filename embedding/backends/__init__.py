"""Lookup backends behind one interface; `build_backend` picks one by name."""
from __future__ import annotations

import torch

from ..spec import WorkloadSpec
from .base import BackendError, LookupBackend, init_weights
from .fbgemm_tbe import FbgemmTBE
from .torch_bag import TorchEmbeddingBag
from .torchrec_ebc import TorchRecEBC

__all__ = ["BACKENDS", "BackendError", "LookupBackend", "build_backend", "check_backend_names", "init_weights"]

BACKENDS: dict[str, type[LookupBackend]] = {"torch": TorchEmbeddingBag, "fbgemm": FbgemmTBE,
                                            "torchrec": TorchRecEBC}


def check_backend_names(names: list[str] | tuple[str, ...]) -> None:
    """BackendError naming every unknown name in `names` and the known ones (an empty list is the caller's call)."""
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise BackendError(f"unknown backend(s) {unknown}; choose from {sorted(BACKENDS)}")


def build_backend(name: str, spec: WorkloadSpec, weights: list[torch.Tensor], device: torch.device,
                  precision: str = "fp32", learning_rate: float = 0.01) -> LookupBackend:
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; choose from {sorted(BACKENDS)}")
    return BACKENDS[name](spec, weights, device, precision, learning_rate)
