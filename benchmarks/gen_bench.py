"""Generation rate: row ids per second of the seeded generator, one core, large tables.

`python -m benchmarks.gen_bench [--rows N] [--count N] [--repeats R]`: times `_TableSampler.fill` (the compiled
loop that every batch uses) for Zipf at several alphas and for uniform access, after one untimed warm-up call that
also compiles; reports the median of R calls and the spread. numba runs this loop on one thread, so two clocks are
read: CPU time of this process (`time.process_time`: the rate of one core, unaffected by other jobs taking the core
away) and wall time (`time.perf_counter`: what a caller waits, lower on a shared, loaded machine).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from embedding.generate import _TableSampler
from embedding.spec import AccessSpec, TableSpec

__all__ = ["generation_rates"]


def generation_rates(rows: int, count: int, repeats: int, alphas=(0.8, 1.05, 1.2)) -> list[dict]:
    """Per access pattern: median, min and max of M ids/s over `repeats` calls, by CPU time and by wall time."""
    out = np.empty(count, dtype=np.int64)
    results = []
    for access in [AccessSpec("zipf", a) for a in alphas] + [AccessSpec("uniform")]:
        sampler = _TableSampler(TableSpec("g", rows, 64, access=access), seed=0, index=0)
        sampler.fill(out, 1)
        cpu, wall = [], []
        for r in range(repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            sampler.fill(out, 2 + r)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        cpu_rates = count / np.maximum(cpu, 1e-9) / 1e6
        wall_rates = count / np.array(wall) / 1e6
        label = f"zipf({access.alpha})" if access.kind == "zipf" else "uniform"
        results.append({"access": label, "rows": rows, "repeats": repeats,
                        "median_M_per_s": float(np.median(cpu_rates)), "min": float(cpu_rates.min()),
                        "max": float(cpu_rates.max()), "wall_median_M_per_s": float(np.median(wall_rates))})
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--count", type=int, default=20_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    print(f"row ids per second, one core, table of {a.rows:,} rows, {a.count:,} ids per call, median of {a.repeats}"
          " (CPU time; wall time in brackets)")
    for r in generation_rates(a.rows, a.count, a.repeats):
        print(f"  {r['access']:>11}: {r['median_M_per_s']:7.1f} M/s  (min {r['min']:.1f}, max {r['max']:.1f};"
              f" wall {r['wall_median_M_per_s']:.1f})")


if __name__ == "__main__":
    main()
