"""validate-cost: ≥ 20 plans over ≥ 5 workloads, none a training family; the table has the analytic, learned and
TorchRec columns with median and p90 errors; bad input is one line, exit 2, before anything runs."""
from __future__ import annotations

import pytest

from benchmarks import validate_cost
from benchmarks.perfmodel.cases import family


def test_cases_cover_twenty_plans_over_five_workloads_none_from_a_training_family() -> None:
    cases = validate_cost.build_cases(2, quick=False)
    assert len(cases) >= 20 and len({c["label"].split(":")[0] for c in cases}) >= 5
    families = {tuple(family(s)) for s in range(50)}
    assert not any(tuple(c["overrides"]) in families for c in cases)
    quick = validate_cost.build_cases(2, quick=True)
    assert len(quick) == 2 * len(validate_cost.WORKLOADS)


def test_error_table_reports_median_and_p90_of_each_model() -> None:
    cases = [{"case": f"c{i}", "types": {"TW": 2}, "rounds": 1, "round_steps": [10.0], "measured": 10.0,
              "ours": 10.0 + i, "learned": 10.0 + i / 2, "torchrec": 5.0, "rank_measured": [8.0, 8.0],
              "rank_ours": [8.0 + i, 8.0], "rank_learned": [8.0, 8.0], "rank_torchrec": [4.0, 4.0]}
             for i in range(5)]
    lines, med = validate_cost.error_table(cases)
    assert med["ours"] == pytest.approx(0.2) and med["learned"] == pytest.approx(0.1)
    assert med["torchrec"] == pytest.approx(0.5) and med["ours_p90"] == pytest.approx(0.36)
    assert med["learned_rank"] == 0.0 and med["torchrec_rank"] == pytest.approx(0.5)
    text = "\n".join(lines)
    assert "learned err" in text and "p90" in text


def test_cases_without_a_learned_model_show_a_dash() -> None:
    case = {"case": "c", "types": {"RW": 1}, "rounds": 1, "round_steps": [4.0], "measured": 4.0, "ours": 5.0,
            "torchrec": None, "rank_measured": [3.0], "rank_ours": [3.0], "rank_torchrec": None}
    lines, med = validate_cost.error_table([case])
    assert "learned" not in med and "| — | — |" in lines[2]


@pytest.mark.parametrize("argv, message", [(["--workloads", "huge"], "--workloads 'huge'"),
                                           (["--hardware", "nowhere"], "no hardware config"),
                                           (["--model", "/no/model.json"], "cannot be read"),
                                           (["--world-sizes", "1"], "--world-sizes")])
def test_bad_input_is_one_line_before_any_run(argv, message, tmp_path, capsys) -> None:
    records = tmp_path / "r.jsonl"
    assert validate_cost.main([*argv, "--records", str(records)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and not records.exists()


def test_every_case_of_a_job_keeps_its_own_plan_file() -> None:
    from benchmarks.distributed.worker import plan_file
    from benchmarks.perfmodel.cases import run_label
    from benchmarks.perfmodel.collect import step_keys

    cases = validate_cost.build_cases(2, quick=False)
    assert len({plan_file(c["label"]) for c in cases}) == len(cases)
    keys = [k for k, _, _ in step_keys(3, 2)]
    assert len({plan_file(run_label(k)) for k in keys}) == len(keys)


def test_stage_table_shows_which_part_of_the_step_the_model_misses() -> None:
    stages = {"input_dist": 1.0, "lookup": 2.0, "output_dist": 0.5, "dense_backward": 0.3, "output_dist_bwd": 0.5,
              "lookup_bwd": 3.0, "optimizer": 0.2}
    ours = {"input_dist": 1.0, "lookup": 1.0, "output_dist": 0.5, "output_dist_bwd": 0.5, "lookup_bwd": 3.2,
            "optimizer": 0.0, "outside": 1.0}
    case = {"case": "w:p:w2", "measured": 9.0, "stages": stages, "stage_ours": ours}
    lines = validate_cost.stage_table([case, {"case": "no_plan", "measured": 1.0}])
    assert len(lines) == 4 and "w/p/w2" in lines[2]  # header, rule, one case (the one without a plan is left out)
    assert "2.00 / 1.00" in lines[2]  # forward lookup: measured / ours
    assert "3.20 / 3.20" in lines[2] and "1.80 / 1.00" in lines[2]  # backward + optimizer; outside = 9 − 7.2
    assert "forward lookup measured 2.0 ms, ours 1.0 ms, median ratio 0.50" in lines[3]
    assert validate_cost.stage_table([]) == []


def test_collection_can_start_at_another_family() -> None:
    from benchmarks.perfmodel.collect import step_keys

    keys = step_keys(2, 2, ("all_rw",), first=100)
    assert [s for _, s, _ in keys] == [100, 101] and keys[0][0] == "step/100/all_rw/w2"


def _measured_run(tmp_path, plan_file: str = "") -> str:
    """A records file as validate-cost leaves it: one case measured in two jobs, then the validation record (the
    plan file named as `plan_file`, default its absolute path)."""
    import json

    from benchmarks.perfmodel.cases import build_plan

    plan = build_plan("all_rw", validate_cost.WORKLOADS["small4"], 2)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    stages = dict.fromkeys(validate_cost.MEASURED_STAGES, 1.0)
    recs = []
    for run_id, step in (("j1", 9.0), ("j2", 11.0)):
        metrics = [{"name": "step_time", "value": step}, {"name": "predicted_step_time", "value": 1.0}]
        metrics += [{"name": k, "value": v, "rank": r} for r in (0, 1) for k, v in
                    [("embedding_time", 6.0), *stages.items()]]
        recs.append({"run_id": run_id, "kind": "distributed", "case": "small4:all_rw:w2", "world_size": 2,
                     "plan": {"sharding_types": {"RW": 4}, "file": plan_file or str(tmp_path / "plan.json")},
                     "metrics": metrics})
    recs.append({"run_id": "v", "time": "t", "kind": "validation", "config": {"quick": False, "hardware": "x"},
                 "case_run_ids": ["j1", "j2"], "loadavg": [[1.0, 1.0, 1.0]]})
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


def test_rescore_prices_an_earlier_runs_measurements_on_another_calibration(tmp_path, capsys) -> None:
    records = _measured_run(tmp_path)
    assert validate_cost.main(["--rescore", "latest", "--records", records, "--hardware", "dev_2core",
                               "--model", "none"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| small4/all_rw/w2 | RW4 | 10.00 | 9.0–11.0"))
    ours = float(row.split("|")[5])
    assert ours != 1.0 and ours > 0  # priced again on dev_2core, not the recorded prediction
    assert "rescored: validate-cost run v" in out and "per part, over the cases" in out
    assert validate_cost.main(["--rescore", "nope", "--records", records, "--model", "none"]) == 2
    assert "--rescore 'nope'" in capsys.readouterr().err


def test_rescore_from_elsewhere_finds_plan_files_named_relative_to_the_run(tmp_path, monkeypatch, capsys) -> None:
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    records = _measured_run(run / "results", plan_file="results/plan.json")  # as a run started in run/ names it
    monkeypatch.chdir(tmp_path)
    assert validate_cost.main(["--rescore", "latest", "--records", records, "--hardware", "dev_2core",
                               "--model", "none"]) == 0
    out, err = capsys.readouterr()
    row = next(line for line in out.splitlines() if line.startswith("| small4/all_rw/w2 |"))
    assert float(row.split("|")[5]) != 1.0 and "not found" not in err  # priced again, not the recorded 1.0
    (run / "results" / "plan.json").unlink()
    assert validate_cost.main(["--rescore", "latest", "--records", records, "--model", "none"]) == 2
    out, err = capsys.readouterr()  # refused in one line: a rescore keeping the recorded predictions compares nothing
    assert "1 of 1 cases' plan files are not found" in err and len(err.strip().splitlines()) == 1 and not out


def test_compare_plans_rounds_pair_each_plan_with_ours_within_a_round():
    """A busy round slows every plan in it: the paired ratio to ours stays put while the raw step times move,
    and a plan identical to ours is marked as the noise gauge."""
    from benchmarks.compare_plans import _rounds_table

    def plan(types):
        return {"tables": {f"t{i}": {"sharding_type": t, "shards": [[i % 2]]} for i, t in enumerate(types)}}

    cases = [{"label": "ours", "plan": plan(["table_wise"] * 2)},
             {"label": "torchrec", "plan": plan(["column_wise"] * 2)},
             {"label": "best_greedy", "plan": plan(["table_wise"] * 2)}]
    steps = [{"ours": 10.0, "torchrec": 12.0, "best_greedy": 10.5},  # a quiet round
             {"ours": 30.0, "torchrec": 36.0, "best_greedy": 29.0}]  # everything 3x slower
    per_round = [{k: {"metrics": [{"name": "step_time", "value": v}], "plan": {"sharding_types": {"TW": 2}}}
                  for k, v in r.items()} for r in steps]
    rows = {line.split(" |")[0].lstrip("| "): line for line in _rounds_table(cases, per_round)[2:]}
    assert "1.200 (1.200–1.200) | 2/2" in rows["torchrec"]  # paired: the same 1.2 in both rounds
    assert "20.00 (10.00–30.00)" in rows["ours"]  # raw: medians over rounds move 3x
    assert "best_greedy (same plan as ours)" in rows and "1/2" in rows["best_greedy (same plan as ours)"]
