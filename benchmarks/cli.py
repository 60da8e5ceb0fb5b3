"""`dlrmbench` console script: one entry, subcommands.

  dlrmbench run [hydra overrides]          the benchmark app (same as python -m benchmarks.run); -m sweeps
  dlrmbench trace stats FILE               statistics of a dlrm_datasets trace
  dlrmbench trace write OUT [overrides]    write a workload's batches as a dlrm_datasets trace (.gz compresses)
  dlrmbench plan ... | compare A B         sharding plans: make one with any optimizer; compare plans per rank
  dlrmbench sweep gather|plans ...         one table (CSV, markdown) of a sweep's jobs; planners × ranks records
  dlrmbench report RECORDS --out DIR       markdown + HTML report with PNG plots
  dlrmbench regress deterministic|timed    compare against results/baselines; exit 1 on a regression
  dlrmbench dist [overrides]               run a sharding plan across local gloo ranks (TorchRec DMP)
  dlrmbench calibrate | validate-cost | compare-plans   fit the cost model; predicted vs measured; plans side by side
  dlrmbench perfmodel collect|train|evaluate           the learned cost model: measured records, trees, held-out error
  dlrmbench device-bw [--device cuda] [--out FILE]      one device's lookup and copy bandwidth (torch-native kernel)
"""
from __future__ import annotations

import json
import sys

__all__ = ["main"]


def _trace(argv: list[str]) -> int:
    from embedding.spec import SpecError

    if len(argv) < 2 or argv[0] not in ("stats", "write"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        if argv[0] == "stats":
            from embedding.traces import load_trace, rows_per_table, trace_statistics

            trace = load_trace(argv[1])
            stats = trace_statistics([trace], trace.num_tables)
            print(json.dumps({"file": argv[1], "tables": trace.num_tables, "batch_size": trace.batch_size,
                              "rows_per_table": rows_per_table(trace).tolist(), **stats}, indent=1))
            return 0
        import numpy as np

        from embedding.batch import Batch
        from embedding.generate import generate_batches
        from embedding.traces import save_trace

        from .compose import compose_workload

        spec = compose_workload(argv[2:])
        batches = generate_batches(spec)
        merged = Batch(lengths=np.concatenate([b.lengths for b in batches], axis=1),
                       indices=np.concatenate([np.concatenate([b.table_indices(t) for b in batches])
                                               for t in range(spec.num_tables)]))
        save_trace(argv[1], merged)
        print(f"wrote {argv[1]}: {spec.num_tables} tables, {merged.batch_size} samples, {merged.num_lookups} indices")
        return 0
    except SpecError as e:
        print(f"dlrmbench: error: {e}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        from . import run

        sys.argv = ["dlrmbench run", *rest]
        run.main()
        return 0
    if cmd == "trace":
        return _trace(rest)
    if cmd in ("plan", "compare"):
        from . import plan_cli

        return plan_cli.main(argv)
    modules = {"sweep": "benchmarks.sweep", "report": "benchmarks.report", "regress": "benchmarks.regress",
               "dist": "benchmarks.distributed.launch", "calibrate": "benchmarks.calibrate",
               "validate-cost": "benchmarks.validate_cost", "compare-plans": "benchmarks.compare_plans",
               "device-bw": "benchmarks.device_bw", "perfmodel": "benchmarks.perfmodel.cli"}
    if cmd in modules:
        import importlib

        return importlib.import_module(modules[cmd]).main(rest)
    print(f"dlrmbench: unknown command {cmd!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
