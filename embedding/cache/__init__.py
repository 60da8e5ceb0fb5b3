"""Embedding caches: exact simulators, miss-ratio curves, a real two-tier cached embedding.

Torch-free names are re-exported here; the two-tier module and `run_cache` live in `embedding.cache.tiered` and
`embedding.cache.run` (they import torch).
"""
from embedding.cache.config import CacheConfig, CacheConfigError
from embedding.cache.mrc import MissRatioCurve, lru_mrc, miss_rate_at, plot_mrc, slow_tier_bytes_at
from embedding.cache.simulate import SIM_POLICIES, CacheInputError, SimResult, simulate
from embedding.cache.workload import CacheReport, TableCacheStats, simulate_batches

__all__ = ["CacheConfig", "CacheConfigError", "MissRatioCurve", "lru_mrc", "miss_rate_at", "plot_mrc",
           "slow_tier_bytes_at", "SIM_POLICIES", "CacheInputError", "SimResult", "simulate", "CacheReport",
           "TableCacheStats", "simulate_batches"]
