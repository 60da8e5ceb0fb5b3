"""`dlrmbench serve [run|search|validate|overhead|whatif] [overrides]`: latency-bounded serving under MLPerf LoadGen.

  run       one LoadGen test of the configured server (serving=<preset> serving.loadgen.target_qps=...)
  search    the highest QPS LoadGen calls VALID for the naive server, static batching and ours (bisection;
            counted LoadGen runs), a QPS–p99 PNG per setting
  validate  the fixed-service SUT against M/D/1 and M/D/c (c = 2, 4) at 30/60/85% utilisation
  overhead  LoadGen's own cost per query (a null SUT answering at once)
  whatif    SimPy model of the queue from measured records, checked at 40/70/90% of an Offline capacity (trust
            verdict), then the embedding stage replaced by the NMP emulator's speedup or a cache's hit rate × tier
            speeds

Overrides are Hydra's: serving=deeprecsys_rm1 serving.loadgen.latency_ms=50 workload.max_rows=100000.
Records go to serving.records (default results/serving/records.jsonl), LoadGen's logs beside them.
Bad input: one line on stderr, exit 2, nothing written.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from embedding.spec import SpecError
from embedding.workload_config import WorkloadConfig, build_workload
from serving.config import ServingConfig, check_serving

from .compose import CONF_DIR
from .records import append_records, environment, git_sha, metric, new_run_id

__all__ = ["main", "compose_serve", "ServeAppConfig"]

COMMANDS = ("run", "search", "validate", "overhead", "whatif")


@dataclass
class ServeAppConfig:
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    records: str = "results/serving/records.jsonl"
    """JSONL file the records are appended to; LoadGen logs go to serving.log_dir/<run id>/"""


def _compose(overrides: list[str]) -> ServeAppConfig:
    ConfigStore.instance().store(name="dlrmbench_serve_schema", node=ServeAppConfig)
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="serve", overrides=overrides)
    return OmegaConf.to_object(cfg)


def compose_serve(overrides: list[str]) -> ServeAppConfig:
    """Compose twice: once to read which workload the serving preset names, then with that workload (unless the
    user chose one) and the preset's row cap (unless the user set workload.max_rows)."""
    try:
        first = _compose(overrides)
        extra = []
        if not any(o.startswith("workload=") for o in overrides):
            name = first.serving.workload
            if not (Path(CONF_DIR) / "workload" / f"{name}.yaml").is_file():
                presets = sorted(p.stem for p in (Path(CONF_DIR) / "workload").glob("*.yaml"))
                raise SpecError(f"serving.workload={name!r}: no such workload preset; choose from {presets}")
            extra.append(f"workload={name}")
        if first.serving.max_rows and not any(o.startswith("workload.max_rows=") for o in overrides):
            extra.append(f"workload.max_rows={first.serving.max_rows}")
        return _compose(extra + overrides) if extra else first
    except (HydraException, OmegaConfBaseException) as e:
        raise SpecError(str(e).splitlines()[0]) from None


def serving_record(run_id: str, cfg: ServeAppConfig, spec, point: dict, role: str = "run") -> dict:
    """One record per measured point: QPS offered and achieved, percentiles, verdict, batches, wait vs service."""
    load = point.get("loadavg", list(os.getloadavg()))
    how = (f"MLPerf LoadGen {cfg.serving.loadgen.scenario} scenario, one run, latencies from "
           f"mlperf_log_summary.txt; load average {load[0]:.2f} (shared machine)")
    metrics = [metric("qps_offered", point.get("target_qps", 0.0), "queries/s", "LoadGen target QPS"),
               metric("qps_scheduled", point.get("scheduled_qps", float("nan")), "queries/s", how),
               metric("qps_completed", point.get("completed_qps", point.get("samples_per_second", float("nan"))),
                      "queries/s", how)]
    for k, v in point.items():
        if k.startswith("p") and k.endswith("_ms") and k[1].isdigit():
            metrics.append(metric(f"latency_{k[:-3]}", v, "ms", how))
    for k in ("mean_latency_ms", "service_ms_mean", "service_ms_p99", "queue_wait_ms_mean", "queue_wait_ms_p99",
              "batch_samples_mean"):
        if k in point:
            metrics.append(metric(k, point[k], "ms" if k.endswith("_ms") or "_ms_" in k else "samples",
                                  "measured in the server (perf_counter), same run"))
    metrics = [m for m in metrics if m["value"] == m["value"]]  # drop NaN (JSON has none)
    return {"run_id": run_id, "kind": "serving", "role": role, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "git_sha": git_sha(), "config": OmegaConf.to_container(OmegaConf.structured(cfg)),
            "env": environment(), "workload": {"name": spec.name, "tables": spec.num_tables,
                                                       "row_cap": spec.row_cap,
                                                       "capped_tables": spec.capped_tables},
            "verdict": point.get("verdict"), "loadavg": load,
            "point": {k: v for k, v in point.items() if isinstance(v, (int, float, str, bool, list))
                      and v == v}, "metrics": metrics}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd = argv.pop(0) if argv and argv[0] in COMMANDS else "run"
    bad = [a for a in argv if "=" not in a]
    if bad:
        print(f"dlrmbench serve: error: {bad[0]!r} is not a command ({', '.join(COMMANDS)}) nor a key=value "
              "override", file=sys.stderr)
        return 2
    try:
        cfg = compose_serve(argv)
        check_serving(cfg.serving, cuda=cfg.serving.server.gpu_threshold > 0 and _cuda())
        spec = build_workload(cfg.workload)
    except SpecError as e:
        print(f"dlrmbench serve: error: {e}", file=sys.stderr)
        return 2
    return _COMMANDS[cmd](cfg, spec)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _write(cfg: ServeAppConfig, records: list[dict]) -> None:
    append_records(cfg.records, records)
    print(f"wrote {len(records)} record(s) to {cfg.records}")


def _line(tag: str, p: dict) -> str:
    la = p.get("loadavg", os.getloadavg())[0]
    pct = " ".join(f"{k[:-3]} {p[k]:.2f}" for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99.9_ms") if k in p)
    return (f"{tag}: offered {p.get('target_qps', 0):.1f} QPS, completed {p.get('completed_qps', float('nan')):.1f}, "
            f"{p.get('verdict')}, ms: {pct}; batch {p.get('batch_samples_mean', 0):.0f} samples, queue wait "
            f"{p.get('queue_wait_ms_mean', 0):.2f} ms vs service {p.get('service_ms_mean', 0):.2f} ms "
            f"(loadavg {la:.2f})")


def _run(cfg: ServeAppConfig, spec, setup) -> int:

    import numpy as np

    from serving.build import new_server
    from serving.loadgen import run_loadgen

    run_id = new_run_id()
    s = cfg.serving
    records, points = [], []
    for k in range(s.loadgen.repeats):
        lg_cfg = replace(s.loadgen, seed=s.loadgen.seed + k)
        point = run_loadgen(new_server(setup, s.server), setup.queries, lg_cfg,
                            Path(s.log_dir) / run_id / (f"rep{k}" if s.loadgen.repeats > 1 else ""))
        print(_line(s.name if s.loadgen.repeats == 1 else f"{s.name} #{k + 1}", point), flush=True)
        points.append(point)
        records.append(serving_record(run_id, cfg, spec, point))
    if len(points) > 1:
        key = f"p{s.loadgen.percentile:g}_ms"
        lat = np.array([p[key] for p in points])
        print(f"{s.name}: {sum(p['verdict'] == 'VALID' for p in points)}/{len(points)} VALID at "
              f"{s.loadgen.target_qps:g} QPS; {key[:-3]} min/median/max {lat.min():.1f}/{np.median(lat):.1f}/"
              f"{lat.max():.1f} ms (loadavg {os.getloadavg()[0]:.2f})")
    _write(cfg, records)
    return 0


def _search(cfg: ServeAppConfig, spec, setup) -> int:
    import numpy as np

    from serving.build import new_server
    from serving.interference import read_counters, run_guarded
    from serving.loadgen import run_loadgen
    from serving.report import plot_qps_latency
    from serving.search import confirm_top, search_all

    s = cfg.serving
    run_id = new_run_id()
    cores = os.cpu_count() or 1
    # starting QPS only (never the answer): half of 1 / (one median-size query on one worker, median of 5)
    n = int(np.median(setup.queries.sizes))
    # and never below the QPS at which min_query_count fits in min_duration (slower runs cost more than halvings)
    start = max(1.0, 0.5 / _median_time(lambda: setup.dlrm.run_samples(0, n)),
                1e3 * s.loadgen.min_query_count / max(s.loadgen.min_duration_ms, 1))
    print(f"{s.name}: bound p{s.loadgen.percentile:g} ≤ {s.loadgen.latency_ms:g} ms; start {start:.1f} QPS "
          f"(loadavg {os.getloadavg()[0]:.2f})")
    batches, batch_ms = _admit_batches(s, setup)
    records: list[dict] = []
    count = [0]

    def run(setting, qps: float, repeat: int | None = None) -> dict:
        """One counted LoadGen run; a confirmation repeat gets its own schedule seed and the longer duration."""
        lg_cfg = s.loadgen
        if repeat is not None:
            lg_cfg = replace(lg_cfg, seed=lg_cfg.seed + 1 + repeat,
                             min_duration_ms=s.search.confirm_duration_ms or lg_cfg.min_duration_ms)
        tag = setting.label if repeat is None else f"{setting.label} confirm #{repeat + 1}"

        def once() -> dict:
            count[0] += 1
            return run_loadgen(new_server(setup, setting.server), setup.queries, lg_cfg,
                               Path(s.log_dir) / run_id / f"{count[0]:03d}", target_qps=qps)

        guard = s.search.others_cpu_max >= 0
        runs = run_guarded(once, read_counters, s.search.others_cpu_max, s.search.disturbed_reruns if guard else 0)
        for i, p in enumerate(runs):
            last = i == len(runs) - 1
            p["disturbed"] = guard and p["disturbed"]
            role = "search" if repeat is None else "confirm"
            rec = serving_record(run_id, cfg, spec, p, role=role if last else f"{role}_disturbed")
            rec["setting"] = setting.label
            rec["server_setting"] = OmegaConf.to_container(OmegaConf.structured(setting.server))
            records.append(rec)
            others = p["others_cpu_cores"]
            note = "" if others is None else f"; others {others:.2f} cores" + (
                (", disturbed: run again" if not last else ", disturbed (reruns spent)") if p["disturbed"] else "")
            print("  " + _line(tag, p) + note, flush=True)
        return runs[-1]

    def log(msg):
        print(msg, flush=True)

    results = search_all(run, s.server, s.search, start, cores, log=log, rank_key=f"p{s.loadgen.percentile:g}_ms",
                         batches=batches)
    sc = s.search
    searched = {id(r): r.runs for r in results}
    tops, picks = confirm_top(run, results, sc, log)
    # the runs spent on each kind's runner-up settings (bracket extension + confirmation): the cost of confirm_top
    extra = sum(r.runs - searched[id(r)] + r.confirm_runs for rs in tops.values() for r in rs[1:])
    total = count[0]  # every LoadGen run, disturbed ones re-run included
    disturbed = sum(1 for rec in records if rec["point"].get("disturbed"))
    kept_disturbed = sum(1 for rec in records
                         if rec["point"].get("disturbed") and rec["role"] in ("search", "confirm"))
    la = os.getloadavg()

    def val(kind, attr):
        r = picks[kind]
        return getattr(r, attr) if r is not None else 0.0

    confirmed = {k: val(k, "confirmed_qps") for k in picks}  # ours falls back to static's when that held higher
    tried = {k: [{"setting": r.setting.label, "best_qps": r.best_qps, "confirmed_qps": r.confirmed_qps,
                  "confirm_runs": r.confirm_runs} for r in rs] for k, rs in tops.items()}
    summary = {"run_id": run_id, "kind": "serving_search", "workload": spec.name, "serving": s.name,
               "bound_ms": s.loadgen.latency_ms, "percentile": s.loadgen.percentile, "loadgen_runs": total,
               "confirm_runs": sum(r.confirm_runs for r in results),
               "confirm_duration_ms": sc.confirm_duration_ms or s.loadgen.min_duration_ms,
               "confirm_bisect_steps": sc.confirm_bisect_steps, "confirm_top": sc.confirm_top,
               "confirm_above": sc.confirm_above,
               "runner_up_runs": extra,
               **{f"{k}_confirmed_settings": v for k, v in tried.items()},
               "disturbed_runs": disturbed, "disturbed_kept": kept_disturbed, "others_cpu_max": sc.others_cpu_max,
               "search_duration_ms": s.loadgen.min_duration_ms,
               "max_batches_admitted": batches, "batch_service_ms": {str(b): t for b, t in batch_ms.items()},
               "batch_headroom": sc.batch_headroom,
               **{f"{k}_qps": v for k, v in confirmed.items()},
               **{f"{k}_best_seen_qps": val(k, "best_qps") for k in picks},
               **{f"{k}_setting": picks[k].setting.label if picks[k] else None for k in picks},
               **{f"{k}_confirm_trail": [list(t) for t in picks[k].confirm_trail] if picks[k] else [] for k in picks},
               **{f"{k}_bounded_above": bool(picks[k] and picks[k].bracketed) for k in picks},
               **{f"{k}_confirm_disturbed": bool(picks[k] and picks[k].confirm_disturbed) for k in picks},
               **{f"{k}_confirm_unbounded": bool(picks[k] and picks[k].confirm_unbounded) for k in picks},
               "loadavg": list(la),
               "probed_only": [r.setting.label for r in results if r.setting.kind == "ours" and r.runs == 1
                               and r.best_qps > 0],
               "unbracketed": [picks[k].setting.label for k in picks if picks[k] and picks[k].best_qps > 0
                               and not picks[k].bracketed]}
    print(f"{s.name}: latency-bounded QPS (confirmed: all {sc.confirm_repeats} repeats VALID, backing off from the "
          f"best VALID QPS) naive {summary['naive_qps']:.1f}, best static {summary['static_qps']:.1f} "
          f"({summary['static_setting']}), ours {summary['ours_qps']:.1f} ({summary['ours_setting']}); highest single "
          f"VALID run: naive {summary['naive_best_seen_qps']:.1f}, static {summary['static_best_seen_qps']:.1f}, ours "
          f"{summary['ours_best_seen_qps']:.1f}; {total} LoadGen runs ({summary['confirm_runs']} of them "
          f"confirmation runs of ≥ {summary['confirm_duration_ms']} ms, {extra} spent on runner-up settings; "
          + (f"{disturbed} disturbed by other processes (> {sc.others_cpu_max:g} cores), {kept_disturbed} of them "
             "kept after the reruns" if sc.others_cpu_max >= 0 else "disturbance guard off") + f"); loadavg {la[0]:.2f}"
          + "; confirmed settings: " + "; ".join(
              f"{k} " + ", ".join(f"{t['setting']} {t['best_qps']:.1f} → " + (
                  (f"{t['confirmed_qps']:.1f}" if t["confirmed_qps"] else "none held") if t["confirm_runs"]
                  else "not confirmed (search best ≤ its kind's confirmed figure)") for t in v)
              for k, v in tried.items() if v)
          + (f"; lower bounds only (no INVALID above): {summary['unbracketed']}" if summary["unbracketed"] else "")
          + (f"; {len(summary['probed_only'])} candidate(s) of ours VALID at the probe but not bisected "
             f"(max_settings={sc.max_settings}): not reported" if summary["probed_only"] else ""))
    pct = f"p{s.loadgen.percentile:g}_ms"
    curves: dict[str, list] = {}
    for r in results:
        if r.setting.kind == "ours" and r.best_qps <= 0:
            continue
        curves[r.setting.label] = [(p.get("completed_qps", 0.0), p[pct], p.get("verdict") == "VALID")
                                   for p in r.points if pct in p]
    loads = [rec["loadavg"][0] for rec in records]
    png = plot_qps_latency(curves, s.loadgen.latency_ms, s.loadgen.percentile,
                           f"{spec.name} ({s.name}): latency-bounded QPS",
                           f"each point one LoadGen Server run (min {s.loadgen.min_duration_ms} ms, ≥ "
                           f"{s.loadgen.min_query_count} queries); filled = VALID; shared 2-core machine, load "
                           f"average {min(loads):.1f}–{max(loads):.1f}", Path(s.log_dir) / run_id / "qps_p99.png")
    print(f"plot: {png}")
    summary["plot"] = str(png)
    how = (f"the best confirmed of the kind's top {sc.confirm_top} setting(s) by search QPS (naive: 1): from the "
           f"highest target QPS LoadGen called VALID, down the ladder {list(sc.confirm_ladder)} of it "
           + ("(up its mirror when that level held) " if sc.confirm_above else "") + "to "
           f"a level whose {sc.confirm_repeats} repeats of ≥ {summary['confirm_duration_ms']} ms were all VALID "
           f"with the level above failed, then {sc.confirm_bisect_steps} bisection step(s) between the two; "
           f"{total} LoadGen runs in all; load average {la[0]:.2f}")
    summary["metrics"] = [metric(f"{k}_qps_at_bound", confirmed[k], "queries/s", how) for k in picks] + [
        metric("loadgen_runs", total, "runs", "LoadGen runs the search spent (the budget)")]
    _write(cfg, [*records, summary])
    return 0


def _validate(cfg: ServeAppConfig, spec) -> int:
    from serving.queries import QuerySet
    from serving.validate import validate_point

    s = cfg.serving
    run_id = new_run_id()
    queries = QuerySet.build(s.query, s.query.pool_samples)
    rows, records = [], []
    for c in (1, 2, 4):
        for rho in (0.3, 0.6, 0.85):
            r = validate_point(s.server.fixed_ms, c, rho, queries, s.loadgen, s.loadgen.min_query_count,
                               Path(s.log_dir) / run_id / f"md{c}_{int(rho * 100)}")
            m, ref, st = r["measured"], r["reference"], r["reference_steady_state"]
            band = ref["p99_band_ms"]
            line = (f"M/D/{c} rho {rho:.2f} ({r['qps']:.0f} QPS): p50 {m['p50_ms']:.2f} vs {ref['p50_ms']:.2f} ms "
                    f"({100 * r['p50_error']:+.1f}%), p99 {m['p99_ms']:.2f} vs {ref['p99_ms']:.2f} ms "
                    f"({100 * r['p99_error']:+.1f}%) {'ok' if r['p50_ok'] and r['p99_ok'] else 'OUTSIDE 10%'} "
                    f"(reference: runs of {s.loadgen.min_query_count} queries, 90% of them p99 {band[0]:.1f}–"
                    f"{band[1]:.1f} ms; steady state p99 {st['p99_ms']:.2f}); vs M/G/{c} "
                    f"with the measured service times p50 {100 * r['p50_error_mgc']:+.1f}% p99 "
                    f"{100 * r['p99_error_mgc']:+.1f}%; "
                    f"service p50/p99 {m['service_ms_p50']:.2f}/{m['service_ms_p99']:.2f} ms; "
                    f"loadavg {m['loadavg'][0]:.2f}")
            print(line, flush=True)
            rows.append(line)
            rec = serving_record(run_id, cfg, spec, m, role="validate")
            rec.update(setting=f"M/D/{c}", validation={k: v for k, v in r.items() if k != "measured"})
            records.append(rec)
    _write(cfg, records)
    return 0


def _overhead(cfg: ServeAppConfig, spec) -> int:
    from serving.queries import QuerySet
    from serving.validate import null_sut_overhead

    s = cfg.serving
    run_id = new_run_id()
    queries = QuerySet.build(s.query, s.query.pool_samples)
    p = null_sut_overhead(queries, s.loadgen, s.loadgen.target_qps, max(s.loadgen.min_query_count, 1000),
                          Path(s.log_dir) / run_id / "null_sut")
    print(f"null SUT at {p['target_qps']:.0f} QPS: LoadGen latency p50 {1e3 * p['p50_ms']:.1f} us, "
          f"p99 {1e3 * p['p99_ms']:.1f} us, mean {1e3 * p['mean_latency_ms']:.1f} us (loadavg {p['loadavg'][0]:.2f})")
    rec = serving_record(run_id, cfg, spec, p, role="overhead")
    rec["setting"] = "null SUT"
    _write(cfg, [rec])
    return 0


def _admit_batches(s, setup) -> tuple[list[int], dict[int, float]]:
    """Ours' max batch sizes (`serving.search.max_batches`): the smallest always, each larger one only when one
    batch of that many pool samples (in-process, 1 intra-op thread as in a two-worker setting, median of 5) takes
    ≤ bound / `serving.search.batch_headroom` (serving/search.py: `admitted_batches`). Prints what it measured and
    admitted."""
    import torch

    from serving.search import admitted_batches

    sizes = sorted(set(s.search.max_batches))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # a size above the pool cannot be timed on pool samples: not measured, so not admitted
        ms = {b: 1e3 * _median_time(lambda b=b: setup.dlrm.run_samples(0, b)) for b in sizes[1:]
              if b <= s.query.pool_samples}
    finally:
        torch.set_num_threads(threads)
    batches = admitted_batches(sizes, ms, s.loadgen.latency_ms, s.search.batch_headroom)
    if ms:
        print(f"{s.name}: ours' max batch: {batches} searched (" + ", ".join(
            f"{b} samples {t:.1f} ms a batch, {'≤' if b in batches else '>'} bound / {s.search.batch_headroom:g} = "
            f"{s.loadgen.latency_ms / s.search.batch_headroom:.1f} ms" for b, t in ms.items())
            + f"; loadavg {os.getloadavg()[0]:.2f})", flush=True)
    return batches, ms


def _median_time(fn, repeats: int = 5) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(sorted(ts)[len(ts) // 2])


def _nmp_speedup(spec, pool, n: int) -> tuple[float, str]:
    """RecNMP-opt (conf/nmp/recnmp_opt.yaml, fast fidelity) speedup of the embedding lookups over the host
    baseline on two batches of n served samples."""
    from embedding.nmp import NmpConfig, run_nmp

    yaml = OmegaConf.load(Path(CONF_DIR) / "nmp" / "recnmp_opt.yaml")
    ncfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(NmpConfig), yaml, {"fidelity": "fast"}))
    batches = [pool.gather([(0, n)]), pool.gather([(n, n)])]
    m = next(x for x in run_nmp(ncfg, spec, batches) if x["name"] == "nmp.speedup_over_host")
    return m["value"], "RecNMP-opt emulation (conf/nmp/recnmp_opt.yaml, fidelity fast), " + m["method"]


def _whatif(cfg: ServeAppConfig, spec, setup) -> int:
    import json

    import numpy as np

    from serving.build import new_server
    from serving.desim import Arrivals, PathModel, ServiceModel, bounded_qps, simulate_runs, trust_verdict
    from serving.loadgen import run_loadgen
    from serving.whatif import cache_hit_rate, cache_speedup, slow_row_seconds

    s, w = cfg.serving, cfg.serving.whatif
    run_id = new_run_id()
    dl = setup.dlrm
    offline = new_server(setup, s.server)
    cap = run_loadgen(offline, setup.queries, replace(s.loadgen, scenario="Offline"),
                      Path(s.log_dir) / run_id / "offline", target_qps=s.loadgen.target_qps)
    capacity = cap["completed_qps"]
    print(f"{s.name}: capacity {capacity:.1f} QPS (one LoadGen Offline run of {int(cap.get('queries', 0))} queries, "
          f"same server setting; loadavg {cap['loadavg'][0]:.2f}); measured loads at 40/70/90% of it", flush=True)
    measured, records, stats, load_of = [], [], [], []
    reps = s.loadgen.repeats  # runs per load (each its own LoadGen seed): the measured spread beside the model's band
    for k, frac in enumerate((0.4, 0.7, 0.9)):
        for rep in range(reps):
            server = new_server(setup, s.server)
            p = run_loadgen(server, setup.queries, replace(s.loadgen, seed=s.loadgen.seed + rep),
                            Path(s.log_dir) / run_id / (f"load{k}" + (f"_rep{rep}" if reps > 1 else "")),
                            target_qps=frac * capacity)
            stats.append(server.stats)
            measured.append(p)
            load_of.append(k)
            rec = serving_record(run_id, cfg, spec, p, role="whatif-measured")
            rec["setting"] = "measured"
            records.append(rec)
            print("  " + _line(f"measured {int(frac * 100)}%" + (f" #{rep + 1}" if reps > 1 else ""), p), flush=True)
    model = ServiceModel.fit(np.array([n for x in stats for n in x.batch_samples]),
                             np.array([t for x in stats for t in x.service_s]))
    iid = replace(model)
    model.with_trace([(np.array(x.start_s), np.array(x.batch_samples), np.array(x.service_s)) for x in stats])
    raw = Path(s.log_dir) / run_id / "server_records.json"
    raw.write_text(json.dumps([{"qps": p["scheduled_qps"], "queries": int(p["queries"]), "p50_ms": p["p50_ms"],
                                "p99_ms": p["p99_ms"], "mean_latency_ms": p["mean_latency_ms"],
                                **{k: getattr(x, k) for k in ("batch_samples", "service_s", "start_s", "dispatch_s",
                                                              "complete_s", "sojourn_s")}}
                               for p, x in zip(measured, stats, strict=True)]))
    gaps = [1e-3 * (p["mean_latency_ms"] - p["sojourn_ms_mean"]) for p in measured]
    issue = float(np.average(gaps, weights=[len(x.sojourn_s) for x in stats]))
    path = PathModel.from_stats(stats, issue=issue)
    print(f"service model: {model.sizes.size} measured batches in their measured time order (a line "
          f"{1e3 * model.a:.2f} ms + {1e6 * model.b:.1f} us/sample times the slowdown of the measured batch at the "
          f"same point of the runs' {model.period:.1f} s timeline, from a random offset per simulated run); the "
          f"i.i.d. variant (the {model.neighbours} nearest in size) shown beside it; path outside "
          f"service resampled from the same runs' records: dispatch lag of {path.dispatch.size} batches (median "
          f"{1e3 * np.median(path.dispatch):.3f} ms, p99 {1e3 * np.percentile(path.dispatch, 99):.3f}), completion "
          f"path of {path.complete.size} queries (median {1e3 * np.median(path.complete):.3f} ms, p99 "
          f"{1e3 * np.percentile(path.complete, 99):.3f}); LoadGen's issue delay, mean only (LoadGen's mean latency "
          f"minus the server's mean sojourn, per run {', '.join(f'{1e3 * g:.3f}' for g in gaps)} ms): "
          f"{1e3 * path.issue:.3f} ms added to every query")
    table = []
    for k in range(3):
        runs = [i for i, g in enumerate(load_of) if g == k]
        p0 = measured[runs[0]]
        qps = float(np.median([measured[i]["scheduled_qps"] for i in runs]))
        sim = simulate_runs(s.server, qps, setup.queries.sizes, model, int(p0["queries"]), percentiles=(50, 99),
                            path=path)
        flat = simulate_runs(s.server, qps, setup.queries.sizes, iid, int(p0["queries"]), percentiles=(50, 99),
                             path=path)
        replays = []
        for i in runs:  # each run modelled from its own records alone, on its own timeline
            own = ServiceModel.fit(np.array(stats[i].batch_samples, float), np.array(stats[i].service_s))
            own.with_trace([(np.array(stats[i].start_s), np.array(stats[i].batch_samples),
                             np.array(stats[i].service_s))])
            replays.append(simulate_runs(s.server, measured[i]["scheduled_qps"], setup.queries.sizes, own,
                                         int(measured[i]["queries"]), percentiles=(50, 99),
                                         path=PathModel.from_stats([stats[i]], issue=gaps[i]), trace_offset=0.0))
        p99s = [measured[i]["p99_ms"] for i in runs]
        lo, hi = sim["p99_band_ms"]
        table.append({"qps": qps, "queries": int(p0["queries"]), "runs": len(runs),
                      "verdict": "/".join(measured[i]["verdict"] for i in runs),
                      "measured_p50_ms": float(np.median([measured[i]["p50_ms"] for i in runs])),
                      "model_p50_ms": sim["p50_ms"], "model_p50_band_ms": sim["p50_band_ms"],
                      "measured_p99_ms": float(np.median(p99s)), "measured_p99_runs_ms": p99s,
                      "runs_in_band": sum(lo <= v <= hi for v in p99s),
                      "model_p99_ms": sim["p99_ms"], "model_p99_band_ms": sim["p99_band_ms"],
                      "p99_error": sim["p99_ms"] / float(np.median(p99s)) - 1,
                      "loadavg": measured[runs[-1]]["loadavg"][0],
                      "iid_p50_ms": flat["p50_ms"], "iid_p99_ms": flat["p99_ms"],
                      "iid_p99_band_ms": flat["p99_band_ms"],
                      "replay_p50_ms": float(np.median([r["p50_ms"] for r in replays])),
                      "replay_p99_ms": float(np.median([r["p99_ms"] for r in replays])),
                      "replay_p99_band_ms": replays[0]["p99_band_ms"] if len(runs) == 1 else
                      [min(r["p99_band_ms"][0] for r in replays), max(r["p99_band_ms"][1] for r in replays)]})
    trusted, labels = trust_verdict(table)
    errors = [r["p99_error"] for r in table]
    for r, lab in zip(table, labels, strict=True):
        r["check"] = lab
        spread = "" if r["runs"] == 1 else (
            f"; measured p99 of {r['runs']} runs {', '.join(f'{v:.1f}' for v in r['measured_p99_runs_ms'])} ms "
            f"(median compared), {r['runs_in_band']}/{r['runs']} inside the model's band")
        print(f"  model vs measured at {r['qps']:.1f} QPS ({r['queries']} queries, LoadGen {r['verdict']}; model: "
              f"median of 21 runs of that length, 5–95% band of single runs{spread}): p50 {r['model_p50_ms']:.2f} "
              f"[{r['model_p50_band_ms'][0]:.2f}–{r['model_p50_band_ms'][1]:.2f}] vs {r['measured_p50_ms']:.2f} ms; "
              f"p99 {r['model_p99_ms']:.2f} [{r['model_p99_band_ms'][0]:.1f}–{r['model_p99_band_ms'][1]:.1f}] vs "
              f"{r['measured_p99_ms']:.2f} ms: {lab}; i.i.d. variant p50 {r['iid_p50_ms']:.2f}, p99 "
              f"{r['iid_p99_ms']:.2f} [{r['iid_p99_band_ms'][0]:.1f}–{r['iid_p99_band_ms'][1]:.1f}]; replay of "
              f"each run alone (its own records, its own timeline, new arrivals; median over its runs) p50 {r['replay_p50_ms']:.2f}, p99 "
              f"{r['replay_p99_ms']:.2f} [{r['replay_p99_band_ms'][0]:.1f}–{r['replay_p99_band_ms'][1]:.1f}] "
              f"(loadavg {r['loadavg']:.2f})", flush=True)
    print(f"trust verdict: model {'TRUSTED' if trusted else 'NOT trusted'} on this run (rule: model p99 within 15% "
          f"of measured p99 at all three loads, 40/70/90% of the Offline capacity"
          + (f"; measured p99 = median of {reps} runs per load)" if reps > 1 else ")"), flush=True)
    grid = [n for n in (16, 32, 64, 128, 256, 512) if n <= setup.pool.samples // 2]
    share, t_emb = [], {}
    for n in grid:
        whole = _median_time(lambda n=n: dl.run_samples(0, n))
        t_emb[n] = _median_time(lambda n=n: dl.run_sparse(0, n))
        share.append(min(1.0, t_emb[n] / whole))
    print("embedding share of a batch's service time (median of 5, one worker): "
          + ", ".join(f"{n}: {100 * e:.0f}%" for n, e in zip(grid, share, strict=True))
          + f" (loadavg {os.getloadavg()[0]:.2f})")
    model.embedding_share = lambda n: float(np.interp(n, grid, share))
    tag = "" if trusted else ", NOT trusted"

    def bounded(speedup: float = 1.0, arrivals: Arrivals | None = None) -> float:
        model.embedding_speedup = speedup
        return bounded_qps(s.server, setup.queries.sizes, model, s.loadgen.latency_ms, s.loadgen.percentile,
                           max(1.0, 0.5 * capacity), steps=8, queries=8000, arrivals=arrivals, path=path)

    base_q = bounded()
    nmp, nmp_how = _nmp_speedup(setup.spec, setup.pool, min(128, setup.pool.samples // 2))
    nmp_q = bounded(nmp)
    n_ref = 128 if 128 in t_emb else grid[-1]
    lookups = float(setup.pool.gather([(0, n_ref)]).lengths.sum())
    hit = cache_hit_rate(setup.spec, setup.pool, setup.queries, w.cache_fraction)
    slow_row = slow_row_seconds(setup.spec, w.slow_tier)
    cache = cache_speedup(t_emb[n_ref], lookups, hit, slow_row)
    cache_q = bounded(cache)
    bursty = Arrivals("onoff", w.burst, w.on_fraction, w.on_ms)
    burst_q = bounded(1.0, bursty)

    def ratio(q: float) -> float:
        return q / base_q if base_q else float("nan")

    print(f"what-if (model{tag}), latency-bounded QPS at p{s.loadgen.percentile:g} ≤ {s.loadgen.latency_ms:g} ms, "
          f"Poisson arrivals: measured-service model {base_q:.1f}", flush=True)
    print(f"  RecNMP: embeddings on RecNMP-opt memory (lookup speedup {nmp:.2f}x, emulated) → {nmp_q:.1f} "
          f"({ratio(nmp_q):.2f}x). Emulated: only the embedding share of service time.")
    print(f"  cache: LRU of {100 * w.cache_fraction:g}% of each table's rows in DRAM, the rest on the {w.slow_tier} "
          f"tier: hit rate {100 * hit:.1f}% (simulated, exact LRU over 2000 LoadGen-drawn queries), slow tier "
          f"{1e6 * slow_row:.2f} us/row (measured), embedding stage {1 / cache:.2f}x slower at {n_ref} samples "
          f"({lookups:.0f} lookups, measured {1e3 * t_emb[n_ref]:.2f} ms) → {cache_q:.1f} ({ratio(cache_q):.2f}x). "
          "Emulated: the misses' slow-tier time only.")
    print(f"  bursty arrivals (model only: LoadGen's Server scenario makes Poisson arrivals only): on-off MMPP, "
          f"{w.burst:g}x the mean rate {100 * w.on_fraction:g}% of the time in on periods of mean {w.on_ms:g} ms → "
          f"{burst_q:.1f} ({ratio(burst_q):.2f}x).")
    summary = {"run_id": run_id, "kind": "serving_whatif", "workload": spec.name, "serving": s.name,
               "server": OmegaConf.to_container(OmegaConf.structured(s.server)),
               "model": {"a_s": model.a, "b_s_per_sample": model.b, "batches": int(model.sizes.size),
                         "dispatch_records": int(path.dispatch.size), "complete_records": int(path.complete.size),
                         "issue_delay_s": path.issue, "issue_delay_per_run_s": gaps},
               "capacity_qps": capacity, "capacity_method": "one LoadGen Offline run, same server setting",
               "comparison": table, "p99_errors": errors, "trusted": trusted,
               "embedding_share": dict(zip(grid, share, strict=True)),
               "nmp_speedup": nmp, "nmp_method": nmp_how, "bounded_qps_model": base_q, "bounded_qps_nmp": nmp_q,
               "cache": {"fraction": w.cache_fraction, "tier": w.slow_tier, "hit_rate": hit,
                         "slow_row_s": slow_row, "embedding_speedup": cache, "bounded_qps": cache_q},
               "bursty": {"burst": w.burst, "on_fraction": w.on_fraction, "on_ms": w.on_ms, "bounded_qps": burst_q},
               "bound_ms": s.loadgen.latency_ms, "percentile": s.loadgen.percentile, "loadavg": list(os.getloadavg())}
    how = (f"SimPy model{tag} from {model.sizes.size} measured batches; latency-bounded QPS at p{s.loadgen.percentile:g} "
           f"≤ {s.loadgen.latency_ms:g} ms by bisection on the model")
    summary["metrics"] = [metric(name, v, "queries/s", how) for name, v in (
        ("model_qps_at_bound", base_q), ("recnmp_qps_at_bound", nmp_q), ("cache_qps_at_bound", cache_q),
        ("bursty_qps_at_bound", burst_q))] + [metric("model_p99_error", 100 * e, "%", "model vs measured p99, "
                                                     "LoadGen-length runs") for e in errors]
    _write(cfg, [*records, summary])
    return 0


def _with_setup(body):
    """Run `body(cfg, spec, setup)` with the pool, model (and worker processes, if any) built, and end the
    processes whatever happens."""
    def command(cfg: ServeAppConfig, spec) -> int:
        from serving.build import build_setup

        setup = build_setup(spec, cfg.serving)
        try:
            return body(cfg, spec, setup)
        finally:
            setup.close()
    return command


_COMMANDS = {"run": _with_setup(_run), "search": _with_setup(_search), "validate": _validate,
             "overhead": _overhead, "whatif": _with_setup(_whatif)}


if __name__ == "__main__":
    sys.exit(main())
