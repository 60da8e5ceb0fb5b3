"""One-pass LRU miss-ratio curves equal per-size simulation; planner hook; PNG output."""
from __future__ import annotations

import numpy as np
import pytest

from embedding.cache.mrc import lru_mrc, miss_rate_at, plot_mrc, slow_tier_bytes_at, stack_distances
from embedding.cache.simulate import CacheInputError, dense_ids, simulate


def test_mrc_equals_lru_simulation_at_every_capacity(trace):
    mrc = lru_mrc(trace)
    assert mrc.distinct == np.unique(trace).size
    for cap in range(1, mrc.distinct + 2):
        assert mrc.misses_at(cap) == simulate(trace, "lru", cap).misses, cap


def test_stack_distances_of_a_small_stream():
    ids, uniq = dense_ids(np.array([1, 2, 1, 3, 2, 2, 1]))
    assert stack_distances(ids, uniq.size).tolist() == [0, 0, 2, 0, 3, 1, 3]


def test_miss_rate_at_fraction_of_table_rows(make_zipf):
    keys = make_zipf(4000, 500, 1.1, 4)
    mrc = lru_mrc(keys, table_rows=1000)
    assert miss_rate_at(mrc, 0.1) == simulate(keys, "lru", 100).misses / keys.size
    assert miss_rate_at(mrc, 0.0) == 1.0
    assert miss_rate_at(mrc, 1.0) == mrc.distinct / keys.size
    assert slow_tier_bytes_at(mrc, 0.1, 256) == simulate(keys, "lru", 100).misses * 256
    with pytest.raises(CacheInputError, match="cache fraction must be in"):
        miss_rate_at(mrc, 1.5)
    with pytest.raises(CacheInputError, match="below the .* distinct keys"):
        lru_mrc(keys, table_rows=10)


def test_plot_writes_png(tmp_path, make_zipf):
    path = plot_mrc({"zipf": lru_mrc(make_zipf(2000, 300, 1.0, 0))}, str(tmp_path / "mrc.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mrc.png"]
