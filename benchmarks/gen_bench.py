"""Generation rate: row ids per second of the seeded generator, one core, large tables.

`python -m benchmarks.gen_bench [--rows N] [--count N] [--repeats R]`: times `_TableSampler.fill` (the compiled
loop that every batch uses) for Zipf at several alphas and for uniform access, after one untimed warm-up call that
also compiles; reports the median of R calls and the spread. numba runs this loop on one thread.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from embedding.generate import _TableSampler
from embedding.spec import AccessSpec, TableSpec

__all__ = ["generation_rates"]


def generation_rates(rows: int, count: int, repeats: int, alphas=(0.8, 1.05, 1.2)) -> list[dict]:
    out = np.empty(count, dtype=np.int64)
    results = []
    for access in [AccessSpec("zipf", a) for a in alphas] + [AccessSpec("uniform")]:
        sampler = _TableSampler(TableSpec("g", rows, 64, access=access), seed=0, index=0)
        sampler.fill(out, 1)
        secs = []
        for r in range(repeats):
            t0 = time.perf_counter()
            sampler.fill(out, 2 + r)
            secs.append(time.perf_counter() - t0)
        rates = count / np.array(secs) / 1e6
        label = f"zipf({access.alpha})" if access.kind == "zipf" else "uniform"
        results.append({"access": label, "rows": rows, "median_M_per_s": float(np.median(rates)),
                        "min": float(rates.min()), "max": float(rates.max()), "repeats": repeats})
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--count", type=int, default=20_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    print(f"row ids per second, one core, table of {a.rows:,} rows, {a.count:,} ids per call, median of {a.repeats}")
    for r in generation_rates(a.rows, a.count, a.repeats):
        print(f"  {r['access']:>11}: {r['median_M_per_s']:7.1f} M/s  (min {r['min']:.1f}, max {r['max']:.1f})")


if __name__ == "__main__":
    main()
