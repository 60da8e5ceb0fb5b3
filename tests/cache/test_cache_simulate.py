"""Exact simulators: agreement with libCacheSim, Belady optimality, infinite = distinct, associativity, dirt."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from embedding.cache.reference import libcachesim_run
from embedding.cache.setassoc import set_of
from embedding.cache.simulate import CacheInputError, dense_ids, simulate

pytest.importorskip("libcachesim")

CAPACITIES = (1, 7, 64, 300)


@pytest.mark.parametrize("policy", ["lru", "lfu", "belady"])
def test_misses_equal_libcachesim(trace, policy, tmp_path):
    path = str(tmp_path / "t.bin")
    for cap in CAPACITIES:
        ours = simulate(trace, policy, cap)
        ref = libcachesim_run(trace, policy, cap, path=path)
        assert (ours.misses, ours.requests) == (ref.misses, ref.requests), (policy, cap)


def test_belady_has_fewest_misses(trace):
    """Demand Belady beats every demand-fetch policy; Belady with bypass beats them all, static included."""
    for cap in CAPACITIES:
        demand = simulate(trace, "belady", cap).misses
        bypass = simulate(trace, "belady_bypass", cap).misses
        others = [simulate(trace, p, cap).misses for p in ("lru", "lfu")]
        others += [simulate(trace, p, cap - cap % 4, associativity=4).misses for p in ("lru", "lfu", "belady")
                   if cap >= 4]
        assert all(demand <= m for m in others), (cap, demand, others)
        assert bypass <= demand and bypass <= simulate(trace, "static", cap, warmup_fraction=1.0).misses
        assert bypass >= simulate(trace, "infinite", cap).misses


def test_infinite_equals_distinct_count(trace):
    res = simulate(trace, "infinite", 1)
    assert res.misses == np.unique(trace).size == res.distinct
    assert simulate(trace, "lru", res.distinct).misses == res.distinct  # a cache that holds every key


def _lru_set_assoc_reference(keys, capacity, ways, writes):
    """Plain-Python N-way LRU with write-back counting (the definition, slowly)."""
    ids, uniq = dense_ids(keys)
    sets = set_of(uniq, capacity // ways)
    cache = [OrderedDict() for _ in range(capacity // ways)]
    misses = wb = 0
    for k, w in zip(keys, writes, strict=True):
        s = cache[sets[_index(uniq, k)]]
        if k in s:
            s.move_to_end(k)
        else:
            misses += 1
            if len(s) == ways:
                _, dirty = s.popitem(last=False)
                wb += dirty
            s[k] = False
        s[k] = s[k] or bool(w)
    return misses, wb


def _index(uniq, k):
    return int(np.flatnonzero(uniq == k)[0])


def test_set_associative_lru_matches_python_reference(make_zipf):
    keys = make_zipf(3000, 300, 1.0, 5)
    writes = np.random.default_rng(0).random(keys.size) < 0.3
    for cap, ways in ((32, 4), (64, 8), (60, 1)):
        res = simulate(keys, "lru", cap, associativity=ways, writes=writes)
        assert (res.misses, res.writebacks) == _lru_set_assoc_reference(keys, cap, ways, writes)


@pytest.mark.parametrize("policy", ["lru", "lfu", "belady"])
def test_one_set_equals_fully_associative(trace, policy):
    writes = np.ones(trace.size, np.uint8)
    for cap in (8, 50):
        a = simulate(trace, policy, cap, associativity=cap, writes=writes)
        b = simulate(trace, policy, cap, writes=writes)
        assert (a.misses, a.writebacks, a.dirty_at_end) == (b.misses, b.writebacks, b.dirty_at_end)


@pytest.mark.parametrize("policy", ["lru", "lfu", "belady"])
def test_training_writes_back_every_evicted_row(trace, policy):
    res = simulate(trace, policy, 50, writes=np.ones(trace.size, bool))
    assert res.writebacks > 0 and res.writebacks + res.dirty_at_end == res.misses
    assert simulate(trace, policy, 50).writebacks == 0  # read-only stream


def test_static_hot_set_is_top_k_of_warmup():
    keys = np.array([5, 5, 5, 9, 9, 2, 7, 5, 9, 2, 2, 2], np.int64)
    res = simulate(keys, "static", 2, warmup_fraction=0.5)  # warm-up 5,5,5,9,9,2: hot {5, 9}
    assert res.hits == 5 and res.misses == 7  # 5 and 9 hit after their first (compulsory) miss
    full = simulate(keys, "static", 2, warmup_fraction=1.0)  # counts 5:4, 9:3, 2:4 -> {5, 2}
    assert full.hits == 6


def test_hashed_and_direct_key_maps_agree(trace):
    big = trace * 1_000_003 + (1 << 40)  # far beyond the direct-map range
    for policy in ("lru", "lfu", "belady"):
        assert simulate(big, policy, 33).misses == simulate(trace, policy, 33).misses


@pytest.mark.parametrize("kwargs, match", [
    ({"policy": "lru", "capacity_rows": 0}, "capacity_rows must be a positive"),
    ({"policy": "lru", "capacity_rows": -3}, "capacity_rows must be a positive"),
    ({"policy": "fifo", "capacity_rows": 4}, "unknown cache policy 'fifo'"),
    ({"policy": "lru", "capacity_rows": 10, "associativity": 4}, "associativity 4 does not divide"),
    ({"policy": "static", "capacity_rows": 8, "associativity": 4}, "associativity applies to"),
])
def test_bad_input_is_named(kwargs, match):
    with pytest.raises(CacheInputError, match=match):
        simulate(np.arange(10), **kwargs)


def test_bad_streams_are_named():
    with pytest.raises(CacheInputError, match="1-D integer array"):
        simulate(np.ones(4), "lru", 2)
    with pytest.raises(CacheInputError, match="one flag per key"):
        simulate(np.arange(4), "lru", 2, writes=np.ones(3))
