"""Generated batches: deterministic, the right shapes, the right distributions."""
import numpy as np
import pytest
from scipy import stats

from embedding.generate import (
    WorkloadGenerator,
    _power_mass,
    _scatter,
    _scatter_range,
    _shape_q,
    _TableSampler,
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
    head = sampler.head_ranks  # last rank drawn by the alias table (partly); the continuous tail starts inside it
    for lo, hi in ((0, 10), (head - 2000, head), (head, head + 2000), (50_000, n)):
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


def _outcome_probabilities(sampler):
    """Exact probability of each code the packed alias table yields (own code below threshold, else alias)."""
    table = sampler.alias_table.reshape(-1, 2)
    scale = 2.0 ** int(sampler.bucket_shift)
    own_p = table[:, 0].astype(np.float64) / scale / table.shape[0]
    codes = table[:, 1]
    own = (codes & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)
    alias = (codes >> np.uint64(32)).astype(np.uint32).view(np.int32)
    prob = {}
    for c, q in zip(np.concatenate([own, alias]), np.concatenate([own_p, 1 / table.shape[0] - own_p]), strict=True):
        prob[int(c)] = prob.get(int(c), 0.0) + q
    return prob


@pytest.mark.parametrize("alpha", [0.8, 1.05, 2.0])
def test_alias_layout_gives_exact_head_and_continuous_tail(alpha):
    """Head ranks get exact Zipf probabilities (relative error < 1e-9, the continuous tail's share of the
    normaliser); the tail pieces carry exactly ∫ x^-alpha over [head_ranks - ½, N + ½] in total."""
    n = 300_000
    sampler = _TableSampler(TableSpec("z", n, 8, access=AccessSpec("zipf", alpha)), seed=1, index=0)
    prob = _outcome_probabilities(sampler)
    k = sampler.head_ranks
    rows = _scatter_range(k, n, sampler.half_bits, sampler.keys)
    head = np.array([prob[int(r)] for r in rows[:-1]])
    exact = zipf_probabilities(n, alpha)
    assert np.max(np.abs(head / exact[: k - 1] - 1)) < 1e-9
    tail = sum(q for c, q in prob.items() if c < 0) + prob[int(rows[-1])]
    want = float(_power_mass(k - 0.5, n + 0.5, alpha)) * prob[int(rows[0])]
    assert abs(tail / want - 1) < 1e-12
    assert sampler.alias_table.nbytes <= 2**19  # O(buckets), not O(rows)


@pytest.mark.parametrize("alpha", [0.3, 1.0, 1.05, 3.0])
def test_tail_shape_polynomial_inverts_the_piece_cdf(alpha):
    """h(u) = u + u(u-1) q(2u-1) against the long-double inverse CDF of x^-alpha on one piece: exact ends,
    error < 1e-13 inside."""
    sampler = _TableSampler(TableSpec("z", 10**6, 8, access=AccessSpec("zipf", alpha)), seed=1, index=0)
    u = np.linspace(0, 1, 10_001)[1:-1]
    h = u + u * (u - 1) * np.polynomial.polynomial.polyval(2 * u - 1, sampler.q)
    exact = u + u * (u - 1) * _shape_q(u, alpha, sampler.per_octave)
    assert np.max(np.abs(h - exact.astype(np.float64))) < 1e-13


def test_ids_do_not_depend_on_how_many_are_drawn():
    """Counter-based streams and chunked passes: the first k ids of a call are the same whatever its length."""
    sampler = _TableSampler(TableSpec("z", 5_000_000, 8, access=AccessSpec("zipf", 0.9)), seed=4, index=2)
    long, short = np.empty(5000, dtype=np.int64), np.empty(3001, dtype=np.int64)
    sampler.fill(long, 77)
    sampler.fill(short, 77)
    assert np.array_equal(long[:3001], short)


def test_tables_beyond_int32_row_ids():
    """Row ids ≥ 2^31 do not fit the packed codes: head ranks go through the tail path and still hit their rows."""
    n, alpha = 2**31 + 11, 1.05
    sampler = _TableSampler(TableSpec("big", n, 8, access=AccessSpec("zipf", alpha)), seed=0, index=0)
    ids = np.empty(400_000, dtype=np.int64)
    sampler.fill(ids, 5)
    assert ids.min() >= 0 and ids.max() < n and ids.max() >= 2**31 - 2**27
    z = np.sum(np.arange(1, 10**6 + 1, dtype=np.float64) ** -alpha) + float(_power_mass(10**6 + 0.5, n + 0.5, alpha))
    for rank in (1, 2, 10):
        expected = ids.size * rank**-alpha / z
        hits = np.count_nonzero(ids == _scatter(rank - 1, n, sampler.half_bits, sampler.keys))
        assert abs(hits - expected) < 5 * np.sqrt(expected), rank
