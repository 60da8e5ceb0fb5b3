"""Exact cache simulation of one key stream: `simulate(keys, policy, capacity_rows, ...) -> SimResult`.

Policies: lru, lfu (ties: least recently used among equal counts; counts restart when a row re-enters, the same
rule as libCacheSim's LFU), static (top-k keys by frequency in a warm-up prefix, pinned; ties by first appearance;
every request of the stream is counted, the prefix standing for the profiling run; like every policy here it
starts empty, so a pinned row's first request is a (compulsory) miss), belady (MIN with demand
fetch: the requested row always enters, as libCacheSim's Belady; optimal among demand-fetch policies),
belady_bypass (MIN that may leave a missed row uncached: optimal over every policy, static included), infinite (misses = distinct keys).
`associativity` > 0 gives N-way set-associative lru/lfu/belady.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from embedding.cache import kernels
from embedding.cache.setassoc import POLICY_CODES, set_associative, set_of

__all__ = ["SimResult", "simulate", "dense_ids", "SIM_POLICIES", "CacheInputError"]

SIM_POLICIES = ("lru", "lfu", "static", "belady", "belady_bypass", "infinite")
_EMPTY_U8 = np.zeros(0, np.uint8)


class CacheInputError(ValueError):
    """A simulation input that cannot be simulated; the message names what is wrong."""


@dataclass
class SimResult:
    """Exact counts of one simulation. `writebacks`: dirty rows evicted (each costs one row write to the slow
    tier); `dirty_at_end`: dirty rows still cached when the stream ends (written by a final flush)."""

    policy: str
    capacity_rows: int
    associativity: int
    requests: int
    hits: int
    misses: int
    distinct: int
    writebacks: int
    dirty_at_end: int
    hit_flags: np.ndarray = field(repr=False)  # (requests,) uint8
    keys: np.ndarray = field(repr=False)  # (distinct,) int64, dense id -> key
    ids: np.ndarray = field(repr=False)  # (requests,) int64 dense ids
    writebacks_per_id: np.ndarray = field(repr=False)  # (distinct,) int64
    dirty_end_per_id: np.ndarray = field(repr=False)  # (distinct,) bool

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def miss_rate(self) -> float:
        return self.misses / self.requests if self.requests else 0.0


def _check(keys: np.ndarray, policy: str, capacity_rows: int, associativity: int,
           writes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    if policy not in SIM_POLICIES:
        raise CacheInputError(f"unknown cache policy {policy!r}; expected one of {SIM_POLICIES}")
    if not isinstance(capacity_rows, (int, np.integer)) or capacity_rows <= 0:
        raise CacheInputError(f"capacity_rows must be a positive integer, got {capacity_rows!r}")
    if associativity < 0:
        raise CacheInputError(f"associativity must be ≥ 0 (0 = fully associative), got {associativity}")
    if associativity > 0:
        if policy not in POLICY_CODES:  # lru, lfu, belady
            raise CacheInputError(f"associativity applies to {tuple(POLICY_CODES)}, not {policy!r}")
        if capacity_rows % associativity:
            raise CacheInputError(f"associativity {associativity} does not divide capacity_rows {capacity_rows}")
    keys = np.asarray(keys)
    if keys.ndim != 1 or not np.issubdtype(keys.dtype, np.integer):
        raise CacheInputError(f"keys must be a 1-D integer array, got shape {keys.shape} dtype {keys.dtype}")
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    if writes is None:
        w = _EMPTY_U8
    else:
        w = np.ascontiguousarray(writes, dtype=np.uint8)
        if w.shape != keys.shape:
            raise CacheInputError(f"writes must have one flag per key: {w.shape} vs {keys.shape}")
    return keys, w


def simulate(keys: np.ndarray, policy: str, capacity_rows: int, associativity: int = 0,
             writes: np.ndarray | None = None, warmup_fraction: float = 0.1) -> SimResult:
    """Simulate `policy` with `capacity_rows` rows over `keys` (requests in order); `writes[i]` marks request i
    as updating its row (training: all True)."""
    keys, w = _check(keys, policy, capacity_rows, associativity, writes)
    n = keys.size
    ids, uniq = dense_ids(keys)
    u = uniq.size
    cap = int(capacity_rows)
    if policy == "infinite" or (policy != "static" and associativity == 0 and cap >= u):
        hit, wb, dirty = _infinite(ids, u, w)
    elif policy == "static":
        if not 0 < warmup_fraction <= 1:
            raise CacheInputError(f"warmup_fraction must be in (0, 1], got {warmup_fraction}")
        hit, wb, dirty = _static(ids, u, cap, w, warmup_fraction)
    elif associativity > 0:
        num_sets = cap // associativity
        nxt = kernels.next_use(ids, u) if policy == "belady" else np.zeros(0, np.int64)
        hit, wb, dirty = set_associative(ids, u, set_of(uniq, num_sets), num_sets, associativity,
                                         POLICY_CODES[policy], w, nxt)
    elif policy == "lru":
        hit, wb, dirty = kernels.lru(ids, u, cap, w)
    elif policy == "lfu":
        max_freq = int(np.bincount(ids).max()) if n else 0
        hit, wb, dirty = kernels.lfu(ids, u, cap, w, max_freq)
    else:
        hit, wb, dirty = kernels.belady(ids, u, cap, w, kernels.next_use(ids, u), policy == "belady_bypass")
    hits = int(hit.sum(dtype=np.int64))
    return SimResult(policy=policy, capacity_rows=cap, associativity=associativity, requests=n, hits=hits,
                     misses=n - hits, distinct=u, writebacks=int(wb.sum()), dirty_at_end=int(dirty.sum()),
                     hit_flags=hit, keys=uniq, ids=ids, writebacks_per_id=wb, dirty_end_per_id=dirty)


def dense_ids(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids in first-seen order (hot keys get small ids, which keeps the simulators' arrays cache-friendly):
    a direct map when the keys are non-negative and their range is at most a few times the stream, else hashing."""
    if keys.size and keys.min() >= 0 and keys.max() < 4 * keys.size + (1 << 22):
        return kernels.densify_direct(keys, int(keys.max()) + 1)
    return kernels.densify(keys)


def _infinite(ids: np.ndarray, u: int, w: np.ndarray):
    """Everything fits: only first requests miss, nothing is evicted."""
    first = np.zeros(ids.size, np.uint8)
    if ids.size:
        _, pos = np.unique(ids, return_index=True)
        first[pos] = 1
    dirty = np.zeros(u, np.bool_)
    if w.size:
        dirty[ids[w.astype(bool)]] = True
    return (1 - first).astype(np.uint8), np.zeros(u, np.int64), dirty


def _static(ids: np.ndarray, u: int, cap: int, w: np.ndarray, warmup_fraction: float):
    """Pin the `cap` most frequent ids of the warm-up prefix (ties: first seen); misses read the slow tier
    directly and are not cached, so nothing is evicted; written hot rows stay dirty until the final flush."""
    prefix = ids[:max(1, int(round(warmup_fraction * ids.size)))]
    counts = np.bincount(prefix, minlength=u)
    order = np.argsort(-counts, kind="stable")[:cap]
    hot = np.zeros(u, np.bool_)
    hot[order[counts[order] > 0]] = True
    hit = _infinite(ids, u, _EMPTY_U8)[0] & hot[ids].astype(np.uint8)  # pinned, and not the first request
    dirty = np.zeros(u, np.bool_)
    if w.size:
        dirty[ids[w.astype(bool)]] = True
        dirty &= hot
    return hit, np.zeros(u, np.int64), dirty
