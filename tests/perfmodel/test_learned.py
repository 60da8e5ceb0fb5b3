"""The learned cost model: trees exported as arrays predict what scikit-learn predicts; trained on a tiny
synthetic record set whose measured steps depart from the analytic model in a known way, it learns that departure
on held-out families; the saved model carries its provenance and loads; collection keys are resumable."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.perfmodel import collect
from benchmarks.perfmodel import train as train_mod
from benchmarks.perfmodel.cases import build_plan, family
from benchmarks.perfmodel.cli import main as perfmodel_main
from benchmarks.perfmodel.train import GBT, case_model, export_trees, read_records, train
from sharding.learned_cost import (
    STEP_FEATURES,
    LearnedCostModel,
    LearnedModelError,
    LookupModel,
    load_learned,
    plan_features,
    predict_trees,
)

HW = "dev_2core"


def test_exported_trees_predict_what_sklearn_predicts() -> None:
    from sklearn.ensemble import GradientBoostingRegressor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 4))
    y = np.sin(x[:, 0]) + 0.5 * (x[:, 1] > 0.3)
    m = GradientBoostingRegressor(**dict(GBT, n_estimators=30)).fit(x, y)
    trees = export_trees(m, x)
    assert np.allclose(predict_trees(trees, x), m.predict(x))
    assert np.allclose(predict_trees(json.loads(json.dumps(trees)), x[:3]), m.predict(x[:3]))


def _synthetic_records(n_families: int) -> list[dict]:
    """Step records of real families and plans, with the 'measured' step = analytic × (1.5 for the one-rank plans, else 0.8):
    a departure the analytic model does not have and the trees can learn from the families they train on."""
    out = []
    for seed in range(n_families):
        for plan in ("all_rw", "one_rank", "all_tw"):
            rec = {"key": f"step/{seed}/{plan}/w2", "kind": "step", "family": seed, "plan_name": plan, "world": 2,
                   "overrides": family(seed), "plan": build_plan(plan, family(seed), 2), "hardware": HW,
                   "loadavg": [0.5, 0.5, 0.5], "machine": {"cpu_model": "test"}, "git_sha": "abc"}
            cost, p, _ = case_model(rec, HW)
            factor = 1.5 if plan == "one_rank" else 0.8
            rec["step_s"] = cost.plan_cost(p) * factor
            rec["rank_s"] = [r.elapsed * factor for r in cost.breakdown(p)]
            out.append(rec)
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("perfmodel")
    records = d / "records.jsonl"
    collect.append(records, _synthetic_records(10))
    model = train(str(records), HW, str(d / "model.json"), {"git_sha": "abc", "machine": {"cpu_model": "x"}})
    return d, model


def test_trained_model_learns_a_departure_on_held_out_families(trained) -> None:
    _, model = trained
    ev = model["heldout"]["step"]
    assert ev["heldout_records"] >= 3 and ev["train_records"] >= 20
    assert ev["analytic"]["median"] > 0.2  # held out: families 0 and 5, all off by 25% or 33%
    assert ev["learned"]["median"] < ev["analytic"]["median"] / 2
    imp = list(model["importance"]["step"].values())
    assert sum(imp) == pytest.approx(1.0, abs=1e-3) and imp == sorted(imp, reverse=True)


def test_saved_model_has_provenance_and_predicts_through_the_planner_interface(trained) -> None:
    from dataclasses import replace

    from benchmarks.distributed.config import compose_dist
    from embedding.workload_config import build_workload
    from sharding.plan import ShardingPlan
    from sharding.topology import load_topology
    from sharding.workload import PlanWorkload

    d, _ = trained
    model = load_learned(d / "model.json")
    prov = model["provenance"]
    assert prov["step_records"] == 30 and prov["hardware"] == HW and prov["git_sha"] == "abc"
    assert prov["trained"] and prov["loadavg_1min"]["median"] == 0.5
    over = family(3)
    spec = replace(build_workload(compose_dist(over).workload), mode="train")
    topo = load_topology(HW, ranks=2)
    plan = ShardingPlan.from_dict(build_plan("all_rw", over, 2))
    lcm = LearnedCostModel(PlanWorkload.from_spec(spec), topo, model, LookupModel.from_hardware(HW, topo))
    f = plan_features(lcm.analytic, plan, lcm.lookup)
    expected = lcm.analytic.plan_cost(plan) * math.exp(predict_trees(model["step"], [[f[k] for k in STEP_FEATURES]])[0])
    assert lcm.plan_cost(plan) == pytest.approx(expected)
    assert len(lcm.rank_seconds(plan)) == 2 and all(x > 0 for x in lcm.rank_seconds(plan))


def test_evaluate_prints_held_out_errors_and_importance(trained, capsys) -> None:
    d, _ = trained
    assert perfmodel_main(["evaluate", "--model", str(d / "model.json"), "--records", str(d / "records.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "held-out |error|" in out and "step importance" in out and '"step_learned_median"' in out


def test_a_file_of_another_feature_set_is_refused(tmp_path) -> None:
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"step": {}, "step_features": ["other"]}))
    with pytest.raises(LearnedModelError, match="re-run"):
        load_learned(p)


def test_collection_is_resumable_and_families_are_seeded(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    collect.append(path, [{"key": "step/0/all_rw/w2"}])
    with open(path, "a") as f:
        f.write('{"key": "cut off')  # an interrupted write
    assert collect.done_keys(path) == {"step/0/all_rw/w2"}
    keys = [k for k, _, _ in collect.step_keys(2, 2, ("all_rw", "one_rank"))]
    assert keys == ["step/0/all_rw/w2", "step/0/one_rank/w2", "step/1/all_rw/w2", "step/1/one_rank/w2"]
    assert family(4) == family(4) and family(4) != family(5)
    assert collect.lookup_family(2) == collect.lookup_family(2)
    assert read_records(path) == [{"key": "step/0/all_rw/w2"}]


@pytest.mark.parametrize("argv, message", [(["collect", "--kinds", "gpu"], "--kinds 'gpu'"),
                                           (["collect", "--plans", "all_xx"], "--plans 'all_xx'"),
                                           (["collect", "--hardware", "nope"], "no hardware config"),
                                           (["train", "--records", "/no/such.jsonl"], "no such file"),
                                           (["evaluate", "--model", "/no/model.json"], "cannot be read")])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path) -> None:
    assert perfmodel_main([*argv, *(["--records", str(tmp_path / "r.jsonl")] if argv[0] == "collect" else [])]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.jsonl").exists()


def test_plan_with_the_learned_cost_model_writes_the_candidate_it_rates_fastest(trained, tmp_path, capsys) -> None:
    from benchmarks import plan_cli
    from sharding.plan import ShardingPlan

    d, _ = trained
    out = tmp_path / "p.json"
    argv = ["plan", "--tables", "smoke", "--hardware", HW, "--ranks", "2", "--optimizer", "greedy_size",
            "--no-torchrec-estimate", "--out", str(out), "--cost-model", "learned"]
    assert plan_cli.main([*argv, "--learned-model", str(d / "model.json")]) == 0
    choice = ShardingPlan.load(out).meta["learned_choice"]
    scores = choice["candidates"]
    assert len(scores) >= 2 and choice["chosen"] == min(scores, key=lambda n: scores[n]["learned_ms"])
    assert "learned cost model chose" in capsys.readouterr().out
    assert plan_cli.main([*argv, "--learned-model", str(tmp_path / "none.json")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_compare_plans_adds_the_learned_models_choice_as_a_plan_to_run(trained) -> None:
    from benchmarks.compare_plans import PLANNERS, _planned_cases
    from sharding.plan import ShardingPlan

    d, _ = trained
    cases = _planned_cases(["workload=smoke", "dist.mode=train"], HW, 2, str(d / "model.json"))
    assert [c["label"] for c in cases[:-1]] == list(PLANNERS)  # every plan made once, before any round runs
    plan = ShardingPlan.from_dict(cases[-1]["plan"])
    assert cases[-1]["label"] == f"learned:{plan.meta['learned_choice']['chosen']}" and plan.world_size == 2


def test_collected_plans_are_resolved_before_the_job_and_kept() -> None:
    from benchmarks.perfmodel.cases import resolved_plan

    greedy = resolved_plan("greedy_size", family(1), 2, HW)
    assert greedy["world_size"] == 2 and len(greedy["tables"]) == len(family(1)[1].split(","))
    assert resolved_plan("all_rw", family(1), 2, HW) == build_plan("all_rw", family(1), 2)
    with pytest.raises(ValueError, match="planned in the job"):
        resolved_plan("ours", family(1), 2, HW)


def test_evaluating_on_another_machines_records_warns_and_scores_steps_and_ranks(trained, tmp_path,
                                                                                 capsys) -> None:
    import json

    d, _ = trained
    lines = (d / "records.jsonl").read_text().splitlines()
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps(dict(json.loads(x), machine={"cpu_model": "x", "cores": 1})) + "\n"
                             for x in lines))
    model = json.loads((d / "model.json").read_text())
    model["provenance"]["machine"] = {"cpu_model": "x", "cores": 2}
    (tmp_path / "m.json").write_text(json.dumps(model))
    assert perfmodel_main(["evaluate", "--model", str(tmp_path / "m.json"), "--records", str(other)]) == 0
    out = capsys.readouterr().out
    assert "cores 2" in out and "(the records' machine)" in out
    scores = json.loads(out.strip().splitlines()[-1])
    assert {"step_learned_median", "rank_learned_median", "step_analytic_p90"} <= set(scores)


def _lookup_records() -> tuple[list[dict], LookupModel]:
    """FBGEMM records that take the calibration fit's time / 1.25 (a process alone), torch ones 5× faster."""
    from benchmarks.perfmodel.collect import lookup_family

    lm = LookupModel(call_s=50e-6, near_bandwidth=50e9, dram_bandwidth=20e9, colocated=1.25, id_s=3e-9)
    recs = []
    for seed in range(20):
        p = lookup_family(seed)
        ids = p["batch"] * p["pooling"]
        for backend in ("fbgemm", "torch"):
            r = {"key": f"lookup/{seed}/{backend}", "kind": "lookup", "backend": backend, **p, "ids": ids,
                 "unique_rows": ids}
            fit = train_mod.lookup_price(r, lm) * lm.colocated  # the fit as calibrated: every rank busy
            r["fwd_s"] = fit / lm.colocated if backend == "fbgemm" else fit / 5
            recs.append(r)
    return recs, lm


def test_analytic_lookup_error_prices_fbgemm_alone_and_leaves_torch_to_the_trees() -> None:
    recs, lm = _lookup_records()
    x, y, groups, priced = train_mod.lookup_table(recs, lm)
    assert priced.sum() == 20 and np.allclose(y[priced], 0.0)  # FBGEMM alone: the fit / the co-located slowdown
    ev = train_mod.evaluate_split(x, y, groups, train_mod.LOOKUP_FEATURES, priced)
    assert ev["analytic"]["median"] < 1e-9 and ev["analytic_on"] == "fbgemm"
    assert ev["priced_records"] == ev["heldout_records"] // 2
    everything = train_mod.evaluate_split(x, y, groups, train_mod.LOOKUP_FEATURES)  # torch's 5× in the median
    assert everything["analytic"]["median"] > 0.5
