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

__all__ = ["DlrmService", "FixedService"]


class DlrmService:
    def __init__(self, spec: WorkloadSpec, pool: SamplePool, queries: QuerySet, backend: str = "torch") -> None:
        self.pool, self.queries = pool, queries
        device = torch.device("cpu")
        sparse = build_backend(backend, spec, init_weights(spec), device)
        self.model = DLRM(spec, sparse).eval()

    def batch_of(self, pieces: list[Piece]):
        q = self.queries
        return self.pool.gather([(int(q.starts[p.request.query]) + p.offset, p.n) for p in pieces])

    def __call__(self, pieces: list[Piece]) -> None:
        self.model.predict(self.model.prepare(self.batch_of(pieces)))

    def run_samples(self, start: int, n: int) -> None:
        """One batch of n pool samples from `start` (for profiling service time against batch size)."""
        self.model.predict(self.model.prepare(self.pool.gather([(start, n)])))

    def run_sparse(self, start: int, n: int) -> None:
        """The embedding stage alone on n pool samples (gather, prepare, lookups)."""
        sparse_inputs, _, _ = self.model.prepare(self.pool.gather([(start, n)]))
        with torch.no_grad():
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
