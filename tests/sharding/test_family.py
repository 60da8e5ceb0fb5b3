"""The instance family is seeded and spans what it promises; `benchmarks.plan_family` rates every plan on both
models and refuses bad input."""
from __future__ import annotations

import json

from benchmarks.plan_family import main
from sharding.family import family, instance


def test_instances_are_seeded_and_span_the_promised_ranges() -> None:
    inst = family(40)
    assert [i.workload for i in family(3, first=5)] == [inst[k].workload for k in (5, 6, 7)]
    assert instance(5).topology == inst[5].topology
    worlds = {i.topology.world_size for i in inst}
    hosts = [i.topology.num_hosts for i in inst]
    tables = [len(i.workload.tables) for i in inst]
    dims = {t.dim for i in inst for t in i.workload.tables}
    pools = [t.pooling.expected for i in inst for t in i.workload.tables]
    batches = [i.workload.batch_size for i in inst]
    assert worlds <= {8, 16, 32, 64, 128, 256} and len(worlds) >= 4
    assert 1 <= min(hosts) and max(hosts) <= 32 and min(tables) >= 8 and max(tables) <= 1000
    assert min(dims) >= 4 and max(dims) <= 512 and len(dims) >= 6
    assert min(pools) >= 1 and max(pools) <= 200
    assert 512 <= min(batches) and max(batches) <= 65536
    assert {i.workload.mode for i in inst} == {"train", "inference"} and any(i.tight for i in inst)


def test_plan_family_rates_each_plan_on_both_models(tmp_path, capsys) -> None:
    out = tmp_path / "f.jsonl"
    assert main(["--count", "1", "--first", "8", "--no-torchrec", "--out", str(out)]) == 0
    rec = json.loads(out.read_text().splitlines()[0])
    assert rec["instance"] == "f8" and rec["ours_cpu_s"] > 0
    for name, p in rec["plans"].items():
        assert p["valid"] and p["ours_ms"] > 0 and p["trec_ms"] > 0, name
    assert "summary" in out.with_suffix(".md").read_text()
    for bad in (["--count", "0"], ["--torchrec-cap", "-1"], ["--first", "-2"]):
        assert main([*bad, "--out", str(tmp_path / "bad.jsonl")]) == 2
        assert not (tmp_path / "bad.jsonl").exists()
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and bad[0] in err[0]


def test_plan_family_times_optimize_apart_from_checking_its_plan(monkeypatch) -> None:
    """`ours_cpu_s` is the planner's CPU alone; validating and rating its plan (the benchmark's own work) is
    `check_cpu_s`. A counted clock: optimize advances it by 1, the check by 5."""
    import types

    import benchmarks.plan_family as pf

    clock = [0.0]
    monkeypatch.setattr(pf, "time", types.SimpleNamespace(process_time=lambda: clock[0], perf_counter=lambda: 0.0))
    real_optimize, real_rate = pf.optimize, pf._rate

    def optimize(*a, **k):  # noqa: ANN002, ANN003, ANN202
        clock[0] += 1.0
        return real_optimize(*a, **k)

    def rate(*a):  # noqa: ANN002, ANN202
        clock[0] += 5.0
        return real_rate(*a)

    monkeypatch.setattr(pf, "optimize", optimize)
    monkeypatch.setattr(pf, "_rate", rate)
    rec = pf.run_instance(instance(8), None)
    assert rec["ours_cpu_s"] == 1.0 and rec["check_cpu_s"] == 5.0
    assert rec["plans"]["ours"]["valid"]
