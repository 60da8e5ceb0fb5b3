"""Workloads and plans that are measured: the seeded families `dlrmbench perfmodel collect` trains on, and the
plan layouts (one sharding type for every table, or a named optimizer) both it and `validate-cost` run.

A family is drawn from a seed: 2–12 tables of 2k–1.5M rows (log-uniform, at most `MAX_TABLE_BYTES` in all),
one dim of 16/32/64/128, pooling 1–32 fixed or skewed, uniform or Zipf(0.8–1.3) ids, batch 256/512/1024. The
named validation workloads are not drawn from any family: what validate-cost measures is held out of training.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from benchmarks.distributed.config import compose_dist
from embedding.spec import WorkloadSpec
from embedding.workload_config import build_workload
from sharding.layouts import column_splits, table_plan
from sharding.plan import ShardingPlan, ShardingType

__all__ = ["workload_spec", "build_plan", "resolved_plan", "run_label", "family", "LAYOUTS", "OPTIMIZERS", "COLLECT_PLANS", "MAX_TABLE_BYTES", "train_overrides"]

TW, RW, CW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.ROW_WISE, ShardingType.COLUMN_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)
OPTIMIZERS = ("ours", "torchrec", "round_robin", "greedy_size", "best_greedy")
LAYOUTS = ("all_rw", "all_twrw", "all_cw", "dp_small", "one_rank", "all_tw")
COLLECT_PLANS = ("greedy_size", "round_robin", "all_rw", "all_cw", "one_rank", "dp_small", "all_twrw")
MAX_TABLE_BYTES = 1.2e9  # all tables together, fp32 rows: both ranks' copies and state fit a 24 GiB machine


def train_overrides(hardware: str) -> list[str]:
    """The job overrides every measured case runs with: embedding-only model, training, `hardware`."""
    return [f"dist.hardware={hardware}", "dist.model=embedding", "dist.mode=train"]


def run_label(key: str) -> str:
    """A case label for `run_cases` that keeps its plan file apart from the other cases' of the job: the worker
    names plan files by the label's last path component, so labels carry no '/' (key 'a/b/w2' -> 'a:b:w2')."""
    return key.replace("/", ":")


def resolved_plan(name: str, overrides: list[str], world: int, hardware: str) -> dict:
    """`build_plan`, with a named deterministic baseline (greedy_size, round_robin) planned here, so that the
    record keeps the plan it ran (`ours` and `torchrec` plan on rank 0 in the job: refused here)."""
    from dataclasses import replace

    from sharding.baselines import BASELINES
    from sharding.topology import load_topology
    from sharding.workload import PlanWorkload

    built = build_plan(name, overrides, world)
    if isinstance(built, dict):
        return built
    if name not in BASELINES:
        raise ValueError(f"plan {name!r} is planned in the job, not here: choose a layout or a baseline")
    wl = PlanWorkload.from_spec(replace(workload_spec(tuple(overrides)), mode="train"))
    return BASELINES[name](wl, load_topology(hardware, ranks=world)).to_dict()


@lru_cache(maxsize=256)
def workload_spec(overrides: tuple[str, ...]) -> WorkloadSpec:
    """The workload of a case's overrides, composed once per process (Hydra composition costs ~0.1 s)."""
    return build_workload(compose_dist(list(overrides)).workload)


def build_plan(name: str, overrides: list[str], world: int) -> dict | str:
    """A named optimizer (planned on rank 0 in the job), or a plan dict of one layout for every table: all_rw,
    all_twrw, all_cw (where the dim splits in `world` blocks; else table-wise), dp_small (DP for tables of
    ≤ 20k rows, the rest round-robin table-wise), one_rank (all on rank 0), all_tw (round-robin)."""
    if name in OPTIMIZERS:
        return name
    if name not in LAYOUTS:
        raise ValueError(f"plan {name!r} is not one of {[*OPTIMIZERS, *LAYOUTS]}")
    spec = workload_spec(tuple(overrides))
    ranks = list(range(world))
    tables = {}
    for i, t in enumerate(spec.tables):
        if name == "all_rw":
            tp = table_plan(t, RW, ranks, "ddr")
        elif name == "all_twrw":
            tp = table_plan(t, TWRW, ranks, "ddr")
        elif name == "all_cw" and world in column_splits(t.dim):
            tp = table_plan(t, CW, [(i + k) % world for k in ranks], "ddr")
        elif name == "dp_small" and t.rows <= 20000:
            tp = table_plan(t, DP, ranks, "ddr")
        else:  # one_rank, all_tw, or the table-wise fallback: round-robin (one_rank: all on rank 0)
            tp = table_plan(t, TW, [0 if name == "one_rank" else i % world], "ddr")
        tables[t.name] = tp
    return ShardingPlan(world, tables, optimizer=name).to_dict()


def family(seed: int) -> list[str]:
    """Workload overrides of family member `seed` (see the module docstring)."""
    rng = np.random.default_rng(1_000 + seed)
    n = int(rng.integers(2, 13))
    dim = int(rng.choice([16, 32, 64, 128]))
    rows = np.exp(rng.uniform(np.log(2e3), np.log(1.5e6), n)).astype(int)
    total = rows.sum() * dim * 4
    if total > MAX_TABLE_BYTES:
        rows = np.maximum(1000, (rows * MAX_TABLE_BYTES / total).astype(int))
    pool = int(rng.choice([1, 4, 8, 16, 32]))
    kind = str(rng.choice(["fixed", "skewed"]))
    batch = int(rng.choice([256, 512, 1024]))
    out = ["workload=smoke", f"workload.rows=[{','.join(str(int(r)) for r in rows)}]", f"workload.dim={dim}",
           f"workload.pooling.kind={kind}", f"workload.pooling.mean={pool}", f"workload.batch_size={batch}"]
    if kind == "skewed":
        out.append(f"workload.pooling.high={4 * pool}")
    if rng.random() < 0.35:
        out.append("workload.access.kind=uniform")
    else:
        out += ["workload.access.kind=zipf", f"workload.access.alpha={rng.uniform(0.8, 1.3):.2f}"]
    return out
