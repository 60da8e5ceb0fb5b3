"""One rank of a distributed run: `python -m benchmarks.distributed.worker [hydra overrides]`, started by torchrun
(single or multi-node) or by `dlrmbench dist` (benchmarks.distributed.launch), which both set RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT.

Every rank composes the same overrides; rank 0 decides the run id and output directory and broadcasts them (no
rank resolves a clock of its own), makes the plan and broadcasts it, gathers every rank's timings and alone
writes the records (appended per case, so a later failure leaves earlier records intact).
"""
from __future__ import annotations

import os
import re
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from benchmarks.perfmodel.machine import usable_cores
from benchmarks.records import append_records, new_run_id
from embedding.generate import WorkloadGenerator

from .case import Case, load_cases, resolve_case
from .config import DistRunConfig, compose_dist
from .model import (
    build_module,
    forward,
    load_state,
    loss_of,
    make_inputs,
    make_optimizer,
    reference_state,
    shard_module,
)
from .phases import ENV as PHASE_ENV
from .phases import report_phase
from .report import build_records, print_summary
from .stages import STAGES, StageTimer, allreduce_bytes, find_sharded_ebc

__all__ = ["main", "run_case", "plan_file"]


def plan_file(label: str) -> str:
    """Name of a case's plan file inside the run's output directory: the whole label (a plan file's label is its
    stem), so cases such as `small4/ours/w2` and `wide2/ours/w2` in one job do not overwrite each other's plan."""
    name = Path(label).stem if label.endswith(".json") else label
    return re.sub(r"[^\w.-]", "_", name) + "_plan.json"


def _env_int(name: str) -> int:
    if name not in os.environ:
        raise RuntimeError(f"{name} is not set: start this module with torchrun or `dlrmbench dist`")
    return int(os.environ[name])


def _device(cfg: DistRunConfig) -> torch.device:
    if cfg.placement.device == "cuda":
        local = _env_int("LOCAL_RANK")
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def _backend(cfg: DistRunConfig, device: torch.device) -> str:
    if cfg.dist.backend != "auto":
        return cfg.dist.backend
    return "nccl" if device.type == "cuda" else "gloo"


def _broadcast_run(cfg: DistRunConfig) -> tuple[str, str]:
    box = [None, None]
    if dist.get_rank() == 0:
        run_id = cfg.dist.run_id or new_run_id()
        box = [run_id, str(Path(cfg.dist.output_dir) / run_id)]
        Path(box[1]).mkdir(parents=True, exist_ok=True)
    dist.broadcast_object_list(box, src=0)
    return box[0], box[1]  # type: ignore[return-value]


def _inject_fault(cfg: DistRunConfig, step: int) -> None:
    d = cfg.dist
    if d.fault == "none" or dist.get_rank() != d.fault_rank or step != d.fault_step:
        return
    if d.fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if d.fault == "hang":
        while True:  # the others wait for it in the next collective: dist.timeout_s must end the job
            time.sleep(1)
    raise RuntimeError(f"injected fault (dist.fault=raise) at step {step}")


def _build(case: Case, device: torch.device, pg, state: dict[str, torch.Tensor] | None = None) -> torch.nn.Module:
    d = case.cfg.dist
    module = build_module(case.spec, d.model, torch.device("meta"))
    dmp = shard_module(module, case.plan, case.workload, case.topology, d.model, device, d.optimizer,
                       d.learning_rate, pg)
    load_state(dmp, reference_state(case.spec, d.model) if state is None else state)
    return dmp


def run_case(case: Case, device: torch.device, out_dir: str, case_index: int = 0,
             state: dict[str, torch.Tensor] | None = None) -> dict:
    """Time plain steps (step time), then staged steps (per-stage breakdown); this rank's results. `state`: the
    case's `reference_state`, when the caller keeps it for cases of the same workload (it is only read)."""
    d, spec, rank, world = case.cfg.dist, case.spec, dist.get_rank(), dist.get_world_size()
    checks = None
    if d.verify:
        from .verify import verify_case

        dmp = _build(case, device, dist.group.WORLD, state)
        report_phase("verify", case_index)
        checks = verify_case(case, dmp, device, world)
        report_phase("sharding", case_index)
    t_build = time.perf_counter()
    dmp = _build(case, device, dist.group.WORLD, state)
    build_s = time.perf_counter() - t_build
    gen = WorkloadGenerator(spec)
    inputs = [make_inputs(spec, gen.batch(rank * spec.num_batches + i), device) for i in range(spec.num_batches)]
    opt = make_optimizer(dmp, d.optimizer, d.learning_rate) if case.train else None
    timer = StageTimer(find_sharded_ebc(dmp), device, case.train)
    if not case.train:
        dmp.eval()

    def step(i: int, staged: bool) -> None:
        x = inputs[i % len(inputs)]
        if not case.train:
            with torch.no_grad():
                forward(dmp, d.model, x)
            if staged:
                timer.end_step()
            return
        loss = loss_of(forward(dmp, d.model, x), d.model, x)
        if staged:
            timer.backward(loss)
            timer.optimizer_step(opt)
            timer.end_step()
        else:
            loss.backward()
            opt.step()
            opt.zero_grad()

    clock = timer._now
    report_phase("steps", case_index)
    step_s = []
    for k in range(d.warmup + d.repeats):
        _inject_fault(case.cfg, k)
        t0 = clock()
        step(k, staged=False)
        if k >= d.warmup:
            step_s.append(clock() - t0)
    timer.enabled = True
    for k in range(d.warmup):
        step(k, staged=True)
    timer.steps.clear()
    prof = _profiler(d.profile)
    with prof:
        for k in range(d.repeats):
            step(k, staged=True)
    if d.profile:
        prof.export_chrome_trace(str(Path(out_dir) / f"{case.label}_trace_rank{rank}.json"))
    stages = {s: [st[s] for st in timer.steps] for s in STAGES}
    nbytes = dict(timer.bytes, allreduce_bytes=allreduce_bytes(dmp, world) if case.train else 0.0)
    return {"rank": rank, "step_s": step_s, "stages": stages, "bytes": nbytes, "checks": checks, "build_s": build_s}


def _profiler(enabled: bool):
    if not enabled:
        from contextlib import nullcontext

        return nullcontext()
    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])


@record
def main(argv: list[str] | None = None) -> int:
    report_phase("rendezvous")
    overrides = list(sys.argv[1:] if argv is None else argv)
    cfg = compose_dist(overrides)
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if cfg.dist.world_size and cfg.dist.world_size != world:
        raise ValueError(f"dist.world_size={cfg.dist.world_size} but the launcher started {world} ranks")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    torch.set_num_threads(cfg.dist.threads or max(1, usable_cores() // local_world))  # affinity, not the machine
    device = _device(cfg)
    # under the local launcher its watchdog ends a stuck phase after dist.timeout_s and names it; the collectives'
    # own timeout is then only the backstop (under torchrun it is the limit)
    watched = bool(os.environ.get(PHASE_ENV))
    dist.init_process_group(_backend(cfg, device), timeout=timedelta(seconds=cfg.dist.timeout_s * (2 if watched else 1)))
    try:
        report_phase("sharding")
        run_id, out_dir = _broadcast_run(cfg)
        for index, (label, case_overrides, plan_source) in enumerate(load_cases(cfg, overrides)):
            report_phase("sharding", index)
            case = resolve_case(label, case_overrides, plan_source, world)
            if rank == 0:
                case.plan.save(Path(out_dir) / plan_file(label))
            t0 = time.perf_counter()
            mine = run_case(case, device, out_dir, index)
            gathered = [None] * world if rank == 0 else None
            dist.gather_object(mine, gathered, dst=0)
            if rank == 0:
                records = build_records(case, gathered, run_id, out_dir, mine["checks"],  # type: ignore[arg-type]
                                        str(Path(out_dir) / plan_file(label)))
                append_records(cfg.output.records, records)
                append_records(Path(out_dir) / "records.jsonl", records)
                print_summary(records[0])
                print(f"  ({time.perf_counter() - t0:.1f} s) record appended to {cfg.output.records}, run {run_id}",
                      flush=True)
        report_phase("done")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()  # an exception propagates as before (traceback, exit 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown, which gloo's threads can abort after a clean destroy (see calibrate)
