"""Validation of the near-memory emulator against RecNMP (Ke et al., ISCA 2020) and its emulation rate.

Run: .venv/bin/python -m benchmarks.nmp_bench [--batch-size 64] [--vector-bytes 128]
Workload as the paper's SLS study: 32 tables × 1 M rows, pooling 80, uniform rows; DDR4-2400, 4 channels,
2 ranks per DIMM, 1/2/4 DIMMs per channel (2/4/8 ranks). Speedup = host-baseline cycles / NMP cycles.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from embedding.nmp import DramGeometry, LookupStream, NmpConfig, emulate_batch, emulate_streams

PAPER_SPEEDUP = {2: 1.96, 4: 3.83, 8: 7.35}
TABLES, ROWS, POOLING = 32, 1_000_000, 80


def sls_stream(batch: int, vector_bytes: int, seed: int, alpha: float = 0.0) -> LookupStream:
    """One batch: every (table, sample) bag looks up POOLING rows, uniform (alpha 0) or Zipf(alpha) scattered."""
    rng = np.random.default_rng(seed)
    n = TABLES * batch * POOLING
    if alpha > 0:
        ranks = np.minimum(rng.zipf(alpha, n), ROWS) - 1
        rows = (ranks * 2654435761) % ROWS  # scatter hot ranks over the id space (bijective: ROWS coprime)
    else:
        rows = rng.integers(0, ROWS, n)
    tables = np.repeat(np.arange(TABLES), batch * POOLING)
    bag = np.repeat(np.arange(TABLES * batch), POOLING)
    poolings = (bag % batch) * TABLES + bag // batch  # sample-major: SLS of all tables run concurrently
    return LookupStream.from_arrays(tables, rows, poolings, np.full(TABLES, ROWS), np.full(TABLES, vector_bytes))


def speedup(cfg: NmpConfig, stream: LookupStream) -> float:
    r = emulate_batch(cfg, stream)
    return r["host"].cycles / r["nmp"].cycles


def validation(batch: int, vector_bytes: int) -> None:
    stream = sls_stream(batch, vector_bytes, seed=1)
    print(f"SLS speedup over the host baseline ({vector_bytes} B vectors, pooling {POOLING}, "
          f"{stream.num_lookups:,} lookups; paper within ±10% = PASS)")
    print(f"{'ranks/ch':>8} {'paper':>6} {'colour':>7} {'diff':>6} {'':>5} {'colour+sync':>11} {'random':>7} "
          f"{'random+sync':>11}")
    for ranks, paper in PAPER_SPEEDUP.items():
        geo = DramGeometry(dimms_per_channel=ranks // 2)
        s = {(m, sync): speedup(NmpConfig(mapping=m, packet_sync=sync, geometry=geo), stream)
             for m in ("page_colour", "random") for sync in (False, True)}
        col = s[("page_colour", False)]
        ok = "PASS" if abs(col / paper - 1) <= 0.10 else "FAIL"
        print(f"{ranks:>8} {paper:>6.2f} {col:>7.2f} {col / paper - 1:>+6.1%} {ok:>5} "
              f"{s[('page_colour', True)]:>11.2f} {s[('random', False)]:>7.2f} {s[('random', True)]:>11.2f}")
    print("colour: each table in one rank, so each pooling's rows are read by one rank and packets spread evenly;\n"
          "random: 4 KiB pages scattered, a pooling's 80 rows split binomially over the ranks; each packet waits for\n"
          "its most loaded rank (+sync: all ranks start each packet together, the paper's 'slowest rank' rule).")


def cache_study(batch: int, vector_bytes: int) -> None:
    print("\nRankCache (LRU per rank, every lookup cached) hit rate vs capacity, 2 batches, page colouring, 2 ranks:")
    sizes = [8 << 10, 32 << 10, 128 << 10, 512 << 10, 1 << 20]
    print(f"{'trace':>12} " + " ".join(f"{s >> 10:>6}K" for s in sizes))
    for name, alpha in (("uniform", 0.0), ("zipf 1.05", 1.05), ("zipf 1.2", 1.2)):
        streams = [sls_stream(batch, vector_bytes, seed=10 + k, alpha=alpha) for k in range(2)]
        rates = []
        for size in sizes:
            res = emulate_streams(NmpConfig(rankcache_bytes=size), streams)
            rates.append(sum(r["nmp"].cache_hits for r in res) / sum(r["nmp"].cache_probes for r in res))
        print(f"{name:>12} " + " ".join(f"{r:>7.1%}" for r in rates))
    print("paper: < 5% on random traces, 20–60% on production traces, ≈ 25% at 8 KB rising to an optimum at 128 KB")


def emulation_rate(batch: int, vector_bytes: int) -> None:
    stream = sls_stream(batch, vector_bytes, seed=3)
    cfg = NmpConfig(geometry=DramGeometry(dimms_per_channel=2))
    emulate_batch(cfg, stream)  # warm-up (numba cache load)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        emulate_batch(cfg, stream)
        times.append(time.perf_counter() - t0)
    rate = stream.num_lookups / float(np.median(times))
    print(f"\nEmulation rate: {rate / 1e6:.2f} M lookups/s through both modes (host + RecNMP, 4 ranks/channel), "
          f"median of 3, {stream.num_lookups:,} lookups; {2 * rate / 1e6:.2f} M lookup-emulations/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--vector-bytes", type=int, default=128)
    args = ap.parse_args()
    validation(args.batch_size, args.vector_bytes)
    cache_study(max(8, args.batch_size // 4), args.vector_bytes)
    emulation_rate(args.batch_size, args.vector_bytes)


if __name__ == "__main__":
    main()
