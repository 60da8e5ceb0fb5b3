"""`run_cache(cfg, spec, batches)`: the cache experiment behind `dlrmbench run cache=...`, as metric dicts.

simulate: exact hits/misses per table (key "table") and overall, slow-tier bytes, and beside the policy the
Belady (optimal) and infinite-cache (compulsory) misses at the same capacity.
execute: runs `TieredEmbeddingBag` over the batches (training: forward, backward, update, final flush) and
reports measured lookups/s, hits, misses and slow-tier bytes next to the simulated hit rate of the same policy.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from embedding.batch import Batch
from embedding.cache.config import CacheConfig
from embedding.cache.simulate import CacheInputError
from embedding.cache.tiered import TieredEmbeddingBag
from embedding.cache.workload import CacheReport, TableCacheStats, shared_stream, simulate_batches
from embedding.spec import TableSpec, WorkloadSpec

__all__ = ["run_cache", "simulate_report", "report_metrics"]


def _m(name: str, value: float, unit: str, method: str, table: str | None = None) -> dict:
    d = {"name": name, "value": float(value), "unit": unit, "method": method}
    if table is not None:
        d["table"] = table
    return d


def simulate_report(cfg: CacheConfig, tables: Sequence[TableSpec], batches: Sequence[Batch], train: bool,
                    policy: str | None = None) -> CacheReport:
    return simulate_batches(batches, tables, policy or cfg.policy, scope=cfg.scope, capacity_rows=cfg.capacity_rows,
                            capacity_bytes=cfg.capacity_bytes, capacity_fraction=cfg.capacity_fraction,
                            associativity=cfg.associativity if (policy or cfg.policy) != "infinite" else 0,
                            train=train, warmup_fraction=cfg.warmup_fraction)


def report_metrics(rep: CacheReport, prefix: str = "") -> list[dict]:
    """Metric dicts of one simulation: overall (no "table" key) then per table."""
    how = (f"exact simulation of {rep.policy} ({rep.scope} cache) over every lookup of the batches, "
           "in kernel order (batch by batch, table-major)")
    out = []
    for s, table in [(rep.overall, None)] + [(s, s.table) for s in rep.tables]:
        out += _stats_metrics(s, table, how, prefix)
    return out


def _stats_metrics(s: TableCacheStats, table: str | None, how: str, prefix: str) -> list[dict]:
    return [
        _m(prefix + "hits", s.hits, "count", how, table),
        _m(prefix + "misses", s.misses, "count", how, table),
        _m(prefix + "hit_rate", s.hit_rate, "ratio", how + "; hits / lookups", table),
        _m(prefix + "lookups", s.requests, "count", "lookups in the batches", table),
        _m(prefix + "capacity_rows", s.capacity_rows, "rows", "cache rows after conversion from the config "
           "(per table: capped at the table's rows; associative: rounded down to whole sets)", table),
        _m(prefix + "slow_tier_bytes_read", s.bytes_fetched, "bytes", "misses × row_bytes (dim × dtype bytes)",
           table),
        _m(prefix + "slow_tier_bytes_written_back", s.bytes_written_back, "bytes",
           "dirty evictions × row_bytes (training writes every looked-up row)", table),
        _m(prefix + "slow_tier_bytes_flushed", s.bytes_flushed, "bytes",
           "rows dirty at the end × row_bytes (written by the final flush)", table),
    ]


def run_cache(cfg: CacheConfig, spec: WorkloadSpec, batches: Sequence[Batch], device: str = "cpu") -> list[dict]:
    """Run the configured cache experiment on the workload's batches; [] when cfg.policy is 'off'.
    `device` (the placement's) holds the fast tier in execute mode: cuda with slow_tier=host is HBM over pinned
    host memory."""
    if cfg.policy == "off":
        return []
    if not batches:
        raise CacheInputError("run_cache needs at least one batch")
    train = spec.mode == "train"
    if cfg.mode == "simulate":
        t0 = time.perf_counter()
        rep = simulate_report(cfg, spec.tables, batches, train)
        elapsed = time.perf_counter() - t0
        out = report_metrics(rep)
        out.append(_m("simulation_throughput", rep.overall.requests / elapsed, "requests/s",
                      "lookups simulated / wall time of one simulate_batches call (incl. stream assembly)"))
        if cfg.include_references and cfg.policy not in ("belady", "infinite"):
            for ref in ("belady", "infinite"):
                r = simulate_report(cfg, spec.tables, batches, train, policy=ref)
                name = "belady_misses" if ref == "belady" else "compulsory_misses"
                how = f"exact {ref} simulation at the same capacity ({'optimal' if ref == 'belady' else 'distinct rows'})"
                out.append(_m(name, r.overall.misses, "count", how))
                out += [_m(name, s.misses, "count", how, s.table) for s in r.tables]
        return out
    return _execute(cfg, spec, batches, train, torch.device(device))


def _execute(cfg: CacheConfig, spec: WorkloadSpec, batches: Sequence[Batch], train: bool,
             device: torch.device) -> list[dict]:
    """Cached execution: one TieredEmbeddingBag per table (or one over all tables if shared)."""
    tables = spec.tables
    sim = simulate_report(cfg, tables, batches, train)
    caps = [s.capacity_rows for s in sim.tables]
    rng = np.random.default_rng(spec.seed)
    if cfg.scope == "shared":
        if len({t.dim for t in tables}) != 1:
            raise CacheInputError("shared cached execution needs one dim for all tables")
        weights = rng.standard_normal((sum(t.rows for t in tables), tables[0].dim), dtype=np.float32)
        mods = [TieredEmbeddingBag(weights, caps[0], cfg.policy, slow=cfg.slow_tier, device=device)]
        keys = [shared_stream([b], tables)[0] for b in batches]
        offs = [np.concatenate([[0], np.cumsum(b.lengths.ravel())]) for b in batches]
        inputs = [[(torch.from_numpy(k), torch.from_numpy(o))] for k, o in zip(keys, offs, strict=True)]
    else:
        mods = [TieredEmbeddingBag(rng.standard_normal((t.rows, t.dim), dtype=np.float32), c, cfg.policy,
                                   slow=cfg.slow_tier, device=device)
                for t, c in zip(tables, caps, strict=True)]
        inputs = [[(torch.from_numpy(b.table_indices(t).astype(np.int64)),
                    torch.from_numpy(np.concatenate([[0], np.cumsum(b.lengths[t])])))
                   for t in range(len(tables))] for b in batches]
    try:
        _warm_up(cfg, tables[0].dim, train, device)
        t0 = time.perf_counter()
        for per_batch in inputs:
            for mod, (idx, off) in zip(mods, per_batch, strict=True):
                out = mod(idx, off)
                if train:
                    out.sum().backward()
                    mod.apply_gradients()
        for mod in mods:
            mod.flush()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - t0
        lookups = sum(m.lookups for m in mods)
        hits = sum(m.hits for m in mods)
        how = (f"measured: TieredEmbeddingBag ({cfg.policy}, fast tier on {device.type}, slow tier {cfg.slow_tier}) "
               f"over {len(batches)} batches, "
               f"{'forward+backward+update' if train else 'forward'}, one pass incl. final flush")
        res = [
            _m("lookup_throughput", lookups / elapsed, "lookups/s", how + "; lookups / wall time"),
            _m("hits", hits, "count", how + "; miss = first lookup in a batch of a row not cached at its start"),
            _m("misses", lookups - hits, "count", how),
            _m("hit_rate", hits / lookups, "ratio", how),
            _m("simulated_hit_rate", sim.overall.hit_rate, "ratio",
               "exact per-lookup simulation of the same policy and capacity (the execution admits per batch)"),
            _m("slow_tier_bytes_read", sum(m.slow.bytes_read for m in mods), "bytes", how + "; rows fetched × row bytes"),
            _m("slow_tier_bytes_written_back", sum(m.slow.bytes_written for m in mods), "bytes",
               how + "; dirty rows written (evictions and flush) × row bytes"),
        ]
        if cfg.scope == "per_table":
            for t, m, s in zip(tables, mods, sim.tables, strict=True):
                res += [_m("hits", m.hits, "count", how, t.name), _m("misses", m.misses, "count", how, t.name),
                        _m("simulated_hit_rate", s.hit_rate, "ratio", "exact per-lookup simulation", t.name)]
        return res
    finally:
        for mod in mods:
            mod.close()


def _warm_up(cfg: CacheConfig, dim: int, train: bool, device: torch.device) -> None:
    """Compile (or load) the admission kernels and touch the device's code paths on a throwaway 4-row table, so
    that the timed pass measures the cache, not numba's first-call compilation (seconds on a fresh machine)."""
    mod = TieredEmbeddingBag(np.zeros((4, dim), np.float32), 2, cfg.policy, slow=cfg.slow_tier, device=device)
    try:
        for rows in ([0, 1], [2, 3], [0, 2]):
            out = mod(torch.tensor(rows), torch.tensor([0, 1, 2]))
            if train:
                out.sum().backward()
                mod.apply_gradients()
        mod.flush()
    finally:
        mod.close()
