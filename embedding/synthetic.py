"""Random table sets shaped like Meta's dlrm_datasets (the inputs of sharding research and FBGEMM benchmarks).

Rows are log-uniform over [rows_min, rows_max] (most tables small, a few huge, as in the 856-table release), pooling
means log-normal (median ≈ 3, long tail, capped at 200), dims drawn from `dims`, Zipf alpha uniform in
[alpha_min, alpha_max] (≈ 1.05 reproduces the release's "≈ 1% of rows take ≈ 40% of lookups").
"""
from __future__ import annotations

import numpy as np

from .spec import SEED_MAX, ZIPF_ALPHA_MAX, AccessSpec, PoolingSpec, SpecError, TableSpec

__all__ = ["random_tables", "RANDOM_TABLES_MAX"]

RANDOM_TABLES_MAX = 100_000
"""more tables than this is a typo, not a workload (dlrm_datasets has 856)"""


def random_tables(count: int, seed: int = 0, rows_min: int = 100, rows_max: int = 40_000_000,
                  dims: tuple[int, ...] = (16, 32, 64, 128), alpha_min: float = 0.9, alpha_max: float = 1.2,
                  dtype: str = "fp32", prefix: str = "t") -> tuple[TableSpec, ...]:
    checks = [(1 <= count <= RANDOM_TABLES_MAX, f"count must be in 1..{RANDOM_TABLES_MAX}, got {count}"),
              (0 <= seed <= SEED_MAX, f"seed must be in 0..2^63-1, got {seed}"),
              (1 <= rows_min <= rows_max, f"need 1 ≤ rows_min ≤ rows_max, got {rows_min}, {rows_max}"),
              (len(dims) > 0 and all(int(d) > 0 for d in dims), f"dims must be positive, got {list(dims)}"),
              (0 < alpha_min <= alpha_max <= ZIPF_ALPHA_MAX,
               f"need 0 < alpha_min ≤ alpha_max ≤ {ZIPF_ALPHA_MAX:g}, got {alpha_min}, {alpha_max}")]
    for ok, message in checks:
        if not ok:
            raise SpecError(f"random_tables: {message}")
    rng = np.random.default_rng([seed, 0x7AB1E5])
    rows = np.exp(rng.uniform(np.log(rows_min), np.log(rows_max), count)).astype(np.int64)
    pooling = np.clip(np.round(rng.lognormal(np.log(3.0), 1.2, count), 1), 1.0, 200.0)
    dim = rng.choice(np.asarray(dims), count)
    alpha = rng.uniform(alpha_min, alpha_max, count)
    return tuple(
        TableSpec(name=f"{prefix}{i}", rows=int(rows[i]), dim=int(dim[i]), dtype=dtype,
                  pooling=PoolingSpec("skewed", float(pooling[i])), access=AccessSpec("zipf", float(alpha[i])))
        for i in range(count))
