"""The speed reference: its record format, the rescaling arithmetic against hand-computed values, the drift
warning, and validate-cost's use of it when rescoring a run."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from benchmarks import validate_cost
from benchmarks.perfmodel import reference as ref

CAL = {"copy_bandwidth": 10e9, "lookup_s": 2e-3, "mlp_s": 4e-3}


def test_calibration_reference_is_the_geometric_mean_of_its_start_and_end() -> None:
    data = {"machine": {"reference": {"start": {"copy_bandwidth": 8e9, "lookup_s": 1e-3, "mlp_s": 2e-3},
                                      "end": {"copy_bandwidth": 2e9, "lookup_s": 4e-3, "mlp_s": 8e-3}}}}
    got = ref.reference_of(data)
    assert got == pytest.approx({"copy_bandwidth": 4e9, "lookup_s": 2e-3, "mlp_s": 4e-3})
    assert ref.reference_of({"machine": {}}) is None and ref.reference_of({}) is None
    assert ref.reference_of({"machine": {"reference": {"start": {"copy_bandwidth": 0, "lookup_s": 1,
                                                                 "mlp_s": 1}}}}) is None


def test_ratios_are_faster_now_above_one() -> None:
    now = {"copy_bandwidth": 5e9, "lookup_s": 4e-3, "mlp_s": 2e-3}  # half the bandwidth; lookup 2x slower, MLP 2x faster
    r = ref.ratios(now, CAL)
    assert r["bandwidth"] == pytest.approx(0.5) and r["compute"] == pytest.approx(math.sqrt(0.5 * 2.0))
    assert ref.combine([{"copy_bandwidth": 1, "lookup_s": 3, "mlp_s": 5},
                        {"copy_bandwidth": 3, "lookup_s": 1, "mlp_s": 7}]) == {"copy_bandwidth": 2.0,
                                                                              "lookup_s": 2.0, "mlp_s": 6.0}


def test_rescale_scales_bandwidths_by_bandwidth_and_fixed_times_by_compute() -> None:
    data = {"tiers": [{"name": "ddr", "capacity": 1e9, "bandwidth": 10e9}],
            "intra_host": {"bandwidth": 2e9, "latency": 40e-6},
            "collectives": {"all_to_all": {"bandwidth": 1e9, "latency": 100e-6}},
            "optimizer_bandwidth": 3e9, "stage_bandwidth": {"TW": {"lookup": 6e9}},
            "stage_overhead": {"TW": {"lookup": 1e-3}}, "step_overhead": 4e-3, "step_overhead_per_value": 2e-9,
            "lookup_weights": {"lookup": {"id_bytes": 50.0}}, "bwd_compute_multiplier": 2.0}
    r = {"bandwidth": 0.5, "compute": 0.25}  # half the bandwidth, a quarter of the compute speed
    out = ref.rescale_hardware(data, r, "reference")
    assert out["tiers"][0]["bandwidth"] == 5e9 and out["tiers"][0]["capacity"] == 1e9
    assert out["intra_host"] == {"bandwidth": 1e9, "latency": 160e-6}
    assert out["collectives"]["all_to_all"] == {"bandwidth": 0.5e9, "latency": 400e-6}
    assert out["optimizer_bandwidth"] == 1.5e9 and out["stage_bandwidth"]["TW"]["lookup"] == 3e9
    assert out["stage_overhead"]["TW"]["lookup"] == 4e-3 and out["step_overhead"] == 16e-3
    assert out["step_overhead_per_value"] == 8e-9
    assert out["lookup_weights"] == data["lookup_weights"] and out["bwd_compute_multiplier"] == 2.0
    assert data["tiers"][0]["bandwidth"] == 10e9  # the input is not changed
    comp = ref.rescale_hardware(data, r, "compute")
    assert comp["tiers"][0]["bandwidth"] == 2.5e9 and comp["step_overhead"] == 16e-3
    assert "rescaled" not in ref.rescale_hardware(data, r, "none")
    with pytest.raises(ValueError):
        ref.rescale_hardware(data, r, "bogus")


def test_drift_warning_only_beyond_the_tolerance() -> None:
    assert ref.drift_warning({"bandwidth": 1.2, "compute": 0.8}, "round 1") is None
    w = ref.drift_warning({"bandwidth": 1.0, "compute": 0.5}, "round 2")
    assert w and w.startswith("warning: round 2:") and "compute ×0.50" in w and "\n" not in w


def test_reference_lines_report_each_round_and_warn_once_per_drifting_round() -> None:
    refs = [dict(CAL), {"copy_bandwidth": 10e9, "lookup_s": 6e-3, "mlp_s": 12e-3}, None]
    lines, warns = validate_cost.reference_lines(refs, CAL, [0.1, 0.5])
    assert "round 1" in lines[1] and "compute 1.00" in lines[1] and "10%" in lines[1]
    assert "compute 0.33" in lines[2] and "50%" in lines[2] and "no reference" in lines[3]
    assert len(warns) == 1 and "round 2" in warns[0]


def _calibrated(tmp_path: Path, with_ref: bool = True) -> str:
    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf/hardware/dev_2core.yaml").read_text())
    data["calibration"] = {}
    if with_ref:
        data["machine"] = {"reference": {"start": dict(CAL), "end": dict(CAL)}}
    p = tmp_path / ("cal.yaml" if with_ref else "noref.yaml")
    p.write_text(yaml.safe_dump(data))
    return str(p)


def _add_reference(records: str, now: dict) -> None:
    lines = [json.loads(x) for x in Path(records).read_text().splitlines()]
    for r in lines:
        if r.get("kind") == "validation":
            r["reference"] = [now, now]
    Path(records).write_text("".join(json.dumps(r) + "\n" for r in lines))


def _ours(out: str) -> float:
    row = next(line for line in out.splitlines() if line.startswith("| small4/all_rw/w2 |"))
    return float(row.split("|")[5])


def test_rescore_rescaled_by_the_runs_reference(tmp_path, capsys) -> None:
    from tests.distributed.test_validate_cost import _measured_run

    records = _measured_run(tmp_path)
    cal = _calibrated(tmp_path)
    _add_reference(records, {"copy_bandwidth": 20e9, "lookup_s": 1e-3, "mlp_s": 2e-3})  # twice as fast now
    args = ["--rescore", "latest", "--records", records, "--hardware", cal, "--model", "none"]
    assert validate_cost.main(args) == 0
    plain = capsys.readouterr()
    assert "bandwidth 2.00, compute 2.00" in plain.out and "speed reference reads bandwidth ×2.00" in plain.err
    assert validate_cost.main([*args, "--rescale", "reference"]) == 0
    scaled = _ours(capsys.readouterr().out)
    assert scaled == pytest.approx(_ours(plain.out) / 2, rel=0.02)  # every time term halves
    assert validate_cost.main([*args[:-4], "--hardware", _calibrated(tmp_path, False), "--model", "none",
                               "--rescale", "reference"]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the fingerprint warning: one error line
    assert last.startswith("dlrmbench validate-cost: error: --rescale reference") and "no speed reference" in last


def test_a_live_run_refuses_to_rescale_a_file_without_a_reference_before_measuring(tmp_path, capsys) -> None:
    records = tmp_path / "r.jsonl"
    assert validate_cost.main(["--rescale", "reference", "--hardware", "dev_2core", "--model", "none",
                               "--records", str(records)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no speed reference" in err[0] and not records.exists()


def test_sync_ratio_is_reported_and_warned_on_but_not_priced() -> None:
    cal = dict(CAL, sync_s=100e-6)
    assert "sync" not in ref.ratios(dict(CAL), cal) and "sync" not in ref.ratios(cal, dict(CAL))
    r = ref.ratios(dict(CAL, sync_s=400e-6), cal)  # the all_reduce 4x slower now, the rest unchanged
    assert r == pytest.approx({"bandwidth": 1.0, "compute": 1.0, "sync": 0.25})
    data = {"collectives": {"all_to_all": {"bandwidth": 1e9, "latency": 100e-6}}, "step_overhead": 4e-3,
            "stage_overhead": {"TW": {"lookup": 1e-3}}}
    out = ref.rescale_hardware(data, r, "reference")  # fixed times follow compute (1.0), not the all_reduce
    assert out["collectives"]["all_to_all"] == {"bandwidth": 1e9, "latency": 100e-6}
    assert out["step_overhead"] == 4e-3 and out["stage_overhead"]["TW"]["lookup"] == 1e-3
    w = ref.drift_warning(r, "round 1")
    assert w and "sync ×0.25" in w
    both = {"start": dict(CAL, sync_s=100e-6), "end": dict(CAL, sync_s=400e-6)}
    assert ref.reference_of({"machine": {"reference": both}})["sync_s"] == pytest.approx(200e-6)
    both["end"].pop("sync_s")
    assert "sync_s" not in ref.reference_of({"machine": {"reference": both}})
    assert "sync_s" not in ref.combine([dict(CAL, sync_s=1.0), dict(CAL)])


def test_probes_in_a_process_group_time_the_all_reduce() -> None:
    got = ref.run_probes(2)
    assert got["ranks"] == 2 and got["sync_s"] > 0 and all(got[k] > 0 for k in ref.FIELDS)
