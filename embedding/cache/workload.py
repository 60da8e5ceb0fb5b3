"""Cache simulation of a workload's batches: one cache per table (keys local) or one shared cache (keys made
global by offsetting each table's rows), with hits, misses and slow-tier bytes per table and overall.

The request order is the order a lookup kernel sees them: batch by batch, table-major inside a batch.
In training every looked-up row is written (its gradient update), so every eviction writes a row back.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from embedding.batch import Batch
from embedding.cache.simulate import CacheInputError, SimResult, simulate
from embedding.spec import TableSpec

__all__ = ["TableCacheStats", "CacheReport", "table_streams", "shared_stream", "table_capacities",
           "simulate_batches"]


@dataclass(frozen=True)
class TableCacheStats:
    """Exact counts for one table (or 'all'). bytes_fetched = misses × row_bytes; bytes_written_back = dirty
    evictions × row_bytes; bytes_flushed = rows still dirty at the end × row_bytes."""

    table: str
    requests: int
    hits: int
    misses: int
    distinct: int
    capacity_rows: int
    associativity: int
    bytes_fetched: float
    bytes_written_back: float
    bytes_flushed: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class CacheReport:
    policy: str
    scope: str
    tables: tuple[TableCacheStats, ...]
    overall: TableCacheStats


def table_streams(batches: Sequence[Batch], num_tables: int) -> list[np.ndarray]:
    """Per table, its keys over all batches in order."""
    for b in batches:
        if b.num_tables != num_tables:
            raise CacheInputError(f"a batch has {b.num_tables} tables, the table set has {num_tables}")
    return [np.concatenate([b.table_indices(t) for b in batches]).astype(np.int64, copy=False)
            if batches else np.zeros(0, np.int64) for t in range(num_tables)]


def shared_stream(batches: Sequence[Batch], tables: Sequence[TableSpec]) -> tuple[np.ndarray, np.ndarray]:
    """The global key stream (key = row + first global row of its table) and each request's table."""
    base = np.concatenate([[0], np.cumsum([t.rows for t in tables])]).astype(np.int64)
    keys, owner = [], []
    for b in batches:
        if b.num_tables != len(tables):
            raise CacheInputError(f"a batch has {b.num_tables} tables, the table set has {len(tables)}")
        per_table = b.lengths.sum(axis=1)
        tab = np.repeat(np.arange(len(tables), dtype=np.int64), per_table)
        rows = np.array([t.rows for t in tables], dtype=np.int64)[tab]
        if b.indices.size and (b.indices.min() < 0 or np.any(b.indices >= rows)):
            raise CacheInputError("a batch looks up a row outside its table's [0, rows)")
        keys.append(b.indices.astype(np.int64) + base[tab])
        owner.append(tab)
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(keys), np.concatenate(owner)


def table_capacities(tables: Sequence[TableSpec], scope: str, capacity_rows: int = 0, capacity_bytes: int = 0,
                     capacity_fraction: float = 0.0) -> list[int]:
    """Cache rows per table (per_table: capped at the table's rows) or one total (shared; bytes / widest row)."""
    given = [v for v in (capacity_rows, capacity_bytes, capacity_fraction) if v > 0]
    if len(given) != 1:
        raise CacheInputError("give exactly one capacity > 0: capacity_rows, capacity_bytes or capacity_fraction")
    if capacity_fraction > 1:
        raise CacheInputError(f"capacity_fraction must be in (0, 1], got {capacity_fraction}")
    if scope == "shared":
        total_rows = sum(t.rows for t in tables)
        if capacity_rows:
            cap = capacity_rows
        elif capacity_bytes:
            cap = int(capacity_bytes // max(t.row_bytes for t in tables))
        else:
            cap = int(capacity_fraction * total_rows)
        if cap <= 0:
            raise CacheInputError(f"the shared cache capacity holds no row ({capacity_bytes=}, {capacity_fraction=})")
        return [min(cap, total_rows)]
    if scope != "per_table":
        raise CacheInputError(f"cache scope {scope!r} is not one of ('per_table', 'shared')")
    caps = []
    for t in tables:
        if capacity_rows:
            cap = capacity_rows
        elif capacity_bytes:
            cap = int(capacity_bytes // t.row_bytes)
        else:
            cap = int(capacity_fraction * t.rows)
        if cap <= 0:
            raise CacheInputError(f"table {t.name!r}: the cache capacity holds no row of {t.row_bytes} bytes "
                                  f"({capacity_bytes=}, {capacity_fraction=})")
        caps.append(min(cap, t.rows))
    return caps


def _ways(cap: int, associativity: int) -> tuple[int, int]:
    """Capacity rounded down to whole sets, and the ways; a cache smaller than one set is one full set."""
    if associativity <= 0:
        return cap, 0
    if cap <= associativity:
        return cap, cap
    return cap - cap % associativity, associativity


def _stats(name: str, res: SimResult, row_bytes: float) -> TableCacheStats:
    return TableCacheStats(name, res.requests, res.hits, res.misses, res.distinct, res.capacity_rows,
                           res.associativity, res.misses * row_bytes, res.writebacks * row_bytes,
                           res.dirty_at_end * row_bytes)


def simulate_batches(batches: Sequence[Batch], tables: Sequence[TableSpec], policy: str, *, scope: str = "per_table",
                     capacity_rows: int = 0, capacity_bytes: int = 0, capacity_fraction: float = 0.0,
                     associativity: int = 0, train: bool = False, warmup_fraction: float = 0.1) -> CacheReport:
    """Simulate `policy` over the batches' lookups; exact counts per table and overall."""
    caps = table_capacities(tables, scope, capacity_rows, capacity_bytes, capacity_fraction)
    if scope == "per_table":
        per = []
        for t, keys, cap in zip(tables, table_streams(batches, len(tables)), caps, strict=False):
            if keys.size and (keys.min() < 0 or keys.max() >= t.rows):
                raise CacheInputError(f"table {t.name!r}: indices outside [0, {t.rows})")
            c, w = _ways(cap, associativity)
            res = simulate(keys, policy, c, w, np.ones(keys.size, np.uint8) if train else None, warmup_fraction)
            per.append(_stats(t.name, res, t.row_bytes))
        overall = TableCacheStats("all", *(sum(getattr(s, f) for s in per) for f in (
            "requests", "hits", "misses", "distinct", "capacity_rows")), associativity,
            *(sum(getattr(s, f) for s in per) for f in ("bytes_fetched", "bytes_written_back", "bytes_flushed")))
        return CacheReport(policy, scope, tuple(per), overall)
    keys, owner = shared_stream(batches, tables)
    c, w = _ways(caps[0], associativity)
    res = simulate(keys, policy, c, w, np.ones(keys.size, np.uint8) if train else None, warmup_fraction)
    base = np.concatenate([[0], np.cumsum([t.rows for t in tables])]).astype(np.int64)
    id_table = np.searchsorted(base, res.keys, side="right") - 1  # table of each distinct key
    nt = len(tables)
    req = np.bincount(owner, minlength=nt)
    hits = np.bincount(owner, weights=res.hit_flags, minlength=nt).astype(np.int64)
    distinct = np.bincount(id_table, minlength=nt)
    wb = np.bincount(id_table, weights=res.writebacks_per_id, minlength=nt).astype(np.int64)
    dirty = np.bincount(id_table, weights=res.dirty_end_per_id, minlength=nt).astype(np.int64)
    per = tuple(TableCacheStats(t.name, int(req[i]), int(hits[i]), int(req[i] - hits[i]), int(distinct[i]), c, w,
                                (req[i] - hits[i]) * t.row_bytes, wb[i] * t.row_bytes, dirty[i] * t.row_bytes)
                for i, t in enumerate(tables))
    overall = TableCacheStats("all", res.requests, res.hits, res.misses, res.distinct, c, w,
                              sum(s.bytes_fetched for s in per), sum(s.bytes_written_back for s in per),
                              sum(s.bytes_flushed for s in per))
    return CacheReport(policy, scope, per, overall)
