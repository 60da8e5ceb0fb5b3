"""Bad input anywhere: property tests (hypothesis) over every entry point's options and over malformed files
(trace, table list, plan, baseline, records). Each must end with exit code 2, exactly one line on stderr, no
traceback, and nothing written where the output would go. Entry points are called in-process through
`benchmarks.cli.main` (what `dlrmbench` runs); a few cases run the real console command in a subprocess.

Every malformed file is made invalid by construction (one mutation of a valid file that breaks it), so a
property never depends on a lucky draw.
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from benchmarks import cli

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = 12
"""examples per property; a property over options or files that fail before anything runs takes ~0.1-0.5 s each"""
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
"""no shrinking: a failure is reported with the example that found it (shrinking launcher runs takes minutes)"""
WORDS = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8)
BAD_FLOATS = st.one_of(st.sampled_from(["nan", "inf", "-inf"]), st.floats(max_value=0, allow_nan=False,
                                                                         allow_infinity=False).map(repr))


@pytest.fixture
def box(tmp_path, monkeypatch, capsys):
    """A working folder (cwd) and a checker: call dlrmbench, assert exit 2, one line, no traceback, no output."""
    monkeypatch.chdir(tmp_path)

    def no_ranks(*args, **kwargs):
        raise AssertionError(f"ranks were started for bad input: {args[:2]}")

    monkeypatch.setattr("benchmarks.distributed.launch.launch_module", no_ranks)

    def refused(argv: list[str], *outputs: Path) -> str:
        capsys.readouterr()
        rc = cli.main(argv)
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if x.strip()]
        assert rc == 2, (argv, rc, err[-2000:])
        assert len(lines) == 1, (argv, err[-2000:])
        assert "Traceback" not in err and "weights_only" not in err, err
        for out in outputs:
            assert not Path(out).exists(), (argv, out)
        return lines[0]

    return tmp_path, refused


# ---------------------------------------------------------------- run: bad option values

def _ints(key: str, bad) -> st.SearchStrategy[str]:
    return bad.map(lambda v: f"{key}={v}")


RUN_OPTIONS = st.one_of(
    _ints("bench.warmup", st.integers(-10**9, -1)),
    _ints("bench.repeats", st.integers(-10**9, 0)),
    _ints("bench.threads", st.integers(-10**9, -1)),
    _ints("bench.ceiling_buffer_mib", st.integers(-10**9, 0)),
    BAD_FLOATS.map(lambda v: f"bench.max_memory_fraction={v}"),
    st.floats(min_value=1.0001, max_value=1e300).map(lambda v: f"bench.max_memory_fraction={v!r}"),
    _ints("workload.seed", st.one_of(st.integers(-10**18, -1), st.integers(2**63, 2**70))),
    BAD_FLOATS.map(lambda v: f"workload.access.alpha={v}"),
    st.floats(min_value=100.001, max_value=1e300).map(lambda v: f"workload.access.alpha={v!r}"),
    _ints("workload.batch_size", st.one_of(st.integers(-10**9, 0), st.integers(10**9, 10**15))),
    _ints("workload.num_batches", st.one_of(st.integers(-10**9, 0), st.integers(10**8, 10**15))),
    _ints("workload.dim", st.integers(-10**9, 0)),
    st.lists(st.integers(-10**6, 0), min_size=1, max_size=3).map(lambda v: f"workload.rows=[{','.join(map(str, v))}]"),
    st.sampled_from(["nan", "inf", "0.5", "-3"]).map(lambda v: f"workload.pooling.mean={v}"),
    WORDS.filter(lambda w: w not in ("inference", "train")).map(lambda w: f"workload.mode={w}"),
    WORDS.filter(lambda w: w not in ("fp32", "fp16", "int8")).map(lambda w: f"backend.precision={w}"),
    BAD_FLOATS.map(lambda v: f"backend.learning_rate={v}"),
    WORDS.filter(lambda w: w not in ("cpu", "cuda")).map(lambda w: f"placement.device={w}"),
    WORDS.map(lambda w: f"bench.repeats={w}x"),
    WORDS.map(lambda w: f"workload.{w}_nope=1"),
    WORDS.filter(lambda w: not (REPO / "conf" / "workload" / f"{w}.yaml").exists()).map(lambda w: f"workload={w}"),
    WORDS.map(lambda w: f"backend.names=[{w}x]"),
)


@FUZZ
@given(option=RUN_OPTIONS)
def test_run_refuses_bad_options(box, option):
    tmp, refused = box
    records = tmp / "r.jsonl"
    refused(["run", "workload=smoke", "backend=torch", option, f"output.records={records}"], records)


def test_run_refuses_an_output_that_is_a_folder_before_measuring(box):
    tmp, refused = box
    (tmp / "out").mkdir()
    line = refused(["run", "workload=smoke", "output.records=out"])
    assert "out is a directory" in line


# ---------------------------------------------------------------- trace files

def _valid_triple(t: int = 2, b: int = 3) -> list[torch.Tensor]:
    lengths = torch.ones(t, b, dtype=torch.int64)
    offsets = torch.arange(t * b + 1, dtype=torch.int64)
    return [torch.arange(t * b, dtype=torch.int64), offsets, lengths]


def _broken_trace(kind: str, value: int) -> object:
    """A (indices, offsets, lengths) triple with one mutation that makes it invalid, or another broken object."""
    ind, off, lens = _valid_triple()
    if kind == "float_indices":
        return (ind.float() + 0.5 * (value % 2), off, lens)
    if kind == "nan_indices":
        return (torch.full_like(ind, float("nan"), dtype=torch.float32), off, lens)
    if kind == "bool_lengths":
        return (ind, off, lens.bool())
    if kind == "negative_index":
        return (ind - (1 + value % 100), off, lens)
    if kind == "decreasing_offsets":
        return (ind, off.flip(0), lens)
    if kind == "offsets_count":
        return (ind, off[: -1 - value % 3], lens)
    if kind == "lengths_1d":
        return (ind, off, lens.ravel())
    if kind == "empty":
        return (ind[:0], off[:1], lens[:0])
    if kind == "two_tensors":
        return (ind, off)
    if kind == "dict":
        return {"indices": ind, "offsets": off, "lengths": lens}
    return [value, "x"]


TRACE_KINDS = ["float_indices", "nan_indices", "bool_lengths", "negative_index", "decreasing_offsets",
               "offsets_count", "lengths_1d", "empty", "two_tensors", "dict", "list"]


@st.composite
def broken_trace_files(draw) -> tuple[str, bytes | object]:
    how = draw(st.sampled_from(["bytes", "gzip_bytes", "pickle", "torch"]))
    if how == "bytes":
        return how, draw(st.binary(max_size=200))
    if how == "gzip_bytes":
        return how, gzip.compress(draw(st.binary(max_size=200)))
    if how == "pickle":
        return how, pickle.dumps(draw(st.dictionaries(WORDS, st.integers(), max_size=3)))
    return how, _broken_trace(draw(st.sampled_from(TRACE_KINDS)), draw(st.integers(0, 1000)))


def _write_trace(path: Path, how: str, payload) -> None:
    if how == "torch":
        torch.save(payload, path)
    else:
        path.write_bytes(payload)


@pytest.mark.slow
@FUZZ
@given(file=broken_trace_files(), gz=st.booleans())
def test_trace_stats_and_run_refuse_malformed_traces(box, file, gz):
    tmp, refused = box
    path = tmp / ("t.pt.gz" if gz else "t.pt")
    _write_trace(path, *file)
    line = refused(["trace", "stats", str(path)])
    assert "weights_only" not in line and "trust" not in line
    records = tmp / "r.jsonl"
    refused(["run", "workload=trace", f"workload.trace={path}", f"output.records={records}"], records)


@FUZZ
@given(where=st.sampled_from(["missing_folder", "folder", "through_file"]), option=st.one_of(
    st.just("workload=smoke"), RUN_OPTIONS))
def test_trace_write_refuses_bad_paths_and_options(box, where, option):
    tmp, refused = box
    (tmp / "dir").mkdir(exist_ok=True)
    (tmp / "file").write_text("x")
    out = {"missing_folder": tmp / "no" / "t.pt.gz", "folder": tmp / "dir", "through_file": tmp / "file" / "t.pt"}[where]
    refused(["trace", "write", str(out), option])
    assert sorted(p.name for p in (tmp / "dir").iterdir()) == []


def test_trace_write_refuses_an_unknown_workload(box):
    tmp, refused = box
    refused(["trace", "write", str(tmp / "x.pt.gz"), "workload=nosuch"], tmp / "x.pt.gz")


@pytest.mark.slow
def test_a_trace_with_a_table_list_is_honoured_or_refused(box):
    tmp, refused = box
    trace = tmp / "t.pt"
    torch.save(tuple(_valid_triple(t=2, b=4)), trace)
    (tmp / "two.csv").write_text("name,rows,dim,pooling\na,100,16,1\nb,100,32,1\n")
    (tmp / "three.csv").write_text("name,rows,dim,pooling\na,100,16,1\nb,100,16,1\nc,100,16,1\n")
    (tmp / "small.csv").write_text("name,rows,dim,pooling\na,1,16,1\nb,1,16,1\n")
    from benchmarks.compose import compose_workload

    spec = compose_workload(["workload=trace", f"workload.trace={trace}", "workload.batch_size=2",
                             f"workload.table_list={tmp / 'two.csv'}"])
    assert [(t.name, t.rows, t.dim) for t in spec.tables] == [("a", 100, 16), ("b", 100, 32)]
    assert "2 tables in the trace, 3 in the table list" in refused(
        ["run", "workload=trace", f"workload.trace={trace}", "workload.batch_size=2",
         f"workload.table_list={tmp / 'three.csv'}"])
    assert "out of range" in refused(
        ["run", "workload=trace", f"workload.trace={trace}", "workload.batch_size=2",
         f"workload.table_list={tmp / 'small.csv'}"])
    assert "brings its own tables" in refused(["run", "workload=smoke", f"workload.trace={trace}"])


# ---------------------------------------------------------------- table lists (run and plan)

GOOD_ROW = {"name": "a", "rows": "1000", "dim": "16", "pooling": "2", "alpha": "1.05"}
BAD_VALUES = {"rows": ["", "-5", "0", "1.5", "abc", "nan", "inf"], "dim": ["", "0", "-1", "2.5", "x"],
              "pooling": ["", "0.5", "nan", "inf", "-2", "abc"], "alpha": ["-1", "nan", "inf", "1000", "abc"],
              "name": [""]}


@st.composite
def broken_table_lists(draw) -> tuple[str, bytes]:
    how = draw(st.sampled_from(["bad_value", "missing_column", "duplicate", "binary", "yaml_syntax",
                                "yaml_scalar", "empty"]))
    cols = list(GOOD_ROW)
    if how == "bad_value":
        col = draw(st.sampled_from(list(BAD_VALUES)))
        row = dict(GOOD_ROW, **{col: draw(st.sampled_from(BAD_VALUES[col]))})
        return ".csv", (",".join(cols) + "\n" + ",".join(row[c] for c in cols) + "\n").encode()
    if how == "missing_column":
        drop = draw(st.sampled_from(["name", "rows", "dim", "pooling"]))
        keep = [c for c in cols if c != drop]
        return ".csv", (",".join(keep) + "\n" + ",".join(GOOD_ROW[c] for c in keep) + "\n").encode()
    if how == "duplicate":
        line = ",".join(GOOD_ROW[c] for c in cols)
        return ".csv", (",".join(cols) + f"\n{line}\n{line}\n").encode()
    if how == "binary":
        return ".csv", b"\xff\xfe\x00" + draw(st.binary(max_size=100))
    if how == "yaml_syntax":
        return ".yaml", b"tables: [ {name: a, rows: 1\n"
    if how == "yaml_scalar":
        return ".yaml", draw(st.sampled_from([b"42", b"- 1\n- 2\n", b"tables: 3\n"]))
    return ".csv", b"name,rows,dim,pooling\n"


@pytest.mark.slow
@FUZZ
@given(file=broken_table_lists())
def test_run_and_plan_refuse_malformed_table_lists(box, file):
    tmp, refused = box
    suffix, payload = file
    path = tmp / f"tables{suffix}"
    path.write_bytes(payload)
    records, plan = tmp / "r.jsonl", tmp / "plan.json"
    refused(["run", "workload=table_list", f"workload.table_list={path}", f"output.records={records}"], records)
    refused(["plan", "--tables", str(path), "--hardware", "dev_2core", "--optimizer", "round_robin", "--out",
             str(plan)], plan)


# ---------------------------------------------------------------- plan and compare

PLAN_OPTIONS = st.one_of(
    st.integers(-10**6, 0).map(lambda v: ["--ranks", str(v)]),
    st.integers(-10**6, 0).map(lambda v: ["--batch-size", str(v)]),
    st.integers(-10**6, -1).map(lambda v: ["--anneal", str(v)]),
    st.integers(-10**6, 0).map(lambda v: ["--torchrec-timeout", str(v)]),
    st.one_of(st.integers(-10**6, 0), st.integers(100_001, 10**9)).map(lambda v: ["--tables", f"random:{v}"]),
    WORDS.map(lambda w: ["--tables", f"random:{w}"]),
    WORDS.map(lambda w: ["--tables", f"{w}_nope"]),
    WORDS.map(lambda w: ["--hardware", f"{w}_nope"]),
    WORDS.map(lambda w: ["--optimizer", f"{w}_nope"]),
    WORDS.map(lambda w: ["--mode", w]),
    WORDS.map(lambda w: ["--ranks", w]),
    WORDS.map(lambda w: [f"--{w}-nope"]),
)


@FUZZ
@given(option=PLAN_OPTIONS)
def test_plan_refuses_bad_options(box, option):
    tmp, refused = box
    out = tmp / "plan.json"
    refused(["plan", "--tables", "random:8", "--hardware", "dev_2core", "--optimizer", "round_robin", "--out",
             str(out), "--no-torchrec-estimate", *option], out)


def test_plan_refuses_an_output_in_a_missing_folder(box):
    tmp, refused = box
    assert "does not exist" in refused(["plan", "--tables", "random:4", "--out", str(tmp / "no" / "p.json")])


_VALID_PLAN: dict | None = None


def _valid_plan() -> dict:
    """A round-robin plan of the smoke workload on 2 ranks of dev_2core (what `dist workload=smoke` runs)."""
    global _VALID_PLAN
    if _VALID_PLAN is None:
        from benchmarks.compose import compose_workload
        from sharding import BASELINES, PlanWorkload, load_topology

        wl = PlanWorkload.from_spec(compose_workload(["workload=smoke"]))
        _VALID_PLAN = BASELINES["round_robin"](wl, load_topology("dev_2core", 2)).to_dict()
    return json.loads(json.dumps(_VALID_PLAN))


@st.composite
def broken_plans(draw) -> bytes:
    """A plan JSON with one mutation that makes it invalid for the smoke workload on 2 ranks."""
    plan = _valid_plan()
    how = draw(st.sampled_from(["rank_out_of_range", "world_size", "drop_table", "extra_table", "sharding_type",
                                "shard_length", "shard_field", "format", "truncated", "bytes", "not_object",
                                "tables_list"]))
    name = draw(st.sampled_from(sorted(plan["tables"])))
    shard = plan["tables"][name]["shards"][0]
    if how == "rank_out_of_range":
        shard[0] = draw(st.one_of(st.integers(2, 10**6), st.integers(-10**6, -1)))
    elif how == "world_size":
        plan["world_size"] = draw(st.one_of(st.integers(3, 10**6), st.integers(-10, 1), st.just("two")))
    elif how == "drop_table":
        del plan["tables"][name]
    elif how == "extra_table":
        plan["tables"][name + "_extra"] = plan["tables"][name]
    elif how == "sharding_type":
        plan["tables"][name]["sharding_type"] = draw(WORDS)
    elif how == "shard_length":
        plan["tables"][name]["shards"][0] = shard[: draw(st.integers(0, 6))]
    elif how == "shard_field":
        shard[draw(st.integers(0, 4))] = draw(st.one_of(WORDS, st.none(), st.just([1])))
    elif how == "format":
        plan["format"] = draw(WORDS)
    elif how == "truncated":
        text = json.dumps(plan)
        return text[: draw(st.integers(0, len(text) - 1))].encode()
    elif how == "bytes":
        return b"\xff" + draw(st.binary(max_size=100))
    elif how == "not_object":
        return json.dumps(draw(st.one_of(st.integers(), st.lists(st.integers(), max_size=3), WORDS))).encode()
    else:
        plan["tables"] = list(plan["tables"].values())
    return json.dumps(plan).encode()


@FUZZ
@given(payload=broken_plans())
def test_compare_refuses_malformed_plans(box, payload):
    tmp, refused = box
    good, bad, png = tmp / "good.json", tmp / "bad.json", tmp / "c.png"
    good.write_text(json.dumps(_valid_plan()))
    bad.write_bytes(payload)
    refused(["compare", str(good), str(bad), "--tables", "smoke", "--hardware", "dev_2core", "--ranks", "2",
             "--png", str(png)], png)


# ---------------------------------------------------------------- dist (the launcher refuses before any rank)

DIST_OPTIONS = st.one_of(
    _ints("dist.world_size", st.one_of(st.integers(-10**6, 0), st.integers(10**4, 10**9))),
    BAD_FLOATS.map(lambda v: f"dist.timeout_s={v}"),
    st.floats(min_value=604801, max_value=1e300).map(lambda v: f"dist.timeout_s={v!r}"),
    WORDS.filter(lambda w: w not in ("ours", "torchrec", "random")).map(lambda w: f"dist.plan={w}_x"),
    WORDS.map(lambda w: f"dist.plan=/missing/{w}.json"),
    WORDS.map(lambda w: f"dist.model={w}"),
    WORDS.filter(lambda w: w not in ("train", "inference", "workload")).map(lambda w: f"dist.mode={w}"),
    WORDS.filter(lambda w: w not in ("sgd",)).map(lambda w: f"dist.optimizer={w}"),
    WORDS.filter(lambda w: w not in ("auto", "gloo", "nccl")).map(lambda w: f"dist.backend={w}"),
    WORDS.filter(lambda w: w not in ("none", "raise", "kill", "hang")).map(lambda w: f"dist.fault={w}"),
    _ints("dist.repeats", st.integers(-10**6, 0)),
    _ints("dist.warmup", st.integers(-10**6, -1)),
    _ints("dist.threads", st.integers(-10**6, -1)),
    BAD_FLOATS.map(lambda v: f"dist.learning_rate={v}"),
    WORDS.map(lambda w: f"dist.hardware={w}_nope"),
    st.just("dist.verify=true"),  # the smoke workload is small enough: verify refuses the default workload
    RUN_OPTIONS,
)


@pytest.mark.slow
@FUZZ
@given(option=DIST_OPTIONS)
def test_dist_refuses_bad_options_before_starting_ranks(box, option):
    tmp, refused = box
    records, out = tmp / "r.jsonl", tmp / "dist"
    workload = "workload=default" if option == "dist.verify=true" else "workload=smoke"
    refused(["dist", workload, option, f"output.records={records}", f"dist.output_dir={out}"], records, out)


@pytest.mark.slow
@FUZZ
@given(payload=broken_plans())
def test_dist_refuses_malformed_plan_files_before_starting_ranks(box, payload):
    tmp, refused = box
    plan, records, out = tmp / "plan.json", tmp / "r.jsonl", tmp / "dist"
    plan.write_bytes(payload)
    refused(["dist", "workload=smoke", f"dist.plan={plan}", f"output.records={records}", f"dist.output_dir={out}"],
            records, out)


@pytest.mark.slow
@FUZZ
@given(payload=st.one_of(st.binary(max_size=50), st.sampled_from([b"[]", b"{}", b"[1]", b'[{"overrides": 3}]',
                                                                  b'[{"plan": 5}]', b'[{"overrides": [1]}]'])))
def test_dist_refuses_malformed_cases_files(box, payload):
    tmp, refused = box
    cases, records = tmp / "cases.json", tmp / "r.jsonl"
    cases.write_bytes(payload)
    refused(["dist", "workload=smoke", f"dist.cases={cases}", f"output.records={records}",
             f"dist.output_dir={tmp / 'dist'}"], records)


def test_dist_refuses_a_world_size_this_machine_cannot_hold(box):
    tmp, refused = box
    line = refused(["dist", "workload=smoke", "dist.world_size=100000", f"dist.output_dir={tmp / 'd'}"])
    assert "dist.world_size=100000" in line and "at most" in line and "GiB" in line


# ---------------------------------------------------------------- calibrate, validate-cost, compare-plans

CALIBRATE_OPTIONS = st.one_of(
    st.integers(-10**6, 1).map(lambda v: ["--world-size", str(v)]),
    st.integers(-10**6, 999).map(lambda v: ["--rows", str(v)]),
    st.integers(-10**6, 0).map(lambda v: ["--repeats", str(v)]),
    st.integers(-10**6, 0).map(lambda v: ["--rounds", str(v)]),
    BAD_FLOATS.map(lambda v: ["--timeout", v]),
    WORDS.map(lambda w: ["--rows", w]),
    WORDS.map(lambda w: [f"--{w}-nope"]),
    st.just(["--out", "."]),
    st.integers(100_000, 10**9).map(lambda v: ["--world-size", str(v)]),
)


@FUZZ
@given(option=CALIBRATE_OPTIONS)
def test_calibrate_refuses_bad_options(box, option):
    tmp, refused = box
    out = tmp / "hw.yaml"
    refused(["calibrate", "--out", str(out), *option], out)


VALIDATE_OPTIONS = st.one_of(
    st.sampled_from(["", "1", "0,2", "2,,3", "-2", "two"]).map(lambda v: ["--world-sizes", v]),
    st.integers(-10**6, 0).map(lambda v: ["--rounds", str(v)]),
    st.integers(-10**6, 0).map(lambda v: ["--repeats", str(v)]),
    BAD_FLOATS.map(lambda v: ["--timeout", v]),
    WORDS.map(lambda w: ["--hardware", f"{w}_nope"]),
    WORDS.map(lambda w: ["--rescale", f"{w}_nope"]),
    st.just(["--records", "."]),
    WORDS.map(lambda w: [f"--{w}-nope"]),
)


@FUZZ
@given(option=VALIDATE_OPTIONS)
def test_validate_cost_refuses_bad_options(box, option):
    tmp, refused = box
    records = tmp / "r.jsonl"
    refused(["validate-cost", "--records", str(records), *option], records)


@pytest.mark.slow
@FUZZ
@given(option=st.one_of(VALIDATE_OPTIONS.filter(lambda o: o[0] not in ("--world-sizes", "--rounds", "--repeats")),
                        st.integers(-10, 1).map(lambda v: ["--world-size", str(v)]),
                        RUN_OPTIONS.map(lambda o: [o]), WORDS.map(lambda w: [w])))
def test_compare_plans_refuses_bad_options(box, option):
    tmp, refused = box
    records = tmp / "r.jsonl"
    refused(["compare-plans", "--records", str(records), "workload=smoke", *option], records)


# ---------------------------------------------------------------- report and regress files

@st.composite
def broken_records(draw) -> bytes:
    how = draw(st.sampled_from(["bytes", "not_json", "not_object", "no_metrics", "bad_metric", "empty"]))
    if how == "bytes":
        return b"\xff" + draw(st.binary(max_size=100))
    if how == "not_json":
        return b'{"kind": "lookup", "metrics": [\n'
    if how == "not_object":
        return (json.dumps(draw(st.one_of(st.integers(), st.lists(st.integers(), max_size=3)))) + "\n").encode()
    if how == "no_metrics":
        return json.dumps({"kind": draw(WORDS)}).encode() + b"\n"
    if how == "bad_metric":
        return json.dumps({"kind": "lookup", "metrics": [{"name": "x", "value": draw(WORDS)}]}).encode() + b"\n"
    return b"\n\n"


@FUZZ
@given(payload=broken_records())
def test_report_refuses_malformed_records(box, payload):
    tmp, refused = box
    records, out = tmp / "r.jsonl", tmp / "report"
    records.write_bytes(payload)
    refused(["report", str(records), "--out", str(out)], out)


def test_report_refuses_missing_records_and_an_output_through_a_file(box):
    tmp, refused = box
    refused(["report", str(tmp / "none.jsonl"), "--out", str(tmp / "rep")], tmp / "rep")
    (tmp / "f").write_text("x")
    (tmp / "r.jsonl").write_text(json.dumps({"kind": "lookup", "metrics": []}) + "\n")
    refused(["report", str(tmp / "r.jsonl"), "--out", str(tmp / "f" / "rep")])


@st.composite
def broken_baselines(draw) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["deterministic", "timed"]))
    how = draw(st.sampled_from(["bytes", "not_json", "missing_key", "bad_entry"]))
    if how == "bytes":
        return kind, b"\xff" + draw(st.binary(max_size=100))
    if how == "not_json":
        return kind, b'{"figures": {'
    if how == "missing_key":
        return kind, json.dumps({("probes" if kind == "deterministic" else "figures"): {"a": 1.0}}).encode()
    if kind == "deterministic":
        return kind, json.dumps({"figures": {"a": draw(st.one_of(WORDS, st.none(), st.lists(st.integers())))}}).encode()
    ratios = draw(st.one_of(st.lists(st.floats(0.1, 10), max_size=2), st.lists(WORDS, min_size=3, max_size=4),
                            st.lists(st.floats(max_value=0), min_size=3, max_size=4)))
    return kind, json.dumps({"probes": {"torch_forward/gather": {"ratios": ratios}}}).encode()


@FUZZ
@given(file=broken_baselines())
def test_regress_refuses_malformed_baselines_before_measuring(box, file):
    tmp, refused = box
    kind, payload = file
    base, save = tmp / "base.json", tmp / "saved.json"
    base.write_bytes(payload)
    refused(["regress", kind, "--baseline", str(base)], save)
    if kind == "deterministic":
        refused(["regress", kind, "--now", str(base)])


REGRESS_OPTIONS = st.one_of(
    st.integers(-10**6, 2).map(lambda v: ["timed", "--repeats", str(v)]),
    st.one_of(st.floats(max_value=0), st.floats(min_value=1)).map(lambda v: ["timed", "--alpha", repr(v)]),
    st.floats(max_value=-1e-9).map(lambda v: ["timed", "--threshold", repr(v)]),
    BAD_FLOATS.filter(lambda v: v not in ("0.0", "-0.0")).map(lambda v: ["deterministic", "--rel-tol", v]),
    WORDS.map(lambda w: ["deterministic", "--tol", w]),
    WORDS.map(lambda w: ["deterministic", "--tol", f"nmp:={w}"]),
    WORDS.map(lambda w: [w]),
    WORDS.map(lambda w: ["timed", f"--{w}-nope"]),
    st.just(["timed", "--save", "."]),
)


@FUZZ
@given(option=REGRESS_OPTIONS)
def test_regress_refuses_bad_options(box, option):
    tmp, refused = box
    refused(["regress", *option])


# ---------------------------------------------------------------- the real console command (subprocess)

@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    ["run", "workload=smoke", "bench.repeats=0"],
    ["run", "workload=smoke", "workload.access.alpha=inf"],
    ["plan", "--tables", "random:0", "--out", "p.json"],
    ["dist", "workload=smoke", "dist.plan=nosuch"],
    ["trace", "stats", "pickle.pt"],
])
def test_console_command_prints_one_line_and_exits_2(tmp_path, argv):
    (tmp_path / "pickle.pt").write_bytes(pickle.dumps({"a": np.arange(3)}))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "benchmarks.cli", *argv], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "results" / "records.jsonl").exists() and not (tmp_path / "p.json").exists()
