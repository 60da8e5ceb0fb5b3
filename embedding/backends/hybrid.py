"""Hybrid placement: some tables in host memory (looked up by the CPU), the rest on the accelerator; pooled host
outputs are copied to the accelerator and the columns put back in table order. The copy is part of every timed
forward, and `transfer_bytes` counts it (B × Σ host dims × 4 bytes per batch)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..batch import Batch
from .base import BackendError, LookupBackend

__all__ = ["HybridBackend", "host_table_ids"]


def host_table_ids(spec, host_tables: list[str], host_largest: int) -> list[int]:
    names = [t.name for t in spec.tables]
    unknown = [n for n in host_tables if n not in names]
    if unknown:
        raise BackendError(f"placement names tables {unknown} that workload {spec.name!r} does not have")
    ids = {names.index(n) for n in host_tables}
    ids |= set(np.argsort([-t.bytes for t in spec.tables], kind="stable")[:host_largest].tolist())
    return sorted(ids)


class HybridBackend(LookupBackend):
    def __init__(self, factory, spec, weights, host_ids: list[int], device: torch.device, precision="fp32",
                 learning_rate=0.01) -> None:
        self.name = "hybrid"
        self.precisions = (precision,)
        super().__init__(spec, weights, device, precision, learning_rate)
        fast_ids = [i for i in range(spec.num_tables) if i not in set(host_ids)]
        if not host_ids or not fast_ids:
            raise BackendError("hybrid placement needs at least one host table and one device table")
        self.parts = []
        for ids, dev in ((fast_ids, device), (host_ids, torch.device("cpu"))):
            sub = replace(spec, tables=tuple(spec.tables[i] for i in ids), original_rows=())
            self.parts.append((ids, factory(sub, [weights[i] for i in ids], dev, precision, learning_rate)))
        self.inner_name = self.parts[0][1].name
        self.kernel = f"hybrid: {self.parts[0][1].kernel} on {device} + same on cpu for host tables"
        dims = np.array(self.dims)
        starts = np.concatenate([[0], np.cumsum(dims)])
        order = fast_ids + host_ids  # column blocks as produced: fast tables, then host tables
        cols = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in order])
        self.perm = torch.from_numpy(np.argsort(cols)).to(device)  # back to workload table order
        self.host_dims = int(dims[host_ids].sum())

    def transfer_bytes(self, batch_size: int) -> int:
        return batch_size * self.host_dims * 4

    def prepare(self, batch: Batch):
        out = []
        for ids, part in self.parts:
            lengths = batch.lengths[ids]
            bounds = batch.table_offsets
            indices = np.concatenate([batch.indices[bounds[i]:bounds[i + 1]] for i in ids])
            out.append(part.prepare(Batch(lengths=np.ascontiguousarray(lengths), indices=indices)))
        return out

    def forward(self, inputs) -> torch.Tensor:
        fast = self.parts[0][1].forward(inputs[0])
        host = self.parts[1][1].forward(inputs[1]).to(self.device, non_blocking=True)
        return torch.cat([fast, host], dim=1).index_select(1, self.perm)

    def after_backward(self) -> None:
        for _, part in self.parts:
            part.after_backward()

    def table_weights(self) -> list[torch.Tensor]:
        out: list[torch.Tensor] = [None] * self.spec.num_tables  # type: ignore[list-item]
        for ids, part in self.parts:
            for i, w in zip(ids, part.table_weights(), strict=True):
                out[i] = w
        return out

    @property
    def optimizer(self) -> str:
        return self.parts[0][1].optimizer
