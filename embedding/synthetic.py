"""Random table sets shaped like Meta's dlrm_datasets (the inputs of sharding research and FBGEMM benchmarks).

Rows are log-uniform over [rows_min, rows_max] (most tables small, a few huge, as in the 856-table release), pooling
means log-normal (median ≈ 3, long tail, capped at 200), dims drawn from `dims`, Zipf alpha uniform in
[alpha_min, alpha_max] (≈ 1.05 reproduces the release's "≈ 1% of rows take ≈ 40% of lookups").
"""
from __future__ import annotations

import numpy as np

from .spec import AccessSpec, PoolingSpec, TableSpec

__all__ = ["random_tables"]


def random_tables(count: int, seed: int = 0, rows_min: int = 100, rows_max: int = 40_000_000,
                  dims: tuple[int, ...] = (16, 32, 64, 128), alpha_min: float = 0.9, alpha_max: float = 1.2,
                  dtype: str = "fp32", prefix: str = "t") -> tuple[TableSpec, ...]:
    if count <= 0:
        raise ValueError(f"random_tables: count must be > 0, got {count}")
    if not 1 <= rows_min <= rows_max:
        raise ValueError(f"random_tables: need 1 ≤ rows_min ≤ rows_max, got {rows_min}, {rows_max}")
    rng = np.random.default_rng([seed, 0x7AB1E5])
    rows = np.exp(rng.uniform(np.log(rows_min), np.log(rows_max), count)).astype(np.int64)
    pooling = np.clip(np.round(rng.lognormal(np.log(3.0), 1.2, count), 1), 1.0, 200.0)
    dim = rng.choice(np.asarray(dims), count)
    alpha = rng.uniform(alpha_min, alpha_max, count)
    return tuple(
        TableSpec(name=f"{prefix}{i}", rows=int(rows[i]), dim=int(dim[i]), dtype=dtype,
                  pooling=PoolingSpec("skewed", float(pooling[i])), access=AccessSpec("zipf", float(alpha[i])))
        for i in range(count))
