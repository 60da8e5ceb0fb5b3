"""`dlrmbench validate-cost [--hardware H] [--model M] [--world-sizes 2] [--quick] [--records F]`: run ≥ 20 plans
for real and hold the cost models to what they measure.

Plans span sharding types (our optimizer's, TorchRec's planner's, greedy, round-robin, all row-wise, column-wise,
table-row-wise, some data-parallel, everything on one rank) over six named workloads (narrow and wide dims, many
small tables, tables far beyond the last-level cache, hot Zipf and uniform ids), on each world size given. None
of them is a calibration plan or drawn from the families `dlrmbench perfmodel collect` trains on: every case is
held out of calibration and training.
Per case: predicted step time (our `CostModel.plan_cost`, the learned model `--model` when one is trained, and
TorchRec's estimator, all on `--hardware`) against the measured step time; per rank: predicted rank time (ours: the rank's work + the collectives it joins + its
wait for slower peers, `RankCost.elapsed`; TorchRec: its shards' perf summed) against the measured embedding
stages of that rank (which include those waits). Error = |predicted − measured| / measured; the table ends with
the median and p90 absolute error of each model. The whole list of cases runs `--rounds` times, one job each, in a
different (seeded) order each round, and each measured figure is the median over rounds of the per-round
medians over steps (the statistic `benchmarks.calibrate` fits with): on a shared machine load from other
processes comes in bursts of seconds, which one round of a case can fall into. The table shows each case's
spread over rounds (min–max of the per-round medians) and the median relative spread, the noise floor any
error figure sits on.
A last table splits each case's step into parts (forward lookup, backward + optimizer, collectives, outside the
stages) measured and predicted, to show which term the model gets wrong.
A `validation` record with those medians is appended next to the cases' own `distributed` records.
`--rescore RUN_ID|latest` measures nothing: it prices an earlier run's cases (their plans and measured times in
`--records`) on `--hardware` / `--model` and prints the same tables, so calibrations and model versions can be
compared on the same measurements.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.distributed.jobs import metric_value, rank_values, run_cases
from benchmarks.errors import InputError, OneLineParser, check_output_file, one_line
from benchmarks.perfmodel.cases import build_plan, run_label
from benchmarks.perfmodel.machine import check_hardware_file, check_machine, loadavg
from benchmarks.perfmodel.reference import try_probes
from benchmarks.records import append_records, environment, git_sha, metric, new_run_id

__all__ = ["main", "WORKLOADS", "build_cases", "error_table", "merge_rounds", "learned_predictions", "stage_table",
           "stage_predictions"]

WORKLOADS = {
    "small4": ["workload=smoke"],
    "uniform8": ["workload=smoke", "workload.rows=[200000,200000,200000,200000,200000,200000,200000,200000]",
                 "workload.dim=32", "workload.pooling.kind=fixed", "workload.pooling.mean=16",
                 "workload.access.kind=uniform", "workload.batch_size=1024"],
    "wide2": ["workload=smoke", "workload.rows=[500000,300000]", "workload.dim=128", "workload.pooling.kind=fixed",
              "workload.pooling.mean=32", "workload.batch_size=512"],
    "many32": ["workload=smoke", f"workload.rows=[{','.join(['3000'] * 16 + ['12000'] * 16)}]", "workload.dim=16",
               "workload.pooling.kind=fixed", "workload.pooling.mean=4", "workload.batch_size=512"],
    "beyond_llc": ["workload=smoke", "workload.rows=[1500000,1000000,800000]", "workload.dim=64",
                   "workload.pooling.kind=fixed", "workload.pooling.mean=8", "workload.access.kind=uniform",
                   "workload.batch_size=512"],
    "hot_zipf6": ["workload=smoke", "workload.rows=[600000,400000,400000,200000,100000,50000]", "workload.dim=64",
                  "workload.pooling.kind=skewed", "workload.pooling.mean=12", "workload.pooling.high=48",
                  "workload.access.kind=zipf", "workload.access.alpha=1.25", "workload.batch_size=512"],
}
PLANS = {"small4": ["ours", "round_robin", "all_rw", "one_rank", "torchrec", "dp_small"],
         "uniform8": ["ours", "all_cw", "greedy_size", "all_twrw"],
         "wide2": ["ours", "all_cw", "all_rw"],
         "many32": ["ours", "dp_small", "all_rw", "one_rank"],
         "beyond_llc": ["ours", "all_rw", "round_robin"],
         "hot_zipf6": ["ours", "greedy_size", "all_cw", "all_twrw"]}


def build_cases(world: int, quick: bool) -> list[dict]:
    """Every (workload, plan) case; `quick`: the first two plans of each workload."""
    cases = []
    for wl, overrides in WORKLOADS.items():
        for plan in PLANS[wl][: 2 if quick else None]:
            cases.append({"label": run_label(f"{wl}/{plan}/w{world}"), "overrides": overrides,
                          "plan": build_plan(plan, overrides, world), "world": world})
    return cases


def _err(pred: float | None, meas: float | None) -> float | None:
    return None if pred is None or not meas else abs(pred - meas) / meas


def _fmt(x: float | None, pct: bool = False) -> str:
    return "—" if x is None else (f"{100 * x:.0f}%" if pct else f"{x:.2f}")


def _ours_rank(record: dict, rank: int) -> float | None:
    per = record.get("prediction", {}).get("ours_per_rank") or []
    if rank >= len(per):
        return None
    r = per[rank]
    return 1e3 * (float(r.get("elapsed_s", r["total_s"])) - float(r.get("other_s", 0.0)))  # embedding stages


def _plan_dict(record: dict, base: Path | None = None) -> dict | None:
    """The plan file a case record names. A relative path is relative to where that run was started, so when it
    is not found from here it is looked up beside the records file (`base`: its folder and the folder above,
    e.g. run/ for run/results/records.jsonl)."""
    f = record.get("plan", {}).get("file")
    if not f:
        return None
    tries = [Path(f)]
    if base is not None and not Path(f).is_absolute():
        tries += [base / f, base.parent / f]
    for p in tries:
        try:
            return json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
    return None


def merge_rounds(rounds: list[list[dict]], base: Path | None = None) -> list[dict]:
    """One summary per case: median over rounds of the measured step and per-rank embedding times (plan files
    looked up as `_plan_dict` does)."""
    by_case: dict[str, list[dict]] = {}
    index: dict[str, list[int]] = {}
    for k, recs in enumerate(rounds):
        for r in recs:
            by_case.setdefault(r["case"], []).append(r)
            index.setdefault(r["case"], []).append(k)
    out = []
    for case, recs in by_case.items():
        first = recs[0]
        ranks = [rank_values(r, "embedding_time") for r in recs]
        steps = [float(metric_value(r, "step_time") or 0.0) for r in recs]
        out.append({"case": case, "types": first["plan"]["sharding_types"], "rounds": len(recs),
                    "run_ids": [r["run_id"] for r in recs], "round_steps": steps, "round_index": index[case],
                    "measured": float(np.median(steps)),
                    "ours": metric_value(first, "predicted_step_time"),
                    "torchrec": metric_value(first, "torchrec_predicted_step_time"),
                    "rank_measured": [float(np.median(v)) for v in zip(*ranks, strict=True)],
                    "rank_ours": [_ours_rank(first, k) for k in range(len(ranks[0]))],
                    "rank_torchrec": rank_values(first, "torchrec_predicted_rank_time") or None,
                    "stages": {k: float(np.median([max(rank_values(r, k) or [0.0]) for r in recs]))
                               for k in MEASURED_STAGES},
                    "world": int(first.get("world_size", len(ranks[0]))), "plan_dict": _plan_dict(first, base)})
    return out


MEASURED_STAGES = ("input_dist", "lookup", "output_dist", "dense_backward", "output_dist_bwd", "lookup_bwd",
                   "optimizer")
# what the stage table compares: (name, measured stages, predicted parts of `CostModel.stage_breakdown`)
STAGE_GROUPS = (("forward lookup", ("lookup",), ("lookup",)),
                ("backward + optimizer", ("lookup_bwd", "optimizer"), ("lookup_bwd", "optimizer")),
                ("collectives", ("input_dist", "output_dist", "output_dist_bwd"),
                 ("input_dist", "output_dist", "output_dist_bwd", "fixed")),
                ("outside the stages", ("outside",), ("outside",)))


def stage_predictions(cases: list[dict], overrides: dict[str, list[str]], hardware: str) -> None:
    """Fill each case's "stage_ours" (ms per part of `CostModel.stage_breakdown`) in place."""
    from benchmarks.perfmodel.train import case_model

    for c in cases:
        if c.get("plan_dict") and c["case"] in overrides:
            cost, plan, _ = case_model({"overrides": overrides[c["case"]], "world": c["world"],
                                        "plan": c["plan_dict"]}, hardware)
            c["stage_ours"] = {k: 1e3 * v for k, v in cost.stage_breakdown(plan).items()}


def stage_table(cases: list[dict]) -> list[str]:
    """Which part of the step our model gets wrong: per case measured / predicted ms of each part (measured: per
    stage the max over ranks, median over rounds; "outside the stages" = step − Σ of those, dense backward
    included), then per part the sums over cases and the median ratio predicted / measured."""
    rows = [c for c in cases if c.get("stage_ours") and c.get("stages")]
    if not rows:
        return []
    names = [g[0] for g in STAGE_GROUPS]
    lines = ["| case | " + " | ".join(f"{n} ms (measured / ours)" for n in names) + " |",
             "|---|" + "---:|" * len(names)]
    tot: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for c in rows:
        meas = dict(c["stages"])
        meas["outside"] = c["measured"] - sum(v for k, v in c["stages"].items() if k != "dense_backward")
        cells = []
        for name, m_keys, p_keys in STAGE_GROUPS:
            m, p = sum(meas.get(k, 0.0) for k in m_keys), sum(c["stage_ours"].get(k, 0.0) for k in p_keys)
            tot[name].append((m, p))
            cells.append(f"{m:.2f} / {p:.2f}")
        lines.append(f"| {c['case'].replace(':', '/')} | " + " | ".join(cells) + " |")
    lines.append("\nper part, over the cases: " + "; ".join(
        f"{n} measured {sum(m for m, _ in v):.1f} ms, ours {sum(p for _, p in v):.1f} ms, median ratio "
        f"{np.median([p / m for m, p in v if m > 0]):.2f}" for n, v in tot.items()) + "\n")
    return lines


def analytic_predictions(cases: list[dict], overrides: dict[str, list[str]], hardware: str) -> None:
    """Refill each case's "ours" / "rank_ours" and TorchRec's estimates from its plan on `hardware` (in place):
    `--rescore` prices measured runs with another calibration or another version of the model."""
    from benchmarks.perfmodel.train import case_model
    from sharding.torchrec_adapter import torchrec_estimate
    from sharding.workload import PlanError

    for c in cases:
        if not c.get("plan_dict") or c["case"] not in overrides:
            continue
        cost, plan, _ = case_model({"overrides": overrides[c["case"]], "world": c["world"],
                                    "plan": c["plan_dict"]}, hardware)
        c["ours"] = 1e3 * cost.plan_cost(plan)
        c["rank_ours"] = [1e3 * (r.elapsed - r.other) for r in cost.breakdown(plan)]
        try:
            est = torchrec_estimate(plan, cost.workload, cost.topology)
            c["torchrec"], c["rank_torchrec"] = est["perf_ms"], list(est["perf_ms_per_rank"])
        except (PlanError, ValueError, RuntimeError):
            c["torchrec"], c["rank_torchrec"] = None, None


def rescored_rounds(records_path: str, run_id: str) -> tuple[dict, list[list[dict]]]:
    """(the validation record `run_id` or the latest full one, its case records grouped by job)."""
    from benchmarks.perfmodel.train import read_records

    recs = read_records(records_path)
    vals = [r for r in recs if r.get("kind") == "validation" and (r["run_id"] == run_id if run_id != "latest"
                                                                  else not r["config"].get("quick"))]
    if not vals:
        raise InputError(f"--rescore {run_id!r}: no such validation record in {records_path!r} (latest: the last "
                         "full validate-cost run)")
    val = vals[-1]
    ids = val["case_run_ids"]
    rounds = [[r for r in recs if r.get("kind") == "distributed" and r["run_id"] == i] for i in ids]
    return val, [r for r in rounds if r]


def learned_predictions(cases: list[dict], overrides: dict[str, list[str]], hardware: str, model: dict) -> None:
    """Fill each case's "learned" step ms and "rank_learned" ms from the trained model (in place)."""
    from benchmarks.perfmodel.train import case_model
    from sharding.learned_cost import LearnedCostModel

    for c in cases:
        if not c.get("plan_dict") or c["case"] not in overrides:
            continue
        cost, plan, lm = case_model({"overrides": overrides[c["case"]], "world": c["world"],
                                     "plan": c["plan_dict"]}, hardware)
        lcm = LearnedCostModel(cost.workload, cost.topology, model, lm)
        c["learned"] = 1e3 * lcm.plan_cost(plan)
        c["rank_learned"] = [1e3 * x for x in lcm.rank_seconds(plan)]


def round_errors(cases: list[dict], n_rounds: int) -> list[float | None]:
    """Per round, the median over cases of |ours − that round's measured step| / measured (None: no case)."""
    per: list[list[float]] = [[] for _ in range(n_rounds)]
    for c in cases:
        for k, m in zip(c.get("round_index") or [], c.get("round_steps") or [], strict=False):
            e = _err(c.get("ours"), m)
            if e is not None and k < n_rounds:
                per[k].append(e)
    return [float(np.median(v)) if v else None for v in per]


def hardware_reference(hardware: str) -> dict[str, float] | None:
    """The speed reference a calibrated hardware YAML stored (`reference.reference_of`), None for presets and
    files without one."""
    import yaml

    from benchmarks.perfmodel.reference import reference_of

    p = Path(hardware)
    if p.suffix not in (".yaml", ".yml") or not p.is_file():
        return None
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return reference_of(data) if isinstance(data, dict) else None


def reference_lines(refs: list[dict | None], cal: dict[str, float] | None, errors: list[float | None],
                    ) -> tuple[list[str], list[str]]:
    """(one line per round: its speed reference, its ratios to the calibration's and its median step error;
    one warning line per round whose ratio is off by more than `REF_TOLERANCE`)."""
    from benchmarks.perfmodel.reference import REF_TOLERANCE, drift_warning, ratios

    lines, warns = [f"speed reference per round (tolerance ±{100 * REF_TOLERANCE:.0f}% of the calibration's):"], []
    for k, ref in enumerate(refs):
        err = errors[k] if k < len(errors) else None
        if not ref:
            lines.append(f"- round {k + 1}: no reference; median step error (ours) {_fmt(err, True)}")
            continue
        head = (f"- round {k + 1}: copy {ref['copy_bandwidth'] / 1e9:.1f} GB/s, lookup {1e3 * ref['lookup_s']:.3f} "
                f"ms, MLP {1e3 * ref['mlp_s']:.2f} ms" + (f", all_reduce {1e6 * ref['sync_s']:.0f} µs"
                                                          if "sync_s" in ref else ""))
        if cal:
            r = ratios(ref, cal)
            head += f"; ratio to the calibration's: bandwidth {r['bandwidth']:.2f}, compute {r['compute']:.2f}"
            head += f", sync {r['sync']:.2f}" if "sync" in r else ""
            w = drift_warning(r, f"round {k + 1}")
            if w:
                warns.append(w)
        lines.append(f"{head}; median step error (ours) {_fmt(err, True)}")
    if not cal:
        lines.append("  (the hardware file has no speed reference: re-run `dlrmbench calibrate` to record one)")
    return lines, warns


def run_reference(refs: list[dict | None]) -> dict[str, float] | None:
    """A run's reference: each field's median over its rounds' references (None when none has one)."""
    from benchmarks.perfmodel.reference import combine

    got = [r for r in refs if r]
    return combine(got) if got else None


def rescaled_hardware(hardware: str, refs: list[dict | None], mode: str) -> str:
    """`--rescale`: a temporary copy of `hardware` priced at the run's speed (`reference.rescale_hardware` with
    the ratio of the run's reference to the calibration's); `hardware` itself for mode "none". InputError when
    either side has no reference."""
    import tempfile

    import yaml

    from benchmarks.perfmodel.reference import ratios, rescale_hardware

    if mode == "none":
        return hardware
    cal, now = hardware_reference(hardware), run_reference(refs)
    if cal is None:
        raise InputError(f"--rescale {mode}: the hardware file {hardware!r} has no speed reference (re-run "
                         "`dlrmbench calibrate` to record one)")
    if now is None:
        raise InputError(f"--rescale {mode}: the run has no speed reference (measured before validate-cost "
                         "recorded one)")
    data = yaml.safe_load(Path(hardware).read_text())
    out = rescale_hardware(data, ratios(now, cal), mode)
    fd, path = tempfile.mkstemp(prefix="dlrmbench-rescaled-", suffix=".yaml")
    with open(fd, "w") as f:
        yaml.safe_dump(out, f, sort_keys=False)
    return path


def _stats(v: list[float]) -> dict[str, float]:
    return {"median": float(np.median(v)), "p90": float(np.quantile(v, 0.9))} if v else {}


def error_table(cases: list[dict]) -> tuple[list[str], dict[str, float]]:
    """Markdown lines (per case, then per rank) and the median (and p90: key + "_p90") absolute errors."""
    lines = ["| case | types | measured step ms | min–max over rounds | ours ms | ours err | learned ms | "
             "learned err | TorchRec ms | TorchRec err |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    spreads = []
    errs: dict[str, list[float]] = {k: [] for k in ("ours", "learned", "torchrec", "ours_rank", "learned_rank",
                                                    "torchrec_rank")}
    rank_lines = ["| case | rank | measured embedding ms | ours ms | ours err | learned ms | learned err | "
                  "TorchRec ms | TorchRec err |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cases:
        meas = c["measured"]
        preds = {k: c.get(k) for k in ("ours", "learned", "torchrec")}
        e = {k: _err(v, meas) for k, v in preds.items()}
        for k, v in e.items():
            errs[k] += [v] if v is not None else []
        types = " ".join(f"{k}{v}" for k, v in c["types"].items())
        rs = c.get("round_steps") or [meas]
        spreads.append((max(rs) - min(rs)) / meas if meas else 0.0)
        name = c["case"].replace(":", "/")
        lines.append(f"| {name} | {types} | {_fmt(meas)} | {min(rs):.1f}–{max(rs):.1f} | "
                     + " | ".join(f"{_fmt(preds[k])} | {_fmt(e[k], True)}" for k in ("ours", "learned", "torchrec"))
                     + " |")
        per = {"ours": c["rank_ours"], "learned": c.get("rank_learned"), "torchrec": c.get("rank_torchrec")}
        for r, m in enumerate(c["rank_measured"]):
            pr = {k: (v[r] if v and r < len(v) else None) for k, v in per.items()}
            er = {k: _err(v, m) for k, v in pr.items()}
            for k, v in er.items():
                errs[f"{k}_rank"] += [v] if v is not None else []
            rank_lines.append(f"| {name} | {r} | {_fmt(m)} | "
                              + " | ".join(f"{_fmt(pr[k])} | {_fmt(er[k], True)}" for k in ("ours", "learned", "torchrec"))
                              + " |")
    med: dict[str, float] = {}
    for k, v in errs.items():
        st = _stats(v)
        if st:
            med[k], med[f"{k}_p90"] = st["median"], st["p90"]
    med["round_spread"] = float(np.median(spreads)) if spreads else 0.0

    def summary(suffix: str) -> str:
        return ", ".join(f"{name} {_fmt(med.get(k + suffix), True)} (p90 {_fmt(med.get(k + suffix + '_p90'), True)})"
                         for k, name in (("ours", "ours"), ("learned", "learned"), ("torchrec", "TorchRec")))

    lines.append(f"\nmedian absolute error of the step time: {summary('')} ({len(cases)} cases, median over "
                 f"{max(c['rounds'] for c in cases)} rounds; median spread over rounds (max − min) / median: "
                 f"{_fmt(med['round_spread'], True)})\n")
    rank_lines.append(f"\nmedian absolute error per rank: {summary('_rank')}")
    return lines + rank_lines, med


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="dlrmbench validate-cost", description=__doc__.splitlines()[0])
    p.add_argument("--hardware", default="", help="hardware preset or YAML (default: "
                   "results/hardware/calibrated.yaml when `dlrmbench calibrate` wrote it, else dev_2core)")
    p.add_argument("--world-sizes", default="2", help="comma-separated rank counts, one job each")
    p.add_argument("--model", default="", help="trained learned model (default: results/perfmodel/model.json "
                   "when `dlrmbench perfmodel train` wrote it; 'none': analytic and TorchRec only)")
    p.add_argument("--workloads", default="", help=f"comma-separated subset of {list(WORKLOADS)} (default all)")
    p.add_argument("--quick", action="store_true", help="2 plans per workload, 5 timed steps, one round "
                   "(a few minutes)")
    p.add_argument("--rounds", type=int, default=5, help="jobs over the whole case list; median over rounds")
    p.add_argument("--repeats", type=int, default=20, help="timed steps per case and round")
    p.add_argument("--records", default="results/records.jsonl")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--rescale", default="none", choices=("none", "reference", "compute"),
                   help="price on the calibration scaled by the speed reference measured before each round "
                   "against the calibration's: 'reference' = bandwidths × the bandwidth ratio, fixed times / the "
                   "compute ratio; 'compute' = everything by the compute ratio; default none")
    p.add_argument("--rescore", default="", metavar="RUN_ID", help="measure nothing: price the cases of an "
                   "earlier validate-cost run in --records (its run id, or 'latest') with --hardware and --model "
                   "and print the tables (nothing is written)")
    return p


def check_args(hardware: str, records: str, timeout: float, worlds: list[int]) -> None:
    """What every job of validate-cost or compare-plans needs, checked once before the first job starts."""
    from benchmarks.distributed.config import TIMEOUT_MAX_S
    from sharding.topology import load_topology

    if not 0 < timeout <= TIMEOUT_MAX_S:
        raise InputError(f"--timeout {timeout} must be > 0 and ≤ {TIMEOUT_MAX_S} s")
    check_output_file(records, "--records")
    for w in worlds:
        load_topology(hardware, ranks=w)


def default_hardware(given: str) -> str:
    if given:
        return given
    calibrated = Path("results/hardware/calibrated.yaml")
    return str(calibrated) if calibrated.is_file() else "dev_2core"


def default_model(given: str) -> str:
    """The learned model to score: `given`, '' for none, else the trained default when it exists."""
    if given == "none":
        return ""
    if given:
        return given
    trained = Path("results/perfmodel/model.json")
    return str(trained) if trained.is_file() else ""


def _rescore(records: str, run_id: str, hw: str, model: dict | None, model_path: str, mode: str = "none") -> int:
    """`--rescore`: the tables of an earlier run's measurements, priced on `hw` (and `model`; `mode`: `hw`
    rescaled by the run's speed reference, `rescaled_hardware`)."""
    try:
        val, per_round = rescored_rounds(records, run_id)
        refs = list(val.get("reference") or [])
        priced = rescaled_hardware(hw, refs, mode)
    except (InputError, OSError) as e:
        print(f"dlrmbench validate-cost: error: {one_line(e)}", file=sys.stderr)
        return 2
    try:
        return _rescore_priced(records, val, per_round, refs, hw, priced, model, model_path, mode)
    finally:
        if priced != hw:
            Path(priced).unlink(missing_ok=True)


def _rescore_priced(records: str, val: dict, per_round: list[list[dict]], refs: list, hw: str, priced: str,
                    model: dict | None, model_path: str, mode: str) -> int:
    cases = merge_rounds(per_round, Path(records).resolve().parent)
    lost = [c for c in cases if not c.get("plan_dict")]
    if lost:  # a rescore that kept the recorded predictions would compare nothing: refuse before pricing
        name = next((r.get("plan", {}).get("file") for rs in per_round for r in rs if r["case"] == lost[0]["case"]),
                    None)
        print(f"dlrmbench validate-cost: error: --rescore: {len(lost)} of {len(cases)} cases' plan files are not "
              f"found (e.g. {name!r}, looked up from here and beside {records!r}): run it from the folder the "
              "measurement was started in", file=sys.stderr)
        return 2
    overrides = {c["case"]: WORKLOADS[c["case"].split(":")[0]] for c in cases}
    analytic_predictions(cases, overrides, priced)
    if model is not None:
        learned_predictions(cases, overrides, priced, model)
    stage_predictions(cases, overrides, priced)
    lines, _ = error_table(cases)
    ref_lines, warns = reference_lines(refs or [None] * len(per_round), hardware_reference(hw),
                                       round_errors(cases, len(per_round)))
    print("\n".join(lines + stage_table(cases) + ref_lines))
    for w in warns:
        print(w, file=sys.stderr)
    print(f"rescored: validate-cost run {val['run_id']} ({val['time']}, measured with hardware "
          f"{val['config']['hardware']!r}; load average before and after each round {val['loadavg']}) priced on "
          f"{hw!r} (rescale {mode}), learned model {model_path or 'none'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "validate-cost":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    try:
        worlds = [int(x) for x in args.world_sizes.split(",")]
        if any(w < 2 for w in worlds):
            raise ValueError
    except ValueError:
        print(f"dlrmbench validate-cost: error: --world-sizes {args.world_sizes!r} must list integers ≥ 2",
              file=sys.stderr)
        return 2
    if args.rounds < 1 or args.repeats < 1:
        print("dlrmbench validate-cost: error: --rounds and --repeats must be ≥ 1", file=sys.stderr)
        return 2
    chosen = [w for w in args.workloads.split(",") if w] or list(WORKLOADS)
    if any(w not in WORKLOADS for w in chosen):
        print(f"dlrmbench validate-cost: error: --workloads {args.workloads!r}: allowed {', '.join(WORKLOADS)}",
              file=sys.stderr)
        return 2
    hw = default_hardware(args.hardware)
    from sharding.learned_cost import LearnedModelError, load_learned
    from sharding.topology import TopologyError, load_topology

    try:
        check_args(hw, args.records, args.timeout, worlds)
    except (ValueError, OSError) as e:
        print(f"dlrmbench validate-cost: error: {one_line(e)}", file=sys.stderr)
        return 2
    try:
        load_topology(hw)
    except TopologyError as e:
        print(f"dlrmbench validate-cost: error: --hardware {hw!r}: {e}", file=sys.stderr)
        return 2
    model_path = default_model(args.model)
    try:
        model = load_learned(model_path) if model_path else None
    except LearnedModelError as e:
        print(f"dlrmbench validate-cost: error: --model: {e}", file=sys.stderr)
        return 2
    warnings = check_hardware_file(hw)
    if model is not None:
        warnings += [f"{w} ({model_path})" for w in check_machine(model["provenance"].get("machine"),
                                                                  what="learned model")]
    for w in warnings:
        print(w, file=sys.stderr)
    if args.rescore:
        return _rescore(args.records, args.rescore, hw, model, model_path, args.rescale)
    if args.rescale != "none" and hardware_reference(hw) is None:
        print(f"dlrmbench validate-cost: error: --rescale {args.rescale}: the hardware file {hw!r} has no speed "
              "reference (re-run `dlrmbench calibrate` to record one)", file=sys.stderr)
        return 2
    rounds = 1 if args.quick else args.rounds
    overrides = [f"dist.hardware={hw}", "dist.model=embedding", "dist.mode=train"]
    overrides += ["dist.repeats=5", "dist.warmup=2"] if args.quick else [f"dist.repeats={args.repeats}"]
    per_round: list[list[dict]] = [[] for _ in range(rounds)]
    rc, loads, case_overrides, refs = 0, [loadavg()], {}, []
    for k in range(rounds):
        refs.append(try_probes(worlds[0]))  # before every round: the machine's speed now
        for w in worlds:
            cases = [c for c in build_cases(w, args.quick) if c["label"].split(":")[0] in chosen]
            case_overrides.update({c["label"]: c["overrides"] for c in cases})
            random.Random(k).shuffle(cases)  # a burst of load hits different cases in different rounds
            code, found = run_cases(cases, overrides, w, args.records, args.timeout)
            rc, per_round[k] = rc or code, per_round[k] + found
            loads.append(loadavg())
    records = [r for recs in per_round for r in recs]
    if not records:
        return rc or 1
    cases = merge_rounds(per_round)
    try:
        priced = rescaled_hardware(hw, refs, args.rescale)
    except InputError as e:  # every probe failed: the run is kept, priced as calibrated
        print(f"warning: {one_line(e)}; priced without rescaling", file=sys.stderr)
        priced = hw
    try:
        if priced != hw:
            analytic_predictions(cases, case_overrides, priced)
        if model is not None:
            learned_predictions(cases, case_overrides, priced, model)
        stage_predictions(cases, case_overrides, priced)
    finally:
        if priced != hw:
            Path(priced).unlink(missing_ok=True)
    lines, med = error_table(cases)
    lines += stage_table(cases)
    ref_lines, warns = reference_lines(refs, hardware_reference(hw), round_errors(cases, rounds))
    print("\n".join(lines + ref_lines))
    for w in warns:
        print(w, file=sys.stderr)
    print(f"load average (1, 5, 15 min) before and after each round: {loads}; learned model: "
          f"{model_path or 'none'}; every case is held out of calibration and of the learned model's training")
    how = f"median over cases of |predicted − measured| / measured, hardware {hw!r}"
    append_records(args.records, [{
        "run_id": new_run_id(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_sha": git_sha(),
        "env": environment(), "kind": "validation", "backend": "torchrec_dmp", "config": {"hardware": hw,
        "world_sizes": worlds, "quick": args.quick, "rounds": rounds, "model": model_path,
        "workloads": chosen, "rescale": args.rescale}, "cases": [c["case"] for c in cases], "loadavg": loads,
        "reference": refs,
        "case_run_ids": sorted({r["run_id"] for r in records}),
        "metrics": [metric(f"p90_abs_error_{k[:-4]}" if k.endswith("_p90") else f"median_abs_error_{k}", v,
                           "fraction", (how.replace("median", "p90", 1) if k.endswith("_p90") else how)
                           + (" (per rank: embedding stages)" if "rank" in k else ""))
                    for k, v in med.items() if k != "round_spread"]
        + [metric("median_round_spread", med["round_spread"], "fraction", "median over cases of (max − min) / "
                  "median of the per-round median step times")]}])
    return rc


if __name__ == "__main__":
    sys.exit(main())
