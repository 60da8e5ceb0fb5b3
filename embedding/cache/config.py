"""`CacheConfig`: which cache policy, how big, how organised, simulated or really executed.

Validated on construction so that a config that exists is one that can run; the root Hydra schema holds it as
field `cache`.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CacheConfig", "CacheConfigError", "POLICIES", "SCOPES", "MODES"]

POLICIES = ("off", "lru", "lfu", "static", "belady", "belady_bypass", "infinite")
SCOPES = ("per_table", "shared")
MODES = ("simulate", "execute")


class CacheConfigError(ValueError):
    """A cache configuration that cannot run; the message names the offending field."""


@dataclass
class CacheConfig:
    policy: str = "off"
    """One of off, lru, lfu (least-frequently used, ties broken least-recently used), static (top-k rows by
    frequency over a warm-up prefix, pinned), belady (MIN, future knowledge, demand fetch), belady_bypass (MIN that
    may leave a miss uncached: optimal over all policies), infinite (compulsory misses only)."""
    capacity_rows: int = 0
    """Cache size in rows: per table for scope per_table (capped at the table's rows, reported), total for shared."""
    capacity_bytes: int = 0
    """Cache size in bytes, converted to rows by the row size (per_table) or the widest row (shared, as FBGEMM
    sizes every slot for the widest table)."""
    capacity_fraction: float = 0.0
    """Cache size as a fraction of each table's rows (FBGEMM's cache_load_factor); summed over tables if shared."""
    associativity: int = 0
    """Ways per set; 0 means fully associative. Set = hash(key) mod (rows / ways); ways must divide the rows."""
    scope: str = "per_table"
    """per_table: one cache per table, keys local; shared: one cache over all tables, keys offset per table."""
    mode: str = "simulate"
    """simulate: exact hit/miss counts over the lookup stream; execute: run the two-tier embedding and time it."""
    warmup_fraction: float = 0.1
    """static only: the prefix of the stream whose row frequencies choose the pinned hot set."""
    slow_tier: str = "mmap"
    """execute only: where the full table lives: mmap (a memory-mapped file; served from the page cache once warm),
    direct (the same file read with O_DIRECT: a real disk tier), host (a host tensor, pinned when CUDA is present)."""
    include_references: bool = True
    """Also report Belady (optimal) and infinite-cache (compulsory) misses at the same capacity."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise CacheConfigError(f"cache.policy {self.policy!r} is not one of {POLICIES}")
        if self.scope not in SCOPES:
            raise CacheConfigError(f"cache.scope {self.scope!r} is not one of {SCOPES}")
        if self.slow_tier not in ("host", "mmap", "direct"):
            raise CacheConfigError(f"cache.slow_tier {self.slow_tier!r} is not one of ('host', 'mmap', 'direct')")
        if self.mode not in MODES:
            raise CacheConfigError(f"cache.mode {self.mode!r} is not one of {MODES}")
        if self.capacity_rows < 0 or self.capacity_bytes < 0 or self.capacity_fraction < 0:
            raise CacheConfigError("cache capacity must be > 0 (capacity_rows, capacity_bytes or capacity_fraction)")
        given = [n for n in ("capacity_rows", "capacity_bytes", "capacity_fraction") if getattr(self, n) > 0]
        if self.policy not in ("off", "infinite"):
            if len(given) != 1:
                raise CacheConfigError(
                    f"cache.policy {self.policy!r} needs exactly one capacity > 0 of capacity_rows, capacity_bytes,"
                    f" capacity_fraction; got {given or 'none (capacity ≤ 0)'}")
        if self.capacity_fraction > 1:
            raise CacheConfigError(f"cache.capacity_fraction must be in (0, 1], got {self.capacity_fraction}")
        if self.associativity < 0:
            raise CacheConfigError(f"cache.associativity must be ≥ 0 (0 = fully associative), got {self.associativity}")
        if self.associativity > 0 and self.policy in ("static", "infinite"):
            raise CacheConfigError(f"cache.associativity applies to lru, lfu, belady, not {self.policy!r}")
        if self.associativity > 0 and self.capacity_rows > 0 and self.capacity_rows % self.associativity:
            raise CacheConfigError(f"cache.associativity {self.associativity} does not divide capacity_rows "
                                   f"{self.capacity_rows}")
        if not 0 < self.warmup_fraction <= 1:
            raise CacheConfigError(f"cache.warmup_fraction must be in (0, 1], got {self.warmup_fraction}")
        if self.mode == "execute" and self.policy not in ("lru", "lfu"):
            raise CacheConfigError(f"cache.mode execute runs lru or lfu, not {self.policy!r}")
        if self.mode == "execute" and self.associativity > 0:
            raise CacheConfigError("cache.mode execute is fully associative; set cache.associativity=0")
