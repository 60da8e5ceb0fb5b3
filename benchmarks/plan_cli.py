"""`dlrmbench plan ...` and `dlrmbench compare ...`: plan tables onto hardware with any optimizer, compare plans.

  plan --tables criteo_terabyte --hardware dgx_h100 --ranks 8 --optimizer ours --out plan.json
  compare a.json b.json --png compare.png
Bad input: one message on stderr, exit code 2, nothing written.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.errors import OneLineParser, check_output_file, one_line
from embedding.files import umask_mode
from embedding.spec import SpecError
from sharding import (
    BASELINES,
    CostModel,
    PlanError,
    PlanWorkload,
    ShardingPlan,
    TopologyError,
    load_topology,
    lower_bound,
    optimize,
    validate_plan,
)
from sharding.learned_cost import LearnedModelError
from sharding.optimizer import SEARCH_ITERS
from sharding.tablesets import load_tables

__all__ = ["main", "make_plan", "rank_table", "context_from_meta"]

OPTIMIZERS = ["ours", "torchrec", *BASELINES]


def make_plan(optimizer: str, wl: PlanWorkload, topo: Any, search_iters: int | None = None,
              torchrec_timeout: int | None = None, anneal: int = 0, torchrec_search: int = 0) -> ShardingPlan:
    if optimizer == "ours":
        return optimize(wl, topo, search_iters=search_iters, anneal=anneal, torchrec_search=torchrec_search)
    if optimizer == "torchrec":
        from sharding.torchrec_adapter import run_torchrec_planner
        return run_torchrec_planner(wl, topo, timeout_s=torchrec_timeout)
    return BASELINES[optimizer](wl, topo)


def rank_table(plan: ShardingPlan, cost: CostModel) -> str:
    tiers = [t.name for t in cost.topology.tiers]
    head = f"{'rank':>5} {'compute ms':>11} {'comms ms':>9} {'total ms':>9} " + " ".join(
        f"{t + ' GB':>9}" for t in tiers) + f" {'shards':>6}"
    lines = [head]
    for r in cost.breakdown(plan):
        lines.append(f"{r.rank:>5} {r.compute * 1e3:>11.4f} {r.comms * 1e3:>9.4f} {r.total * 1e3:>9.4f} "
                     + " ".join(f"{r.memory.get(t, 0) / 1e9:>9.3f}" for t in tiers) + f" {r.shards:>6}")
    return "\n".join(lines)


def resource_table(plan: ShardingPlan, cost: CostModel) -> str:
    """Where the step goes: per resource whose slowest rank the step pays, max and mean over ranks; imbalance =
    max − mean, what a perfectly balanced placement of the same shards would save."""
    loads, rest = cost.resource_loads(plan)
    rows = sorted(((k, float(v.max()), min(float(v.mean()), float(v.max()))) for k, v in loads.items() if v.max() > 0),
                  key=lambda r: r[2] - r[1])
    lines = [f"{'resource':<28} {'max ms':>9} {'mean ms':>9} {'max/mean':>8} {'imbalance ms':>12}"]
    lines += [f"{k:<28} {mx * 1e3:>9.4f} {mn * 1e3:>9.4f} {mx / mn:>8.3f} {(mx - mn) * 1e3:>12.4f}" for k, mx, mn in rows]
    imb = sum(mx - mn for _, mx, mn in rows)
    lines.append(f"step = Σ max + fixed latencies and step overhead {rest * 1e3:.4f} ms; imbalance {imb * 1e3:.4f} ms "
                 f"({imb / (imb + rest + sum(mn for _, _, mn in rows)) :.1%} of the step)")
    return "\n".join(lines)


def _annotate(plan: ShardingPlan, cost: CostModel, context: dict[str, Any], wall_s: float, estimate: bool) -> None:
    lb = lower_bound(cost)
    c = cost.plan_cost(plan)
    plan.meta.update({"context": context, "plan_wall_s": wall_s, "cost_s": c, "lower_bound": lb.to_dict(),
                      "ratio_to_lower_bound": c / lb.value, "per_rank": [r.to_dict() for r in cost.breakdown(plan)],
                      "topology": cost.topology.to_dict(),
                      "resources": {k: {"max_s": float(v.max()), "mean_s": float(v.mean())}
                                    for k, v in cost.resource_loads(plan)[0].items()}})
    if estimate:
        from sharding.torchrec_adapter import torchrec_estimate
        try:
            plan.meta["torchrec_estimate"] = torchrec_estimate(plan, cost.workload, cost.topology)
        except Exception as e:  # an estimate that TorchRec cannot make is reported, not fatal
            plan.meta["torchrec_estimate"] = {"error": f"{type(e).__name__}: {e}"[:300]}


def context_from_meta(plan: ShardingPlan) -> tuple[PlanWorkload, Any]:
    ctx = plan.meta.get("context")
    if not ctx:
        raise PlanError("plan file records no context (tables, hardware): pass --tables, --hardware, --ranks")
    wl = PlanWorkload(load_tables(ctx["tables"]), ctx["batch_size"], ctx["mode"])
    return wl, load_topology(ctx["hardware"], ctx["ranks"], ctx.get("ranks_per_host"), ctx.get("hbm_gib"))


def _topology(args: argparse.Namespace) -> Any:
    return load_topology(args.hardware, args.ranks, args.ranks_per_host, args.hbm_gib)


def _plan(args: argparse.Namespace) -> int:
    for flag, value, least in (("--search-iters", args.search_iters, 1), ("--anneal", args.anneal, 0),
                               ("--torchrec-search", args.torchrec_search, 0)):
        if value is not None and value < least:
            raise PlanError(f"{flag} {value}: must be an integer ≥ {least}")
    topo = _topology(args)
    wl = PlanWorkload(load_tables(args.tables), args.batch_size, args.mode)
    if args.cost_model == "learned":
        from sharding.learned_cost import load_learned

        load_learned(args.learned_model)  # a missing or stale model fails before any planning
    t0 = time.perf_counter()
    plan = make_plan(args.optimizer, wl, topo, args.search_iters, args.torchrec_timeout, args.anneal,
                     args.torchrec_search)
    wall = time.perf_counter() - t0
    cost = CostModel(wl, topo)
    validate_plan(plan, wl, topo, cost)
    if args.cost_model == "learned":  # the candidates ranked by the learned model (benchmarks.perfmodel.choose)
        from benchmarks.perfmodel.choose import choose_learned

        plan, scored = choose_learned(plan, args.optimizer, wl, topo, args.hardware, args.learned_model)
        for name, s in sorted(scored.items(), key=lambda kv: kv[1]["learned_ms"]):
            print(f"  {name:<22} analytic {s['analytic_ms']:.4f} ms, learned {s['learned_ms']:.4f} ms")
        print(f"learned cost model chose {plan.meta['learned_choice']['chosen']}")
    ctx = {"tables": args.tables, "hardware": args.hardware, "ranks": topo.world_size, "batch_size": args.batch_size,
           "mode": args.mode, "optimizer": args.optimizer, "ranks_per_host": topo.ranks_per_host,
           "hbm_gib": args.hbm_gib}
    _annotate(plan, cost, ctx, wall, not args.no_torchrec_estimate)
    print(rank_table(plan, cost))
    print(resource_table(plan, cost))
    m = plan.meta
    est = m.get("torchrec_estimate", {}).get("perf_ms")
    print(f"{args.optimizer}: {len(wl.tables)} tables on {topo.world_size} ranks planned in {wall:.3f} s; cost "
          f"{m['cost_s'] * 1e3:.4f} ms (slowest rank), lower bound {m['lower_bound']['lower_bound_s'] * 1e3:.4f} ms, "
          f"ratio {m['ratio_to_lower_bound']:.3f}" + (f", TorchRec estimate {est:.4f} ms" if est else ""))
    plan.save(args.out)
    print(f"wrote {args.out}")
    return 0


def _load_plan(path: str) -> ShardingPlan:
    try:
        return ShardingPlan.load(path)
    except (PlanError, OSError, KeyError, TypeError) as e:
        msg = one_line(e) if not isinstance(e, OSError) else (e.strerror or str(e))
        raise PlanError(msg if path in msg else f"{path}: {msg}") from None


def _compare(args: argparse.Namespace) -> int:
    plans = [_load_plan(p) for p in args.plans]
    if args.tables:
        topo = _topology(args)
        wl = PlanWorkload(load_tables(args.tables), args.batch_size, args.mode)
    else:
        wl, topo = context_from_meta(plans[0])
    cost = CostModel(wl, topo)
    for path, p in zip(args.plans, plans, strict=False):
        try:
            validate_plan(p, wl, topo, cost)
        except PlanError as e:
            raise PlanError(f"{path}: {e}") from None
    lb = lower_bound(cost).value
    print(f"{'plan':<28} {'optimizer':<20} {'cost ms':>9} {'ratio':>6} {'max mem GB':>10} {'TorchRec est ms':>15}")
    for path, p in zip(args.plans, plans, strict=False):
        ranks = cost.breakdown(p)
        est = p.meta.get("torchrec_estimate", {}).get("perf_ms")
        print(f"{Path(path).name:<28} {p.optimizer:<20} {max(r.total for r in ranks) * 1e3:>9.4f} "
              f"{max(r.total for r in ranks) / lb:>6.3f} {max(sum(r.memory.values()) for r in ranks) / 1e9:>10.3f} "
              f"{est if est is not None else float('nan'):>15.4f}")
    if args.png:
        _png(args.png, args.plans, plans, cost)
        print(f"wrote {args.png}")
    return 0


def _png(out: str, paths: list[str], plans: list[ShardingPlan], cost: CostModel) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(2, len(plans), figsize=(4 + 3 * len(plans), 6), squeeze=False, sharey="row")
    for i, (path, p) in enumerate(zip(paths, plans, strict=False)):
        ranks = cost.breakdown(p)
        x = np.arange(len(ranks))
        comp = np.array([r.compute for r in ranks]) * 1e3
        comm = np.array([r.comms for r in ranks]) * 1e3
        ax = axes[0][i]
        ax.bar(x, comp, label="compute")
        ax.bar(x, comm, bottom=comp, label="communication")
        ax.set_title(f"{p.optimizer or Path(path).stem}: {max(comp + comm):.3f} ms", fontsize=9)
        ax.set_xlabel("rank")
        bottom = np.zeros(len(ranks))
        for t in cost.topology.tiers:
            m = np.array([r.memory.get(t.name, 0.0) for r in ranks]) / 1e9
            axes[1][i].bar(x, m, bottom=bottom, label=t.name)
            bottom += m
        axes[1][i].set_xlabel("rank")
    axes[0][0].set_ylabel("predicted ms / iteration")
    axes[1][0].set_ylabel("memory GB")
    axes[0][0].legend(fontsize=8)
    axes[1][0].legend(fontsize=8)
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(dir=Path(out).parent or ".", suffix=".png")
    os.fchmod(fd, umask_mode())  # mkstemp's 0600 → what open() would give
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, out)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="dlrmbench", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)

    def workload_args(p: argparse.ArgumentParser, required: bool) -> None:
        p.add_argument("--tables", required=required,
                       help="workload preset (conf/workload), table-list CSV/YAML, or random:COUNT[:SEED]")
        p.add_argument("--hardware", default="dgx_h100", help="conf/hardware preset name or YAML path")
        p.add_argument("--ranks", type=int, default=None, help="resize the hardware to N ranks")
        p.add_argument("--ranks-per-host", type=int, default=None, metavar="N",
                       help="regroup the hardware's ranks into hosts of N (before --ranks)")
        p.add_argument("--hbm-gib", type=float, default=None, metavar="GIB", help="HBM per rank (GiB)")
        p.add_argument("--batch-size", type=int, default=512, help="batch per rank (TorchRec convention)")
        p.add_argument("--mode", choices=["train", "inference"], default="train")

    p = sub.add_parser("plan", help="plan tables onto hardware")
    workload_args(p, True)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="ours")
    p.add_argument("--out", required=True, help="plan JSON to write")
    p.add_argument("--search-iters", type=int, default=None, metavar="N",
                   help=f"ours: local-search iterations per packing (counted work, default {SEARCH_ITERS}; "
                        "no clock decides a plan)")
    p.add_argument("--anneal", type=int, default=0, metavar="N",
                   help="ours: N million proposals of the opt-in long search (sharding.anneal; about 5 M/s here)")
    p.add_argument("--torchrec-search", type=int, default=0, metavar="N",
                   help="ours: also run TorchRec's planner search re-stated on our models (sharding.trec_search), "
                        "each proposer placing ≤ N shards (e.g. 30000), and return a plan no worse on both models "
                        "than its best (opt-in: it can cost our model's rating where the two models disagree)")
    p.add_argument("--torchrec-timeout", type=int, default=None, help="torchrec: planner timeout (s)")
    p.add_argument("--no-torchrec-estimate", action="store_true", help="skip TorchRec's estimate of the plan")
    p.add_argument("--cost-model", choices=["analytic", "learned"], default="analytic",
                   help="learned: the optimizer's and the baselines' plans ranked by the trained model")
    p.add_argument("--learned-model", default="results/perfmodel/model.json", help="with --cost-model learned")
    c = sub.add_parser("compare", help="compare plans for one workload")
    c.add_argument("plans", nargs="+")
    workload_args(c, False)
    c.add_argument("--png", default=None, help="write per-rank stacked bars here")
    return ap


def _check_args(args: argparse.Namespace) -> None:
    """Numbers a plan cannot be made with, refused by name before anything runs."""
    checks = [(args.ranks is None or args.ranks >= 1, f"--ranks {args.ranks} must be ≥ 1 (omit it to keep the "
                                                      "hardware preset's rank count)"),
              (args.batch_size >= 1, f"--batch-size {args.batch_size} must be ≥ 1")]
    if args.command == "plan":
        checks += [(args.anneal >= 0, f"--anneal {args.anneal} must be ≥ 0 (millions of proposals)"),
                   (args.torchrec_search >= 0, f"--torchrec-search {args.torchrec_search} must be ≥ 0 (shards)"),
                   (args.torchrec_timeout is None or args.torchrec_timeout >= 1,
                    f"--torchrec-timeout {args.torchrec_timeout} must be ≥ 1 s")]
    for ok, message in checks:
        if not ok:
            raise PlanError(message)


def main(argv: list[str] | None = None) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    args = _parser().parse_args(argv)
    try:
        _check_args(args)
        if args.command == "plan":
            check_output_file(args.out, "--out", create_folders=False)
        elif args.png:
            check_output_file(args.png, "--png", create_folders=False)
        return _plan(args) if args.command == "plan" else _compare(args)
    except (PlanError, TopologyError, SpecError, ValueError, OSError, HydraException, OmegaConfBaseException,
            LearnedModelError) as e:
        print(f"dlrmbench {args.command}: error: {one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
