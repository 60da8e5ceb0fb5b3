"""Seeded, vectorised batch generation: pooling sizes per bag, then row ids per lookup.

Batch b of a workload depends only on (seed, b, table), so batches can be made in any order and the same seed
always gives identical batches. Row ids are drawn by a compiled loop (numba) so generation runs at ≥ 100 M ids/s
and is never the bottleneck; every batch is made before any timed region.

Zipf: bounded Zipf(alpha) over ranks 1..N, P(k) ∝ k^-alpha. Ranks ≤ 16384 are drawn exactly through an alias
table (one uniform each) whose last outcome is "the tail"; tail ranks are drawn by inverting the continuous density
x^-alpha on [k - ½, k + ½], whose relative error per rank is ≈ alpha(alpha+1)/(24 k²) < 1e-9 there. Rank k then maps to row `scatter(k - 1)`, a seeded bijection of
[0, N) (4-round Feistel network with cycle walking). Random numbers come from
splitmix64 over a counter, seeded per (seed, batch, table), so hot rows are spread over the id space, not rows 0..k.
"""
from __future__ import annotations

import numba
import numpy as np

from .batch import Batch
from .spec import PoolingSpec, TableSpec, WorkloadSpec

__all__ = ["HEAD_RANKS", "WorkloadGenerator", "generate_batches", "zipf_probabilities"]

HEAD_RANKS = 1 << 14
_HOT_TABLE = 1 << 16


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(cache=True, inline="always")
def _mix(x: np.uint64) -> np.uint64:
    # splitmix64 finaliser: a cheap, well-mixing 64-bit hash; over a counter it is the splitmix64 generator
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True, inline="always")
def _uniform01(seed: np.uint64, j: np.int64) -> float:
    """The j-th double in [0, 1) of stream `seed` (splitmix64, counter-based: any j, any order)."""
    return float(_mix(seed + np.uint64(j + 1) * _GOLDEN) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True, inline="always")
def _scatter(i: np.int64, n: np.int64, half_bits: np.int64, keys: np.ndarray) -> np.int64:
    """Seeded bijection of [0, n): 4-round Feistel over 2·half_bits bits (round function: top bits of a keyed
    multiply), cycle-walking until the value lands below n (fewer than 4 steps on average)."""
    h = np.uint64(half_bits)
    mask = np.uint64((1 << half_bits) - 1)
    shift = np.uint64(64 - half_bits)
    k0, k1, k2, k3 = keys[0], keys[1], keys[2], keys[3]
    x = np.uint64(i)
    while True:
        left = x >> h
        right = x & mask
        left ^= ((right + k0) * _GOLDEN) >> shift
        right ^= ((left + k1) * _GOLDEN) >> shift
        left ^= ((right + k2) * _GOLDEN) >> shift
        right ^= ((left + k3) * _GOLDEN) >> shift
        x = (left << h) | right
        if x < np.uint64(n):
            return np.int64(x)


@numba.njit(cache=True)
def _scatter_range(count: np.int64, n: np.int64, half_bits: np.int64, keys: np.ndarray) -> np.ndarray:
    out = np.empty(count, dtype=np.int64)
    for i in range(count):
        out[i] = _scatter(i, n, half_bits, keys)
    return out


@numba.njit(cache=True)
def _fill_uniform(out: np.ndarray, n: np.int64, seed: np.uint64) -> None:
    for j in range(out.size):
        out[j] = np.int64(_uniform01(seed, j) * n)


@numba.njit(cache=True)
def _alias_table(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker/Vose alias table: outcome i is drawn by one uniform, exactly in proportion to weights[i]."""
    m = weights.size
    prob = weights * (m / weights.sum())
    alias = np.arange(m)
    small = np.empty(m, dtype=np.int64)
    large = np.empty(m, dtype=np.int64)
    ns = nl = 0
    for i in range(m):
        if prob[i] < 1.0:
            small[ns] = i
            ns += 1
        else:
            large[nl] = i
            nl += 1
    while ns > 0 and nl > 0:
        ns -= 1
        s = small[ns]
        g = large[nl - 1]
        alias[s] = g
        prob[g] -= 1.0 - prob[s]
        if prob[g] < 1.0:
            nl -= 1
            small[ns] = g
            ns += 1
    for i in range(m):  # leftovers are 1 up to rounding
        prob[i] = min(prob[i], 1.0)
    return prob, alias


@numba.njit(cache=True)
def _fill_zipf(out, n, alpha, prob, alias, tail_lo, half_bits, keys, hot_rows, seed):
    head = prob.size - 1  # outcomes 0..head-1 are ranks, outcome `head` is "somewhere in the tail"
    one_minus = 1.0 - alpha
    inv_one_minus = 1.0 / one_minus if alpha != 1.0 else 0.0
    lo_pow = tail_lo ** one_minus if alpha != 1.0 else 0.0
    hi = n + 0.5
    tail_mass = np.log(hi / tail_lo) if alpha == 1.0 else (hi ** one_minus - lo_pow) / one_minus
    tail_seed = seed ^ np.uint64(0x5DEECE66D)
    for j in range(out.size):
        v = _uniform01(seed, j) * prob.size
        i = np.int64(v)
        rank = i if v - i < prob[i] else alias[i]  # 0-based rank, or `head` for the tail
        if rank == head:
            w = _uniform01(tail_seed, j) * tail_mass
            x = tail_lo * np.exp(w) if alpha == 1.0 else (lo_pow + w * one_minus) ** inv_one_minus
            rank = min(max(np.int64(x + 0.5), head + 1), n) - 1  # nearest rank, 1-based → 0-based
        out[j] = hot_rows[rank] if rank < hot_rows.size else _scatter(rank, n, half_bits, keys)


def zipf_probabilities(n: int, alpha: float) -> np.ndarray:
    """Exact bounded Zipf probabilities of ranks 1..n (for tests and statistics; O(n) memory)."""
    w = np.arange(1, n + 1, dtype=np.float64) ** -alpha
    return w / w.sum()


class _TableSampler:
    """Row-id sampler of one table: precomputed head CDF, guide table and scatter keys."""

    def __init__(self, table: TableSpec, seed: int, index: int) -> None:
        self.table = table
        n = table.rows
        ss = np.random.SeedSequence([seed, index, 0xA11CE])
        self.keys = ss.generate_state(4, dtype=np.uint64)
        self.half_bits = max(1, (int(n - 1).bit_length() + 1) // 2)
        if table.access.kind == "zipf":
            self.alpha = alpha = float(table.access.alpha)
            head = min(n, HEAD_RANKS)
            self.tail_lo = head + 0.5
            weights = np.empty(head + 1)
            weights[:head] = np.arange(1, head + 1, dtype=np.float64) ** -alpha
            hi = n + 0.5
            if n == head:
                weights[head] = 0.0
            elif alpha == 1.0:
                weights[head] = np.log(hi / self.tail_lo)
            else:
                weights[head] = (hi ** (1 - alpha) - self.tail_lo ** (1 - alpha)) / (1 - alpha)
            self.prob, self.alias = _alias_table(weights)
            # rows of the hottest ranks, precomputed: most draws land here and skip the Feistel rounds
            self.hot_rows = _scatter_range(np.int64(min(n, _HOT_TABLE)), np.int64(n), np.int64(self.half_bits),
                                           self.keys)

    def fill(self, out: np.ndarray, seed: int) -> None:
        n = np.int64(self.table.rows)
        if self.table.access.kind == "zipf":
            _fill_zipf(out, n, self.alpha, self.prob, self.alias, self.tail_lo, np.int64(self.half_bits),
                       self.keys, self.hot_rows,
                       np.uint64(seed))
        else:
            _fill_uniform(out, n, np.uint64(seed))


def _lengths(pooling: PoolingSpec, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    if pooling.kind == "fixed":
        return np.full(batch_size, int(pooling.mean), dtype=np.int64)
    if pooling.kind == "uniform":
        return rng.integers(pooling.low, pooling.high + 1, size=batch_size, dtype=np.int64)
    sizes = rng.geometric(1.0 / pooling.mean, size=batch_size).astype(np.int64)  # mean = pooling.mean, ≥ 1
    return np.minimum(sizes, pooling.high) if pooling.high > 0 else sizes


class WorkloadGenerator:
    """Makes batch b of a synthetic workload; batch b is the same whatever order batches are asked for."""

    def __init__(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self.samplers = [_TableSampler(t, spec.seed, i) for i, t in enumerate(spec.tables)]

    def lengths(self, b: int) -> np.ndarray:
        """(T, B) pooling sizes of batch b."""
        spec = self.spec
        out = np.empty((spec.num_tables, spec.batch_size), dtype=np.int64)
        for t, table in enumerate(spec.tables):
            rng = np.random.default_rng([spec.seed, b, t, 1])
            out[t] = _lengths(table.pooling, spec.batch_size, rng)
        return out

    def batch(self, b: int) -> Batch:
        spec = self.spec
        lengths = self.lengths(b)
        per_table = lengths.sum(axis=1)
        indices = np.empty(int(per_table.sum()), dtype=np.int64)
        start = 0
        for t, sampler in enumerate(self.samplers):
            stop = start + int(per_table[t])
            seed = int(np.random.SeedSequence([spec.seed, b, t, 2]).generate_state(1)[0] >> 1)
            sampler.fill(indices[start:stop], seed)
            start = stop
        rng = np.random.default_rng([spec.seed, b, 0xD3])
        dense = rng.standard_normal((spec.batch_size, spec.dense.num_dense_features), dtype=np.float32)
        labels = (rng.random(spec.batch_size) < 0.5).astype(np.float32)
        return Batch(lengths=lengths, indices=indices, dense=dense, labels=labels)


def generate_batches(spec: WorkloadSpec) -> list[Batch]:
    """All `spec.num_batches` batches, from the trace when the workload names one, else generated."""
    if spec.trace:
        from .traces import trace_batches

        return trace_batches(spec)
    gen = WorkloadGenerator(spec)
    return [gen.batch(b) for b in range(spec.num_batches)]
