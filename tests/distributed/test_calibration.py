"""Calibration's fits and the machine check: the lookup fit recovers known near-core and DRAM bandwidths, residuals
are relative, and a calibration used on another machine (CPU, cores, bandwidth probe) is warned about."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from benchmarks import calibrate
from benchmarks.perfmodel.machine import check_hardware_file, check_machine, fingerprint, llc_bytes

LLC = 32 * 2**20


def _grid() -> list[dict]:
    pts = []
    for dim in calibrate.DIMS:
        for mult in calibrate.LLC_MULTIPLES:
            rows = calibrate.lookup_rows(dim, mult, LLC, None)
            for access in calibrate.ACCESS:
                for batch in calibrate.BATCHES:
                    pts.append({"dim": dim, "rows": rows, "table_bytes": rows * dim * 4, "access": access,
                                "batch": batch, "ids": batch * 16.0})
    return pts


def test_lookup_fit_recovers_per_id_near_and_dram_costs() -> None:
    pts = _grid()
    for i, p in enumerate(pts):  # two batch sizes per table: ids and bytes vary apart
        p["ids"] *= 1 + (i % 3) / 2
        ids, near, dram = calibrate.lookup_terms(p, LLC)
        p["fwd_s"] = 20e-6 + ids * 3e-9 + near / 50e9 + dram / 8e9
    fit = calibrate.fit_lookup(pts, LLC)
    assert fit["near_bandwidth"] == pytest.approx(50e9, rel=1e-3)
    assert fit["dram_bandwidth"] == pytest.approx(8e9, rel=1e-3)
    assert fit["id_s"] == pytest.approx(3e-9, rel=1e-3)
    assert fit["call_s"] == pytest.approx(20e-6, rel=1e-3) and fit["max_residual"] < 1e-6
    w = calibrate.lookup_weights(fit, fit)
    assert w["lookup"]["id_bytes"] == pytest.approx(150.0, rel=1e-3) and w["lookup_bwd"]["dram"] == 0.0


def test_relative_fit_weighs_small_calls_like_large_ones() -> None:
    pts = [{"b": b, "t": 100e-6 + b / 1e9} for b in (4e3, 64e3, 1e6, 4e6)]
    pts[-1]["t"] *= 1.5  # one noisy large call: an absolute fit chases it, the relative one keeps the small ones
    lat, bw = calibrate.fit_relative(pts, "b", "t")
    rel = calibrate.residual(pts[:3], "b", "t", (lat, bw))[1]
    ab = calibrate.residual(pts[:3], "b", "t", calibrate._fit_points(pts, "b", "t"))[1]
    assert rel < ab and lat > 0


def test_tables_beyond_the_cache_gather_from_dram_and_small_ones_do_not() -> None:
    small = {"dim": 64, "rows": calibrate.lookup_rows(64, 0.25, LLC, None), "access": "uniform", "batch": 512,
             "ids": 8192.0}
    small["table_bytes"] = small["rows"] * 256
    big = dict(small, rows=calibrate.lookup_rows(64, 8.0, LLC, None))
    big["table_bytes"] = big["rows"] * 256
    assert calibrate.lookup_terms(small, LLC)[2] == 0.0
    assert calibrate.lookup_terms(big, LLC)[2] == pytest.approx(8192 * 256 * (1 - 1 / 8))
    hot = dict(big, access="zipf")
    assert calibrate.lookup_terms(hot, LLC)[2] < calibrate.lookup_terms(big, LLC)[2]
    assert calibrate.lookup_rows(16, 8.0, LLC, 5000) == 5000


def test_residual_is_relative_to_the_measured_time() -> None:
    pts = [{"b": 1e6, "t": 2e-3}, {"b": 2e6, "t": 2e-3}]
    med, worst = calibrate.residual(pts, "b", "t", (0.0, 1e9))
    assert med == pytest.approx(0.25) and worst == pytest.approx(0.5)


def test_machine_check_warns_on_another_cpu_core_count_or_bandwidth() -> None:
    here = {"cpu_model": "A", "cores": 2, "copy_bandwidth": 40e9, "loadavg": [1.0, 1.0, 1.0]}
    assert check_machine(dict(here), here) == []
    assert check_machine(dict(here, copy_bandwidth=45e9), here) == []  # within the probe's noise
    warns = check_machine(dict(here, cpu_model="B", cores=16, copy_bandwidth=120e9), here)
    assert len(warns) == 3 and "cpu_model 'B'" in warns[0] and "cores 16" in warns[1] and "120.0 GB/s" in warns[2]
    assert "no machine fingerprint" in check_machine(None, here)[0]


def test_hardware_file_check_reads_the_stored_fingerprint(tmp_path) -> None:
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump({"device": "cpu", "calibration": {}, "machine": {"cpu_model": "elsewhere",
                                                                                 "cores": 999}}))
    warns = check_hardware_file(str(f))
    assert len(warns) == 2 and all(str(f) in w for w in warns)
    assert check_hardware_file("dev_2core") == []  # a preset: nothing measured, nothing to check


def test_fingerprint_names_the_machine() -> None:
    fp = fingerprint(probe_s=0.05)
    assert fp["cores"] >= 1 and fp["copy_bandwidth"] > 0 and fp["cpu_model"] and len(fp["loadavg"]) == 3
    assert llc_bytes() > 0 and np.isfinite(fp["memory_bytes"])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable cores to take one away")
def test_a_process_limited_to_one_core_fingerprints_as_one_core_and_a_two_core_calibration_is_warned(tmp_path):
    """`taskset -c 0`, or a container's CPU set: the cores are the process's affinity, not `os.cpu_count`."""
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump({"device": "cpu", "calibration": {},
                                 "machine": dict(fingerprint(probe_s=0.05), cores=len(os.sched_getaffinity(0)))}))
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from benchmarks.perfmodel.machine import check_hardware_file, usable_cores; "
            f"print(usable_cores(), os.cpu_count()); print(*check_hardware_file({str(f)!r}), sep='\\n')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == f"1 {os.cpu_count()}"
    assert any(f"cores {len(os.sched_getaffinity(0))}" in line and "has 1" in line for line in out[1:])


def _stored_calibration(path) -> None:
    """A calibrated file's measurement block, made up: what `--refit` fits again."""
    pts = _grid()
    for p in pts:
        ids, near, dram = calibrate.lookup_terms(p, LLC)
        p.update(fwd_s=30e-6 + ids * 2e-9 + near / 100e9, train_s=2 * (30e-6 + ids * 2e-9 + near / 100e9),
                 bytes=near)
    comm = {op: [{"sent_bytes": b, "bytes_per_rank": b, "secs": 1e-4 + b / 1e9} for b in (4e3, 6e4, 1e6, 4e6)]
            for op in ("all_to_all", "reduce_scatter", "all_gather", "all_reduce")}
    dense = [{"rows": r, "bytes": r * 256, "secs": 5e-5 + r * 256 / 2e9} for r in calibrate.DENSE_ROWS]
    tiny = {k: 1e-4 for k in calibrate.STAGE_KEYS}
    stages = {k: dict(tiny) for k in calibrate.OVERHEAD_PLANS}
    stages.update({f"{k}:big": {s: 1e-3 for s in calibrate.STAGE_KEYS} for k in ("TW", "RW", "CW", "TWRW", "DP")})
    data = {"ranks_per_host": 2, "machine": {"cpu_model": "x", "cores": 2, "host": "h"},
            "lookup_model": {"llc_bytes": LLC}, "sources": {"provenance": "made up"},
            "calibration": {"phase_s": {}, "colocated": {"slowdown": 1.1}, "lookups": pts, "collectives": comm,
                            "dense_optimizer": dense, "torchrec_stages_s": stages,
                            "torchrec_step_s": {k: 2e-3 for k in stages}, "torchrec_stage_rounds_s": {}}}
    path.write_text(yaml.safe_dump(data))


def test_refit_fits_stored_measurements_again_with_the_models_own_bytes(tmp_path, capsys) -> None:
    from sharding.topology import load_topology

    src, out = tmp_path / "cal.yaml", tmp_path / "refit.yaml"
    _stored_calibration(src)
    assert calibrate.main(["--refit", str(src), "--out", str(out)]) == 0
    topo = load_topology(str(out))
    lw = topo.lookup_weights["lookup"]
    assert lw["id_bytes"] == pytest.approx(2e-9 * 100e9, rel=1e-3) and lw["dram"] == 0.0 and topo.llc_bytes == LLC
    nbytes = calibrate.stage_plan_bytes(2, LLC, topo.lookup_weights)["TW:big"]
    assert topo.stage_bandwidth["TW"]["lookup"] == pytest.approx(nbytes["lookup"] / 0.9e-3)
    assert topo.step_overhead == pytest.approx(2e-3 - 6e-4)
    assert "refitted from" in out.read_text() and "fit residuals" in capsys.readouterr().out


@pytest.mark.parametrize("content, message", [(None, "No such file"), ("device: cpu\n", "no calibration")])
def test_refit_of_a_file_without_measurements_is_one_line(content, message, tmp_path, capsys) -> None:
    src, out = tmp_path / "cal.yaml", tmp_path / "refit.yaml"
    if content is not None:
        src.write_text(content)
    assert calibrate.main(["--refit", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and not out.exists()


def _round(scale: float, stage_big: float = 1e-3) -> dict:
    """One round's measurements, made up: every time × `scale` (a round under a burst of load: scale > 1)."""
    pts = _grid()
    for p in pts:
        ids, near, dram = calibrate.lookup_terms(p, LLC)
        t = 30e-6 + ids * 2e-9 + near / 100e9
        p.update(fwd_s=scale * t, train_s=scale * 2 * t, bytes=near)
    comm = {op: [{"sent_bytes": b, "bytes_per_rank": b, "secs": scale * (1e-4 + b / 1e9)} for b in (4e3, 6e4, 1e6, 4e6)]
            for op in ("all_to_all", "reduce_scatter", "all_gather", "all_reduce")}
    dense = [{"rows": r, "bytes": r * 256, "secs": scale * (5e-5 + r * 256 / 2e9)} for r in calibrate.DENSE_ROWS]
    stages = {k: {s: scale * 1e-4 for s in calibrate.STAGE_KEYS} for k in calibrate.OVERHEAD_PLANS}
    stages.update({f"{k}:big": {s: scale * stage_big for s in calibrate.STAGE_KEYS}
                   for k in ("TW", "RW", "CW", "TWRW", "DP")})
    return {"lookups": pts, "colocated": {"slowdown": 1.1 * scale}, "collectives": comm, "dense_optimizer": dense,
            "torchrec_stages_s": stages, "torchrec_step_s": {k: scale * 2e-3 for k in stages},
            "torchrec_gap_s": {k: scale * 1.4e-3 for k in stages}}


def test_each_figure_is_the_median_of_per_round_fits_so_one_loaded_round_does_not_move_it() -> None:
    quiet = calibrate.fit_rounds([_round(1.0)], 2, LLC)["median"]
    fit = calibrate.fit_rounds([_round(1.0), _round(3.0), _round(1.0), _round(1.0), _round(1.0)], 2, LLC)
    med, spread = fit["median"], fit["spread"]
    assert med["lookup_bandwidth"] == pytest.approx(quiet["lookup_bandwidth"], rel=1e-6)
    assert med["forward"]["id_s"] == pytest.approx(2e-9, rel=1e-3)
    assert med["optimizer_bandwidth"] == pytest.approx(2e9, rel=1e-6)
    assert med["collectives"]["all_to_all"]["bandwidth"] == pytest.approx(1e9, rel=1e-6)
    assert med["step_overhead"] == pytest.approx(1.4e-3) and med["fixed_tw_s"] == pytest.approx(quiet["fixed_tw_s"])
    assert med["stage_bandwidth"]["TW"]["lookup"] == pytest.approx(quiet["stage_bandwidth"]["TW"]["lookup"])
    # the loaded round shows in the spread (3× the time: a third of the bandwidth), not in the figure
    lo, hi = spread["optimizer_bandwidth"]
    assert lo == pytest.approx(2e9 / 3, rel=1e-6) and hi == pytest.approx(2e9, rel=1e-6)
    assert spread["step_overhead"][1] == pytest.approx(3 * 1.4e-3) and len(fit["rounds"]) == 5


def test_a_stage_with_no_growth_in_most_rounds_is_left_to_the_microbenchmarks() -> None:
    flat = _round(1.0, stage_big=1e-4)  # the larger plan no slower than the tiny one: no bandwidth measured
    fit = calibrate.fit_rounds([flat, flat, _round(1.0)], 2, LLC)["median"]
    assert "TW" not in fit["stage_bandwidth"]
    fit = calibrate.fit_rounds([_round(1.0), _round(1.0), flat], 2, LLC)["median"]
    assert fit["stage_bandwidth"]["TW"]["lookup"] > 0


def test_median_tree_and_spread_over_rounds() -> None:
    from benchmarks.calibration_rounds import median_tree, relative_spread, rotated, spread_tree

    trees = [{"a": 1.0, "b": {"c": 4.0}}, {"a": 9.0, "b": {"c": 2.0}}, {"a": 2.0, "b": {"c": 3.0, "d": 1.0}}]
    assert median_tree(trees) == {"a": 2.0, "b": {"c": 3.0, "d": 1.0}}
    assert median_tree(trees, missing=float("inf")) == {"a": 2.0, "b": {"c": 3.0}}
    assert spread_tree(trees) == {"a": [1.0, 9.0], "b": {"c": [2.0, 4.0], "d": [1.0, 1.0]}}
    assert rotated(("x", "y", "z"), 4) == ["y", "z", "x"] and relative_spread([1.0, 2.0, 3.0]) == pytest.approx(1.0)


def test_refit_of_a_file_with_rounds_fits_each_round(tmp_path, capsys) -> None:
    from sharding.topology import load_topology

    src, out = tmp_path / "cal.yaml", tmp_path / "refit.yaml"
    data = {"ranks_per_host": 2, "machine": {"cpu_model": "x", "cores": 2, "host": "h"},
            "lookup_model": {"llc_bytes": LLC}, "sources": {"provenance": "made up"},
            "calibration": {"phase_s": {}, "rounds": [_round(1.0), _round(5.0), _round(1.0)]}}
    src.write_text(yaml.safe_dump(data))
    assert calibrate.main(["--refit", str(src), "--out", str(out)]) == 0
    topo = load_topology(str(out))
    assert topo.optimizer_bandwidth == pytest.approx(2e9, rel=1e-6) and topo.step_overhead == pytest.approx(1.4e-3)
    stored = yaml.safe_load(out.read_text())["calibration"]
    assert len(stored["round_fits"]) == 3 and stored["term_spread"]["optimizer_bandwidth"][0] == pytest.approx(4e8)
    printed = capsys.readouterr().out
    assert "median [min–max] over 3 rounds" in printed and "outside the stages 1.40 [1.40–7.00] ms" in printed


def test_stacked_plan_gives_the_lone_rank_speed_up_and_the_all_to_all_share_the_model_misses() -> None:
    from benchmarks.calibrate import stacked

    stages = ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd", "optimizer")
    tiny = dict.fromkeys(stages, 1e-3)
    big = {s: 1e-3 + 2e-3 for s in stages}  # byte part 2 ms per stage on each rank's 2 tables
    # synthetic W = 2: rank 0 alone with 4 tables runs its lookups 1.5× faster than twice the busy price, the
    # ids it receives take as long as each rank's half did (the senders pay their share)
    stack = {**tiny, "lookup": 1e-3 + 2 * 2e-3 / 1.5, "lookup_bwd": 1e-3 + 2 * 2e-3 / 1.25, "input_dist": 3e-3}
    got = stacked({"TW": tiny, "TW:big": big, "TW:stack": stack}, 2)
    assert got["lookup"] == pytest.approx(1.5) and got["lookup_bwd"] == pytest.approx(1.25)
    assert got["input_dist"] == pytest.approx(0.5)
    assert stacked({"TW": tiny, "TW:big": big}, 2) == {}  # a file calibrated before the stacked plan


def test_backward_fit_counts_rows_once_per_distinct_row_and_the_weights_say_so() -> None:
    pts = _grid()
    for i, p in enumerate(pts):
        p["ids"] *= 1 + (i % 3) / 2
        p["unique_rows"] = p["ids"] * (0.3 if p["access"] == "zipf" else 0.95)  # hot tables repeat rows
        ids, near, dram = calibrate.lookup_terms(p, LLC, unique=True)
        p["bwd_s"] = 30e-6 + ids * 5e-9 + near / 20e9 + dram / 8e9
    assert calibrate.per_unique_row(pts)
    fit = calibrate.fit_lookup(pts, LLC, "bwd_s", unique=True)
    assert fit["near_bandwidth"] == pytest.approx(20e9, rel=1e-3) and fit["max_residual"] < 1e-6
    per_id = calibrate.fit_lookup(pts, LLC, "bwd_s")  # the same times read per id: the fit misses them
    assert per_id["max_residual"] > 0.05
    assert calibrate.lookup_weights(fit, fit, unique=True)["lookup_bwd"]["unique_rows"] == 1.0
    assert "unique_rows" not in calibrate.lookup_weights(fit, fit)["lookup_bwd"]
    for p in pts[:1]:
        del p["unique_rows"]
    assert not calibrate.per_unique_row(pts)  # files calibrated before the grid stored them: per id, as fitted


def test_backward_fit_finds_a_cost_per_distinct_row_whatever_its_width() -> None:
    """A fixed cost per distinct row (the fused update's per-row work, the same at dim 16 and 128) is fitted as
    `row_s` and written as `lookup_weights.lookup_bwd.row_bytes` (row_s · near bandwidth), not put on the ids."""
    pts = _grid()
    for i, p in enumerate(pts):
        p["ids"] *= 1 + (i % 3) / 2
        p["unique_rows"] = p["ids"] * (0.3 if p["access"] == "zipf" else 0.95)
        ids, near, dram = calibrate.lookup_terms(p, LLC, unique=True)
        p["bwd_s"] = 30e-6 + ids * 5e-9 + near / 20e9 + dram / 8e9 + p["unique_rows"] * 400e-9
    fit = calibrate.fit_lookup(pts, LLC, "bwd_s", unique=True)
    assert fit["row_s"] == pytest.approx(400e-9, rel=1e-3) and fit["id_s"] == pytest.approx(5e-9, rel=1e-2)
    assert fit["max_residual"] < 1e-6
    w = calibrate.lookup_weights(fit, fit, unique=True)["lookup_bwd"]
    assert w["row_bytes"] == pytest.approx(round(400e-9 * fit["near_bandwidth"], 2))
    assert "row_s" not in calibrate.fit_lookup(pts, LLC, "bwd_s")  # read per id (the forward's fit): no such term


def test_the_stacked_plan_measured_in_the_first_round_only_is_that_rounds_figure() -> None:
    stages = ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd", "optimizer")
    first = _round(1.0)
    first["torchrec_stages_s"]["TW:stack"] = {**dict.fromkeys(stages, 1e-4), "lookup": 1e-4 + 2 * 0.9e-3 / 1.5,
                                              "lookup_bwd": 1e-4 + 2 * 0.9e-3 / 1.25, "input_dist": 1e-4}
    fit = calibrate.fit_rounds([first, _round(1.0), _round(2.0)], 2, LLC)
    st = fit["median"]["stacked"]
    assert st["lookup"] == pytest.approx(1.5) and st["lookup_bwd"] == pytest.approx(1.25)
    assert [bool(f["stacked"]) for f in fit["rounds"]] == [True, False, False]
    assert fit["median"]["stage_bandwidth"]["TW"]["lookup"] > 0  # the other rounds' stage fits are unaffected

