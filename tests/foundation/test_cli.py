"""The CLI end to end on the smoke workload, and bad input: one clear error, exit ≠ 0, no record written."""
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # every test starts the CLI in a fresh process (torch, hydra): `make test-all`

FAST = ["workload=smoke", "bench.repeats=3", "bench.warmup=1", "bench.ceiling_buffer_mib=32", "workload.num_batches=2",
        "workload.batch_size=64"]


def _run(args, cwd):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "benchmarks.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def test_run_smoke_end_to_end_writes_records_pandas_can_read(tmp_path):
    out = tmp_path / "records.jsonl"
    r = _run(["run", *FAST, f"output.records={out}"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ms/batch" in r.stdout and "torchrec" in r.stdout and "gather_workload_bw" in r.stdout
    df = pd.read_json(out, lines=True)
    kinds = set(df["kind"])
    assert {"generation", "lookup", "model", "overhead", "ceiling"} <= kinds
    assert set(df[df.kind == "lookup"].backend) == {"torch", "fbgemm", "torchrec"}
    rec = json.loads(out.read_text().splitlines()[1])
    assert rec["config"]["workload"]["name"] == "smoke" and rec["env"]["torch"] and rec["git_sha"]
    assert df.run_id.nunique() == 1
    for m in rec["metrics"]:
        assert {"name", "value", "unit", "method"} <= set(m)
    bw = next(m for m in rec["metrics"] if m["name"] == "effective_bw")
    assert bw["value"] > 0 and bw["min"] <= bw["median"] <= bw["max"] and "bytes" in bw["method"]


def test_sweep_runs_each_job(tmp_path):
    out = tmp_path / "records.jsonl"
    r = _run(["run", "-m", "backend=torch,fbgemm", *FAST, "bench.model=false", "bench.ceilings=false",
              "bench.overhead=false", f"output.records={out}"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_json(out, lines=True)
    assert df.run_id.nunique() == 2 and set(df[df.kind == "lookup"].backend) == {"torch", "fbgemm"}


@pytest.mark.parametrize("args,message", [
    (["workload=nope"], "Could not find 'workload/nope'"),
    (["backend=nope"], "Could not find 'backend/nope'"),
    (["backend.names=[foo]"], "unknown backend"),
    (["workload.rows=[0]"], "rows must be a positive"),
    (["workload.dim=0"], "dim must be a positive"),
    (["workload.batch_size=0"], "batch_size must be > 0"),
    (["workload.access.alpha=0"], "alpha must be > 0"),
    (["workload.bogus=1"], "bogus"),
    (["workload=trace", "workload.trace=missing.pt"], "no such file"),
    (["workload=criteo_terabyte"], "workload.max_rows"),
])
def test_bad_input_one_clear_error_no_record(tmp_path, args, message):
    out = tmp_path / "records.jsonl"
    r = _run(["run", *args, f"output.records={out}"], cwd=tmp_path)
    assert r.returncode != 0
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


def test_bad_trace_file_through_the_cli(tmp_path):
    bad = tmp_path / "bad.pt.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    out = tmp_path / "records.jsonl"
    r = _run(["run", "workload=trace", f"workload.trace={bad}", f"output.records={out}"], cwd=tmp_path)
    assert r.returncode == 2 and "cannot be read" in r.stderr and not out.exists()
    r = _run(["trace", "stats", str(bad)], cwd=tmp_path)
    assert r.returncode == 2 and "cannot be read" in r.stderr


def test_trace_write_then_run_on_it(tmp_path):
    trace = tmp_path / "t.pt.gz"
    r = _run(["trace", "write", str(trace), "workload=smoke", "workload.num_batches=2"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path / "r.jsonl"
    r = _run(["run", "workload=trace", f"workload.trace={trace}", "workload.batch_size=256", "backend=fbgemm",
              "bench.repeats=2", "bench.model=false", "bench.ceilings=false", "bench.overhead=false",
              f"output.records={out}"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = pd.read_json(out, lines=True)
    assert rec.workload[0]["trace"] == str(trace) and rec.workload[0]["num_batches"] == 4
