"""Cache benchmark: simulator speed against libCacheSim, one-pass LRU miss-ratio curve, cached-execution sweep.

    .venv/bin/python -m benchmarks.cache_bench [--requests 5000000 --keys 1000000 --alpha 1.05 --repeats 3]
    .venv/bin/python -m benchmarks.cache_bench --skip-simulator [--slow-tiers mmap,direct --policy lru]

1. Same trace (bounded Zipf, hot keys scattered) through our simulators and libCacheSim's (oracleGeneral binary
   file, unit-size objects), same capacity; requests/s of each (median of repeats) and the ratio. Ours starts
   from the in-memory key array and includes its key→id map; libCacheSim's time is process_trace alone.
2. The LRU miss-ratio curve over every capacity in one stack-distance pass, timed against one per-size run.
3. TieredEmbeddingBag forward, cache size × Zipf alpha × slow tier (memmap file, in the page cache here; the
   same file through O_DIRECT, a real disk read per missed block): measured lookups/s, hit rate over the timed
   batches beside the exact simulated hit rate of the same policy over the same lookups, slow-tier bytes (rows and
   device blocks) and time share, beside the fast-only (whole table in RAM) and slow-only (every batch reads its
   distinct rows from the same slow tier) extremes.
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
from embedding.cache.slow_tier import SLOW_KINDS, SlowTier
from embedding.cache.tiered import TieredEmbeddingBag
from embedding.cache.tiered_kernels import distinct_rows
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


def _sweep_inputs(rows: int, dim: int, batch: int, pooling: int, alpha: float, num_batches: int):
    spec = WorkloadSpec("sweep", (TableSpec("t", rows, dim, pooling=PoolingSpec("fixed", pooling),
                                            access=AccessSpec("zipf", alpha)),), batch, num_batches)
    bs = generate_batches(spec)
    return [(torch.from_numpy(b.indices.astype(np.int64)), torch.from_numpy(b.offsets)) for b in bs]


def _slow_only(tier: SlowTier, inputs, repeats: int) -> float:
    """Seconds per pass when every batch reads all its distinct rows from the slow tier, then pools them."""
    mark = np.full(tier.rows, -1, np.int32)

    def run():
        for i, o in inputs:
            uniq, inv = distinct_rows(i.numpy(), mark)
            F.embedding_bag(torch.from_numpy(inv), tier.read(uniq), o, mode="sum", include_last_offset=True)
    return _time_passes(run, repeats)


def _cached(weights: np.ndarray, cap: int, policy: str, kind: str, warm, measured, repeats: int) -> dict:
    """A fresh cache per repeat: warm-up batches untimed, then the measured batches timed; medians."""
    runs = []
    for _ in range(repeats):
        m = TieredEmbeddingBag(weights, cap, policy, slow=kind)
        try:
            with torch.no_grad():
                for i, o in warm:
                    m(i, o)
                s = m.slow
                before = (m.hits, m.lookups, s.bytes_read, s.device_bytes_read, s.seconds_read)
                t0 = time.perf_counter()
                for i, o in measured:
                    m(i, o)
                t = time.perf_counter() - t0
            after = (m.hits, m.lookups, s.bytes_read, s.device_bytes_read, s.seconds_read)
            d = [a - b for a, b in zip(after, before, strict=True)]
            runs.append({"seconds": t, "hit": d[0] / d[1], "lookups": d[1], "row_bytes": d[2], "dev_bytes": d[3],
                         "slow_seconds": d[4]})
        finally:
            m.close()
    mid = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    return mid


def execution_sweep(rows: int, dim: int, batch: int, pooling: int, warm_batches: int, num_batches: int,
                    fractions: list[float], alphas: list[float], kinds: list[str], policy: str,
                    repeats: int) -> None:
    torch.set_num_threads(1)
    weights = np.random.default_rng(0).standard_normal((rows, dim), dtype=np.float32)
    print(f"\n== cached execution ({policy}, forward, 1 thread): table {rows:,} x {dim} fp32 "
          f"({rows * dim * 4 / 2**20:.0f} MiB), batch {batch} x pooling {pooling}; {warm_batches} warm-up batches "
          f"untimed, then {num_batches} timed; median of {repeats} ==")
    print("   slow tier mmap: memmap file, in the OS page cache here (RAM + a copy); direct: the same file through "
          "O_DIRECT, 4 KiB blocks, 8 I/O threads (a real disk read per missed block)")
    print(f"{'tier':6} {'alpha':>5} {'cache':>6} {'lookups/s':>10} {'hit':>6} {'sim hit':>7} {'slow MiB':>8} "
          f"{'dev MiB':>8} {'slow t%':>7} {'fast-only':>10} {'slow-only':>10} {'vs slow':>7}")
    for alpha in alphas:
        inputs = _sweep_inputs(rows, dim, batch, pooling, alpha, warm_batches + num_batches)
        warm, measured = inputs[:warm_batches], inputs[warm_batches:]
        keys = torch.cat([i for i, _ in inputs]).numpy()
        n_warm = sum(i.numel() for i, _ in warm)
        lookups = keys.size - n_warm
        table = torch.from_numpy(weights)
        fast = lookups / _time_passes(lambda t=table, ms=measured: [
            F.embedding_bag(i, t, o, mode="sum", include_last_offset=True) for i, o in ms], repeats)
        max_distinct = max(np.unique(i.numpy()).size for i, _ in inputs)
        sims = {}
        for frac in fractions:
            cap = int(frac * rows)
            if cap >= max_distinct:
                sims[frac] = simulate(keys, policy, cap).hit_flags[n_warm:].mean()
        for kind in kinds:
            tier = SlowTier(weights, kind)
            try:
                slow = lookups / _slow_only(tier, measured, repeats)
            finally:
                tier.close()
            for frac in fractions:
                if frac not in sims:
                    print(f"{kind:6} {alpha:>5} {frac:>6.1%}  skipped: a batch touches {max_distinct:,} rows, "
                          f"more than the cache's {int(frac * rows):,}")
                    continue
                r = _cached(weights, int(frac * rows), policy, kind, warm, measured, repeats)
                thr = r["lookups"] / r["seconds"]
                print(f"{kind:6} {alpha:>5} {frac:>6.1%} {thr:>10.3g} {r['hit']:>6.3f} {sims[frac]:>7.3f} "
                      f"{r['row_bytes'] / 2**20:>8.1f} {r['dev_bytes'] / 2**20:>8.1f} "
                      f"{r['slow_seconds'] / r['seconds']:>7.0%} {fast:>10.3g} {slow:>10.3g} {thr / slow:>6.1f}x")
    print("   lookups/s: timed lookups / wall time of the timed batches (admission, write-back, fetch, pooling).\n"
          "   hit: measured over the timed batches (a lookup hits when its row is cached when looked up; a batch's "
          "rows are never evicted during it);\n"
          f"   sim hit: exact per-lookup {policy} simulation of the whole stream, counted over the same lookups.\n"
          "   slow MiB: rows fetched x row bytes; dev MiB: bytes the tier moved (whole 4 KiB blocks for direct);\n"
          "   slow t%: share of the wall time spent inside slow-tier reads. fast-only: one embedding_bag over the "
          "whole table in RAM;\n"
          "   slow-only: per batch, its distinct rows read from the same slow tier, then pooled (no cache).")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=5_000_000)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--alpha", type=float, default=1.05)
    p.add_argument("--capacity-fraction", type=float, default=0.1, help="of the keys, for the speed comparison")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--png", default=None, help="write the miss-ratio curve plot here")
    p.add_argument("--rows", type=int, default=200_000, help="table rows of the execution sweep")
    p.add_argument("--warm-batches", type=int, default=50, help="untimed batches before the timed ones")
    p.add_argument("--batches", type=int, default=50, help="timed batches of the execution sweep")
    p.add_argument("--slow-tiers", default="mmap,direct", help=f"comma-separated, of {SLOW_KINDS}")
    p.add_argument("--policy", default="lru", choices=("lru", "lfu"), help="cached-execution policy")
    p.add_argument("--exec-repeats", type=int, default=1, help="fresh caches per sweep point (median)")
    p.add_argument("--skip-simulator", action="store_true", help="run only the cached-execution sweep")
    p.add_argument("--skip-execution", action="store_true")
    args = p.parse_args(argv)
    kinds = args.slow_tiers.split(",")
    if args.requests <= 0 or args.keys <= 0 or not 0 < args.capacity_fraction <= 1 or args.repeats <= 0:
        p.error("--requests, --keys, --repeats must be > 0 and --capacity-fraction in (0, 1]")
    if min(args.rows, args.batches, args.exec_repeats) <= 0 or args.warm_batches < 0:
        p.error("--rows, --batches, --exec-repeats must be > 0 and --warm-batches ≥ 0")
    if not set(kinds) <= set(SLOW_KINDS):
        p.error(f"--slow-tiers {args.slow_tiers!r}: each must be one of {SLOW_KINDS}")
    if not args.skip_simulator:
        keys = zipf_trace(args.requests, args.keys, args.alpha)
        capacity = max(32, int(args.capacity_fraction * args.keys))
        speed_vs_libcachesim(keys, capacity, args.repeats)
        mrc_timing(keys, capacity, args.png)
    if not args.skip_execution:
        execution_sweep(args.rows, 64, 512, 8, args.warm_batches, args.batches, [0.05, 0.1, 0.3],
                        [0.8, 1.05, 1.2], kinds, args.policy, args.exec_repeats)

if __name__ == "__main__":
    main()
