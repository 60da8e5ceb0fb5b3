"""Shrinkage of the learned correction (issue 19): λ is chosen by leave-one-family-out CV on the training records
alone, so a correction that does not carry from family to family is shrunk towards the analytic model and one
that does is kept; the model applies λ; several collections pool with their own hardware files."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.perfmodel import collect
from benchmarks.perfmodel.cli import main as perfmodel_main
from benchmarks.perfmodel.train import LAMBDAS, choose_lambda, train
from sharding.learned_cost import correction, predict_trees

from .test_learned import HW, _synthetic_records

NAMES = ("a", "b", "c")


def _families(rng: np.random.Generator, per_family_offset: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """8 families × 6 rows; y = 0.4 · sign(x0) (a departure the features explain) or, with `per_family_offset`,
    a random offset per family the features cannot tell apart (what the collections' families showed)."""
    x = rng.normal(size=(48, 3))
    groups = np.repeat(np.arange(8), 6)
    if per_family_offset:
        y = rng.normal(scale=0.5, size=8)[groups] + rng.normal(scale=0.02, size=48)
    else:
        y = 0.4 * np.sign(x[:, 0])
    return x, y, groups


def test_lambda_keeps_a_correction_that_carries_and_shrinks_one_that_does_not() -> None:
    rng = np.random.default_rng(1)
    lam, errs = choose_lambda(*_families(rng, False), NAMES)
    assert lam == 1.0 and set(errs) == {str(v) for v in LAMBDAS}
    lam_noise, _ = choose_lambda(*_families(rng, True), NAMES)
    assert lam_noise <= 0.25  # fitted family offsets do not predict the next family


def test_too_few_families_keep_the_whole_correction() -> None:
    x = np.zeros((6, 3))
    assert choose_lambda(x, np.ones(6), np.array([0, 0, 0, 1, 1, 1]), NAMES) == (1.0, {})


def test_correction_applies_lambda_and_older_files_mean_one() -> None:
    tree = {"init": 0.2, "learning_rate": 1.0, "trees": [{"left": [-1], "right": [-1], "feature": [0],
                                                          "threshold": [0.0], "value": [0.1]}]}
    x = np.zeros((2, 1))
    assert correction({"step": tree}, "step", x) == pytest.approx(predict_trees(tree, x))
    assert correction({"step": tree, "step_lambda": 0.1}, "step", x) == pytest.approx([0.03, 0.03])


def test_pooled_collections_train_with_their_own_hardware_and_keep_provenance(tmp_path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    recs = _synthetic_records(6)
    collect.append(a, recs[:9])
    collect.append(b, recs[9:])
    model = train([str(a), str(b)], [HW, HW], str(tmp_path / "m.json"), {"git_sha": "abc"})
    prov = model["provenance"]
    assert prov["records"] == [str(a), str(b)] and prov["hardware"] == HW and prov["step_records"] == 18
    assert model["step_lambda"] in LAMBDAS and set(model["lambda_cv"]) == {"step", "rank"}
    assert json.loads((tmp_path / "m.json").read_text())["step_lambda"] == model["step_lambda"]


def test_train_refuses_unpaired_hardware_files_in_one_line(tmp_path, capsys) -> None:
    a = tmp_path / "a.jsonl"
    collect.append(a, _synthetic_records(1))
    argv = ["train", "--records", str(a), "--records", str(a), "--hardware", HW, "--hardware", HW, "--hardware", HW]
    assert perfmodel_main(argv) == 2
    err = capsys.readouterr().err
    assert "2 --records and 3 --hardware" in err and len(err.strip().splitlines()) == 1


def test_cli_train_pools_two_records_files(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    recs = _synthetic_records(4)
    collect.append(a, recs[:6])
    collect.append(b, recs[6:])
    out = tmp_path / "m.json"
    assert perfmodel_main(["train", "--records", str(a), "--records", str(b), "--hardware", HW, "--out", str(out)]) == 0
    model = json.loads(out.read_text())
    assert model["provenance"]["records"] == [str(a), str(b)] and model["provenance"]["step_records"] == 12
    assert f"-> {out}" in capsys.readouterr().out
    assert model["provenance"]["hardware"] == HW  # one file for both: evaluate finds it
    model["provenance"]["hardware"] = [HW, "other.yaml"]
    out.write_text(json.dumps(model))
    assert perfmodel_main(["evaluate", "--model", str(out), "--records", str(a)]) == 2  # which one: ask
    assert "give --hardware" in capsys.readouterr().err
