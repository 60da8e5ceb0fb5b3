"""Fit and evaluate the learned model on measured records (`benchmarks.perfmodel.collect`).

Features are the analytic model's (`sharding.learned_cost.plan_features` / `rank_features`, on the hardware
file given: its calibration and lookup fit); the target is the log ratio measured / analytic of the step and of
each rank's embedding-stage time, and, for single-process lookups, of the forward time over the calibration's
lookup fit. Gradient-boosted trees (scikit-learn `GradientBoostingRegressor`, depth 3, Huber loss: timings taken
under bursts of load from other processes have outliers that squared error chases) are
exported as arrays (`export_trees`) so that `sharding.learned_cost` predicts with numpy alone.
Held out: families whose seed ≡ 0 mod `HOLDOUT_EVERY` (whole workloads, all their plans), so the error printed
is on workloads the trees never saw. The saved file records the data's provenance: machines, git sha, record
count, the load averages during collection, the hardware file, and the date.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from sharding.learned_cost import (
    RANK_FEATURES,
    STEP_FEATURES,
    LookupModel,
    analytic_rank_seconds,
    plan_features,
    predict_trees,
    rank_features,
)

__all__ = ["case_model", "export_trees", "fit_trees", "step_table", "lookup_table", "train", "evaluate_split", "LOOKUP_FEATURES",
           "choose_lambda", "LAMBDAS", "pooled_tables",
           "HOLDOUT_EVERY", "read_records", "lookup_price", "ANALYTIC_BACKEND"]

HOLDOUT_EVERY = 5
LAMBDAS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)  # shrinkage grid of `choose_lambda`
LOOKUP_FEATURES = ("log_analytic_us", "log_rows", "dim", "log_batch", "pooling", "alpha", "llc_ratio", "unique_share",
                   "backend_torch")
GBT = {"loss": "huber", "n_estimators": 150, "max_depth": 3, "learning_rate": 0.05, "subsample": 0.8, "min_samples_leaf": 3,
       "random_state": 0}


def read_records(path: str | Path) -> list[dict[str, Any]]:
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def export_trees(model: Any, x: np.ndarray) -> dict[str, Any]:
    """A fitted `GradientBoostingRegressor` as arrays: init (what its constant first stage predicts: the
    targets' mean or median by loss), learning rate and each tree's nodes (leaf values as the loss set them)."""
    init = float(model.init_.predict(x[:1])[0])
    trees = []
    for est in model.estimators_[:, 0]:
        t = est.tree_
        trees.append({"left": t.children_left.tolist(), "right": t.children_right.tolist(),
                      "feature": [max(int(f), 0) for f in t.feature], "threshold": t.threshold.tolist(),
                      "value": t.value[:, 0, 0].tolist()})
    return {"init": init, "learning_rate": float(model.learning_rate), "trees": trees}


def fit_trees(x: np.ndarray, y: np.ndarray, names: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, float]]:
    """(exported trees, feature importance by name, summing to 1)."""
    from sklearn.ensemble import GradientBoostingRegressor

    params = dict(GBT, min_samples_leaf=min(GBT["min_samples_leaf"], max(1, len(y) // 4)))
    model = GradientBoostingRegressor(**params).fit(x, y)
    imp = {n: round(float(v), 4) for n, v in zip(names, model.feature_importances_, strict=True)}
    return export_trees(model, x), dict(sorted(imp.items(), key=lambda kv: -kv[1]))


def choose_lambda(x: np.ndarray, y: np.ndarray, groups: np.ndarray, names: tuple[str, ...],
                  ) -> tuple[float, dict[str, float]]:
    """(λ, median error per λ): each family predicted by trees fitted on the others (leave-one-family-out), the
    λ of `LAMBDAS` whose λ · prediction errs least at the median. A correction learned on some families need
    not hold on the next: on the collections pooled (32 families) CV kept λ = 0.1, on one narrow collection
    more; fewer than 3 families: λ = 1 (nothing to judge by)."""
    fams = np.unique(groups)
    if len(fams) < 3:
        return 1.0, {}
    pred = np.zeros_like(y)
    for f in fams:
        te = groups == f
        pred[te] = predict_trees(fit_trees(x[~te], y[~te], names)[0], x[te])
    errs = {str(lam): float(np.median(np.abs(np.exp(-(y - lam * pred)) - 1.0))) for lam in LAMBDAS}
    best = min(LAMBDAS, key=lambda lam: errs[str(lam)])
    return float(best), errs


def case_model(rec: dict[str, Any], hardware: str) -> tuple[Any, Any, LookupModel]:
    """(cost model, plan, lookup fit) of a step record on `hardware`."""
    from dataclasses import replace

    from benchmarks.perfmodel.cases import workload_spec
    from sharding.cost import CostModel
    from sharding.plan import ShardingPlan
    from sharding.topology import load_topology
    from sharding.workload import PlanWorkload

    spec = replace(workload_spec(tuple(rec["overrides"])), mode="train")
    topo = load_topology(hardware, ranks=int(rec["world"]))
    cost = CostModel(PlanWorkload.from_spec(spec), topo)
    return cost, ShardingPlan.from_dict(rec["plan"]), LookupModel.from_hardware(hardware, topo)


def step_table(records: list[dict[str, Any]], hardware: str) -> dict[str, Any]:
    """Step and rank feature rows, targets (log measured / analytic) and groups (family seeds)."""
    xs, ys, groups, xr, yr, gr, analytic, measured = [], [], [], [], [], [], [], []
    for rec in records:
        if rec.get("kind") != "step" or not rec.get("plan") or not rec.get("step_s"):
            continue
        cost, plan, lm = case_model(rec, hardware)
        step = cost.plan_cost(plan)
        f = plan_features(cost, plan, lm)
        xs.append([f[k] for k in STEP_FEATURES])
        ys.append(math.log(rec["step_s"] / step))
        groups.append(int(rec["family"]))
        analytic.append(step)
        measured.append(rec["step_s"])
        for fr, base, m in zip(rank_features(cost, plan, lm), analytic_rank_seconds(cost, plan), rec["rank_s"],
                               strict=False):
            if m > 0 and base > 0:
                xr.append([fr[k] for k in RANK_FEATURES])
                yr.append(math.log(m / base))
                gr.append(int(rec["family"]))
    return {"x": np.array(xs), "y": np.array(ys), "groups": np.array(groups), "xr": np.array(xr),
            "yr": np.array(yr), "gr": np.array(gr), "analytic": np.array(analytic), "measured": np.array(measured)}


ANALYTIC_BACKEND = "fbgemm"  # the kernel the calibration's lookup fit times (FBGEMM TBE, what DMP runs)


def lookup_price(r: dict[str, Any], lm: LookupModel) -> float:
    """The analytic price of a single-process lookup record: the calibration's FBGEMM TBE fit (measured with
    every rank busy) over its co-located slowdown (the same kernel timed with every rank busy / alone), since
    the record's process ran alone."""
    row_bytes = r["dim"] * 4
    miss = lm.miss(r["rows"], row_bytes, r["access"], r["alpha"] or 1.05)
    gather = r["ids"] * row_bytes
    return lm.kernel_s(r["ids"], r["ids"] * 8 + r["batch"] * row_bytes + gather, gather * miss) / lm.colocated


def lookup_table(records: list[dict[str, Any]], lm: LookupModel,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Lookup feature rows, targets (log measured forward / `lookup_price`), seeds, and which rows the analytic
    model prices (FBGEMM's; torch.nn.EmbeddingBag is another kernel the calibration never timed: the trees
    learn it, the analytic error leaves it out)."""
    xs, ys, groups, priced = [], [], [], []
    for r in records:
        if r.get("kind") != "lookup" or not r.get("fwd_s"):
            continue
        row_bytes = r["dim"] * 4
        fit = lookup_price(r, lm)
        xs.append([math.log(fit * 1e6), math.log(r["rows"]), r["dim"], math.log(r["batch"]), r["pooling"],
                   r["alpha"], r["rows"] * row_bytes / lm.llc_bytes, r["unique_rows"] / max(r["ids"], 1),
                   float(r["backend"] == "torch")])
        ys.append(math.log(r["fwd_s"] / fit))
        groups.append(int(r["key"].split("/")[1]))
        priced.append(r["backend"] == ANALYTIC_BACKEND)
    return np.array(xs), np.array(ys), np.array(groups), np.array(priced, dtype=bool)


def _errors(log_ratio: np.ndarray) -> dict[str, float]:
    """Median and p90 of |predicted − measured| / measured from log(measured / predicted)."""
    e = np.abs(np.exp(-log_ratio) - 1.0)
    return {"median": float(np.median(e)), "p90": float(np.quantile(e, 0.9)), "n": int(len(e))}


def evaluate_split(x: np.ndarray, y: np.ndarray, groups: np.ndarray, names: tuple[str, ...],
                   priced: np.ndarray | None = None, shrink: bool = False) -> dict[str, Any]:
    """Train on the families not held out, predict the held-out ones: analytic and learned errors (`shrink`: the
    prediction × the λ that `choose_lambda` picks on the training families alone, as `train` does). With
    `priced` (the rows the analytic model prices), the analytic error is over those held-out rows only and the
    learned one is given over them too ("learned_priced")."""
    test = groups % HOLDOUT_EVERY == 0
    if test.all() or not test.any():
        test = np.arange(len(y)) % HOLDOUT_EVERY == 0  # too few families: hold out every 5th record instead
    trees, _ = fit_trees(x[~test], y[~test], names)
    pred = predict_trees(trees, x[test])
    lam = choose_lambda(x[~test], y[~test], groups[~test], names)[0] if shrink else 1.0
    pred = lam * pred
    if priced is None:
        return {"analytic": _errors(y[test]), "learned": _errors(y[test] - pred),
                "train_records": int((~test).sum()), "heldout_records": int(test.sum())}
    on = priced[test]
    return {"analytic": _errors(y[test][on]), "learned": _errors(y[test] - pred),
            "learned_priced": _errors((y[test] - pred)[on]), "analytic_on": ANALYTIC_BACKEND,
            "train_records": int((~test).sum()), "heldout_records": int(test.sum()), "priced_records": int(on.sum())}


FAMILY_STRIDE = 1000  # pooled collections: file i's families are numbered i·1000 + seed, so none collide


def pooled_tables(paths: list[str], hardwares: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any], tuple]:
    """(all records, the step table, the lookup table) of several collections, each priced on its own hardware
    file (its calibration: the analytic model the correction is learned against must be the one its records
    were measured with)."""
    from sharding.topology import load_topology

    records, tabs, looks = [], [], []
    for i, (path, hw) in enumerate(zip(paths, hardwares, strict=True)):
        recs = read_records(path)
        records += recs
        tab = step_table(recs, hw)
        tab["groups"], tab["gr"] = tab["groups"] + i * FAMILY_STRIDE, tab["gr"] + i * FAMILY_STRIDE
        tabs.append(tab)
        lx, ly, lg, lp = lookup_table(recs, LookupModel.from_hardware(hw, load_topology(hw, ranks=2)))
        looks.append((lx, ly, lg + i * FAMILY_STRIDE, lp))
    tab = {k: np.concatenate([t[k] for t in tabs if len(t[k])]) if any(len(t[k]) for t in tabs) else tabs[0][k]
           for k in tabs[0]}
    look = tuple(np.concatenate([lk[j] for lk in looks if len(lk[1])]) if any(len(lk[1]) for lk in looks)
                 else looks[0][j] for j in range(4))
    return records, tab, look


def train(records_path: str | list[str], hardware: str | list[str], out: str,
          provenance: dict[str, Any]) -> dict[str, Any]:
    """Fit the step, rank and lookup models on all records (the held-out evaluation fits its own), save the
    model with its provenance and held-out errors; return the saved dict. Several records files pool their
    collections, each priced on its own hardware file (one hardware file for all when one is given)."""
    paths = [records_path] if isinstance(records_path, str) else list(records_path)
    hws = [hardware] if isinstance(hardware, str) else list(hardware)
    hws = hws * len(paths) if len(hws) == 1 else hws
    if len(hws) != len(paths):
        raise ValueError(f"{len(paths)} records files and {len(hws)} hardware files: give one hardware file, "
                         "or one per records file")
    records, tab, (lx, ly, lg, lp) = pooled_tables(paths, hws)
    if len(tab["y"]) < 8:
        raise ValueError(f"{', '.join(paths)}: {len(tab['y'])} step records with plans; training needs ≥ 8 "
                         "(run `dlrmbench perfmodel collect`)")
    step, step_imp = fit_trees(tab["x"], tab["y"], STEP_FEATURES)
    rank, rank_imp = fit_trees(tab["xr"], tab["yr"], RANK_FEATURES) if len(tab["yr"]) >= 8 else (None, {})
    step_lam, step_cv = choose_lambda(tab["x"], tab["y"], tab["groups"], STEP_FEATURES)
    rank_lam, rank_cv = (choose_lambda(tab["xr"], tab["yr"], tab["gr"], RANK_FEATURES) if rank is not None
                         else (1.0, {}))
    lookup, lookup_imp = fit_trees(lx, ly, LOOKUP_FEATURES) if len(ly) >= 8 else (None, {})
    steps = [r for r in records if r.get("kind") == "step"]
    loads = [r["loadavg"][0] for r in records if r.get("loadavg")]
    heldout = {"step": evaluate_split(tab["x"], tab["y"], tab["groups"], STEP_FEATURES, shrink=True)}
    if rank is not None:
        heldout["rank"] = evaluate_split(tab["xr"], tab["yr"], tab["gr"], RANK_FEATURES, shrink=True)
    if lookup is not None:
        heldout["lookup"] = evaluate_split(lx, ly, lg, LOOKUP_FEATURES, lp if lp.any() else None)
    model = {"step": step, "rank": rank, "lookup": lookup,
             "step_lambda": step_lam, "rank_lambda": rank_lam, "lambda_cv": {"step": step_cv, "rank": rank_cv}, "step_features": list(STEP_FEATURES),
             "rank_features": list(RANK_FEATURES), "lookup_features": list(LOOKUP_FEATURES),
             "importance": {"step": step_imp, "rank": rank_imp, "lookup": lookup_imp}, "heldout": heldout,
             "provenance": {**provenance, **({"machine": steps[0]["machine"]} if steps and steps[0].get("machine")
                                             else {}), "records": paths[0] if len(paths) == 1 else paths, "step_records": len(tab["y"]),
                            "rank_records": len(tab["yr"]), "lookup_records": len(ly), "hardware": hws[0] if len(set(hws)) == 1 else hws,
                            "machines": sorted({json.dumps(r.get("machine"), sort_keys=True) for r in steps}),
                            "record_git_shas": sorted({str(r.get("git_sha")) for r in records}),
                            "loadavg_1min": {"median": float(np.median(loads)), "max": float(max(loads))}
                            if loads else {}, "trained": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            "gbt": GBT, "target": "log(measured / analytic)",
                            "shrinkage": "λ of LAMBDAS with the least median step (rank) error over "
                                         "leave-one-family-out predictions of the training records",
                            "lookup_analytic": "FBGEMM records only, priced by `lookup_price`"}}
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(model))
    return model
