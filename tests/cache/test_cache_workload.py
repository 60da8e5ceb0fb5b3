"""Per-table and shared simulation of a workload's batches, run_cache metrics, CacheConfig validation."""
from __future__ import annotations

import numpy as np
import pytest

from embedding.cache.config import CacheConfig, CacheConfigError
from embedding.cache.run import run_cache
from embedding.cache.simulate import CacheInputError, simulate
from embedding.cache.workload import shared_stream, simulate_batches, table_streams
from embedding.generate import generate_batches
from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec


@pytest.fixture(scope="module")
def spec() -> WorkloadSpec:
    tables = (TableSpec("a", 3000, 16, access=AccessSpec("zipf", 1.1), pooling=PoolingSpec("fixed", 4)),
              TableSpec("b", 800, 32, access=AccessSpec("zipf", 0.9), pooling=PoolingSpec("uniform", low=1, high=6)),
              TableSpec("c", 5000, 16, access=AccessSpec("uniform"), pooling=PoolingSpec("fixed", 2)))
    return WorkloadSpec("cache-test", tables, batch_size=128, num_batches=4, mode="train")


@pytest.fixture(scope="module")
def batches(spec):
    return generate_batches(spec)


def test_per_table_equals_simulating_each_table_stream(spec, batches):
    rep = simulate_batches(batches, spec.tables, "lru", capacity_rows=200, train=True)
    for t, keys, s in zip(spec.tables, table_streams(batches, spec.num_tables), rep.tables, strict=True):
        ref = simulate(keys, "lru", min(200, t.rows), writes=np.ones(keys.size, bool))
        assert (s.hits, s.misses) == (ref.hits, ref.misses)
        assert s.bytes_fetched == ref.misses * t.row_bytes
        assert s.bytes_written_back == ref.writebacks * t.row_bytes
    assert rep.overall.hits == sum(s.hits for s in rep.tables)
    assert rep.overall.misses == sum(s.misses for s in rep.tables)


def test_shared_cache_splits_exact_counts_per_table(spec, batches):
    rep = simulate_batches(batches, spec.tables, "lfu", scope="shared", capacity_rows=512, associativity=32,
                           train=True)
    keys, owner = shared_stream(batches, spec.tables)
    ref = simulate(keys, "lfu", 512, associativity=32, writes=np.ones(keys.size, bool))
    assert (rep.overall.hits, rep.overall.misses, rep.overall.distinct) == (ref.hits, ref.misses, ref.distinct)
    assert sum(s.hits for s in rep.tables) == ref.hits
    assert sum(s.bytes_written_back for s in rep.tables) == sum(
        wb * spec.tables[int(np.searchsorted(np.cumsum([t.rows for t in spec.tables]), k, "right"))].row_bytes
        for k, wb in zip(ref.keys, ref.writebacks_per_id, strict=True))
    whole = simulate_batches(batches, spec.tables, "lru", scope="shared", capacity_fraction=1.0)
    assert whole.overall.misses == whole.overall.distinct  # a cache as large as all tables: compulsory only


def test_run_cache_reports_hits_and_misses_overall_and_per_table(spec, batches):
    metrics = run_cache(CacheConfig("lru", capacity_fraction=0.05), spec, batches)
    by = {(m["name"], m.get("table")): m for m in metrics}
    for key in [("hits", None), ("misses", None)] + [(n, t.name) for t in spec.tables for n in ("hits", "misses")]:
        assert by[key]["unit"] == "count" and by[key]["value"] == int(by[key]["value"])
    assert by[("hits", None)]["value"] + by[("misses", None)]["value"] == by[("lookups", None)]["value"]
    assert by[("belady_misses", None)]["value"] <= by[("misses", None)]["value"]
    assert by[("compulsory_misses", None)]["value"] <= by[("belady_misses", None)]["value"]
    assert all({"name", "value", "unit", "method"} <= set(m) for m in metrics)
    assert run_cache(CacheConfig("off"), spec, batches) == []


def test_run_cache_execute_matches_compulsory_when_everything_fits(spec, batches):
    metrics = run_cache(CacheConfig("lru", capacity_fraction=1.0, mode="execute"), spec, batches)
    by = {(m["name"], m.get("table")): m["value"] for m in metrics}
    assert by[("hit_rate", None)] == by[("simulated_hit_rate", None)]
    assert by[("lookup_throughput", None)] > 0
    assert by[("slow_tier_bytes_written_back", None)] == by[("slow_tier_bytes_read", None)]  # training


@pytest.mark.parametrize("kwargs, match", [
    ({"policy": "lru"}, "needs exactly one capacity > 0"),
    ({"policy": "lru", "capacity_rows": -1}, "capacity must be > 0"),
    ({"policy": "arc", "capacity_rows": 8}, "cache.policy 'arc' is not one of"),
    ({"policy": "lru", "capacity_rows": 100, "associativity": 32}, "associativity 32 does not divide"),
    ({"policy": "lru", "capacity_rows": 8, "capacity_bytes": 64}, "exactly one capacity"),
    ({"policy": "lru", "capacity_rows": 8, "scope": "global"}, "cache.scope 'global'"),
    ({"policy": "belady", "capacity_rows": 8, "mode": "execute"}, "execute runs lru or lfu"),
    ({"policy": "lru", "capacity_fraction": 1.5}, "capacity_fraction must be in"),
])
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(CacheConfigError, match=match):
        CacheConfig(**kwargs)


def test_capacity_that_holds_no_row_is_named(spec, batches):
    with pytest.raises(CacheInputError, match="holds no row"):
        simulate_batches(batches, spec.tables, "lru", capacity_bytes=8)
