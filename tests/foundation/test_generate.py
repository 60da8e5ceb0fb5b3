"""Generated batches: deterministic, the right shapes, the right distributions."""
import numpy as np
import pytest
from scipy import stats

from embedding.generate import (
    HEAD_RANKS,
    WorkloadGenerator,
    _scatter,
    _scatter_range,
    generate_batches,
    zipf_probabilities,
)
from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec


def _spec(access=None, pooling=None, rows=50_000, batch=4096, seed=3):
    access = access or AccessSpec("zipf", 1.05)
    pooling = pooling or PoolingSpec("fixed", 4)
    tables = (TableSpec("a", rows, 16, pooling=pooling, access=access),
              TableSpec("b", rows // 2, 16, pooling=PoolingSpec("uniform", low=1, high=9), access=access))
    return WorkloadSpec("w", tables, batch_size=batch, num_batches=3, seed=seed)


def test_same_seed_gives_identical_batches_in_any_order():
    spec = _spec()
    first = generate_batches(spec)
    gen = WorkloadGenerator(spec)
    for b in (2, 0, 1):
        again = gen.batch(b)
        assert np.array_equal(again.indices, first[b].indices)
        assert np.array_equal(again.lengths, first[b].lengths)
        assert np.array_equal(again.dense, first[b].dense)


def test_other_seed_gives_other_batches():
    a, b = generate_batches(_spec(seed=1))[0], generate_batches(_spec(seed=2))[0]
    assert not np.array_equal(a.indices[:1000], b.indices[:1000])


def test_batch_layout_is_table_major_csr_within_rows():
    spec = _spec()
    batch = generate_batches(spec)[0]
    assert batch.lengths.shape == (2, spec.batch_size)
    assert batch.offsets[-1] == batch.indices.size == batch.lengths.sum()
    for t, table in enumerate(spec.tables):
        idx = batch.table_indices(t)
        assert idx.size == batch.lengths[t].sum()
        assert idx.min() >= 0 and idx.max() < table.rows


def test_scatter_is_a_bijection_for_awkward_sizes():
    keys = np.random.SeedSequence(5).generate_state(4, dtype=np.uint64)
    for n in (1, 2, 3, 5, 17, 1000, 4099, 65_537):
        half = max(1, (int(n - 1).bit_length() + 1) // 2)
        image = np.array([_scatter(i, n, half, keys) for i in range(n)])
        assert np.array_equal(np.sort(image), np.arange(n)), n


@pytest.mark.parametrize("alpha", [0.8, 1.0, 1.05, 1.3])
def test_zipf_frequencies_match_theory(alpha):
    """Per-rank frequencies (rank k's row found through the generator's seeded bijection) against exact bounded
    Zipf probabilities: chi-square on the head, band masses across the alias/tail boundary and in the far tail."""
    n = 200_000
    spec = WorkloadSpec("z", (TableSpec("z", n, 8, pooling=PoolingSpec("fixed", 50), access=AccessSpec("zipf", alpha)),),
                        batch_size=40_000, num_batches=1, seed=11)
    sampler = WorkloadGenerator(spec).samplers[0]
    row_of_rank = _scatter_range(n, n, sampler.half_bits, sampler.keys)
    idx = generate_batches(spec)[0].indices
    by_rank = np.bincount(idx, minlength=n)[row_of_rank]
    p = zipf_probabilities(n, alpha)
    expected = p * idx.size
    head = stats.chisquare(by_rank[:200], expected[:200] * by_rank[:200].sum() / expected[:200].sum())
    assert head.pvalue > 1e-4
    for lo, hi in ((0, 10), (HEAD_RANKS - 2000, HEAD_RANKS), (HEAD_RANKS, HEAD_RANKS + 2000), (50_000, n)):
        observed, want = by_rank[lo:hi].sum(), expected[lo:hi].sum()
        assert abs(observed - want) < 5 * np.sqrt(want) + 1e-3 * idx.size, (lo, hi, observed, want)


def test_hot_rows_are_scattered_not_the_first_ids():
    spec = _spec(rows=1_000_000)
    idx = generate_batches(spec)[0].table_indices(0)
    hottest = np.argsort(np.bincount(idx))[::-1][:20]
    assert hottest.max() > 100_000  # not rows 0..19
    assert len(set(hottest // 50_000)) > 5  # spread over the id space


def test_uniform_access_is_uniform():
    n = 1000
    spec = _spec(access=AccessSpec("uniform"), rows=n * 2, batch=20_000)
    idx = generate_batches(spec)[0].table_indices(0)
    counts = np.bincount(idx, minlength=2 * n)
    assert stats.chisquare(counts).pvalue > 1e-4


@pytest.mark.parametrize("pooling,mean", [(PoolingSpec("fixed", 7), 7.0), (PoolingSpec("uniform", low=2, high=10), 6.0),
                                          (PoolingSpec("skewed", 20), 20.0)])
def test_pooling_means(pooling, mean):
    spec = WorkloadSpec("p", (TableSpec("p", 1000, 8, pooling=pooling),), batch_size=50_000, num_batches=1)
    lengths = generate_batches(spec)[0].lengths[0]
    assert lengths.min() >= 1
    assert abs(lengths.mean() - mean) < 0.02 * mean
    if pooling.kind == "skewed":
        assert stats.skew(lengths) > 1  # long right tail


def test_multi_hot_sizes_per_table():
    sizes = [3, 1, 100]
    tables = tuple(TableSpec(f"t{i}", 100, 8, pooling=PoolingSpec("fixed", s)) for i, s in enumerate(sizes))
    batch = generate_batches(WorkloadSpec("m", tables, batch_size=16, num_batches=1))[0]
    assert batch.lengths.sum(axis=1).tolist() == [16 * s for s in sizes]
