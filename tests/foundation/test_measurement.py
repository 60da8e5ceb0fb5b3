"""Timing summaries, rate metrics, byte formulas and record writing."""
import json
import multiprocessing as mp

import numpy as np
import pytest
import torch

from benchmarks.records import append_records, read_records
from benchmarks.timing import Timing, rate_metric, time_calls
from embedding.spec import PoolingSpec, TableSpec, WorkloadSpec
from embedding.traffic import batch_traffic


def test_time_calls_warms_up_then_times_each_call():
    calls = []
    timing = time_calls(lambda i: calls.append(i), 3, warmup=2, repeats=5, device=torch.device("cpu"))
    assert calls == [0, 1, 0, 1, 2, 0, 1]  # 2 warm-up calls, then 5 timed, cycling over 3 inputs
    assert timing.seconds.shape == (5,) and (timing.seconds >= 0).all()


def test_rate_metric_uses_each_calls_own_amount():
    t = Timing(np.array([1.0, 2.0, 4.0, 1.0]), "test")
    m = rate_metric("r", np.array([10.0, 10.0]), t, "u/s", "how")  # amounts cycle: 10, 10, 10, 10
    assert m["value"] == m["median"] == 7.5  # rates 10, 5, 2.5, 10 → median 7.5
    assert m["min"] == 2.5 and m["max"] == 10 and m["repeats"] == 4
    assert m["p90"] == pytest.approx(np.percentile([10, 5, 2.5, 10], 10))


def test_traffic_formula():
    spec = WorkloadSpec("t", (TableSpec("a", 100, 8, pooling=PoolingSpec("fixed", 2)),
                              TableSpec("b", 100, 16, pooling=PoolingSpec("fixed", 3))), batch_size=4)
    lengths = np.array([[2, 2, 2, 2], [3, 3, 3, 3]])
    tr = batch_traffic(spec, lengths, "fp32")
    assert tr.rows_read == 8 * 8 * 4 + 12 * 16 * 4
    assert tr.indices_read == 20 * 8 + 9 * 8
    assert tr.outputs_written == 4 * 24 * 4
    assert tr.total == tr.rows_read + tr.indices_read + tr.outputs_written
    int8 = batch_traffic(spec, lengths, "int8", index_bytes=4)
    assert int8.rows_read == 8 * (8 + 4) + 12 * (16 + 4)
    train = batch_traffic(spec, lengths, "fp32", train=True)
    assert train.total == 3 * tr.total


def _writer(path, k):
    for i in range(50):
        append_records(path, [{"writer": k, "i": i, "pad": "x" * 5000}])


@pytest.mark.slow  # three spawned processes
def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "r.jsonl"
    procs = [mp.get_context("spawn").Process(target=_writer, args=(str(path), k)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    recs = read_records(path)
    assert len(recs) == 150
    assert sorted((r["writer"], r["i"]) for r in recs) == [(k, i) for k in range(3) for i in range(50)]


def test_records_refuse_nan(tmp_path):
    with pytest.raises(ValueError):
        append_records(tmp_path / "r.jsonl", [{"v": float("nan")}])
    assert not (tmp_path / "r.jsonl").exists() or (tmp_path / "r.jsonl").read_text() == ""
    append_records(tmp_path / "r.jsonl", [{"v": np.float32(1.5), "a": np.arange(2)}])
    assert json.loads((tmp_path / "r.jsonl").read_text()) == {"v": 1.5, "a": [0, 1]}


def test_timing_summary_has_quartiles_and_relative_spread():
    s = Timing(np.array([1.0, 2.0, 3.0, 4.0, 5.0]), "test").summary()
    assert (s["p25"], s["median"], s["p75"]) == (2.0, 3.0, 4.0)
    assert s["rel_iqr"] == pytest.approx(2.0 / 3.0)


def test_time_calls_records_the_machines_load_over_the_timed_calls():
    load = time_calls(lambda i: sum(range(1000)), 1, warmup=1, repeats=5, device=torch.device("cpu")).load
    assert load["cpus"] >= 1 and load["threads"] == torch.get_num_threads()
    assert load["loadavg_before"] >= 0 and load["loadavg_after"] >= 0 and load["wall_s"] > 0
    assert load["cpu_s"] >= 0 and "getloadavg" in load["method"]


def _counting_timing(calls: list) -> tuple:
    fn = calls.append
    return fn, time_calls(fn, 2, warmup=0, repeats=20, device=torch.device("cpu"))


@pytest.mark.parametrize("budget", [0, 1, 2, 7, 40])
def test_overhead_check_makes_at_most_its_budget_of_backend_calls(budget):
    from benchmarks.local import harness_overhead

    calls: list = []
    fn, timing = _counting_timing(calls)
    calls.clear()
    metrics = {m["name"]: m for m in harness_overhead(fn, 2, torch.device("cpu"), timing, budget, "counter")}
    assert len(calls) <= budget
    assert "harness_overhead" in metrics
    if budget < 2:
        assert "harness_overhead_ab" not in metrics and "harness_overhead_ab_skipped" in metrics
    else:
        assert metrics["harness_overhead_ab"]["calls"] == len(calls) > 0


def test_run_quotes_one_median_and_the_share_its_overhead_check_cost():
    from benchmarks.compose import compose_config
    from benchmarks.run import execute

    records = execute(compose_config(["workload=smoke", "workload.batch_size=64", "workload.num_batches=2",
                                      "backend.names=[torch,fbgemm]", "bench.repeats=18", "bench.warmup=2",
                                      "bench.ceilings=false", "bench.model=false", "output.progress=false"]))
    lookup = next(r for r in records if r["kind"] == "lookup" and r["backend"] == "torch")
    assert set(lookup["load"]) >= {"loadavg_before", "loadavg_after", "cpus", "cpu_share", "steal_share"}
    assert all("load" in r for r in records if r["kind"] in ("generation", "lookup", "overhead"))
    batch = next(m for m in lookup["metrics"] if m["name"] == "batch_time")
    assert batch["p25"] <= batch["value"] <= batch["p75"] and "rel_iqr" in batch
    over = {m["name"]: m for m in next(r for r in records if r["kind"] == "overhead")["metrics"]}
    assert f"({batch['value']:.3f} ms, the table's ms/batch)" in over["harness_overhead"]["method"]
    assert over["harness_overhead_ab"]["calls"] <= (2 + 18) // 10  # 10% of torch's measured calls
    assert 0 < over["overhead_check_share"]["value"] < 100


def test_trust_notes_say_when_a_ranking_could_flip_or_the_machine_was_busy():
    from benchmarks.trust import trust_notes

    def t(p25, med, p75):
        return {"value": med, "p25": p25, "p75": p75}

    calm = {"loadavg_before": 0.5, "loadavg_after": 0.7, "cpus": 2, "threads": 2, "cpu_share": 0.9,
            "steal_share": 0.0}
    assert trust_notes([("a", t(1, 2, 3), calm), ("b", t(5, 6, 7), calm)]) == []
    notes = trust_notes([("a", t(1, 2, 3), calm), ("b", t(2.5, 4, 5), calm), ("c", t(9, 10, 11), calm)])
    assert notes == ["! ranking could flip: a and b (interquartile ranges of their timed calls overlap)"]
    busy = dict(calm, loadavg_after=3.5)
    (note,) = trust_notes([("a", t(1, 2, 3), busy), ("b", t(5, 6, 7), calm)])
    assert note.startswith("! a: machine busy while timing (load average 0.5→3.5 on 2 cores")


def test_table_legend_only_under_a_table_that_is_there():
    from benchmarks.compose import compose_config
    from benchmarks.report_table import format_table
    from benchmarks.run import execute

    records = execute(compose_config(["workload=smoke", "workload.num_batches=2", "backend=none",
                                      "nmp=recnmp_base", "nmp.geometry.ranks_per_dimm=1", "output.progress=false"]))
    text = format_table(records)
    assert "ms/batch:" not in text and "backend  precision" not in text
    # one rank per DIMM: NMP reads through as many data paths as the host; the line names that bound
    assert "why: speedup 0.9" in text and "own bound is 1.0" in text
