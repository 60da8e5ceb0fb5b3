"""Sweeps: a failed job keeps its row in the table, re-running skips finished jobs by config hash."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.compose import compose_config
from benchmarks.records import umask_mode
from benchmarks.sweep import config_hash, gather, main, plan_records, write_tables

ROOT = Path(__file__).resolve().parents[2]
APP = ["-m", "benchmarks.run"]


def _sweep(tmp: Path, names: str) -> subprocess.CompletedProcess:
    args = ["workload=smoke", "backend=none", "cache=lru", "cache.capacity_fraction=0.1,0.3", "nmp=off",
            f"backend.names={names}", "output.progress=false", f"output.records={tmp / 'records.jsonl'}",
            f"hydra.sweep.dir={tmp / 'sweep'}"]
    return subprocess.run([sys.executable, *APP, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    first = _sweep(tmp, "[],[bogus]")
    return tmp, first


@pytest.mark.slow  # a 2-job multirun in a subprocess (module fixture)
def test_sweep_with_a_failed_job_is_tabulated(swept):
    tmp, first = swept
    assert first.returncode != 0  # Hydra reports the failed job
    assert f"failed; its row and the others are in {tmp / 'sweep' / 'sweep.md'}" in first.stderr
    rows = list(csv.DictReader(open(tmp / "sweep" / "sweep.csv")))
    status = {(r["backend.names"], r["cache.capacity_fraction"]): r["status"] for r in rows}
    assert status == {("[]", "0.1"): "ok", ("[bogus]", "0.1"): "failed", ("[]", "0.3"): "ok",
                      ("[bogus]", "0.3"): "failed"}
    failed = next(r for r in rows if r["status"] == "failed")
    assert "bogus" in failed["error"]
    hit = {r["cache.capacity_fraction"]: float(r["value"]) for r in rows if r.get("metric") == "hit_rate"}
    assert 0 < hit["0.1"] < hit["0.3"] < 1
    md = (tmp / "sweep" / "sweep.md").read_text()
    assert "4 jobs, 2 failed" in md and "| hit_rate (ratio) |" in md
    assert (tmp / "sweep" / "sweep.md").stat().st_mode & 0o777 == umask_mode()  # not mkstemp's 0600


@pytest.mark.slow  # a 2-job multirun in a subprocess (module fixture)
def test_resume_skips_finished_jobs(swept):
    tmp, _ = swept
    before = (tmp / "records.jsonl").read_text().count("\n")
    again = _sweep(tmp, "[]")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("skipped: records of config") == 2
    assert f"sweep summary: {tmp / 'sweep' / 'sweep.md'} (2 rows" in again.stdout  # says where its summary went
    assert (tmp / "records.jsonl").read_text().count("\n") == before  # nothing was run again
    rows = list(csv.DictReader(open(tmp / "sweep" / "sweep.csv")))
    assert {r["status"] for r in rows} == {"skipped (done earlier)"} and {r["job"] for r in rows} == {"0", "1"}


@pytest.mark.slow  # a 2-job multirun in a subprocess (module fixture)
def test_gather_without_manifest_uses_job_folders(swept, tmp_path):
    tmp, _ = swept
    (tmp / "sweep" / "jobs.jsonl").rename(tmp_path / "jobs.jsonl")
    try:
        rows = gather(tmp / "sweep", tmp / "records.jsonl")
        # every job folder (of either sweep) is a row; exactly the bogus-backend ones have no records
        assert len({r["job"] for r in rows}) == 4
        assert all((r["status"] == "failed") == (r["backend.names"] == "[bogus]") for r in rows)
        with pytest.raises(ValueError, match="records"):
            gather(tmp / "sweep")
    finally:
        (tmp_path / "jobs.jsonl").rename(tmp / "sweep" / "jobs.jsonl")


def test_config_hash_ignores_where_records_go():
    from omegaconf import OmegaConf

    a = OmegaConf.to_container(OmegaConf.structured(compose_config(["output.records=a.jsonl"])))
    b = OmegaConf.to_container(OmegaConf.structured(compose_config(["output.records=b.jsonl"])))
    c = OmegaConf.to_container(OmegaConf.structured(compose_config(["bench.repeats=7"])))
    assert config_hash(a) == config_hash(b) != config_hash(c)


def test_plan_sweep_records_per_rank_costs(tmp_path):
    recs = plan_records("smoke", "dgx_h100", ["round_robin", "greedy_size"], [2, 4])
    assert [(r["optimizer"], r["config"]["plan"]["ranks"]) for r in recs] == [
        ("round_robin", 2), ("greedy_size", 2), ("round_robin", 4), ("greedy_size", 4)]
    for r in recs:
        per_rank = [m for m in r["metrics"] if m["name"] == "rank_compute_ms"]
        assert len(per_rank) == r["config"]["plan"]["ranks"]
        cost = next(m["value"] for m in r["metrics"] if m["name"] == "cost_ms")
        lb = next(m["value"] for m in r["metrics"] if m["name"] == "lower_bound_ms")
        assert cost >= lb > 0
    write_tables([], tmp_path)  # an empty sweep still gives valid (empty) tables
    assert main(["gather", str(tmp_path / "nope")]) == 2
