"""One shared 2-rank gloo job (spawning ranks costs seconds): a plan with one table of each sharding type, run as
embedding training, DLRM training and embedding inference, each verified against the unsharded module."""
from __future__ import annotations

import pytest

from benchmarks.distributed.config import compose_dist
from benchmarks.distributed.jobs import run_cases
from embedding.workload_config import build_workload
from sharding.layouts import table_plan
from sharding.plan import ShardingPlan, ShardingType

WORKLOAD = ["workload=smoke", "workload.rows=[3000,2000,1500,1000,500]", "workload.batch_size=32",
            "workload.num_batches=2", "workload.dim=16", "workload.dense.bottom_mlp=[32,16]",
            "workload.dense.top_mlp=[16,1]"]
TYPES = {"t0": ShardingType.TABLE_WISE, "t1": ShardingType.ROW_WISE, "t2": ShardingType.COLUMN_WISE,
         "t3": ShardingType.TABLE_ROW_WISE, "t4": ShardingType.DATA_PARALLEL}
RANKS = {"t0": [1], "t1": [0, 1], "t2": [1, 0], "t3": [0, 1], "t4": [0, 1]}
FAST = ["dist.warmup=1", "dist.repeats=2", "dist.verify=true", "dist.timeout_s=60"]


def mixed_plan() -> dict:
    spec = build_workload(compose_dist(WORKLOAD).workload)
    tables = {t.name: table_plan(t, TYPES[t.name], RANKS[t.name], "ddr") for t in spec.tables}
    return ShardingPlan(2, tables, optimizer="one_of_each").to_dict()


@pytest.fixture(scope="session")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    plan = mixed_plan()
    cases = [{"label": "embedding_train", "overrides": [], "plan": plan},
             {"label": "dlrm_train", "overrides": ["dist.model=dlrm"], "plan": plan},
             {"label": "embedding_inference", "overrides": ["dist.mode=inference"], "plan": plan}]
    rc, records = run_cases(cases, [*WORKLOAD, *FAST, f"dist.output_dir={out}"], 2, str(out / "records.jsonl"), 60)
    return rc, {r["case"]: r for r in records}, out
