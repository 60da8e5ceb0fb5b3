"""The regression check: identical runs pass, a changed deterministic figure and a slowed kernel are caught, a
noisy but unchanged timing is not called a regression."""
from __future__ import annotations

import json
import time

import numpy as np
import torch

from benchmarks.compose import compose_workload
from benchmarks.regress import BASELINE, compare_samples, main, measure_pair
from embedding.backends import build_backend, init_weights
from embedding.generate import generate_batches


def _figures_file(tmp_path, change: dict | None = None, drop: str | None = None):
    figures = json.load(open(BASELINE))["figures"]
    figures.update(change or {})
    if drop:
        del figures[drop]
    path = tmp_path / "now.json"
    path.write_text(json.dumps({"figures": figures}))
    return str(path)


def test_identical_runs_pass(tmp_path, capsys):
    """Two fresh computations of the deterministic figures agree exactly (the committed baseline itself is checked
    by `dlrmbench regress deterministic` in .ci/run, so that changing a figure on purpose needs a new baseline)."""
    saved = tmp_path / "base.json"
    assert main(["deterministic", "--save", str(saved)]) == 0
    assert main(["deterministic", "--baseline", str(saved)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out


def test_identical_figures_pass(tmp_path):
    assert main(["deterministic", "--now", _figures_file(tmp_path)]) == 0


def test_changed_deterministic_figure_is_caught(tmp_path, capsys):
    base = json.load(open(BASELINE))["figures"]
    now = _figures_file(tmp_path, {"cache:misses": base["cache:misses"] + 1})
    assert main(["deterministic", "--now", now]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("cache:misses "))
    assert "CHANGED" in row and "1 regression(s)" in out


def test_a_stated_tolerance_admits_a_small_change(tmp_path):
    base = json.load(open(BASELINE))["figures"]
    now = _figures_file(tmp_path, {"nmp:host.energy": base["nmp:host.energy"] * (1 + 1e-7)})
    assert main(["deterministic", "--now", now]) == 1
    assert main(["deterministic", "--now", now, "--tol", "nmp:host.energy=1e-6"]) == 0


def test_vanished_figure_is_caught(tmp_path):
    assert main(["deterministic", "--now", _figures_file(tmp_path, drop="plan:round_robin/8r.cost_ms")]) == 1


def test_missing_baseline_is_bad_input(tmp_path, capsys):
    assert main(["deterministic", "--baseline", str(tmp_path / "nope.json"), "--now", str(tmp_path / "x")]) == 2
    assert "cannot read" in capsys.readouterr().err


def _forward():
    spec = compose_workload(["workload=smoke"])
    backend = build_backend("torch", spec, init_weights(spec), torch.device("cpu"), "fp32", 0.01)
    inputs = backend.prepare(generate_batches(spec)[0])

    def run():
        with torch.no_grad():
            backend.forward(inputs)
    return run


def test_slowed_kernel_is_caught():
    kernel = _forward()

    def slowed():  # the planted regression: the same kernel doing its work twice
        kernel()
        kernel()
    ref, cand = measure_pair(kernel, slowed, repeats=15)
    v = compare_samples("torch_forward", ref, cand)
    assert v.verdict == "REGRESSION", v


def test_noisy_but_unchanged_timing_passes():
    kernel = _forward()
    rng = np.random.default_rng(0)

    def noisy():  # same kernel, plus heavy-tailed jitter like a shared machine's
        kernel()
        time.sleep(float(rng.exponential(0.002)))
    ref, cand = measure_pair(noisy, noisy, repeats=15)
    assert compare_samples("torch_forward", ref, cand).verdict != "REGRESSION"


def test_decision_rule_needs_both_size_and_significance():
    rng = np.random.default_rng(1)
    base = rng.lognormal(0, 0.3, 20)
    assert compare_samples("same", base, rng.lognormal(0, 0.3, 20)).verdict == "ok"
    assert compare_samples("slower", base, 1.5 * rng.lognormal(0, 0.3, 20)).verdict == "REGRESSION"
    assert compare_samples("slightly", base, 1.05 * base, threshold=0.10).verdict == "ok"  # significant, but small
    assert compare_samples("faster", base, 0.5 * rng.lognormal(0, 0.3, 20)).verdict == "improved"
