"""Measured records the learned model trains on, appended to a JSONL file and resumable (done keys are skipped).

Two kinds of record, each with the load average and the machine's fingerprint beside its timings:
  lookup   one process, one table: FBGEMM TBE or torch.nn.EmbeddingBag forward and forward+backward+update
           medians over a seeded family of tables (rows 1k–4M, dims, batch, pooling, uniform or Zipf ids).
  step     a plan of a seeded workload family (`benchmarks.perfmodel.cases.family`) run for real on W gloo
           ranks (TorchRec DMP, embedding-only training): median step and each rank's embedding-stage time over
           `repeats` steps, with the workload's overrides and the plan file, so features can be recomputed.
Steps run a few cases per job (`per_job`); records are appended after every job, so an interrupted collection
resumes where it stopped.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.perfmodel.cases import COLLECT_PLANS, family, resolved_plan, run_label, train_overrides
from benchmarks.perfmodel.machine import fingerprint, loadavg

__all__ = ["collect_lookups", "collect_steps", "done_keys", "append", "lookup_family", "step_keys"]

BACKENDS = ("fbgemm", "torch")


def done_keys(path: str | Path) -> set[str]:
    """Keys already in the records file (an unreadable last line, cut off by an interruption, is ignored)."""
    p = Path(path)
    keys: set[str] = set()
    if not p.is_file():
        return keys
    for line in p.read_text().splitlines():
        try:
            keys.add(json.loads(line)["key"])
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return keys


def append(path: str | Path, records: list[dict[str, Any]]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def lookup_family(seed: int) -> dict[str, Any]:
    """One lookup point of the seeded family: a table and a batch."""
    rng = np.random.default_rng(5_000 + seed)
    dim = int(rng.choice([16, 32, 64, 128]))
    rows = int(np.exp(rng.uniform(np.log(1e3), np.log(min(4e6, 4e8 / (dim * 4))))))
    zipf = rng.random() < 0.6
    return {"rows": rows, "dim": dim, "batch": int(rng.choice([256, 512, 1024, 2048])),
            "pooling": int(rng.choice([1, 4, 16, 32])), "access": "zipf" if zipf else "uniform",
            "alpha": round(float(rng.uniform(0.8, 1.3)), 2) if zipf else 0.0}


def _time_lookup(point: dict[str, Any], backend: str, repeats: int) -> tuple[float, float, int, int]:
    """(forward median s, train-step median s, ids, unique rows) of one table on one backend."""
    import torch

    from benchmarks.calibrate import _median_time
    from embedding.backends import build_backend, init_weights
    from embedding.generate import WorkloadGenerator
    from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec

    table = TableSpec("t", point["rows"], point["dim"], pooling=PoolingSpec("fixed", point["pooling"]),
                      access=AccessSpec(point["access"], point["alpha"] or 1.05))
    spec = WorkloadSpec("perfmodel", (table,), point["batch"], 1, mode="train")
    batch = WorkloadGenerator(spec).batch(0)
    be = build_backend(backend, spec, init_weights(spec), torch.device("cpu"))
    inputs = be.prepare(batch)
    grad = torch.ones(point["batch"], point["dim"])

    def fwd() -> None:
        with torch.no_grad():
            be.forward(inputs)

    f = _median_time(fwd, repeats)
    t = _median_time(lambda: be.train_step(inputs, grad), repeats)
    return f, t, int(batch.num_lookups), int(np.unique(batch.indices).size)


def collect_lookups(path: str, n: int, repeats: int, machine: dict[str, Any], sha: str,
                    log=print) -> int:  # noqa: ANN001
    """Measure the first `n` lookup family points on every backend not yet in `path`; records written."""
    done, wrote = done_keys(path), 0
    for seed in range(n):
        point = lookup_family(seed)
        for backend in BACKENDS:
            key = f"lookup/{seed}/{backend}"
            if key in done:
                continue
            load = loadavg()
            f, t, ids, uniq = _time_lookup(point, backend, repeats)
            append(path, [{"key": key, "kind": "lookup", "backend": backend, **point, "ids": ids,
                           "unique_rows": uniq, "fwd_s": f, "train_s": t, "repeats": repeats, "loadavg": load,
                           "machine": _short(machine), "git_sha": sha, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}])
            wrote += 1
        log(f"lookup {seed + 1}/{n} done (load {loadavg()})")
    return wrote


def _short(machine: dict[str, Any]) -> dict[str, Any]:
    return {k: machine.get(k) for k in ("cpu_model", "cores", "llc_bytes", "copy_bandwidth", "host", "reference")
            if k != "reference" or machine.get(k)}


def step_keys(n: int, world: int, plans: tuple[str, ...] = COLLECT_PLANS, first: int = 0,
              ) -> list[tuple[str, int, str]]:
    """(key, family seed, plan) of every step case of a collection (families first … first + n − 1), in the
    order they are run."""
    return [(f"step/{seed}/{plan}/w{world}", seed, plan) for seed in range(first, first + n) for plan in plans]


def collect_steps(path: str, n: int, world: int, hardware: str, repeats: int, per_job: int, timeout: float,
                  machine: dict[str, Any], sha: str, plans: tuple[str, ...] = COLLECT_PLANS,
                  log=print, first: int = 0) -> tuple[int, int]:  # noqa: ANN001
    """Run the step cases of `n` families from seed `first` not yet in `path`; (records written, jobs that
    failed)."""
    from benchmarks.distributed.jobs import metric_value, rank_values, run_cases

    done = done_keys(path)
    todo = [(k, s, p) for k, s, p in step_keys(n, world, plans, first) if k not in done]
    overrides = [*train_overrides(hardware), f"dist.repeats={repeats}", "dist.warmup=2"]
    wrote = failed = 0
    scratch = str(Path(path).with_suffix(".dist.jsonl"))
    for i in range(0, len(todo), per_job):
        chunk = todo[i: i + per_job]
        plans = {key: resolved_plan(plan, family(seed), world, hardware) for key, seed, plan in chunk}
        cases = [{"label": run_label(key), "overrides": family(seed), "plan": plans[key]} for key, seed, _ in chunk]
        load = loadavg()
        rc, recs = run_cases(cases, overrides, world, scratch, timeout)
        failed += rc != 0
        by_case = {r["case"]: r for r in recs}
        out = []
        for key, seed, plan in chunk:
            r = by_case.get(run_label(key))
            if r is None:
                continue
            out.append({"key": key, "kind": "step", "family": seed, "plan_name": plan, "world": world,
                        "overrides": family(seed), "plan": plans[key], "hardware": hardware,
                        "step_s": float(metric_value(r, "step_time") or 0.0) / 1e3,
                        "rank_s": [float(v) / 1e3 for v in rank_values(r, "embedding_time")],
                        "types": r["plan"]["sharding_types"], "repeats": repeats, "loadavg": load,
                        "loadavg_end": loadavg(), "machine": _short(machine), "git_sha": sha,
                        "run_id": r["run_id"], "time": r["time"]})
        append(path, out)
        wrote += len(out)
        log(f"steps {min(i + per_job, len(todo))}/{len(todo)} run ({len(out)} recorded, load {loadavg()})")
    return wrote, failed


def machine_now() -> dict[str, Any]:
    return fingerprint()
