"""`dlrmbench dist [overrides]`: start `dist.world_size` local ranks of `benchmarks.distributed.worker` with
torch's elastic agent (what `torchrun --standalone` runs), and report a failed rank by number and cause.

  dlrmbench dist workload=smoke dist.plan=torchrec          one job on this machine (gloo on CPU)
  dlrmbench dist +dist=dlrm dist.world_size=4               the full DLRM model, 4 ranks
  dlrmbench dist -m dist.plan=ours,torchrec,best_greedy     a Hydra sweep (hydra/launcher=submitit_dist: Slurm)
For several nodes run the worker under torchrun yourself (see the README).

Before any rank starts, this process checks everything a rank would otherwise fail on, and makes each case's
plan (once, so every rank gets the same): the config, the workload, the hardware, the plan (an optimizer's or a
file's, validated against the workload and the ranks), the output paths, `dist.verify`'s size limit, and whether
this machine's memory holds `dist.world_size` ranks. Bad input: one line on stderr, exit code 2, no rank started.

Faults: a rank that raises or dies makes the agent stop the others at once (`max_restarts` 0); a rank stuck in
a collective raises after `dist.timeout_s` (the process group's timeout); a rank that spends more than
`dist.timeout_s` in one phase (rendezvous, sharding, verify, steps; see benchmarks.distributed.phases) has every
rank killed. The exit code is then 1 and stderr names the phase, each failed rank with its exit code or signal
and its error message.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from benchmarks.errors import InputError, check_output_dir, check_output_file, one_line
from benchmarks.records import new_run_id
from embedding.spec import SpecError
from sharding.topology import TopologyError
from sharding.workload import PlanError

from .config import DistConfigError, DistRunConfig, compose_dist
from .phases import ENV, Watchdog

__all__ = ["main", "launch", "launch_module", "preflight", "check_world_size", "INPUT_ERRORS", "describe_failure",
           "RANK_BASE_BYTES"]

INPUT_ERRORS = (SpecError, PlanError, TopologyError, DistConfigError, InputError, OmegaConfBaseException,
                HydraException, FileNotFoundError)
WORKER = "benchmarks.distributed.worker"
RANK_BASE_BYTES = 512 * 2**20
"""memory of one rank before its tables: a worker's resident size after importing torch, TorchRec and FBGEMM was
475 MiB (torch 2.13, torchrec 1.8, fbgemm-gpu-cpu 1.8, on the 2-core development machine), rounded up"""


def _available_bytes() -> int:
    """MemAvailable of /proc/meminfo (what the machine can give new processes now), else physical memory."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_world_size(world: int, table_bytes: float, verify: bool, batch_bytes: float = 0.0,
                     available: int | None = None) -> None:
    """Refuse `world` local ranks when this machine's available memory cannot hold them: RANK_BASE_BYTES per rank,
    the tables once (sharded) plus optimizer state, with dist.verify one unsharded copy per rank, and each rank's
    batches (`batch_bytes` per rank, kept as generated and as input tensors)."""
    available = _available_bytes() if available is None else available
    tables = 2 * table_bytes + (world * table_bytes if verify else 0.0)
    per_rank = RANK_BASE_BYTES + (table_bytes if verify else 0.0) + 2 * batch_bytes
    need = world * per_rank + 2 * table_bytes
    if need <= available:
        return
    fit = max(0, int((available - 2 * table_bytes) // per_rank))
    raise InputError(f"dist.world_size={world}: {world} local ranks need about {need / 2**30:.1f} GiB ({world} × "
                     f"{RANK_BASE_BYTES >> 20} MiB per rank for torch and TorchRec + {tables / 2**30:.2f} GiB of "
                     f"tables{', one unsharded copy per rank for dist.verify' if verify else ''} + "
                     f"{world * 2 * batch_bytes / 2**30:.2f} GiB of batches), more than the {available / 2**30:.1f} "
                     f"GiB this machine has available; at most {fit} ranks fit here (fewer workload.num_batches or "
                     "a smaller workload.batch_size, or several nodes under torchrun)")


def preflight(cfg: DistRunConfig, overrides: list[str]) -> list[dict[str, Any]]:
    """Everything a rank would fail on, checked here before any rank starts; each case resolved to
    {label, overrides, plan (a plan dict, validated against the case's workload on dist.world_size ranks)}."""
    from dataclasses import replace

    from embedding.backends import check_backend_names
    from embedding.workload_config import build_workload
    from sharding.topology import load_topology
    from sharding.workload import PlanWorkload

    from .case import load_cases, make_plan
    from .verify import VERIFY_MAX_BYTES

    world = cfg.dist.world_size
    if world < 1:
        raise DistConfigError(f"dist.world_size={world}: a local job needs ≥ 1 ranks")
    check_backend_names(cfg.backend.names)  # the job runs TorchRec's modules, but a typo is still a mistake
    check_output_file(cfg.output.records, "output.records")
    check_output_dir(cfg.dist.output_dir, "dist.output_dir")
    base = [o for o in overrides if not o.lstrip("+").startswith("dist.cases=")]
    composed = []
    for label, case_overrides, source in load_cases(cfg, overrides):  # first what costs little: configs, tables
        c = compose_dist(case_overrides)
        spec = build_workload(c.workload)
        spec = replace(spec, mode=spec.mode if c.dist.mode == "workload" else c.dist.mode)
        where = f"case {label!r}: " if cfg.dist.cases else ""
        if c.dist.verify and spec.total_bytes > VERIFY_MAX_BYTES:
            raise InputError(f"{where}dist.verify=true needs tables ≤ {VERIFY_MAX_BYTES >> 20} MiB (every rank holds "
                             f"the unsharded module), workload {spec.name!r} has {spec.total_bytes / 2**20:.0f} MiB; "
                             "lower workload.max_rows")
        composed.append((label, case_overrides, source, c, spec, where))
    check_world_size(world, max(x[4].total_bytes for x in composed), any(x[3].dist.verify for x in composed),
                     max(x[4].num_batches * x[4].batch_bytes for x in composed))
    resolved = []
    for label, case_overrides, source, c, spec, where in composed:  # then the plans, on dist.world_size ranks
        topo = load_topology(c.dist.hardware, ranks=world)
        try:
            plan = make_plan(source if source is not None else c.dist.plan,
                             PlanWorkload.from_spec(spec, optimizer=c.dist.optimizer), topo)
        except (PlanError, ValueError) as e:
            raise PlanError(f"{where}{one_line(e)}") from None
        resolved.append({"label": label, "overrides": case_overrides[len(base):] if cfg.dist.cases else [],
                         "plan": plan.to_dict()})
    return resolved


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
    """Check everything (preflight), then run one worker job of `world_size` local ranks; 0 on success, 1 when a
    rank failed or a phase outlasted `timeout_s` (said on stderr), 2 on bad input (one line, no rank started)."""
    run_id = run_id or new_run_id()
    own = ("dist.run_id=", "dist.world_size=", "dist.cases=")
    user = [o for o in overrides if not o.lstrip("+").startswith(("dist.run_id=", "dist.world_size="))]
    try:
        cfg = compose_dist([*user, f"dist.world_size={world_size}"])
        cases = preflight(cfg, [*user, f"dist.world_size={world_size}"])
    except INPUT_ERRORS as e:
        print(f"dlrmbench dist: error: {one_line(e)}", file=sys.stderr)
        return 2
    fd, path = tempfile.mkstemp(prefix="dlrmbench-cases-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cases, f)
    try:
        args = [o for o in user if not o.lstrip("+").startswith(own)]
        return launch_module(WORKER, [*args, f"dist.run_id={run_id}", f"dist.world_size={world_size}",
                                      f"dist.cases={path}"], world_size, timeout_s, run_id, watch=True)
    finally:
        os.unlink(path)


def launch_module(module: str, args: list[str], world_size: int, timeout_s: float, run_id: str | None = None,
                  watch: bool = False) -> int:
    """`python -m module args` on `world_size` local ranks under torch's elastic agent (torchrun --standalone).
    `watch`: the ranks report their phases (benchmarks.distributed.phases) and a phase longer than `timeout_s`
    ends the job."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    run_id = run_id or new_run_id()
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=world_size, run_id=run_id,
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0",
                          rdzv_configs={"timeout": int(max(30, timeout_s))}, max_restarts=0,
                          monitor_interval=0.2, start_method="spawn", shutdown_timeout=5)
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    folder = tempfile.mkdtemp(prefix="dlrmbench-phases-") if watch else None
    dog = Watchdog(folder, world_size, timeout_s, module) if folder else None
    previous = os.environ.get(ENV)
    if folder:
        os.environ[ENV] = folder
    try:
        if dog:
            dog.start()
        elastic_launch(config, sys.executable)("-u", "-m", module, *args)
    except ChildFailedError as e:
        if dog and dog.expired:
            phase, late = dog.expired
            print(f"dlrmbench dist: error: job {run_id} timed out in phase {phase!r}: rank(s) {late} spent more "
                  f"than dist.timeout_s={timeout_s:g} s in it; all {world_size} ranks were stopped", file=sys.stderr)
            return 1
        # ranks the agent stopped (SIGTERM) after another failed are victims, not causes
        causes = [r for r, f in e.failures.items() if f.signal_name() != "SIGTERM"] or list(e.failures)
        lines = [describe_failure(rank, f) + ("   <- cause" if rank in causes and len(e.failures) > 1 else "")
                 for rank, f in sorted(e.failures.items())]
        phase = f" in phase {dog.phases.get(causes[0])!r}" if dog and dog.phases.get(causes[0]) else ""
        print(f"dlrmbench dist: job {run_id} failed{phase}: rank(s) {sorted(causes)} ({len(e.failures)} of "
              f"{world_size} ranks ended abnormally)\n  " + "\n  ".join(lines), file=sys.stderr)
        return 1
    finally:
        if dog:
            dog.stop()
        if folder:
            if previous is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = previous
            shutil.rmtree(folder, ignore_errors=True)
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
    except INPUT_ERRORS as e:
        print(f"dlrmbench dist: error: {one_line(e)}", file=sys.stderr)
        return 2
    return launch(argv, cfg.dist.world_size, cfg.dist.timeout_s, cfg.dist.run_id or None)


if __name__ == "__main__":
    sys.exit(main())
