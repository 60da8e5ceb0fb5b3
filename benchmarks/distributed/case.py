"""One case of a distributed job: a workload, a plan, a model and a mode, resolved the same on every rank.

The plan is made (or read) on rank 0 only and broadcast: our optimizer's local search stops on a clock, so
planning on every rank could give different plans.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch.distributed as dist
from omegaconf import OmegaConf

from embedding.spec import WorkloadSpec
from embedding.workload_config import build_workload
from sharding.baselines import BASELINES
from sharding.cost import CostModel
from sharding.plan import ShardingPlan
from sharding.topology import Topology, load_topology
from sharding.validate import validate_plan
from sharding.workload import PlanError, PlanWorkload

from .config import PLAN_SOURCES, DistRunConfig, compose_dist

__all__ = ["Case", "resolve_case", "make_plan", "load_cases"]


@dataclass
class Case:
    label: str
    cfg: DistRunConfig
    spec: WorkloadSpec
    workload: PlanWorkload
    topology: Topology
    plan: ShardingPlan
    train: bool


def make_plan(source: str | dict, workload: PlanWorkload, topo: Topology) -> ShardingPlan:
    """A plan from an optimizer name, a plan file, or a plan dict; validated against the workload."""
    if isinstance(source, dict):
        plan = ShardingPlan.from_dict(source)
    elif source in PLAN_SOURCES:
        if source == "ours":
            from sharding.optimizer import optimize

            plan = optimize(workload, topo)
        elif source == "torchrec":
            from sharding.torchrec_adapter import run_torchrec_planner

            plan = run_torchrec_planner(workload, topo)
        elif source == "best_greedy":
            plan = best_greedy(workload, topo)
        else:
            plan = BASELINES[source](workload, topo)
    elif Path(source).suffix == ".json":
        if not Path(source).is_file():
            raise PlanError(f"dist.plan: no plan file {source!r}")
        plan = ShardingPlan.load(source)
    else:
        raise PlanError(f"dist.plan {source!r} is neither a plan file (.json) nor one of {list(PLAN_SOURCES)}")
    validate_plan(plan, workload, topo)
    return plan


def best_greedy(workload: PlanWorkload, topo: Topology) -> ShardingPlan:
    """The greedy baseline our cost model rates best (the literature's 'best of the greedy heuristics')."""
    cost = CostModel(workload, topo)
    plans = []
    for name in ("greedy_size", "greedy_lookups", "greedy_size_lookups"):
        try:
            plans.append(BASELINES[name](workload, topo))
        except PlanError:
            continue
    if not plans:
        raise PlanError("no greedy baseline fits this workload on this topology")
    best = min(plans, key=cost.plan_cost)
    best.meta["chosen_as"] = "best_greedy"
    return best


def resolve_case(label: str, overrides: list[str], plan_source: str | dict | None, world: int,
                 cfg: DistRunConfig | None = None) -> Case:
    """Compose the case's config (or take `cfg`, already composed from `overrides`: a Hydra compose costs ~0.3 s,
    which calibrate, resolving the same few configs dozens of times, pays once each); rank 0 makes the plan and
    every rank receives it."""
    cfg = compose_dist(overrides) if cfg is None else cfg
    spec = build_workload(cfg.workload)
    mode = spec.mode if cfg.dist.mode == "workload" else cfg.dist.mode
    spec = replace(spec, mode=mode)
    workload = PlanWorkload.from_spec(spec, optimizer=cfg.dist.optimizer)
    topo = load_topology(cfg.dist.hardware, ranks=world)
    box: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            box[0] = make_plan(plan_source if plan_source is not None else cfg.dist.plan, workload, topo).to_dict()
        except (PlanError, ValueError) as e:
            box[0] = {"error": f"{type(e).__name__}: {e}"}
    dist.broadcast_object_list(box, src=0)
    if "error" in box[0]:
        raise PlanError(f"case {label!r}: {box[0]['error']}")
    plan = ShardingPlan.from_dict(box[0])
    return Case(label, cfg, spec, workload, topo, plan, mode == "train")


def load_cases(cfg: DistRunConfig, overrides: list[str]) -> list[tuple[str, list[str], str | dict | None]]:
    """(label, overrides, plan) of each case: the job's own config, or the entries of `dist.cases`:
    [{"label": ..., "overrides": [...], "plan": "ours" | "path.json" | {plan dict}}, ...]."""
    if not cfg.dist.cases:
        return [(cfg.dist.plan, overrides, None)]
    try:
        entries = json.loads(Path(cfg.dist.cases).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PlanError(f"dist.cases: cannot read {cfg.dist.cases!r}: {e}") from None
    if not isinstance(entries, list) or not entries:
        raise PlanError(f"dist.cases {cfg.dist.cases!r} must hold a non-empty JSON list of cases")
    for i, e in enumerate(entries):
        if not (isinstance(e, dict) and isinstance(e.get("overrides", []), list)
                and all(isinstance(o, str) for o in e.get("overrides", []))
                and (e.get("plan") is None or isinstance(e["plan"], (str, dict)))):
            raise PlanError(f"dist.cases {cfg.dist.cases!r}: case {i} must be {{label, overrides: [strings], plan: "
                            "optimizer name, plan file or plan}}")
    base = [o for o in overrides if not o.startswith("dist.cases=")]
    return [(str(e.get("label", i)), base + list(e.get("overrides", [])), e.get("plan"))
            for i, e in enumerate(entries)]


def resolved_config(cfg: DistRunConfig) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]
