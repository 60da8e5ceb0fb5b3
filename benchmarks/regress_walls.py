"""Wall-clock figures that tests must not assert (a busy runner would fail them), printed with how they were taken.

  python -m benchmarks.regress_walls [--plan-repeats 5] [--fault-repeats 1] [--skip plan|fault]

- plan: `sharding.optimize` on the 856-table set over 128 ranks (dlrm_t856 on dgx_h100_x16, batch 512 per rank);
  target about 1 s. Wall and CPU seconds of each call, median and range.
- fault: a 2-rank gloo job whose rank 1 is killed at step 1 (dist.timeout_s=40): seconds until the launcher returns,
  which must be well inside the timeout (the job ends on the fault, not on the timeout).
Each figure line carries the repeats and the load average before and after.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

__all__ = ["main"]

FAULT_WORKLOAD = ["workload=smoke", "workload.rows=[3000,2000,1500,1000,500]", "workload.batch_size=32",
                  "workload.num_batches=2", "workload.dim=16"]
FAULT_TIMEOUT_S = 40


def _plan_once() -> None:
    from sharding import PlanWorkload, load_topology, optimize
    from sharding.tablesets import load_tables

    optimize(PlanWorkload(load_tables("dlrm_t856"), 512), load_topology("dgx_h100_x16"))


def _fault_once() -> None:
    from benchmarks.distributed import launch

    with tempfile.TemporaryDirectory() as tmp:
        rc = launch.main([*FAULT_WORKLOAD, "dist.fault=kill", "dist.fault_rank=1", "dist.fault_step=1",
                          f"dist.timeout_s={FAULT_TIMEOUT_S}", f"output.records={tmp}/r.jsonl",
                          f"dist.output_dir={tmp}"])
    if rc != 1:
        raise RuntimeError(f"the faulty job returned {rc}, expected 1")


def _figure(label: str, fn: Callable[[], None], repeats: int, target: str) -> None:
    fn() if label.startswith("plan") else None  # warm-up of the planner's imports and caches, not timed
    load0 = os.getloadavg()
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    load1 = os.getloadavg()
    print(f"{label}: wall median {np.median(walls):.2f} s (range {min(walls):.2f}–{max(walls):.2f}), CPU of this "
          f"process median {np.median(cpus):.2f} s, {repeats} repeat(s); {target}; load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after, on {os.cpu_count()} CPUs", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.regress_walls", description=__doc__.splitlines()[0])
    ap.add_argument("--plan-repeats", type=int, default=5)
    ap.add_argument("--fault-repeats", type=int, default=1)
    ap.add_argument("--skip", choices=["plan", "fault"], action="append", default=[])
    args = ap.parse_args(argv)
    if args.plan_repeats < 1 or args.fault_repeats < 1:
        print("regress_walls: error: --plan-repeats and --fault-repeats must be ≥ 1", file=sys.stderr)
        return 2
    if "plan" not in args.skip:
        _figure("plan dlrm_t856 on 128 ranks (sharding.optimize)", _plan_once, args.plan_repeats,
                "target about 1 s (perf_counter around one call)")
    if "fault" not in args.skip:
        _figure("2-rank job with rank 1 killed at step 1", _fault_once, args.fault_repeats,
                f"must end well inside dist.timeout_s={FAULT_TIMEOUT_S} s (perf_counter around launch.main)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
