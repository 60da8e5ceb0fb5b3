"""`plan` writes a plan file with cost, bound and TorchRec's estimate; `compare` prints and draws two plans."""
from __future__ import annotations

from benchmarks.plan_cli import main
from sharding import ShardingPlan


def test_plan_then_compare_with_png(tmp_path, capsys) -> None:
    a, b, png = tmp_path / "ours.json", tmp_path / "greedy.json", tmp_path / "cmp.png"
    common = ["--tables", "random:12:3", "--hardware", "dgx_h100", "--ranks", "4"]
    assert main(["plan", *common, "--optimizer", "ours", "--out", str(a)]) == 0
    assert main(["plan", *common, "--optimizer", "greedy_lookups", "--out", str(b)]) == 0
    out = capsys.readouterr().out
    assert "compute ms" in out and "lower bound" in out and "TorchRec estimate" in out
    plan = ShardingPlan.load(a)
    meta = plan.meta
    assert len(meta["per_rank"]) == 4 and abs(meta["cost_s"] - max(r["total_s"] for r in meta["per_rank"])) <= 1e-12
    assert meta["lower_bound"]["lower_bound_s"] <= meta["cost_s"] and meta["torchrec_estimate"]["perf_ms"] > 0
    assert main(["compare", str(a), str(b), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "ours" in out and "greedy_lookups" in out and png.stat().st_size > 1000
