"""Seeded, vectorised batch generation: pooling sizes per bag, then row ids per lookup.

Batch b of a workload depends only on (seed, b, table), so batches can be made in any order and the same seed
always gives identical batches. Row ids are drawn by compiled, one-thread loops (numba): ≈ 250 M ids/s on one
Zen 4 core for Zipf(1.05) over 10 M rows (`python -m benchmarks.gen_bench`), so generation is never the
bottleneck; every batch is made before any timed region.

Zipf: bounded Zipf(alpha) over ranks 1..N, P(k) ∝ k^-alpha, drawn as one outcome of an alias table with 2^b
buckets (one 64-bit draw: b bits pick the bucket, the other 64 - b bits are compared with an integer threshold,
so each outcome's probability is exact to 2^-64 absolute). Outcomes are the head ranks 1..K-1, exact, and P
"pieces" of the tail. The tail is the continuous density x^-alpha on [L, N + ½], rank k owning [k - ½, k + ½]
(rank K, which straddles L, gets its part below L as a head outcome); its relative error per rank is
≈ alpha(alpha+1)/(24 k²), below 1e-9 since K is chosen ≥ sqrt(alpha(alpha+1)/24e-9) (the head holds ~15,000
ranks up to alpha ≈ 1.9, more above). The pieces split [L, N + ½] at ratios 2^(1/s); by scale invariance every
piece has the same conditional shape, so one polynomial per table (fitted at set-up, error < 1e-14, exact end
points) inverts it from a second draw: no pow, exp or log per id. Floating point adds ≈ 2^-53 × (piece width in
ranks) relative per rank (≈ 4e-10 at 40 M rows; the uniforms' own resolution is the same order), far less than
inverting x^(1 - alpha) directly, whose rounding is amplified by 1/|1 - alpha| (≈ 2e-8 at 10 M rows, alpha 1.05).
Head outcomes store their row ids in the alias table; a tail rank k maps to row `scatter(k - 1)`, a seeded
bijection of [0, N) (4-round Feistel network, cycle-walking until below N). Random numbers come from splitmix64
over a counter, seeded per (seed, batch, table), so hot rows are spread over the id space, not rows 0..k. Ids are
made in chunks, by separate passes: branch-free arithmetic that LLVM vectorises (hashes, tail inversion, Feistel
rounds; AVX-512 where present) and table reads kept scalar (alias lookup, tail pieces, cycle-walk compaction).
"""
from __future__ import annotations

import numba
import numpy as np

from .batch import Batch
from .spec import PoolingSpec, TableSpec, WorkloadSpec

__all__ = ["WorkloadGenerator", "generate_batches", "zipf_probabilities"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_TAIL_STREAM = np.uint64(0x5DEECE66D)  # xor-ed into the seed: the tail's uniforms are an independent stream
_CHUNK = 1024  # ids per pass; the chunk's scratch (48 KiB: draws, tail positions and parameters) stays in L1/L2
_MIN_BUCKET_BITS = 14  # alias table of ≥ 2^14 buckets, 16 bytes each: 256 KiB, in L2
_CONTINUOUS_ERROR = 1e-9  # largest relative error per rank allowed from the continuous tail
_SHAPE_DEGREE = 7  # degree of the polynomial q in the tail shape h(u) = u + u(u-1) q(2u-1)
_SHAPE_TOLERANCE = 1e-14


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
def _feistel(x, h, mask, shift, k0, k1, k2, k3):
    """One pass of the 4-round Feistel permutation of [0, 2^(2h)) (round function: top bits of a keyed multiply)."""
    left = x >> h
    right = x & mask
    left ^= ((right + k0) * _GOLDEN) >> shift
    right ^= ((left + k1) * _GOLDEN) >> shift
    left ^= ((right + k2) * _GOLDEN) >> shift
    right ^= ((left + k3) * _GOLDEN) >> shift
    return (left << h) | right


@numba.njit(cache=True, inline="always")
def _scatter(i: np.int64, n: np.int64, half_bits: np.int64, keys: np.ndarray) -> np.int64:
    """Seeded bijection of [0, n): the Feistel permutation of [0, 2^(2·half_bits)), cycle-walking until the value
    lands below n (fewer than 4 steps on average; < 2 when 2^(2·half_bits) < 2n)."""
    h = np.uint64(half_bits)
    mask = np.uint64((1 << half_bits) - 1)
    shift = np.uint64(64 - half_bits)
    x = _feistel(np.uint64(i), h, mask, shift, keys[0], keys[1], keys[2], keys[3])
    while x >= np.uint64(n):
        x = _feistel(x, h, mask, shift, keys[0], keys[1], keys[2], keys[3])
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
def _fill_zipf(out, n, bucket_shift, alias_table, piece_base, piece_frac, piece_width, q, half_bits, keys, seed):
    """Zipf row ids, chunk by chunk, in passes that are either branch-free arithmetic (vectorised) or table reads
    (scalar: LLVM will not use AVX-512 gathers on AMD Zen): hashes; alias lookup → row id (head) or -(piece + 1)
    (tail), listing the tail draws; their pieces' parameters; their ranks (polynomial inverse of the piece shape)
    and one Feistel pass; cycle walks."""
    low_mask = (np.uint64(1) << bucket_shift) - np.uint64(1)
    tail_seed = seed ^ _TAIL_STREAM
    q0, q1, q2, q3, q4, q5, q6, q7 = q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]
    h = np.uint64(half_bits)
    mask = np.uint64((1 << half_bits) - 1)
    shift = np.uint64(64 - half_bits)
    k0, k1, k2, k3 = keys[0], keys[1], keys[2], keys[3]
    un = np.uint64(n)
    bits = np.empty(_CHUNK, dtype=np.uint64)  # the chunk's 64-bit draws
    pos = np.empty(_CHUNK, dtype=np.int64)  # where each tail draw of the chunk goes
    base = np.empty(_CHUNK, dtype=np.int64)  # its piece's parameters
    frac = np.empty(_CHUNK)
    width = np.empty(_CHUNK)
    walk = np.empty(_CHUNK, dtype=np.uint64)  # its Feistel value, walked until < n
    for start in range(0, out.size, _CHUNK):
        size = min(_CHUNK, out.size - start)
        first = seed + np.uint64(start + 1) * _GOLDEN
        for t in range(size):
            bits[t] = _mix(first + np.uint64(t) * _GOLDEN)
        m = 0
        for t in range(size):
            r = bits[t]
            i = (r >> bucket_shift) << np.uint64(1)  # bucket i: [threshold, own code | alias code << 32]
            use_alias = np.uint64((r & low_mask) >= alias_table[i]) << np.uint64(5)
            code = np.int64(np.int32(alias_table[i + np.uint64(1)] >> use_alias))
            out[start + t] = code
            pos[m] = start + t
            m += code < 0
        for t in range(m):
            piece = -out[pos[t]] - 1
            base[t] = piece_base[piece]
            frac[t] = piece_frac[piece]
            width[t] = piece_width[piece]
        for t in range(m):
            u = _uniform01(tail_seed, pos[t])
            z = 2.0 * u - 1.0
            poly = q0 + z * (q1 + z * (q2 + z * (q3 + z * (q4 + z * (q5 + z * (q6 + z * q7))))))
            shape = max(u + u * (u - 1.0) * poly, 0.0)  # h(u) in [0, 1]: where in the piece, exact at the ends
            rank = min(base[t] + np.int64(np.floor(frac[t] + width[t] * shape)), n)
            walk[t] = _feistel(np.uint64(rank - 1), h, mask, shift, k0, k1, k2, k3)
        while m > 0:
            left = 0
            for t in range(m):
                x = walk[t]
                j = pos[t]
                out[j] = np.int64(x)
                walk[left] = x
                pos[left] = j
                left += x >= un
            for t in range(left):
                walk[t] = _feistel(walk[t], h, mask, shift, k0, k1, k2, k3)
            m = left


def zipf_probabilities(n: int, alpha: float) -> np.ndarray:
    """Exact bounded Zipf probabilities of ranks 1..n (for tests and statistics; O(n) memory)."""
    w = np.arange(1, n + 1, dtype=np.float64) ** -alpha
    return w / w.sum()


def _power_mass(a, b, alpha: float):
    """∫_a^b x^-alpha dx (long double), accurate when b/a is near 1."""
    a, b = np.asarray(a, dtype=np.longdouble), np.asarray(b, dtype=np.longdouble)
    if alpha == 1.0:
        return np.log1p((b - a) / a)
    e = np.longdouble(1) - np.longdouble(alpha)
    return a ** e * np.expm1(e * np.log1p((b - a) / a)) / e


def _shape_q(u, alpha: float, per_octave: int):
    """q(u) with h(u) = u + u(u-1) q: h is the inverse conditional CDF of x^-alpha on [1, r], r = 2^(1/per_octave),
    mapped onto [0, 1]. Long double reference."""
    u = np.asarray(u, dtype=np.longdouble)
    log_r = np.log(np.longdouble(2)) / per_octave
    if alpha == 1.0:
        shape = np.expm1(u * log_r) / np.expm1(log_r)
    else:
        e = np.longdouble(1) - np.longdouble(alpha)
        shape = np.expm1(np.log1p(u * np.expm1(e * log_r)) / e) / np.expm1(log_r)
    return (shape - u) / (u * (u - 1))


def _tail_shape(alpha: float) -> tuple[int, np.ndarray]:
    """Pieces per octave and the monomial coefficients of q(z), z = 2u - 1, fitted to < 1e-14 (checked)."""
    deg = _SHAPE_DEGREE
    z_nodes = np.cos(np.pi * (np.arange(deg + 1) + 0.5) / (deg + 1))
    z_check = np.linspace(-1.0, 1.0, 4001)[1:-1]
    for per_octave in (8, 16, 32, 64, 128, 256, 512, 1024):
        cheb = np.polynomial.chebyshev.chebfit(z_nodes, _shape_q((z_nodes + 1) / 2, alpha, per_octave).astype(np.float64), deg)
        q = np.polynomial.chebyshev.cheb2poly(cheb)
        err = np.abs(np.polynomial.polynomial.polyval(z_check, q) - _shape_q((z_check + 1) / 2, alpha, per_octave))
        if float(err.max()) < _SHAPE_TOLERANCE:
            return per_octave, q.astype(np.float64)
    raise ValueError(f"zipf alpha={alpha}: no tail shape polynomial within {_SHAPE_TOLERANCE} (alpha too large)")


class _TableSampler:
    """Row-id sampler of one table: alias table (head rows and tail pieces), tail pieces, scatter keys.
    Memory: 16 bytes per alias bucket (2^14 buckets for alpha ≤ 2: 256 KiB, in L2), whatever the row count."""

    def __init__(self, table: TableSpec, seed: int, index: int) -> None:
        self.table = table
        n = table.rows
        ss = np.random.SeedSequence([seed, index, 0xA11CE])
        self.keys = ss.generate_state(4, dtype=np.uint64)
        self.half_bits = max(1, (int(n - 1).bit_length() + 1) // 2)
        if table.access.kind == "zipf":
            self._zipf_layout(n, float(table.access.alpha))

    def _zipf_layout(self, n: int, alpha: float) -> None:
        self.alpha = alpha
        per_octave, self.q = _tail_shape(alpha)
        self.per_octave = per_octave
        bits, head = _head_size(n, alpha, per_octave)
        hi = n + 0.5
        pieces = int(np.floor(per_octave * np.log2(hi / (head + 0.5)))) if n > head * 2 ** (1 / per_octave) else 0
        if pieces <= 0:  # small table: every rank in the head, exact
            self.head_ranks = n
            bits = max(1, (n - 1).bit_length())
            weights = np.arange(1, n + 1, dtype=np.float64) ** -alpha
            starts = np.empty(0)
        else:  # pieces [starts[m], starts[m + 1]) of ratio 2^(1/per_octave), the last ending at N + ½
            steps = np.arange(pieces + 1, dtype=np.longdouble) - pieces
            starts = (np.longdouble(hi) * np.exp2(steps / per_octave)).astype(np.float64)
            starts[-1] = hi
            self.head_ranks = k = int(np.floor(starts[0] + 0.5))  # rank K straddles the tail's lower end
            weights = np.empty(k + pieces, dtype=np.longdouble)
            weights[: k - 1] = np.arange(1, k, dtype=np.float64) ** -alpha  # float64 pow: 1e-16 relative, 50× faster
            weights[k - 1] = _power_mass(k - 0.5, starts[0], alpha)
            weights[k:] = _power_mass(starts[:-1], starts[1:], alpha)
            weights = weights.astype(np.float64)
        self.pieces = pieces
        base = np.floor(starts[:-1] + 0.5)
        piece_base, piece_frac = base.astype(np.int64), starts[:-1] + 0.5 - base  # exact: both are doubles
        piece_width = np.diff(starts)  # exact (Sterbenz): neighbours within a factor 2
        head_rows = _scatter_range(np.int64(self.head_ranks), np.int64(n), np.int64(self.half_bits), self.keys)
        if n >= 2 ** 31:  # row ids do not fit the 32-bit codes: head ranks become pieces of width 0
            piece_base = np.concatenate([np.arange(1, self.head_ranks + 1), piece_base])
            piece_frac = np.concatenate([np.zeros(self.head_ranks), piece_frac])
            piece_width = np.concatenate([np.zeros(self.head_ranks), piece_width])
            head_rows = np.empty(0, dtype=np.int64)
        self.piece_base, self.piece_frac, self.piece_width = piece_base, piece_frac, piece_width
        code = np.concatenate([head_rows, -1 - np.arange(weights.size - head_rows.size)])  # per outcome
        self.bucket_shift = np.uint64(64 - bits)
        self.alias_table = _packed_alias(weights, 1 << bits, code)

    def fill(self, out: np.ndarray, seed: int) -> None:
        n = np.int64(self.table.rows)
        if self.table.access.kind == "zipf":
            _fill_zipf(out, n, self.bucket_shift, self.alias_table, self.piece_base, self.piece_frac,
                       self.piece_width, self.q, np.int64(self.half_bits), self.keys, np.uint64(seed))
        else:
            _fill_uniform(out, n, np.uint64(seed))


def _head_size(n: int, alpha: float, per_octave: int) -> tuple[int, int]:
    """(bucket bits b, head size): the head as large as 2^b buckets allow once the tail pieces have theirs, b the
    least ≥ 14 that fits a head of ≥ sqrt(alpha(alpha+1)/24e-9) ranks (continuous tail error < 1e-9)."""
    ratio = 2 ** (1 / per_octave)
    min_head = int(np.ceil(np.sqrt(alpha * (alpha + 1) / (24 * _CONTINUOUS_ERROR))))
    bits = _MIN_BUCKET_BITS
    while True:
        max_pieces = int(np.ceil(per_octave * np.log2((n + 0.5) / min_head))) + 1 if n + 0.5 > min_head else 0
        head = int((2**bits - max_pieces - 2) / ratio)
        if head >= min_head:
            return bits, head
        bits += 1


def _packed_alias(weights: np.ndarray, buckets: int, code: np.ndarray) -> np.ndarray:
    """Alias table as (buckets, 2) uint64, one 16-byte line fragment per bucket: [threshold on the draw's low
    64 - b bits, own outcome's code | alias outcome's code << 32]; codes are int32 (row id, or -(piece + 1))."""
    padded = np.zeros(buckets)
    padded[: weights.size] = weights
    prob, alias = _alias_table(padded)
    scale = float(2 ** (64 - (buckets.bit_length() - 1)))
    code_of = np.concatenate([code, np.zeros(buckets - code.size, dtype=np.int64)])
    own = np.where(np.arange(buckets) < code.size, code_of, code_of[alias])  # padding buckets: always alias
    table = np.empty((buckets, 2), dtype=np.uint64)
    table[:, 0] = np.minimum(np.floor(prob * scale + 0.5), scale)  # prob 1 → 2^(64-b): never the alias
    table[:, 1] = (own.astype(np.int32).view(np.uint32).astype(np.uint64)
                   | (code_of[alias].astype(np.int32).view(np.uint32).astype(np.uint64) << np.uint64(32)))
    return table.reshape(-1)


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
