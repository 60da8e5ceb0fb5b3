"""What a worker runs for one batch of pieces.

`DlrmService` is the real work: the project's DLRM (embedding/dlrm.py) over a lookup backend, on the pieces'
samples gathered from the pool. `FixedService` exists only to validate the queue, the dispatch and the measurement
against queueing theory: a precise timed wait of a known length per batch, never a stand-in for inference.
"""
from __future__ import annotations

import time

import torch

from embedding.backends import build_backend, init_weights
from embedding.dlrm import DLRM
from embedding.spec import WorkloadSpec

from .queries import QuerySet, SamplePool
from .server import Piece

__all__ = ["DlrmService", "FixedService", "build_model"]


def build_model(spec: WorkloadSpec, backend: str, device: torch.device) -> DLRM:
    """The project's DLRM over `backend` on `device`, weights from the workload's seed (so every worker process
    and the GPU copy hold the same model)."""
    sparse = build_backend(backend, spec, init_weights(spec), device)
    return DLRM(spec, sparse).eval()


class DlrmService:
    """Real inference on a batch: gather the pieces' samples from the pool, DLRM forward (no autograd), on `device`
    (the CPU, or a CUDA device for the GPU offload path; the result is synchronised so the time is the GPU's)."""

    def __init__(self, spec: WorkloadSpec, pool: SamplePool, queries: QuerySet, backend: str = "torch",
                 device: str = "cpu") -> None:
        self.pool, self.queries, self.device = pool, queries, torch.device(device)
        self.model = build_model(spec, backend, self.device)

    def batch_of(self, pieces: list[Piece]):
        q = self.queries
        return self.pool.gather([(int(q.starts[p.request.query]) + p.offset, p.n) for p in pieces])

    def _forward(self, batch) -> None:
        with torch.inference_mode():
            out = self.model.predict(self.model.prepare(batch))
        if self.device.type == "cuda":
            out.cpu()  # the answer back on the host: the query is served when its scores are

    def __call__(self, pieces: list[Piece]) -> None:
        self._forward(self.batch_of(pieces))

    def run_samples(self, start: int, n: int) -> None:
        """One batch of n pool samples from `start` (for profiling service time against batch size)."""
        self._forward(self.pool.gather([(start, n)]))

    def run_sparse(self, start: int, n: int) -> None:
        """The embedding stage alone on n pool samples (gather, prepare, lookups)."""
        with torch.inference_mode():
            sparse_inputs, _, _ = self.model.prepare(self.pool.gather([(start, n)]))
            self.model.sparse.forward(sparse_inputs)


class FixedService:
    """Serve each batch by waiting until `ms` after it started (sleep to an absolute deadline: the overshoot of
    the OS timer adds to the service time and is reported as measured service time, not hidden)."""

    def __init__(self, ms: float) -> None:
        self.seconds = ms / 1e3

    def __call__(self, pieces: list[Piece]) -> None:
        deadline = time.perf_counter() + self.seconds
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return
            time.sleep(left)
