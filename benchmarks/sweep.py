"""Sweeps: resume by config hash, one table (CSV + markdown) per sweep, and planner × ranks sweeps.

  dlrmbench run -m +sweep=backends_workloads        Hydra multirun; SweepCallback writes the sweep table as it goes
  dlrmbench run -m ... output.resume=false           re-run jobs whose records already exist
  dlrmbench sweep gather SWEEP_DIR [--records F]     (re)build SWEEP_DIR/sweep.csv and sweep.md
  dlrmbench sweep plans conf/plan_sweep/planners_ranks.yaml --out results/plans.jsonl

A job is identified by the hash of its resolved config (without `output`): records carry their config, so a job
whose hash is found in the records file is finished and skipped on re-run; a re-run job's latest records win; a
failed job keeps its row (status failed) instead of vanishing from the table.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from .errors import OneLineParser

__all__ = ["config_hash", "resolved_config", "finished_jobs", "skip_finished_job", "SweepCallback", "SKIPPED", "gather", "write_tables",
           "markdown_table", "plan_records", "main"]

MANIFEST = "jobs.jsonl"
HEADLINE = ["samples_per_s", "effective_bw", "rows_bw", "batch_time", "model_samples_per_s", "hit_rate", "misses",
            "belady_misses", "compulsory_misses", "nmp.speedup_over_host", "nmp.energy_saving", "cost_ms", "ratio"]


def config_hash(config: dict) -> str:
    """sha256 (first 16 hex) of the resolved config without `output` (where records go does not change a job)."""
    body = {k: v for k, v in config.items() if k != "output"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def resolved_config(cfg: DictConfig) -> dict:
    """The config exactly as `benchmarks.run.execute` records it (validated dataclasses, resolved, no `hydra`)."""
    from .config import Config

    node = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(node):
        node.pop("hydra", None)
    obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), node))
    return OmegaConf.to_container(OmegaConf.structured(obj), resolve=True)


def finished_jobs(records_path: str | os.PathLike) -> dict[str, list[dict]]:
    """config hash → records of that config (all runs), from a records JSONL file; {} when it does not exist."""
    out: dict[str, list[dict]] = {}
    path = Path(records_path)
    if not path.is_file():
        return out
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON record ({e.msg})") from None
            if isinstance(rec.get("config"), dict):
                out.setdefault(config_hash(rec["config"]), []).append(rec)
    return out


def _latest_run(records: list[dict]) -> tuple[list[dict], int]:
    """Records of the newest run among several runs of one config, and how many runs there were."""
    runs: dict[str, list[dict]] = {}
    for r in records:
        runs.setdefault(r.get("run_id", ""), []).append(r)
    newest = max(runs, key=lambda k: (runs[k][0].get("time", ""), k))
    return runs[newest], len(runs)


def _parse_override(o: str) -> tuple[str, str]:
    key, _, value = o.lstrip("+~").partition("=")
    return key, value


@dataclass
class Job:
    num: int
    overrides: list[str]
    config_hash: str | None
    status: str  # ran | skipped | failed | unknown (job folder without a jobs.jsonl entry: the sweep stopped)
    error: str = ""


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    from .records import umask_mode

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, umask_mode())  # mkstemp makes 0600; the table is the user's like any file
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _jobs_from_dirs(sweep_dir: Path, since: float = 0.0) -> list[Job]:
    """Jobs known from their folders: every job folder with a .hydra config saved at or after `since`."""
    jobs = []
    for d in sorted((p for p in sweep_dir.iterdir() if (p / ".hydra" / "config.yaml").is_file()
                     and (p / ".hydra" / "config.yaml").stat().st_mtime >= since),
                    key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name)):
        overrides = list(OmegaConf.load(d / ".hydra" / "overrides.yaml"))
        try:
            h, status, err = config_hash(resolved_config(OmegaConf.load(d / ".hydra" / "config.yaml"))), "unknown", ""
        except Exception as e:  # an invalid job config is a failed job, reported in its row
            h, status, err = None, "failed", f"{type(e).__name__}: {e}"
        jobs.append(Job(int(d.name) if d.name.isdigit() else len(jobs), overrides, h, status, err))
    return jobs


def gather(sweep_dir: str | os.PathLike, records_path: str | os.PathLike | None = None) -> list[dict]:
    """Long-format rows: one per job × record × overall metric; a job without records gets one row (failed)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"sweep folder {sweep_dir} does not exist")
    started, entries = 0.0, []
    manifest = sweep_dir / MANIFEST
    if manifest.is_file():
        for line in manifest.read_text().splitlines():
            entry = json.loads(line) if line.strip() else {}
            if "start" in entry:  # a new multirun into this folder: earlier entries belong to an older sweep
                started, entries = entry["start"], []
            elif entry:
                entries.append(entry)
    jobs = {j.num: j for j in _jobs_from_dirs(sweep_dir, since=started)}
    for entry in entries:
        records_path = records_path or entry["records"]
        entry.pop("records", None)
        jobs[entry["num"]] = Job(**entry)  # the last entry of a job number wins
    jobs = [jobs[n] for n in sorted(jobs)]
    if not jobs:
        raise ValueError(f"{sweep_dir}: no jobs found (neither {MANIFEST} nor job folders with .hydra/config.yaml)")
    if records_path is None:
        raise ValueError(f"{sweep_dir}: no {MANIFEST}; pass the records file (--records)")
    done = finished_jobs(records_path)
    params = [dict(_parse_override(o) for o in j.overrides) for j in jobs]
    keys = sorted({k for p in params for k in p})
    swept = [k for k in keys if len({p.get(k, "") for p in params}) > 1] or keys
    rows: list[dict] = []
    for job, p in zip(jobs, params, strict=True):
        base = {"job": job.num, **{k: p.get(k, "") for k in swept}, "config_hash": job.config_hash or ""}
        recs = done.get(job.config_hash or "", [])
        if not recs:
            status = "failed" if job.status in ("failed", "ran", "unknown") else "missing"
            rows.append({**base, "status": status, "runs": 0, "error": job.error or "no records for this config"})
            continue
        latest, runs = _latest_run(recs)
        status = "skipped (done earlier)" if job.status == SKIPPED else "ok"
        for r in latest:
            for m in r.get("metrics", []):
                if "table" in m:
                    continue
                rows.append({**base, "status": status, "runs": runs, "run_id": r.get("run_id", ""),
                             "kind": r.get("kind", ""), "backend": r.get("backend") or "", "metric": m["name"],
                             "value": m["value"], "unit": m.get("unit", ""), "median": m.get("median", ""),
                             "p90": m.get("p90", ""), "repeats": m.get("repeats", "")})
    return rows


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
    return str(v)


def markdown_table(rows: list[dict]) -> str:
    """One line per job × (kind, backend); swept parameters, status, then the headline metrics present."""
    fixed = {"job", "config_hash", "status", "runs", "run_id", "kind", "backend", "metric", "value", "unit", "median",
             "p90", "repeats", "error"}
    params = [k for k in rows[0] if k not in fixed] if rows else []
    units = {r["metric"]: r["unit"] for r in rows if "metric" in r}
    metrics = [m for m in HEADLINE if m in units]
    lines: dict[tuple, dict] = {}
    for r in rows:
        if r.get("kind") == "generation":
            continue
        key = (r["job"], r.get("kind", ""), r.get("backend", ""))
        line = lines.setdefault(key, {**{k: r.get(k, "") for k in ["job", *params, "status", "runs"]},
                                      "kind": r.get("kind", ""), "backend": r.get("backend", ""),
                                      "note": r.get("error", "")})
        if r.get("metric") in metrics:
            line[r["metric"]] = r["value"]
    head = ["job", *params, "status", "runs", "kind", "backend"] + [f"{m} ({units[m]})" for m in metrics] + ["note"]
    cols = ["job", *params, "status", "runs", "kind", "backend", *metrics, "note"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in lines.values():
        out.append("| " + " | ".join(_fmt(line.get(c, "")).replace("|", "/")[:120] for c in cols) + " |")
    return "\n".join(out) + "\n"


def write_tables(rows: list[dict], out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """sweep.csv (long format, every overall metric) and sweep.md (headline pivot), written atomically."""
    out_dir = Path(out_dir)
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
    _write_atomic(out_dir / "sweep.csv", buf.getvalue())
    failed = sum(1 for r in rows if r["status"] in ("failed", "missing"))
    jobs = len({r["job"] for r in rows})
    md = (f"# Sweep {out_dir}\n\n{jobs} jobs, {failed} failed or missing. Values: each job's latest run "
          f"(runs = how many runs of that config the records hold); metric methods are in the records.\n\n"
          + markdown_table(rows))
    _write_atomic(out_dir / "sweep.md", md)
    return out_dir / "sweep.csv", out_dir / "sweep.md"


SKIPPED = "skipped"
"""What run.main returns for a job skipped by `skip_finished_job` (the callback reads it from the JobReturn)."""


def _is_multirun(config: DictConfig) -> bool:
    return str(OmegaConf.select(config, "hydra.mode", default="")) == "RunMode.MULTIRUN"


def skip_finished_job(cfg: DictConfig) -> bool:
    """True when this multirun job's config already has records in `output.records` (print why); never in a
    single run, never when `output.resume` is false. Called first thing in run.main."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return False
    if not OmegaConf.select(cfg, "output.resume", default=True):
        return False
    try:
        h = config_hash(resolved_config(cfg))
    except Exception:  # an invalid config is reported by the job itself
        return False
    recs = finished_jobs(cfg.output.records).get(h)
    if not recs:
        return False
    run_id = _latest_run(recs)[0][0].get("run_id", "")
    print(f"[sweep] job {HydraConfig.get().job.num} skipped: records of config {h} exist in {cfg.output.records} "
          f"(run {run_id}); output.resume=false re-runs it", file=sys.stderr)
    return True


def _append_line(path: Path, obj: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, (json.dumps(obj) + "\n").encode())
    finally:
        os.close(fd)


def _callback_base():
    from hydra.experimental.callback import Callback

    return Callback


class SweepCallback(_callback_base()):
    """Hydra callback (conf/config.yaml hydra.callbacks): after every multirun job, append its status to
    SWEEP_DIR/jobs.jsonl and rebuild sweep.csv / sweep.md, so the table is current even if the sweep stops."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        _append_line(sweep_dir / MANIFEST, {"start": time.time()})

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        if not _is_multirun(config):
            return
        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            h = config_hash(resolved_config(config))
        except Exception:
            h = None
        failed = job_return.status == JobStatus.FAILED
        value = job_return._return_value
        status = "failed" if failed else (SKIPPED if value == SKIPPED else "ran")
        err = "".join(traceback.format_exception_only(type(value), value)).strip()[:300] if failed else ""
        records = os.path.abspath(str(config.output.records))
        _append_line(sweep_dir / MANIFEST, {"num": int(config.hydra.job.num), "overrides": list(job_return.overrides),
                                            "config_hash": h, "status": status, "error": err, "records": records})
        try:
            write_tables(gather(sweep_dir, records), sweep_dir)
        except Exception as e:  # the table must never break the sweep; say why it is missing
            print(f"[sweep] could not write the sweep table: {type(e).__name__}: {e}", file=sys.stderr)
            return
        if failed:  # Hydra then ends the sweep with an error and on_multirun_end never runs: say it here
            print(f"[sweep] job {config.hydra.job.num} failed; its row and the others are in "
                  f"{sweep_dir / 'sweep.md'}", file=sys.stderr)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Say where the sweep's summary went (and the records behind it), once, when the sweep ends."""
        sweep_dir = Path(str(config.hydra.sweep.dir))
        md = sweep_dir / "sweep.md"
        if not md.is_file():
            print(f"[sweep] no sweep table in {sweep_dir} (see the messages above)", file=sys.stderr)
            return
        rows = [line for line in md.read_text().splitlines() if line.startswith("| ") and "---" not in line]
        print(f"\nsweep summary: {md} ({max(len(rows) - 1, 0)} rows; all metrics in {md.with_suffix('.csv')}); "
              f"records: {os.path.abspath(str(config.output.records))}; report: dlrmbench report "
              f"{os.path.abspath(str(config.output.records))} --out {sweep_dir / 'report'}")


def plan_records(tables: str, hardware: str, optimizers: Sequence[str], ranks: Sequence[int], batch_size: int = 512,
                 mode: str = "train") -> list[dict]:
    """One `kind: plan` record per optimizer × rank count: cost, lower bound, ratio, and per-rank breakdown
    (metrics with `table: rank<N>`) from the dlrmbench cost model. Deterministic for the non-timed optimizers."""
    from sharding import CostModel, PlanError, PlanWorkload, load_topology, lower_bound, validate_plan
    from sharding.tablesets import load_tables

    from .plan_cli import make_plan
    from .records import environment, git_sha, metric, new_run_id

    wl = PlanWorkload(load_tables(tables), batch_size, mode)
    run_id, env, sha = new_run_id(), environment(), git_sha()
    how = "dlrmbench cost model (sharding.cost): step time as CostModel.plan_cost assembles it (collectives + fixed stage costs + slowest forward, backward and optimizer)"
    out = []
    for n in ranks:
        topo = load_topology(hardware, n)
        cost = CostModel(wl, topo)
        lb = lower_bound(cost).value
        for opt in optimizers:
            base = {"run_id": run_id, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_sha": sha, "env": env,
                    "kind": "plan", "backend": None, "optimizer": opt,
                    "config": {"plan": {"tables": tables, "hardware": hardware, "ranks": n, "optimizer": opt,
                                        "batch_size": batch_size, "mode": mode}}}
            t0 = time.perf_counter()
            try:
                plan = make_plan(opt, wl, topo)
                validate_plan(plan, wl, topo, cost)
            except PlanError as e:
                out.append({**base, "feasible": False, "error": str(e)[:300], "metrics": []})
                continue
            wall = time.perf_counter() - t0
            c = cost.plan_cost(plan)
            ms = [metric("cost_ms", c * 1e3, "ms", how), metric("lower_bound_ms", lb * 1e3, "ms", "sharding.bounds"),
                  metric("ratio", c / lb, "x", "cost / lower bound"),
                  metric("plan_wall_s", wall, "s", "perf_counter around one planning call (timed, not deterministic)")]
            for r in cost.breakdown(plan):
                tag = {"table": f"rank{r.rank}"}
                ms += [metric("rank_compute_ms", (r.fwd_compute + r.bwd_compute) * 1e3, "ms", how, **tag),
                       metric("rank_comms_ms", (r.fwd_comms + r.bwd_comms + r.latency) * 1e3, "ms", how, **tag),
                       metric("rank_memory_gb", sum(r.memory.values()) / 1e9, "GB", "bytes placed, all tiers", **tag)]
            out.append({**base, "feasible": True, "metrics": ms})
    return out


def main(argv: list[str]) -> int:
    """`dlrmbench sweep gather|plans ...`; bad input: one line on stderr, exit 2, nothing written."""
    ap = OneLineParser(prog="dlrmbench sweep", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gather", help="build sweep.csv and sweep.md of a multirun folder")
    g.add_argument("sweep_dir")
    g.add_argument("--records", default=None, help="records JSONL (default: the one named in jobs.json)")
    g.add_argument("--out-dir", default=None, help="where to write (default: the sweep folder)")
    p = sub.add_parser("plans", help="plan a table set with several optimizers at several rank counts")
    p.add_argument("spec", help="YAML with tables, hardware, optimizers, ranks, batch_size, mode")
    p.add_argument("--out", required=True, help="records JSONL to append to")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "gather":
            rows = gather(args.sweep_dir, args.records)
            csv_path, md_path = write_tables(rows, args.out_dir or args.sweep_dir)
            print(Path(md_path).read_text())
            print(f"wrote {md_path} and {csv_path}")
            return 0
        spec = OmegaConf.to_container(OmegaConf.load(args.spec))
        missing = [k for k in ("tables", "hardware", "optimizers", "ranks") if k not in spec]
        if missing:
            raise ValueError(f"{args.spec}: missing key(s) {missing}")
        recs = plan_records(spec["tables"], spec["hardware"], spec["optimizers"], spec["ranks"],
                            spec.get("batch_size", 512), spec.get("mode", "train"))
        from .records import append_records

        append_records(args.out, recs)
        for r in recs:
            cost = next((m["value"] for m in r["metrics"] if m["name"] == "cost_ms"), None)
            print(f"{r['optimizer']:<22} ranks {r['config']['plan']['ranks']:>4}  "
                  + (f"cost {cost:.4f} ms" if cost is not None else f"no plan: {r['error']}"))
        print(f"appended {len(recs)} plan records to {args.out}")
        return 0
    except Exception as e:
        print(f"dlrmbench sweep: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
