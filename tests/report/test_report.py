"""The report: plots for the data present, each captioned with machine, versions and method; bad input writes
nothing."""
from __future__ import annotations

from benchmarks.compose import compose_config
from benchmarks.records import append_records
from benchmarks.report import build_report, main
from benchmarks.run import execute
from benchmarks.sweep import plan_records


def test_report_from_real_records(tmp_path):
    records = execute(compose_config(["workload=smoke", "backend=torch", "cache=lru", "nmp=recnmp_base",
                                      "bench.repeats=3", "bench.warmup=1", "bench.ceilings=false",
                                      "bench.overhead=false", "bench.model=false", "output.progress=false"]))
    records += plan_records("smoke", "dgx_h100", ["round_robin", "greedy_size"], [4])
    path = tmp_path / "r.jsonl"
    append_records(path, records)
    assert main([str(path), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    for png in ("backends", "hit_rate", "plans", "nmp_ranks"):
        assert (tmp_path / "rep" / f"{png}.png").stat().st_size > 5000
        assert f"]({png}.png)" in md
    assert "pooling_skew.png" not in md and "No records with this data" in md  # one workload point: no curve
    assert md.count("Machine: ") == 4 and records[0]["env"]["torch"] in md
    assert "<img src=\"hit_rate.png\"" in (tmp_path / "rep" / "report.html").read_text()


def test_bad_input_writes_nothing(tmp_path, capsys):
    assert main([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "rep")]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "rep").exists()
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "mine.txt").write_text("x")
    (tmp_path / "r.jsonl").write_text('{"kind": "lookup", "metrics": []}\n')
    try:
        build_report([{"kind": "lookup", "metrics": []}], tmp_path / "keep")
        raise AssertionError("overwrote a folder that is not a report")
    except ValueError:
        assert (tmp_path / "keep" / "mine.txt").exists()
