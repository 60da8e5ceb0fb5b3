"""Records of a distributed case (written by rank 0 only), built from every rank's timings, and a short table.

Per-step times are per rank; the job's step time is, per step, the slowest rank's (ranks meet at every
collective, so a step ends for the job when its slowest rank ends). A rank's busy time `compute` = lookup +
lookup_bwd + optimizer (+ dense backward): collectives are left out because their time includes waiting for
peers. Slowest rank = the one with the largest median busy time; imbalance = that / the mean over ranks.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from benchmarks.records import environment, git_sha, metric
from sharding.cost import CostModel
from sharding.workload import PlanError

from .case import Case, resolved_config
from .stages import STAGES

__all__ = ["build_records", "predictions", "print_summary", "verify_summary"]

_EMB = [s for s in STAGES if s != "dense_backward"]
_BUSY = ("lookup", "lookup_bwd", "optimizer", "dense_backward")


def _ms(name: str, secs: np.ndarray, method: str, **extra: Any) -> dict:
    s = np.asarray(secs) * 1e3
    return metric(name, float(np.median(s)), "ms", method, median=float(np.median(s)),
                  p90=float(np.percentile(s, 90)), min=float(s.min()), max=float(s.max()), repeats=int(s.size),
                  **extra)


def predictions(case: Case) -> dict[str, Any]:
    """Our cost model's per-rank breakdown and TorchRec's estimator on the same plan (seconds). The step is
    `CostModel.plan_cost` (every rank's `elapsed`: its work, its wait for slower peers and the time outside the
    embedding stages, `Topology.step_overhead`), what the measured step time holds."""
    ranks = [r.to_dict() for r in CostModel(case.workload, case.topology).breakdown(case.plan)]
    out: dict[str, Any] = {"ours_s": max(r["elapsed_s"] for r in ranks), "ours_per_rank": ranks,
                           "hardware": case.topology.name}
    try:
        from sharding.torchrec_adapter import torchrec_estimate

        est = torchrec_estimate(case.plan, case.workload, case.topology)
        out["torchrec_s"] = est["perf_ms"] / 1e3
        out["torchrec_per_rank_s"] = [x / 1e3 for x in est["perf_ms_per_rank"]]
    except (PlanError, ValueError, RuntimeError) as e:
        out["torchrec_error"] = str(e)[:300]
    return out


def build_records(case: Case, results: list[dict], run_id: str, out_dir: str, checks: dict | None,
                  plan_path: str) -> list[dict]:
    world = len(results)
    d = case.cfg.dist
    step = np.max(np.array([r["step_s"] for r in results]), axis=0)  # (repeats,) slowest rank per step
    stages = {s: np.array([r["stages"][s] for r in results]) for s in STAGES}  # (W, repeats)
    busy = sum(stages[s] for s in _BUSY)
    busy_med = np.median(busy, axis=1)
    slowest = int(np.argmax(busy_med))
    pred = predictions(case)
    how = ("perf_counter around each rank's plain DMP step (CUDA: synchronised at the step end), warm-up "
           "excluded; per step the slowest rank")
    staged = ("perf_counter between the sharded collection's input_dist / compute / output_dist calls and at "
              "autograd hooks in the backward (see benchmarks.distributed.stages); median over staged steps")
    m = [_ms("step_time", step, how),
         metric("samples_per_s", world * case.spec.batch_size / float(np.median(step)), "samples/s",
                f"{world} ranks × {case.spec.batch_size} samples / median step_time"),
         metric("slowest_rank", slowest, "rank", "rank with the largest median busy time (lookup + lookup_bwd "
                "+ optimizer + dense_backward)"),
         metric("imbalance", float(busy_med.max() / busy_med.mean()), "×", "max / mean over ranks of median "
                "busy time"),
         metric("predicted_step_time", pred["ours_s"] * 1e3, "ms", "sharding.cost.CostModel.plan_cost: slowest "
                f"rank's work + wait + the step outside the embedding stages, hardware {pred['hardware']!r}")]
    if "torchrec_s" in pred:
        m.append(metric("torchrec_predicted_step_time", pred["torchrec_s"] * 1e3, "ms",
                        "TorchRec EmbeddingPerfEstimator on the same plan and hardware (max over ranks)"))
    for r, res in enumerate(results):
        m.append(_ms("rank_step_time", np.array(res["step_s"]), how.replace("; per step the slowest rank", ""),
                     rank=r))
        for s in STAGES:
            m.append(_ms(s, stages[s][r], staged, rank=r))
        m.append(_ms("embedding_time", sum(stages[s][r] for s in _EMB), "sum of the embedding stages "
                     f"({', '.join(_EMB)}) per staged step", rank=r))
        m.append(_ms("busy_time", busy[r], "lookup + lookup_bwd + optimizer + dense_backward per staged step",
                     rank=r))
        m.append(metric("predicted_rank_time", pred["ours_per_rank"][r]["total_s"] * 1e3, "ms",
                        "CostModel.breakdown total of this rank", rank=r))
        if "torchrec_per_rank_s" in pred:
            m.append(metric("torchrec_predicted_rank_time", pred["torchrec_per_rank_s"][r] * 1e3, "ms",
                            "TorchRec estimator, summed over this rank's shards", rank=r))
        for name, formula in (("input_dist_bytes", "received KJT: ids·8 + lengths·itemsize, from shapes"),
                              ("output_dist_bytes", "lookup outputs sent (non-DP groups): numel·4, from shapes"),
                              ("allreduce_bytes", "ring all-reduce of DDP gradients: 2·(W−1)/W·bytes")):
            m.append(metric(name, res["bytes"][name], "bytes", formula + "; per step, same again in backward"
                            if name == "output_dist_bytes" and case.train else formula, rank=r))
    for kind, diffs in (checks or {}).items():
        for key, value in diffs.items():
            m.append(metric(f"verify_{kind}_max_abs_diff", value, "abs", "max over ranks of |sharded − "
                            "unsharded| (" + ("per feature" if kind == "forward" else "per weight after one "
                                              "training step") + ")", table=key))
    counts: dict[str, int] = {}
    for tp in case.plan.tables.values():
        counts[tp.sharding_type.short] = counts.get(tp.sharding_type.short, 0) + 1
    from benchmarks.run import workload_summary

    return [{"run_id": run_id, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_sha": git_sha(),
             "config": resolved_config(case.cfg), "env": environment(), "workload": workload_summary(case.spec),
             "kind": "distributed", "backend": "torchrec_dmp", "case": case.label, "world_size": world,
             "model": d.model, "mode": "train" if case.train else "inference", "output_dir": out_dir,
             "plan": {"optimizer": case.plan.optimizer, "sharding_types": counts, "file": plan_path},
             "prediction": pred, "metrics": m}]


def print_summary(rec: dict) -> None:
    by = {}
    for x in rec["metrics"]:
        by.setdefault(x["name"], {})[x.get("rank")] = x["value"]
    world = rec["world_size"]
    print(f"\n{rec['case']}: {rec['model']} {rec['mode']}, {world} ranks, plan {rec['plan']['optimizer']} "
          f"{rec['plan']['sharding_types']}")
    print(f"  step {by['step_time'][None]:.2f} ms median (predicted {by['predicted_step_time'][None]:.2f} ms), "
          f"{by['samples_per_s'][None]:.0f} samples/s, slowest rank {int(by['slowest_rank'][None])}, "
          f"imbalance {by['imbalance'][None]:.2f}×")
    print("  rank " + " ".join(f"{s:>15}" for s in STAGES) + "   predicted")
    for r in range(world):
        print(f"  {r:>4} " + " ".join(f"{by[s][r]:>12.3f} ms" for s in STAGES)
              + f" {by['predicted_rank_time'][r]:>8.3f} ms")
    for line in verify_summary(rec):
        print("  " + line)


def verify_summary(rec: dict) -> list[str]:
    """What dist.verify compared, in words: the sharded forward per feature (or the DLRM logits) and, when
    training, every weight after one step, each against the unsharded module on the same batches."""
    parts = []
    for kind, what in (("forward", "forward"), ("update", "weights after one training step")):
        diffs = {m["table"]: m["value"] for m in rec["metrics"] if m["name"] == f"verify_{kind}_max_abs_diff"}
        if diffs:
            worst = max(diffs, key=lambda k: diffs[k])
            over = "the logits" if list(diffs) == ["logits"] else f"{len(diffs)} " + (
                "features" if kind == "forward" else "weights")
            parts.append(f"{what}: max |sharded − unsharded| {diffs[worst]:.2e} over {over} (largest: {worst})")
    return [f"verified against the unsharded module on every rank's batch: {'; '.join(parts)}"] if parts else []
