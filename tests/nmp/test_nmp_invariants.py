"""Physical invariants of the DRAM model and the two execution modes."""
from collections import OrderedDict

import numba
import numpy as np
import pytest

from embedding.nmp import DramGeometry, LookupStream, NmpConfig, RankCache, emulate_batch
from embedding.nmp.channels import stable_order
from embedding.nmp.dram import map_lookups


def stream(tables=8, batch=16, pooling=20, row_bytes=128, rows=100_000, seed=0) -> LookupStream:
    rng = np.random.default_rng(seed)
    n = tables * batch * pooling
    t = np.repeat(np.arange(tables), batch * pooling)
    bag = np.repeat(np.arange(tables * batch), pooling)
    return LookupStream.from_arrays(t, rng.integers(0, rows, n), (bag % batch) * tables + bag // batch,
                                    np.full(tables, rows), np.full(tables, row_bytes))


@pytest.mark.parametrize("mode", ["recnmp", "tensordimm"])
@pytest.mark.parametrize("mapping", ["skylake", "random", "page_colour"])
def test_every_looked_up_byte_is_read_once_inside_dram(mode, mapping):
    s = stream()
    r = emulate_batch(NmpConfig(mode=mode, mapping=mapping), s)
    looked_up = s.num_lookups * 128
    assert r["host"].dram_bytes == looked_up
    assert r["nmp"].dram_bytes == looked_up


@pytest.mark.parametrize("row_bytes", [64, 128, 256])
def test_host_channel_bytes_equal_rows_times_row_size(row_bytes):
    s = stream(row_bytes=row_bytes)
    host = emulate_batch(NmpConfig(mode="host"), s)["host"]
    assert host.channel_data_bytes == s.num_lookups * row_bytes


def test_nmp_channel_bytes_equal_partial_sums_times_size():
    s = stream()
    # page colouring: a pooling lives in one rank, hence one DIMM: exactly one partial sum per pooling
    r = emulate_batch(NmpConfig(mapping="page_colour"), s)["nmp"]
    assert r.channel_data_bytes == np.unique(s.poolings).size * 128
    # random placement: one partial sum per (pooling, DIMM) touched
    cfg = NmpConfig(mapping="random", geometry=DramGeometry(dimms_per_channel=2))
    r = emulate_batch(cfg, s)["nmp"]
    d = map_lookups(cfg, s.tables, s.rows, s.table_rows, s.row_bytes)
    dimm = d.channel * 2 + d.rank // 2
    assert r.channel_data_bytes == np.unique(s.poolings * 8 + dimm).size * 128
    assert r.channel_cmd_bytes == s.num_lookups * 79 / 8


@pytest.mark.parametrize("dimms", [1, 2, 4])
@pytest.mark.parametrize("mapping", ["page_colour", "random"])
def test_speedup_without_cache_never_exceeds_rank_count(dimms, mapping):
    cfg = NmpConfig(mapping=mapping, geometry=DramGeometry(dimms_per_channel=dimms))
    r = emulate_batch(cfg, stream(tables=32, pooling=40))
    assert 1.0 < r["host"].cycles / r["nmp"].cycles <= cfg.geometry.ranks_per_channel


def test_latency_grows_with_pooling():
    cycles = [emulate_batch(NmpConfig(), stream(pooling=p))["nmp"].cycles for p in (5, 20, 80)]
    host = [emulate_batch(NmpConfig(mode="host"), stream(pooling=p))["host"].cycles for p in (5, 20, 80)]
    assert cycles[0] < cycles[1] < cycles[2] and host[0] < host[1] < host[2]


def test_host_baseline_reaches_data_bus_peak_on_random_rows():
    s = stream(tables=8, batch=32, pooling=40, row_bytes=256)
    host = emulate_batch(NmpConfig(mode="host"), s)["host"]
    peak_cycles = s.num_lookups * 4 * 4 / 4  # bursts × tBL over 4 channels
    assert peak_cycles <= host.cycles <= 1.1 * peak_cycles


def test_rankcache_hits_skip_dram_but_not_the_channel():
    s = stream(rows=50)  # tiny tables: almost everything repeats
    r = emulate_batch(NmpConfig(rankcache_bytes=64 << 10), s)["nmp"]
    assert r.cache_hits > 0.5 * s.num_lookups
    assert r.dram_bytes == (s.num_lookups - r.cache_hits) * 128
    assert r.channel_cmd_bytes == s.num_lookups * 79 / 8


def test_lru_matches_an_ordereddict_reference():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 40, 5000).astype(np.int64)
    ranks = rng.integers(0, 2, 5000).astype(np.int64)
    keys = keys * 2 + ranks  # keys carry their rank, as DecodedLookups.key does
    flags = rng.random(5000) < 0.8
    cache = RankCache(2, 16)
    got = cache.filter(keys, ranks, flags)
    want = np.zeros(5000, bool)
    ref = [OrderedDict(), OrderedDict()]
    for i, (k, r, f) in enumerate(zip(keys, ranks, flags, strict=True)):
        if not f:
            continue
        if k in ref[r]:
            want[i] = True
            ref[r].move_to_end(k)
        else:
            ref[r][k] = None
            if len(ref[r]) > 16:
                ref[r].popitem(last=False)
    assert got.sum() > 0 and np.array_equal(got, want)


def test_counting_sort_matches_numpy_stable_argsort():
    keys = np.random.default_rng(4).integers(0, 50, 10_000).astype(np.int64)
    assert np.array_equal(stable_order(keys, 50), np.argsort(keys, kind="stable"))


def test_results_do_not_depend_on_thread_count():
    s = stream(tables=8, batch=16, pooling=20)
    cfg = NmpConfig(rankcache_bytes=8 << 10, mapping="random")
    numba.set_num_threads(1)
    one = emulate_batch(cfg, s)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    many = emulate_batch(cfg, s)
    for mode in ("host", "nmp"):
        a, b = vars(one[mode]), vars(many[mode])
        assert all(np.array_equal(a[k], b[k]) for k in a)
