"""Cache benchmark: simulator speed against libCacheSim, one-pass LRU miss-ratio curve, cached-execution sweep.

    .venv/bin/python -m benchmarks.cache_bench [--requests 5000000 --keys 1000000 --alpha 1.05 --repeats 3]

1. Same trace (bounded Zipf, hot keys scattered) through our simulators and libCacheSim's (oracleGeneral binary
   file, unit-size objects), same capacity; requests/s of each (median of repeats) and the ratio. Ours starts
   from the in-memory key array and includes its key→id map; libCacheSim's time is process_trace alone.
2. The LRU miss-ratio curve over every capacity in one stack-distance pass, timed against one per-size run.
3. TieredEmbeddingBag forward over a memmap slow tier: cache size × Zipf alpha, measured lookups/s, hit rate
   and slow-tier bytes against the exact simulated LRU hit rate, beside the fast-only (whole table in a tensor)
   and slow-only (every batch gathers its rows from the memmap) extremes.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

from embedding.cache.mrc import lru_mrc, plot_mrc
from embedding.cache.reference import libcachesim_run, write_oracle_trace
from embedding.cache.simulate import simulate
from embedding.cache.tiered import SlowTier, TieredEmbeddingBag
from embedding.cache.workload import simulate_batches
from embedding.generate import generate_batches
from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec


def zipf_trace(n: int, num_keys: int, alpha: float, seed: int = 0) -> np.ndarray:
    """Bounded Zipf(alpha) over num_keys keys (inverse CDF), hot keys scattered by a seeded permutation."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, num_keys + 1, dtype=np.float64) ** alpha)
    ranks = np.searchsorted(cdf / cdf[-1], rng.random(n))
    return rng.permutation(num_keys)[ranks].astype(np.int64)


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def speed_vs_libcachesim(keys: np.ndarray, capacity: int, repeats: int) -> None:
    n = keys.size
    simulate(keys[:1000], "lru", 10)  # load the compiled kernels outside the timing
    fd, path = tempfile.mkstemp(suffix=".oracleGeneral.bin")
    os.close(fd)
    try:
        write_oracle_trace(keys, path)
        print(f"\n== simulator speed: {n:,} requests, {np.unique(keys).size:,} keys, capacity {capacity:,} rows, "
              f"median of {repeats} ==")
        print(f"{'policy':8} {'misses':>10} {'libCacheSim':>11} {'ours M req/s':>13} {'libCacheSim M req/s':>20} "
              f"{'speedup':>8}")
        for policy in ("lru", "lfu", "belady"):
            ours_t, ours = _median_time(lambda p=policy: simulate(keys, p, capacity), repeats)
            ref_runs = [libcachesim_run(keys, policy, capacity, path=path) for _ in range(repeats)]
            ref_t = statistics.median(r.seconds for r in ref_runs)
            same = "equal" if ref_runs[0].misses == ours.misses else f"DIFFERS ({ref_runs[0].misses:,})"
            print(f"{policy:8} {ours.misses:>10,} {same:>11} {n / ours_t / 1e6:>13.1f} {n / ref_t / 1e6:>20.1f} "
                  f"{ref_t / ours_t:>7.1f}x")
        t, sa = _median_time(lambda: simulate(keys, "lru", capacity - capacity % 32, associativity=32), repeats)
        print(f"lru 32-way set-associative: {sa.misses:,} misses, {n / t / 1e6:.1f} M req/s (no libCacheSim peer)")
    finally:
        os.remove(path)


def mrc_timing(keys: np.ndarray, capacity: int, png: str | None) -> None:
    lru_mrc(keys[:1000])
    t0 = time.perf_counter()
    mrc = lru_mrc(keys)
    t_mrc = time.perf_counter() - t0
    t0 = time.perf_counter()
    one = simulate(keys, "lru", capacity)
    t_one = time.perf_counter() - t0
    assert mrc.misses_at(capacity) == one.misses
    print(f"\n== LRU miss-ratio curve: all {mrc.distinct:,} capacities in {t_mrc:.2f} s (one pass, stack distances); "
          f"one capacity by simulation {t_one:.2f} s; curve agrees at {capacity:,} rows ==")
    print("  " + "  ".join(f"{f:.0%}: {mrc.at(int(f * mrc.distinct)):.3f}" for f in (0.001, 0.01, 0.05, 0.1, 0.2, 0.5)))
    if png:
        print(f"  plot: {plot_mrc({'zipf': mrc}, png)}")


def _time_passes(run, repeats: int) -> float:
    run()  # warm-up, untimed
    return _median_time(run, repeats)[0]


def execution_sweep(rows: int, dim: int, batch: int, pooling: int, num_batches: int, fractions: list[float],
                    alphas: list[float], repeats: int) -> None:
    torch.set_num_threads(1)
    weights = np.random.default_rng(0).standard_normal((rows, dim), dtype=np.float32)
    row_bytes = dim * 4
    print(f"\n== cached execution (forward, 1 thread): table {rows:,} x {dim} fp32 ({rows * row_bytes / 2**20:.0f} MiB), "
          f"batch {batch} x pooling {pooling}, {num_batches} batches, cold start, median of {repeats} ==")
    print("   slow tier = memmap file; on this machine it sits in the OS page cache, so 'slow' is RAM plus a copy")
    print(f"{'alpha':>5} {'cache':>6} {'lookups/s':>11} {'hit':>6} {'sim hit':>7} {'slow MiB':>9} "
          f"{'fast-only':>11} {'slow-only':>11}")
    for alpha in alphas:
        spec = WorkloadSpec("sweep", (TableSpec("t", rows, dim, pooling=PoolingSpec("fixed", pooling),
                                                access=AccessSpec("zipf", alpha)),), batch, num_batches)
        bs = generate_batches(spec)
        inputs = [(torch.from_numpy(b.indices.astype(np.int64)), torch.from_numpy(b.offsets)) for b in bs]
        lookups = sum(b.num_lookups for b in bs)
        table = torch.from_numpy(weights)
        fast = lookups / _time_passes(lambda inputs=inputs, table=table: [
            F.embedding_bag(i, table, o, mode="sum", include_last_offset=True) for i, o in inputs], repeats)
        slow_tier = SlowTier(weights, "mmap")

        def slow_only(inputs=inputs, slow_tier=slow_tier):
            for i, o in inputs:
                uniq, inv = np.unique(i.numpy(), return_inverse=True)
                rows_t, _ = slow_tier.read(uniq)
                F.embedding_bag(torch.from_numpy(inv), rows_t, o, mode="sum", include_last_offset=True)

        slow = lookups / _time_passes(slow_only, repeats)
        slow_tier.close()
        for frac in fractions:
            cap = int(frac * rows)
            sim = simulate_batches(bs, spec.tables, "lru", capacity_rows=cap).overall
            times = []
            for _ in range(repeats):  # a fresh (cold) cache each repeat, built outside the timing
                m = TieredEmbeddingBag(weights, cap, "lru")
                t0 = time.perf_counter()
                with torch.no_grad():
                    for i, o in inputs:
                        m(i, o)
                times.append(time.perf_counter() - t0)
                hit, read = m.hits / m.lookups, m.slow.bytes_read
                m.close()
            t = statistics.median(times)
            print(f"{alpha:>5} {frac:>6.0%} {lookups / t:>11.3g} {hit:>6.3f} {sim.hit_rate:>7.3f} "
                  f"{read / 2**20:>9.1f} {fast:>11.3g} {slow:>11.3g}")
    print("   hit = measured (per batch: first lookup of a row not cached at batch start misses); "
          "sim hit = exact per-lookup LRU; slow MiB = rows fetched x row bytes")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=5_000_000)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--alpha", type=float, default=1.05)
    p.add_argument("--capacity-fraction", type=float, default=0.1, help="of the keys, for the speed comparison")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--png", default=None, help="write the miss-ratio curve plot here")
    p.add_argument("--rows", type=int, default=200_000, help="table rows of the execution sweep")
    p.add_argument("--batches", type=int, default=100, help="batches of the execution sweep")
    p.add_argument("--skip-execution", action="store_true")
    args = p.parse_args(argv)
    if args.requests <= 0 or args.keys <= 0 or not 0 < args.capacity_fraction <= 1 or args.repeats <= 0:
        p.error("--requests, --keys, --repeats must be > 0 and --capacity-fraction in (0, 1]")
    keys = zipf_trace(args.requests, args.keys, args.alpha)
    capacity = max(32, int(args.capacity_fraction * args.keys))
    speed_vs_libcachesim(keys, capacity, args.repeats)
    mrc_timing(keys, capacity, args.png)
    if not args.skip_execution:
        execution_sweep(args.rows, 64, 512, 8, args.batches, [0.05, 0.1, 0.3], [0.8, 1.05, 1.2], args.repeats)


if __name__ == "__main__":
    main()
