"""The byte formulas every part of dlrmbench uses, and the words that state them in every record.

Pooled forward of one batch (T tables, batch B, L_t lookups of table t, D_t its dim, w bytes per weight element):
  rows read     = Σ_t L_t · (D_t · w + s)          s = 4 bytes of scale/bias per int8 row, else 0
  indices read  = Σ_t L_t · i + (T·B + 1) · i      i = 8 (int64) or 4 (int32) bytes per index and offset
  outputs       = B · Σ_t D_t · o                  o = 4 bytes (fp32 outputs)
Training step: forward + backward, counted as FBGEMM's benchmarks do: backward moves 2 × the forward bytes
(gradient read, rows read and written), so a step moves 3 × the forward bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .spec import DTYPE_BYTES, WorkloadSpec

__all__ = ["Traffic", "batch_traffic", "FORMULA"]

FORMULA = ("bytes = rows read Σ_t L_t·(D_t·w + s) + indices Σ_t L_t·i + offsets (T·B+1)·i + outputs B·ΣD·4; "
           "training step = 3 × forward bytes (FBGEMM convention: backward = 2 × forward)")
_SCALE_BIAS = {"int8": 4, "int4": 4}


@dataclass(frozen=True)
class Traffic:
    rows_read: float
    indices_read: float
    outputs_written: float
    lookups: int
    train_factor: int = 1

    @property
    def total(self) -> float:
        return self.train_factor * (self.rows_read + self.indices_read + self.outputs_written)


def batch_traffic(spec: WorkloadSpec, lengths: np.ndarray, precision: str = "fp32", index_bytes: int = 8,
                  train: bool | None = None) -> Traffic:
    """Bytes one batch moves, from its (T, B) lengths."""
    per_table = lengths.sum(axis=1).astype(np.float64)  # (T,)
    w = DTYPE_BYTES[precision]
    s = _SCALE_BIAS.get(precision, 0)
    dims = np.array([t.dim for t in spec.tables], dtype=np.float64)
    rows = float((per_table * (dims * w + s)).sum())
    indices = float(per_table.sum() * index_bytes + (lengths.size + 1) * index_bytes)
    outputs = float(lengths.shape[1] * dims.sum() * 4)
    train = spec.mode == "train" if train is None else train
    return Traffic(rows, indices, outputs, int(per_table.sum()), 3 if train else 1)
