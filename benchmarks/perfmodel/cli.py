"""`dlrmbench perfmodel collect | train | evaluate`: the learned performance model.

  collect   measure records (single-process lookups, distributed steps of seeded workload families × plans on
            W gloo ranks); appends to --records and skips keys already there (resumable)
  train     fit gradient-boosted trees on the records' analytic features (needs ≥ 8 step records); writes
            --out with provenance and the held-out errors
  evaluate  a trained model's held-out errors and feature importance; with --records, its error on those
            records (e.g. another machine's: how far the model transfers)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.perfmodel.cases import COLLECT_PLANS, LAYOUTS, OPTIMIZERS

__all__ = ["main"]

RECORDS = "results/perfmodel/records.jsonl"
MODEL = "results/perfmodel/model.json"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dlrmbench perfmodel", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="measure records (resumable)")
    c.add_argument("--records", default=RECORDS)
    c.add_argument("--hardware", default="", help="hardware YAML or preset (default: the calibrated file, "
                   "else dev_2core)")
    c.add_argument("--families", type=int, default=12, help="seeded workload families (× 7 plans each)")
    c.add_argument("--first-family", type=int, default=0, help="seed of the first family (another range: "
                   "workloads a model trained on 0 … N−1 never saw, e.g. to test transfer)")
    c.add_argument("--lookups", type=int, default=40, help="seeded lookup points (× 2 backends each)")
    c.add_argument("--world-size", type=int, default=2)
    c.add_argument("--repeats", type=int, default=10, help="timed steps (or calls) per case")
    c.add_argument("--per-job", type=int, default=7, help="step cases per distributed job")
    c.add_argument("--kinds", default="lookup,step", help="comma-separated: lookup, step")
    c.add_argument("--plans", default=",".join(COLLECT_PLANS), help="comma-separated plans per family")
    c.add_argument("--timeout", type=float, default=600.0)
    t = sub.add_parser("train", help="fit the trees; write the model with its provenance")
    t.add_argument("--records", action="append", default=[], help="records file (repeat to pool collections; "
                   f"default {RECORDS})")
    t.add_argument("--hardware", action="append", default=[], help="the hardware file its records were measured "
                   "with (one for all, or one per --records, in order)")
    t.add_argument("--out", default=MODEL)
    e = sub.add_parser("evaluate", help="held-out error and feature importance of a trained model")
    e.add_argument("--model", default=MODEL)
    e.add_argument("--records", default="", help="score the model on these records (another machine's)")
    e.add_argument("--hardware", default="", help="with --records: the hardware the features use")
    return p


def _fail(msg: str) -> int:
    print(f"dlrmbench perfmodel: error: {msg}", file=sys.stderr)
    return 2


def _hardware(given: str) -> str:
    from benchmarks.validate_cost import default_hardware

    return default_hardware(given)


def _collect(a: argparse.Namespace) -> int:
    from benchmarks.perfmodel.collect import collect_lookups, collect_steps, machine_now
    from benchmarks.perfmodel.machine import check_hardware_file
    from benchmarks.records import git_sha
    from sharding.topology import TopologyError, load_topology

    kinds = [k for k in a.kinds.split(",") if k]
    if not kinds or any(k not in ("lookup", "step") for k in kinds):
        return _fail(f"--kinds {a.kinds!r}: allowed lookup, step (comma-separated)")
    if a.families < 0 or a.first_family < 0 or a.lookups < 0 or a.repeats < 1 or a.per_job < 1 or a.world_size < 2:
        return _fail("needs --families ≥ 0, --first-family ≥ 0, --lookups ≥ 0, --repeats ≥ 1, --per-job ≥ 1, "
                     "--world-size ≥ 2")
    plans = tuple(p for p in a.plans.split(",") if p)
    # a collected record keeps the plan it ran, so only plans made here qualify (ours/torchrec plan inside the job)
    allowed = tuple(p for p in (*OPTIMIZERS, *LAYOUTS) if p not in ("ours", "torchrec", "best_greedy"))
    if not plans or any(p not in allowed for p in plans):
        return _fail(f"--plans {a.plans!r}: allowed {', '.join(allowed)} (comma-separated)")
    hw = _hardware(a.hardware)
    try:
        load_topology(hw, ranks=a.world_size)
    except TopologyError as e:
        return _fail(f"--hardware {hw!r}: {e}")
    for w in check_hardware_file(hw):
        print(w, file=sys.stderr)
    machine, sha, t0 = machine_now(), git_sha(), time.perf_counter()
    machine["reference"] = _reference(a.world_size, "start")
    print(f"collecting into {a.records} (machine {machine['cpu_model']}, {machine['cores']} cores, copy "
          f"{machine['copy_bandwidth'] / 1e9:.1f} GB/s, load {machine['loadavg']})")
    rc = 0
    if "lookup" in kinds:
        n = collect_lookups(a.records, a.lookups, a.repeats, machine, sha)
        print(f"{n} lookup records written")
    if "step" in kinds:
        n, failed = collect_steps(a.records, a.families, a.world_size, hw, a.repeats, a.per_job, a.timeout,
                                  machine, sha, plans, first=a.first_family)
        print(f"{n} step records written ({failed} jobs failed)")
        rc = 1 if failed else 0
    print(f"collection took {time.perf_counter() - t0:.0f} s")
    end = _reference(a.world_size, "end")
    if machine["reference"] and end:
        from benchmarks.perfmodel.reference import drift_warning, ratios

        r = ratios(end, machine["reference"])
        print(f"speed reference end / start: bandwidth {r['bandwidth']:.2f}, compute {r['compute']:.2f}")
        w = drift_warning(r, "collection end", against="the collection start's")
        if w:
            print(w, file=sys.stderr)
    return rc


def _reference(world: int, when: str) -> dict | None:
    """The speed reference (`reference.try_probes`, `world` processes at once), printed; None when it cannot run."""
    from benchmarks.perfmodel.reference import try_probes

    ref = try_probes(world)
    if ref:
        print(f"speed reference at the {when}: copy {ref['copy_bandwidth'] / 1e9:.1f} GB/s, lookup "
              f"{ref['lookup_s'] * 1e3:.3f} ms, MLP {ref['mlp_s'] * 1e3:.2f} ms ({world} processes at once)")
    return ref


def _print_eval(model: dict) -> None:
    for kind, ev in model.get("heldout", {}).items():
        on = ev.get("analytic_on")  # lookups: the analytic model prices one backend's kernel
        only = f"; {on} records only, {ev['priced_records']} of them" if on else ""
        also = f"; on the {on} ones {100 * ev['learned_priced']['median']:.0f}%" if on else ""
        print(f"{kind}: held-out |error| median analytic {100 * ev['analytic']['median']:.0f}% (p90 "
              f"{100 * ev['analytic']['p90']:.0f}%{only}), learned {100 * ev['learned']['median']:.0f}% (p90 "
              f"{100 * ev['learned']['p90']:.0f}%{also}); {ev['train_records']} training, {ev['heldout_records']} "
              "held-out records (held out: whole families)")
    for kind, imp in model.get("importance", {}).items():
        if imp:
            top = list(imp.items())[:8]
            print(f"{kind} importance: " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    prov = model.get("provenance", {})
    print(f"provenance: {prov.get('step_records')} step, {prov.get('lookup_records')} lookup records from "
          f"{prov.get('records')}, hardware {prov.get('hardware')}, git {prov.get('git_sha')}, trained "
          f"{prov.get('trained')}, load during collection {prov.get('loadavg_1min')}")


def _train(a: argparse.Namespace) -> int:
    from benchmarks.perfmodel.machine import fingerprint
    from benchmarks.perfmodel.train import train
    from benchmarks.records import git_sha

    paths = a.records or [RECORDS]
    for p in paths:
        if not Path(p).is_file():
            return _fail(f"--records {p!r}: no such file (run `dlrmbench perfmodel collect`)")
    if len(a.hardware) > 1 and len(a.hardware) != len(paths):
        return _fail(f"{len(paths)} --records and {len(a.hardware)} --hardware: give one hardware file, or one per "
                     "records file")
    hws = [_hardware(h) for h in (a.hardware or [""])]
    try:
        # the machine is the records' (where they were measured); this one's only when they name none
        model = train(paths, hws, a.out, {"git_sha": git_sha(), "machine": fingerprint()})
    except ValueError as e:
        return _fail(str(e))
    _print_eval(model)
    print(f"-> {a.out}")
    return 0


def _evaluate(a: argparse.Namespace) -> int:
    import numpy as np

    from benchmarks.perfmodel.machine import check_machine
    from benchmarks.perfmodel.train import read_records, step_table
    from sharding.learned_cost import LearnedModelError, correction, load_learned

    try:
        model = load_learned(a.model)
    except LearnedModelError as e:
        return _fail(str(e))
    if a.records and not Path(a.records).is_file():
        return _fail(f"--records {a.records!r}: no such file")
    _print_eval(model)
    for w in check_machine(model.get("provenance", {}).get("machine"), what="learned model"):
        print(w)
    if a.records:
        trained_on = model["provenance"].get("hardware")
        if not a.hardware and isinstance(trained_on, list):
            return _fail("the model was trained on several hardware files: give --hardware, the one --records "
                         "were measured with")
        hw = a.hardware or trained_on or _hardware("")
        records = read_records(a.records)
        tab = step_table(records, hw)
        if not len(tab["y"]):
            return _fail(f"--records {a.records!r} holds no step records with plans")
        theirs = next((r["machine"] for r in records if r.get("kind") == "step" and r.get("machine")), None)
        if theirs:  # where the records were measured against where the model was trained
            for w in check_machine(model.get("provenance", {}).get("machine"), theirs, what="learned model"):
                print(f"{w} (the records' machine)")
        out: dict[str, Any] = {"records": a.records, "hardware": hw, "n": int(len(tab["y"]))}
        for kind, x, y in (("step", tab["x"], tab["y"]), ("rank", tab["xr"], tab["yr"])):
            if model.get(kind) is None or not len(y):
                continue
            learned = np.abs(np.exp(-(y - correction(model, kind, x))) - 1)
            analytic = np.abs(np.exp(-y) - 1)
            out.update({f"{kind}_analytic_median": round(float(np.median(analytic)), 4),
                        f"{kind}_analytic_p90": round(float(np.quantile(analytic, 0.9)), 4),
                        f"{kind}_learned_median": round(float(np.median(learned)), 4),
                        f"{kind}_learned_p90": round(float(np.quantile(learned, 0.9)), 4)})
        print(json.dumps(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "perfmodel":
        argv = argv[1:]
    try:
        a = _parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return {"collect": _collect, "train": _train, "evaluate": _evaluate}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
