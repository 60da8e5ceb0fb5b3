"""Output for people and machines: `trace stats` as labelled tables or JSON; records and reports written with the
user's umask (not tempfile's 0600/0700)."""
from __future__ import annotations

import json
import os

import pytest

from benchmarks.cli import main
from benchmarks.compose import compose_config
from benchmarks.records import append_records, umask_mode
from benchmarks.report import build_report
from benchmarks.run import execute
from benchmarks.trace_stats import bin_label


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "t.pt.gz"
    assert main(["trace", "write", str(path), "workload=smoke", "workload.num_batches=1",
                 "workload.batch_size=64"]) == 0
    return path


def test_reuse_bins_are_labelled_with_their_ranges():
    assert [bin_label(i) for i in range(4)] == ["1", "2–3", "4–7", "8–15"]
    assert bin_label(10) == "1,024–2,047"


def test_trace_stats_prints_a_labelled_table(trace, capsys):
    assert main(["trace", "stats", str(trace)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"trace {trace}: 4 tables, 64 samples")
    assert any(line.startswith("table ") and "distinct keys" in line and "hot 1% share" in line for line in lines)
    assert sum(line.split()[0] in {"0", "1", "2", "3", "all"} for line in lines if line.strip()) >= 5
    assert "looked up (times)" in out and "\n1 " in out and "\n2–3 " in out
    assert not out.lstrip().startswith("{")


def test_trace_stats_json_is_one_object_for_machines(trace, capsys):
    assert main(["trace", "stats", "--json", str(trace)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tables"] == 4 and d["batch_size"] == 64 and len(d["per_table"]) == 4
    assert d["overall"]["lookups"] == sum(t["lookups"] for t in d["per_table"])


def test_trace_stats_wants_one_file(trace, capsys):
    assert main(["trace", "stats", str(trace), str(trace)]) == 2
    assert "one FILE" in capsys.readouterr().err


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_records_and_reports_follow_the_umask(tmp_path, mask):
    records = execute(compose_config(["workload=smoke", "workload.num_batches=1", "workload.batch_size=32",
                                      "backend=none", "cache=lru", "output.progress=false"]))
    old = os.umask(mask)
    try:
        assert umask_mode() == 0o666 & ~mask
        append_records(tmp_path / "r.jsonl", records)
        build_report(records, tmp_path / "rep")
    finally:
        os.umask(old)
    assert (tmp_path / "r.jsonl").stat().st_mode & 0o777 == 0o666 & ~mask
    assert (tmp_path / "rep").stat().st_mode & 0o777 == 0o777 & ~mask
    for f in (tmp_path / "rep").iterdir():
        assert f.stat().st_mode & 0o777 == 0o666 & ~mask, f.name


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_traces_and_plans_written_atomically_follow_the_umask(tmp_path, mask):
    import numpy as np

    from embedding.batch import Batch
    from embedding.traces import save_trace
    from sharding import PlanWorkload, load_topology
    from sharding.baselines import BASELINES
    from sharding.tablesets import load_tables

    batch = Batch(lengths=np.array([[1, 2]]), indices=np.array([3, 4, 5]))
    plan = BASELINES["round_robin"](PlanWorkload(load_tables("smoke"), 64), load_topology("dgx_h100"))
    old = os.umask(mask)
    try:
        save_trace(tmp_path / "t.pt.gz", batch)
        plan.save(tmp_path / "p.json")
    finally:
        os.umask(old)
    for name in ("t.pt.gz", "p.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask, name
