"""A learned correction of the analytic cost model, trained on this machine's measured runs.

`plan_features` describes a plan the way the analytic model sees it (its step and the step's parts, bytes looked
up, bytes gathered from DRAM for tables beyond the last-level cache, dims, skew, collective bytes, sharding groups,
balance). Gradient-boosted trees (`benchmarks.perfmodel.train` fits them) predict the log ratio measured /
analytic of the step and of each rank's embedding time; `LearnedCostModel` multiplies the analytic figure by
exp(λ · prediction), λ the shrinkage leave-one-family-out CV chose at training (`correction`). The trees are stored as plain arrays in a JSON file with the provenance of their data (machine,
git sha, record count, date), so predicting needs only numpy.

The LLC-aware terms come from the calibration's `lookup_model` (`benchmarks.calibrate`): a row of a table of
S bytes is in a last-level cache of C bytes with the probability of a hot set of C/S of the rows (uniform: C/S).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from embedding.spec import DTYPE_BYTES
from sharding.cost import CostModel, zipf_miss_rate
from sharding.plan import ShardingPlan
from sharding.topology import Topology
from sharding.workload import PlanWorkload

__all__ = ["LookupModel", "plan_features", "rank_features", "predict_trees", "LearnedCostModel", "STEP_FEATURES",
           "RANK_FEATURES", "load_learned", "LearnedModelError", "correction"]

_TYPES = ("TW", "RW", "CW", "TWRW", "DP")
STEP_FEATURES = ("log_analytic_ms", "fwd_share", "bwd_share", "opt_share", "comms_share", "fixed_share",
                 "log_lookup_mb", "log_dram_mb", "kernel_share", "llc_ratio_max", "llc_ratio_mean", "dim_mean",
                 "dim_max", "alpha_mean", "pooling_mean", "log_batch", "world", "tables", "busy_ranks",
                 "imbalance", "log_comm_mb", *(f"n_{t}" for t in _TYPES))
RANK_FEATURES = (*STEP_FEATURES, "rank_log_analytic_ms", "rank_work_share", "rank_load", "rank_shards")


class LearnedModelError(ValueError):
    """A learned-model file that is missing, unreadable or of another feature set."""


@dataclass(frozen=True)
class LookupModel:
    """The calibration's lookup fit: time = call + ids · id_s + bytes / near_bw + DRAM bytes / dram_bw (the
    extra of row bytes that miss the LLC), co-located ranks `colocated` × slower than one alone. Without a
    calibrated one: the topology's tier-0 bandwidth."""

    llc_bytes: float = 32 * 2**20
    call_s: float = 0.0
    near_bandwidth: float = 1e10
    dram_bandwidth: float = 1e10
    colocated: float = 1.0
    id_s: float = 0.0

    @classmethod
    def from_hardware(cls, hardware: str | Path | None, topology: Topology) -> LookupModel:
        """From a calibrated hardware YAML's `lookup_model`; else tier 0's bandwidth for both terms."""
        bw = topology.fast.bandwidth
        p = Path(hardware) if hardware else None
        if p is not None and p.suffix in (".yaml", ".yml") and p.is_file():
            data = yaml.safe_load(p.read_text()) or {}
            lm = data.get("lookup_model") if isinstance(data, dict) else None
            if isinstance(lm, dict) and "forward" in lm:
                f = lm["forward"]
                return cls(float(lm.get("llc_bytes", cls.llc_bytes)), float(f["call_s"]),
                           float(f["near_bandwidth"]), float(f["dram_bandwidth"]),
                           float(lm.get("colocated_slowdown", 1.0)), float(f.get("id_s", 0.0)))
        return cls(near_bandwidth=bw, dram_bandwidth=bw)

    def kernel_s(self, ids: float, nbytes: float, dram_bytes: float) -> float:
        """Seconds of one lookup kernel call of `ids` ids moving `nbytes`, `dram_bytes` of them from DRAM."""
        return self.call_s + ids * self.id_s + nbytes / self.near_bandwidth + dram_bytes / self.dram_bandwidth

    def miss(self, rows: int, row_bytes: float, access: str, alpha: float) -> float:
        """Share of a table's row reads that go to DRAM: a hot set of the LLC's size holds the rest."""
        frac = min(1.0, self.llc_bytes / max(rows * row_bytes, 1.0))
        return zipf_miss_rate(rows, alpha, frac) if access == "zipf" else 1.0 - frac


def _safe_log(x: float) -> float:
    return math.log(max(x, 1e-9))


def _plan_stats(cost: CostModel, plan: ShardingPlan, lm: LookupModel) -> tuple[dict[str, float], np.ndarray,
                                                                                   np.ndarray, np.ndarray]:
    """(plan features, per-rank lookup bytes, per-rank kernel seconds, per-rank shard counts)."""
    wl, w = cost.workload, plan.world_size
    step = cost.plan_cost(plan)
    ranks = cost.breakdown(plan)
    fwd = max(r.fwd_compute for r in ranks)
    bwd = max(r.bwd_compute for r in ranks)
    opt = max(r.optimizer for r in ranks)
    comms = ranks[0].fwd_comms + ranks[0].bwd_comms
    fixed = ranks[0].latency + cost.outside()
    near, dram, kernel, shards = np.zeros(w), np.zeros(w), np.zeros(w), np.zeros(w)
    comm_bytes, llc_ratios, dims, alphas, pools, weights = 0.0, [], [], [], [], []
    types = dict.fromkeys(_TYPES, 0)
    for tp in plan.tables.values():
        t, st = cost.tables[tp.name], tp.sharding_type
        types[st.short] = types.get(st.short, 0) + 1
        row_bytes = t.dim * DTYPE_BYTES[t.dtype]
        miss = lm.miss(t.rows, row_bytes, t.access.kind, t.access.alpha)
        llc_ratios.append(t.rows * row_bytes / lm.llc_bytes)
        lookups_total = 0.0
        for s in tp.shards:
            lookups, bags = cost._traffic(t, st, s.rows)
            gather = lookups * s.cols * DTYPE_BYTES[t.dtype]
            nb = lookups * wl.index_bytes + bags * s.cols * wl.output_bytes + gather
            near[s.rank] += nb
            dram[s.rank] += gather * miss
            kernel[s.rank] += lm.kernel_s(lookups, nb, gather * miss)
            shards[s.rank] += 1
            lookups_total += lookups
            comm_bytes += sum(m[2] + m[3] for m in cost.messages(t, st, s.rows, s.cols))
        dims.append(t.dim)
        alphas.append(t.access.alpha if t.access.kind == "zipf" else 0.0)
        pools.append(t.pooling.expected)
        weights.append(max(lookups_total, 1e-9))
    busy = int(np.count_nonzero(shards))
    kernel = kernel * (lm.colocated if busy > 1 else 1.0)
    wts = np.array(weights)
    load = near + dram
    feats = {
        "log_analytic_ms": _safe_log(step * 1e3), "fwd_share": fwd / step, "bwd_share": bwd / step,
        "opt_share": opt / step, "comms_share": comms / step, "fixed_share": fixed / step,
        "log_lookup_mb": _safe_log(float(load.sum()) / 1e6), "log_dram_mb": _safe_log(float(dram.sum()) / 1e6),
        "kernel_share": float(kernel.max()) / step, "llc_ratio_max": float(max(llc_ratios)),
        "llc_ratio_mean": float(np.average(llc_ratios, weights=wts)), "dim_mean": float(np.average(dims, weights=wts)),
        "dim_max": float(max(dims)), "alpha_mean": float(np.average(alphas, weights=wts)),
        "pooling_mean": float(np.average(pools, weights=wts)), "log_batch": math.log(wl.batch_size),
        "world": float(w), "tables": float(len(plan.tables)), "busy_ranks": float(busy),
        "imbalance": float(load.max() / max(load.mean(), 1e-9)), "log_comm_mb": _safe_log(comm_bytes / 1e6),
        **{f"n_{k}": float(v) for k, v in types.items() if k in _TYPES}}
    return feats, load, kernel, shards


def plan_features(cost: CostModel, plan: ShardingPlan, lm: LookupModel) -> dict[str, float]:
    """The step model's features of one plan (`STEP_FEATURES`), from the analytic model and the lookup fit."""
    return _plan_stats(cost, plan, lm)[0]


def analytic_rank_seconds(cost: CostModel, plan: ShardingPlan) -> list[float]:
    """Per rank, the analytic embedding-stage seconds (work + collectives + wait, the step outside the
    stages left out): what `validate-cost` holds against each rank's measured embedding stages."""
    return [r.elapsed - r.other for r in cost.breakdown(plan)]


def rank_features(cost: CostModel, plan: ShardingPlan, lm: LookupModel) -> list[dict[str, float]]:
    """The rank model's features (`RANK_FEATURES`) of each rank of a plan."""
    feats, load, kernel, shards = _plan_stats(cost, plan, lm)
    ranks = cost.breakdown(plan)
    step = cost.plan_cost(plan)
    out = []
    for r, rc in enumerate(ranks):
        emb = rc.elapsed - rc.other
        out.append({**feats, "rank_log_analytic_ms": _safe_log(emb * 1e3),
                    "rank_work_share": (rc.fwd_compute + rc.bwd_compute + rc.optimizer) / step,
                    "rank_load": float(load[r] / max(load.max(), 1e-9)), "rank_shards": float(shards[r])})
    return out


def predict_trees(model: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """Gradient-boosted regression trees stored as arrays (`benchmarks.perfmodel.train.export_trees`):
    init + learning_rate · Σ leaf values, rows of `x` in the model's feature order."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    out = np.full(len(x), float(model["init"]))
    lr = float(model["learning_rate"])
    for tree in model["trees"]:
        left, right = np.asarray(tree["left"]), np.asarray(tree["right"])
        feat, thr, val = np.asarray(tree["feature"]), np.asarray(tree["threshold"]), np.asarray(tree["value"])
        node = np.zeros(len(x), dtype=np.int64)
        active = left[node] >= 0
        while active.any():
            i = np.nonzero(active)[0]
            go_left = x[i, feat[node[i]]] <= thr[node[i]]
            node[i] = np.where(go_left, left[node[i]], right[node[i]])
            active = left[node] >= 0
        out += lr * val[node]
    return out


def correction(model: dict[str, Any], kind: str, x: np.ndarray) -> np.ndarray:
    """The log factor measured / analytic the model applies to rows `x` of `kind` ("step" or "rank"): the trees'
    prediction × the shrinkage `<kind>_lambda` that leave-one-family-out CV chose when training (1 in older
    files). Shrinking matters because a family unlike the training ones gets a correction learned on others; on
    the collections pooled the CV kept a tenth of it (results/validation/learned_shrink_20261203.md)."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    return float(model.get(f"{kind}_lambda", 1.0)) * predict_trees(model[kind], x)


def load_learned(path: str | Path) -> dict[str, Any]:
    """A trained model file (JSON): {"step": trees, "rank": trees, "features": ..., "provenance": ...}."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise LearnedModelError(f"learned model {str(path)!r} cannot be read: {e}") from None
    if not isinstance(data, dict) or "step" not in data or list(data.get("step_features", [])) != list(STEP_FEATURES):
        raise LearnedModelError(f"learned model {str(path)!r} is not a model of this version's features "
                                "(re-run `dlrmbench perfmodel train`)")
    return data


@dataclass
class LearnedCostModel:
    """The analytic model's step and rank times × exp(λ × the trees' predicted log ratio measured / analytic)."""

    workload: PlanWorkload
    topology: Topology
    model: dict[str, Any]
    lookup: LookupModel = field(default_factory=LookupModel)

    def __post_init__(self) -> None:
        self.analytic = CostModel(self.workload, self.topology)

    def plan_cost(self, plan: ShardingPlan) -> float:
        f = plan_features(self.analytic, plan, self.lookup)
        x = np.array([[f[k] for k in STEP_FEATURES]])
        return self.analytic.plan_cost(plan) * float(np.exp(correction(self.model, "step", x)[0]))

    def rank_seconds(self, plan: ShardingPlan) -> list[float]:
        """Per rank, predicted embedding-stage seconds (the analytic ones where no rank model was trained)."""
        base = analytic_rank_seconds(self.analytic, plan)
        if not self.model.get("rank"):
            return base
        feats = rank_features(self.analytic, plan, self.lookup)
        x = np.array([[f[k] for k in RANK_FEATURES] for f in feats])
        return [b * float(math.exp(r)) for b, r in zip(base, correction(self.model, "rank", x), strict=True)]

