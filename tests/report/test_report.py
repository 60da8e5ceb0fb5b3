"""The report: one question per figure, each captioned with machine, versions, method and every point's own
repeats, beside a table of its numbers; lines join only real series; doubtful points are marked; bad input writes
nothing."""
from __future__ import annotations

import pytest

from benchmarks.compose import compose_config
from benchmarks.records import append_records
from benchmarks.report import backend_figures, build_report, figures, main, sweep_figures
from benchmarks.run import execute
from benchmarks.sweep import plan_records

QUICK = ["workload=smoke", "workload.batch_size=64", "workload.num_batches=2", "bench.repeats=3", "bench.warmup=1",
         "bench.ceilings=false", "bench.overhead=false", "bench.model=false", "output.progress=false"]


def _run(*overrides: str) -> list[dict]:
    return execute(compose_config([*QUICK, *overrides]))


@pytest.fixture(scope="module")
def mixed_modes() -> list[dict]:
    """Real records: torch and fbgemm on smoke, once for inference and once for training."""
    return _run("backend.names=[torch,fbgemm]") + _run("backend.names=[torch,fbgemm]", "workload.mode=train")


def test_report_from_real_records(tmp_path):
    records = _run("backend=torch", "cache=lru", "nmp=recnmp_base")
    records += plan_records("smoke", "dgx_h100", ["round_robin", "greedy_size"], [2, 4])
    path = tmp_path / "r.jsonl"
    append_records(path, records)
    assert main([str(path), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    for png in ("backends_smoke_inference", "hit_rate", "plans", "nmp_ranks"):
        assert (tmp_path / "rep" / f"{png}.png").stat().st_size > 5000
        assert f"]({png}.png)" in md
    assert "lookups_vs_pooling" not in md  # one pooling point: no curve
    assert md.count("No records with this data") == 1 and "## Serving" in md  # the one section not run
    assert md.count("Machine: ") == 4 and records[0]["env"]["torch"] in md
    assert "<img src=\"hit_rate.png\"" in (tmp_path / "rep" / "report.html").read_text()


def test_report_md_has_a_table_of_the_numbers_beside_each_picture(tmp_path, mixed_modes):
    build_report(mixed_modes, tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.count("| backend | samples/s (median) |") == 2  # one table per figure
    for r in (r for r in mixed_modes if r["kind"] == "lookup"):
        if r["workload"]["mode"] == "inference":
            samples = next(m for m in r["metrics"] if m["name"] == "samples_per_s")["value"]
            assert f"{samples:,.0f}" in md  # the plotted median, as a number


def test_backends_of_mixed_train_and_inference_get_separate_figures(mixed_modes):
    figs = backend_figures(mixed_modes)
    assert sorted(f.name for f in figs) == ["backends_smoke_inference", "backends_smoke_train"]
    for f in figs:
        mode = f.name.rsplit("_", 1)[1]
        assert mode in f.heading and sorted(r[0] for r in f.rows) == ["fbgemm fp32", "torch fp32"]
        assert ("one training step (forward, backward, optimizer) per call" in f.caption) == (mode == "train")


def test_captions_give_each_records_own_repeats():
    records = _run("backend=torch", "bench.repeats=3") + _run("backend=fbgemm", "bench.repeats=5")
    (fig,) = backend_figures(records)
    assert "torch fp32: 3 timed calls after 1 warm-up" in fig.caption
    assert "fbgemm fp32: 5 timed calls after 1 warm-up" in fig.caption
    assert {r[0]: r[4] for r in fig.rows} == {"torch fp32": "3", "fbgemm fp32": "5"}
    (same,) = backend_figures(_run("backend.names=[torch,fbgemm]", "bench.repeats=4"))
    assert "(4 timed calls after 1 warm-up)" in same.caption


def test_sweep_lines_join_only_configs_that_differ_in_the_swept_parameter():
    pooled = [r for mean in (2, 6) for r in _run("backend=torch", "workload.pooling.kind=fixed",
                                                   "workload.pooling.high=0", f"workload.pooling.mean={mean}")]
    other = _run("backend=torch", "workload.pooling.kind=fixed", "workload.pooling.high=0",
                 "workload.pooling.mean=4", "workload.batch_size=32")  # another workload: not on the line
    figs = {f.name: f for f in sweep_figures(pooled + other)}
    f = figs["lookups_vs_pooling"]
    assert [row[1] for row in f.rows] == ["2", "6"] and {row[0] for row in f.rows} == {"torch"}
    assert "Single points" not in f.caption
    assert len(f.fig.axes[0].get_lines()) >= 1


def test_a_single_cache_point_says_so():
    (f,) = [f for f in figures(_run("backend=none", "cache=lru"))[0] if f.name == "hit_rate"]
    assert "Single points" in f.caption and "cache.capacity_fraction" in f.caption


def test_busy_machine_and_overlapping_spreads_are_marked(mixed_modes):
    recs = [dict(r) for r in mixed_modes if r["workload"]["mode"] == "inference"]
    recs[-1] = dict(recs[-1], load=dict(recs[-1]["load"], loadavg_before=9.0, loadavg_after=9.5, cpus=2))
    (fig,) = backend_figures(recs)
    notes = {r[0]: r[-1] for r in fig.rows}
    busy = f"{recs[-1]['backend']} fp32"
    assert "machine busy (load average 9.0→9.5 on 2 cores" in notes[busy]
    assert "Hatched (!)" in fig.caption and busy in fig.caption


def test_nmp_speedup_below_one_comes_with_its_bound_in_the_report():
    # one rank per DIMM: NMP reads through as many data paths as the host, so its own bound is ≈ 1
    records = _run("backend=none", "nmp=recnmp_base", "nmp.geometry.ranks_per_dimm=1")
    (f,) = [f for f in figures(records)[0] if f.name == "nmp_ranks"]
    speedup = float(f.rows[0][2])
    assert speedup < 1 and "own bound is 1.0" in f.rows[0][-1]


def test_bad_input_writes_nothing(tmp_path, capsys):
    assert main([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "rep")]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "rep").exists()
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "mine.txt").write_text("x")
    with pytest.raises(ValueError):
        build_report([{"kind": "lookup", "metrics": []}], tmp_path / "keep")
    assert (tmp_path / "keep" / "mine.txt").exists()
