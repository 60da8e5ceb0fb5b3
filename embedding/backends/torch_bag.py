"""torch `nn.EmbeddingBag`: one bag module over the concatenated tables when dims agree (one kernel call, indices
shifted by each table's row offset in `prepare`), else one module per table. Training: sparse gradients and
`torch.optim.Adagrad` (sparse rows only)."""
from __future__ import annotations

import numpy as np
import torch

from ..batch import Batch
from .base import LookupBackend

__all__ = ["TorchEmbeddingBag"]

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


class TorchEmbeddingBag(LookupBackend):
    name = "torch"
    precisions = ("fp32", "fp16")
    kernel = "torch.nn.EmbeddingBag(mode='sum')"

    def __init__(self, spec, weights, device, precision="fp32", learning_rate=0.01) -> None:
        super().__init__(spec, weights, device, precision, learning_rate)
        dtype = _DTYPES[precision]
        sparse = spec.mode == "train"
        self.fused = len(set(self.dims)) == 1
        if self.fused:
            self.row_offsets = np.cumsum([0] + [t.rows for t in spec.tables[:-1]]).astype(np.int64)
            self.bags = torch.nn.ModuleList([torch.nn.EmbeddingBag.from_pretrained(
                torch.cat(weights).to(device, dtype), freeze=False, mode="sum", sparse=sparse,
                include_last_offset=True)])
        else:
            self.bags = torch.nn.ModuleList([torch.nn.EmbeddingBag.from_pretrained(
                w.to(device, dtype), freeze=False, mode="sum", sparse=sparse, include_last_offset=True)
                for w in weights])
        self.opt = torch.optim.Adagrad(self.bags.parameters(), lr=learning_rate) if sparse else None

    @property
    def optimizer(self) -> str:
        return "torch.optim.Adagrad (sparse)" if self.opt else "none"

    def prepare(self, batch: Batch):
        T, B = batch.lengths.shape
        if self.fused:
            shift = np.repeat(self.row_offsets, batch.lengths.sum(axis=1))
            idx = torch.from_numpy(batch.indices + shift).to(self.device)
            return idx, torch.from_numpy(batch.offsets).to(self.device), T, B
        per_table = []
        for t in range(T):
            lens = batch.lengths[t]
            off = np.zeros(B + 1, dtype=np.int64)
            np.cumsum(lens, out=off[1:])
            per_table.append((torch.from_numpy(batch.table_indices(t).copy()).to(self.device),
                              torch.from_numpy(off).to(self.device)))
        return per_table, None, T, B

    def forward(self, inputs) -> torch.Tensor:
        idx, off, T, B = inputs
        if self.fused:
            pooled = self.bags[0](idx, off)  # (T·B, D), bag (t, b) at row t·B + b
            return pooled.view(T, B, -1).transpose(0, 1).reshape(B, -1)  # (B, T·D)
        return torch.cat([bag(i, o) for bag, (i, o) in zip(self.bags, idx, strict=True)], dim=1)

    def after_backward(self) -> None:
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def table_weights(self) -> list[torch.Tensor]:
        if self.fused:
            w = self.bags[0].weight.detach().float().cpu()
            return [w[o:o + t.rows].clone() for o, t in zip(self.row_offsets, self.spec.tables, strict=True)]
        return [b.weight.detach().float().cpu().clone() for b in self.bags]
