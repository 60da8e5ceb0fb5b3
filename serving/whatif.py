"""What-if inputs for the serving model: how much faster (or slower) the embedding stage of a batch would be.

Cache what-if: the tables live on a slow tier (a file read with O_DIRECT: a real disk read, or mmap) behind an
LRU cache holding `fraction` of each table's rows in DRAM. The hit rate is *simulated* (embedding/cache's exact
LRU simulator over the lookups of queries drawn as LoadGen draws them); the slow tier's time per row is *measured*
(reads of random distinct rows of a table copy, median of repeats); hits cost what the embedding stage measures
today (every row in DRAM). So a batch's embedding time becomes t_emb + misses × t_slow_row, i.e. a speedup
s = t_emb / (t_emb + (1 − h) · lookups · t_slow_row) ≤ 1 applied to the embedding share of the service time.
Emulated: only the misses' slow-tier time (simulated count × measured per-row time); the rest is measured.
"""
from __future__ import annotations

import time

import numpy as np

from embedding.backends import init_weights
from embedding.cache import simulate_batches
from embedding.cache.slow_tier import SlowTier
from embedding.spec import WorkloadSpec

from .queries import QuerySet, SamplePool

__all__ = ["cache_hit_rate", "slow_row_seconds", "cache_speedup"]


def cache_hit_rate(spec: WorkloadSpec, pool: SamplePool, queries: QuerySet, fraction: float, n_queries: int = 2000,
                   seed: int = 0) -> float:
    """Overall LRU hit rate of per-table caches of `fraction` of each table's rows over `n_queries` queries drawn
    uniformly from the query set (LoadGen's sample-index draw), in arrival order."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, queries.sizes.size, size=n_queries)
    batches = [pool.gather([(int(queries.starts[q]), int(queries.sizes[q]))]) for q in picks]
    rep = simulate_batches(batches, spec.tables, "lru", capacity_fraction=fraction)
    return rep.overall.hit_rate


def slow_row_seconds(spec: WorkloadSpec, kind: str = "direct", rows: int = 2048, repeats: int = 5,
                     seed: int = 0) -> float:
    """Measured seconds per row read from a slow tier holding a copy of the workload's first table (random
    distinct rows; median over `repeats` reads)."""
    weights = init_weights(spec)[0].numpy()
    tier = SlowTier(weights, kind=kind)
    rng = np.random.default_rng(seed)
    try:
        times = []
        for _ in range(repeats):
            want = np.sort(rng.choice(weights.shape[0], size=min(rows, weights.shape[0]), replace=False))
            t0 = time.perf_counter()
            tier.read(want)
            times.append((time.perf_counter() - t0) / want.size)
    finally:
        tier.close()
    return float(np.median(times))


def cache_speedup(t_emb: float, lookups: float, hit_rate: float, slow_row_s: float) -> float:
    """Embedding-stage speedup (≤ 1) when the misses of `lookups` row lookups are fetched from the slow tier."""
    return t_emb / (t_emb + (1 - hit_rate) * lookups * slow_row_s)
