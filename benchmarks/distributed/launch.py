"""`dlrmbench dist [overrides]`: start `dist.world_size` local ranks of `benchmarks.distributed.worker` with
torch's elastic agent (what `torchrun --standalone` runs), and report a failed rank by number and cause.

  dlrmbench dist workload=smoke dist.plan=torchrec          one job on this machine (gloo on CPU)
  dlrmbench dist +dist=dlrm dist.world_size=4               the full DLRM model, 4 ranks
  dlrmbench dist -m dist.plan=ours,torchrec,best_greedy     a Hydra sweep (hydra/launcher=submitit_dist: Slurm)
For several nodes run the worker under torchrun yourself (see the README).

Faults: a rank that raises or dies makes the agent stop the others at once (`max_restarts` 0); a rank stuck in
a collective raises after `dist.timeout_s` (the process group's timeout). The exit code is then 1 and stderr
names each failed rank with its exit code or signal and its error message.
"""
from __future__ import annotations

import logging
import sys
from typing import Any

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from benchmarks.records import new_run_id
from embedding.spec import SpecError
from embedding.workload_config import build_workload
from sharding.topology import TopologyError, load_topology
from sharding.workload import PlanError

from .config import DistConfigError, compose_dist

__all__ = ["main", "launch", "launch_module", "INPUT_ERRORS", "describe_failure"]

INPUT_ERRORS = (SpecError, PlanError, TopologyError, DistConfigError, OmegaConfBaseException, HydraException,
                FileNotFoundError)


def describe_failure(rank: int, failure: Any) -> str:
    """'rank R: <signal or exit code>: <first line of its error>' for one elastic ProcessFailure."""
    if failure.exitcode is not None and failure.exitcode < 0:
        cause = f"killed by {failure.signal_name()}"
    else:
        cause = f"exit code {failure.exitcode}"
    msg = str(failure.message or "").strip()
    if isinstance(failure.message, dict):
        msg = str(failure.message.get("message", ""))
    first = next((line for line in msg.splitlines() if line.strip() and "pytorch.org" not in line), "")
    if "Signal" in first and "received by PID" in first:
        first = ""
    return f"rank {rank}: {cause}" + (f": {first[:300]}" if first else "")


def launch(overrides: list[str], world_size: int, timeout_s: float, run_id: str | None = None) -> int:
    """Run one worker job of `world_size` local ranks; 0 on success, 1 when a rank failed (said on stderr)."""
    run_id = run_id or new_run_id()
    own = ("dist.run_id=", "dist.world_size=")
    overrides = [o for o in overrides if not o.lstrip("+").startswith(own)]
    return launch_module("benchmarks.distributed.worker", [*overrides, f"dist.run_id={run_id}",
                                                            f"dist.world_size={world_size}"],
                         world_size, timeout_s, run_id)


def launch_module(module: str, args: list[str], world_size: int, timeout_s: float, run_id: str | None = None,
                  ) -> int:
    """`python -m module args` on `world_size` local ranks under torch's elastic agent (torchrun --standalone)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    run_id = run_id or new_run_id()
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=world_size, run_id=run_id,
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0",
                          rdzv_configs={"timeout": int(max(30, timeout_s))}, max_restarts=0,
                          monitor_interval=0.2, start_method="spawn", shutdown_timeout=5)
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    try:
        elastic_launch(config, sys.executable)("-u", "-m", module, *args)
    except ChildFailedError as e:
        # ranks the agent stopped (SIGTERM) after another failed are victims, not causes
        causes = [r for r, f in e.failures.items() if f.signal_name() != "SIGTERM"] or list(e.failures)
        lines = [describe_failure(rank, f) + ("   <- cause" if rank in causes and len(e.failures) > 1 else "")
                 for rank, f in sorted(e.failures.items())]
        print(f"dlrmbench: job {run_id} failed: rank(s) {sorted(causes)} ({len(e.failures)} of {world_size} "
              "ranks ended abnormally)\n  " + "\n  ".join(lines), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "dist":
        argv = argv[1:]
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if "-m" in argv or "--multirun" in argv:
        from .app import run_app

        return run_app(argv)
    try:
        cfg = compose_dist(argv)
        build_workload(cfg.workload)
        load_topology(cfg.dist.hardware, ranks=cfg.dist.world_size or None)
    except INPUT_ERRORS as e:
        print(f"dlrmbench dist: error: {e}", file=sys.stderr)
        return 2
    if cfg.dist.world_size < 1:
        print("dlrmbench dist: error: dist.world_size must be ≥ 1 for a local job", file=sys.stderr)
        return 2
    if cfg.dist.plan.endswith(".json"):
        from pathlib import Path

        if not Path(cfg.dist.plan).is_file():
            print(f"dlrmbench dist: error: dist.plan: no plan file {cfg.dist.plan!r}", file=sys.stderr)
            return 2
    return launch(argv, cfg.dist.world_size, cfg.dist.timeout_s, cfg.dist.run_id or None)


if __name__ == "__main__":
    sys.exit(main())
