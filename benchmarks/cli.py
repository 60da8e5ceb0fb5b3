"""`dlrmbench` console script: one entry, subcommands.

  dlrmbench run [hydra overrides]          the benchmark app (same as python -m benchmarks.run); -m sweeps
  dlrmbench trace stats FILE [--json]      statistics of a dlrm_datasets trace (a table; --json for machines)
  dlrmbench trace write OUT [overrides]    write a workload's batches as a dlrm_datasets trace (.gz compresses)
  dlrmbench plan ... | compare A B         sharding plans: make one with any optimizer; compare plans per rank
  dlrmbench sweep gather|plans ...         one table (CSV, markdown) of a sweep's jobs; planners × ranks records
  dlrmbench report RECORDS --out DIR       markdown + HTML report with PNG plots
  dlrmbench regress deterministic|timed    compare against results/baselines; exit 1 on a regression
  dlrmbench dist [overrides]               run a sharding plan across local gloo ranks (TorchRec DMP)
  dlrmbench calibrate | validate-cost | compare-plans   fit the cost model; predicted vs measured; plans side by side
  dlrmbench perfmodel collect|train|evaluate           the learned cost model: measured records, trees, held-out error
  dlrmbench device-bw [--device cuda] [--out FILE]      one device's lookup and copy bandwidth (torch-native kernel)
  dlrmbench serve [run|search|validate|overhead|whatif] [overrides]   latency-bounded QPS under MLPerf LoadGen
"""
from __future__ import annotations

import json
import sys

__all__ = ["main"]


def _trace(argv: list[str]) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from embedding.spec import SpecError

    from .errors import InputError, one_line

    if len(argv) < 2 or argv[0] not in ("stats", "write"):
        print("dlrmbench trace: error: expected `trace stats FILE` or `trace write OUT [overrides]`", file=sys.stderr)
        return 2
    try:
        if argv[0] == "stats":
            from embedding.traces import load_trace

            from .trace_stats import format_stats, stats_dict

            files = [a for a in argv[1:] if a != "--json"]
            if len(files) != 1:
                print(f"dlrmbench: error: trace stats takes one FILE and optionally --json, got {argv[1:]}",
                      file=sys.stderr)
                return 2
            stats = stats_dict(files[0], load_trace(files[0]))
            print(json.dumps(stats) if "--json" in argv[1:] else format_stats(stats))
            return 0
        return _trace_write(argv[1], argv[2:])
    except (SpecError, InputError, HydraException, OmegaConfBaseException) as e:
        print(f"dlrmbench trace: error: {one_line(e)}", file=sys.stderr)
        return 2


def _trace_write(out: str, overrides: list[str]) -> int:
    """Check the output path and the workload (memory included) first, then generate and write atomically."""
    import numpy as np

    from embedding.batch import Batch
    from embedding.generate import generate_batches
    from embedding.traces import save_trace
    from embedding.workload_config import build_workload

    from .compose import compose_config
    from .errors import InputError, check_output_file
    from .run import _check_memory

    if out.startswith("-") or "=" in out:
        raise InputError(f"trace write: the first argument must be the output file, got {out!r}")
    check_output_file(out, "trace write OUT", create_folders=False)
    cfg = compose_config(overrides)
    spec = build_workload(cfg.workload)
    _check_memory(spec, cfg.bench.max_memory_fraction)
    batches = generate_batches(spec)
    merged = Batch(lengths=np.concatenate([b.lengths for b in batches], axis=1),
                   indices=np.concatenate([np.concatenate([b.table_indices(t) for b in batches])
                                           for t in range(spec.num_tables)]))
    save_trace(out, merged)
    print(f"wrote {out}: {spec.num_tables} tables, {merged.batch_size} samples, {merged.num_lookups} indices")
    return 0


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        from . import run

        return run.cli(rest)
    if cmd == "trace":
        return _trace(rest)
    if cmd in ("plan", "compare"):
        from . import plan_cli

        return plan_cli.main(argv)
    modules = {"sweep": "benchmarks.sweep", "report": "benchmarks.report", "regress": "benchmarks.regress",
               "dist": "benchmarks.distributed.launch", "calibrate": "benchmarks.calibrate",
               "validate-cost": "benchmarks.validate_cost", "compare-plans": "benchmarks.compare_plans",
               "device-bw": "benchmarks.device_bw", "serve": "benchmarks.serve",
               "perfmodel": "benchmarks.perfmodel.cli"}
    if cmd in modules:
        import importlib

        return importlib.import_module(modules[cmd]).main(rest)
    print(f"dlrmbench: error: unknown command {cmd!r}; one of run, trace, {', '.join(['plan', 'compare', *modules])}"
          " (dlrmbench --help)", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Exit code of the subcommand: 0 done, 1 a failure or regression, 2 bad input (one line on stderr)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _dispatch(argv)
    except SystemExit as e:  # argparse (one line, see benchmarks.errors) and Hydra end with SystemExit
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
