"""The DLRM model around a lookup backend: bottom MLP over dense features, pooled embeddings, dot interaction,
top MLP to one logit (Naumov et al., 2019). The sparse part is any `LookupBackend`; its optimizer applies to the
tables (fused or not), SGD to the dense layers."""
from __future__ import annotations

import torch
from torch import nn

from .backends.base import BackendError, LookupBackend
from .batch import Batch
from .spec import WorkloadSpec

__all__ = ["DLRM"]


def _mlp(widths: list[int], last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, spec: WorkloadSpec, sparse: LookupBackend, learning_rate: float = 0.01) -> None:
        super().__init__()
        dims = {t.dim for t in spec.tables}
        d = spec.dense.bottom_mlp[-1]
        if dims != {d}:
            raise BackendError(f"DLRM dot interaction needs every table dim equal to bottom_mlp[-1] = {d}; "
                               f"workload {spec.name!r} has dims {sorted(dims)}")
        torch.manual_seed(spec.seed)
        self.sparse, self.num_tables, self.dim = sparse, spec.num_tables, d
        self.bottom = _mlp([spec.dense.num_dense_features, *spec.dense.bottom_mlp], last_activation=True)
        n = self.num_tables + 1
        self.top = _mlp([d + n * (n - 1) // 2, *spec.dense.top_mlp], last_activation=False)
        rows, cols = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_cols", cols, persistent=False)
        self.to(sparse.device)
        self.dense_opt = torch.optim.SGD(self.parameters(), lr=learning_rate)

    def prepare(self, batch: Batch):
        dev = self.sparse.device
        return (self.sparse.prepare(batch), torch.from_numpy(batch.dense).to(dev),
                torch.from_numpy(batch.labels).to(dev))

    def forward(self, sparse_inputs, dense: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)  # (B, D)
        emb = self.sparse.forward(sparse_inputs).view(dense.shape[0], self.num_tables, self.dim)  # (B, T, D)
        feats = torch.cat([x.unsqueeze(1), emb], dim=1)  # (B, T+1, D)
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self.pair_rows, self.pair_cols]  # (B, T(T+1)/2)
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)  # (B,) logits

    def train_step(self, inputs) -> float:
        sparse_inputs, dense, labels = inputs
        self.dense_opt.zero_grad(set_to_none=True)
        loss = nn.functional.binary_cross_entropy_with_logits(self.forward(sparse_inputs, dense), labels)
        loss.backward()
        self.dense_opt.step()
        self.sparse.after_backward()
        return loss.detach()

    @torch.no_grad()
    def predict(self, inputs) -> torch.Tensor:
        sparse_inputs, dense, _ = inputs
        return torch.sigmoid(self.forward(sparse_inputs, dense))
