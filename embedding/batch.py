"""One batch of sparse lookups in the layout FBGEMM's TBE, TorchRec's KJT and Meta's dlrm_datasets share.

Table-major CSR: `lengths[t, b]` rows are looked up by bag (t, b); `indices` holds them table by table, sample by
sample; `offsets` (T·B + 1) are the running sums of `lengths.ravel()`, so bag (t, b) is
`indices[offsets[t*B + b] : offsets[t*B + b + 1]]`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Batch"]


@dataclass(frozen=True)
class Batch:
    lengths: np.ndarray  # (T, B) int64
    indices: np.ndarray  # (Σ lengths,) int64, table-major
    dense: np.ndarray | None = None  # (B, num_dense) float32, for the DLRM model
    labels: np.ndarray | None = None  # (B,) float32 click labels, for the DLRM model

    @property
    def num_tables(self) -> int:
        return self.lengths.shape[0]

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[1]

    @property
    def offsets(self) -> np.ndarray:
        """(T·B + 1,) int64 running sums of lengths."""
        out = np.zeros(self.lengths.size + 1, dtype=np.int64)
        np.cumsum(self.lengths.ravel(), out=out[1:])
        return out

    @property
    def table_offsets(self) -> np.ndarray:
        """(T + 1,) int64: table t owns indices[table_offsets[t]:table_offsets[t+1]]."""
        out = np.zeros(self.num_tables + 1, dtype=np.int64)
        np.cumsum(self.lengths.sum(axis=1), out=out[1:])
        return out

    def table_indices(self, t: int) -> np.ndarray:
        """The indices that table t looks up in this batch, in order."""
        bounds = self.table_offsets
        return self.indices[bounds[t]:bounds[t + 1]]

    @property
    def num_lookups(self) -> int:
        return int(self.indices.size)
