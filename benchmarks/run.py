"""The Hydra app: `python -m benchmarks.run [overrides]` or `dlrmbench run [overrides]`; `-m` sweeps.

workload → batches (generated before any timing) → each backend timed on them → ceilings → records → table.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from embedding.backends import BackendError, init_weights
from embedding.cache.config import CacheConfigError
from embedding.cache.simulate import CacheInputError
from embedding.generate import generate_batches
from embedding.nmp.config import NmpConfigError
from embedding.spec import SpecError, WorkloadSpec
from embedding.traces import trace_statistics
from embedding.workload_config import build_workload

from .compose import CONF_DIR, compose_config
from .config import Config, register_configs
from .errors import InputError, check_output_file, one_line
from .local import run_backend, run_model
from .records import append_records, environment, git_sha, metric, new_run_id
from .report_table import print_table
from .sweep import SKIPPED, skip_finished_job
from .trust import LoadProbe

register_configs()

# Errors that mean bad input (config, trace, table list): reported in one line, exit 2, no record written.
INPUT_ERRORS = (SpecError, BackendError, CacheConfigError, CacheInputError, NmpConfigError, ValidationError,
                InputError)
# ... and those of composing the config (unknown key or group option, a value of the wrong type)
CONFIG_ERRORS = (*INPUT_ERRORS, HydraException, OmegaConfBaseException)


def _check_memory(spec: WorkloadSpec, fraction: float) -> None:
    """Refuse, before generating anything, a workload whose tables, or whose batches (kept twice: as generated and
    as each backend's input tensors), need more than `fraction` of this machine's memory."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    tables, batches = spec.total_bytes, 2 * spec.num_batches * spec.batch_bytes
    if tables + batches <= fraction * total:
        return
    share = f"more than {fraction:.0%} of this machine's {total / 2**30:.1f} GiB (bench.max_memory_fraction)"
    if batches >= tables:
        raise SpecError(f"workload {spec.name!r}: {spec.num_batches} batches × {spec.batch_size} samples × "
                        f"{spec.lookups_per_sample:g} lookups need {batches / 2**30:.1f} GiB (generated and as "
                        f"backend inputs), {share}; lower workload.num_batches or workload.batch_size")
    biggest = max(spec.tables, key=lambda t: t.bytes)
    raise SpecError(f"workload {spec.name!r} needs {tables / 2**30:.1f} GiB of tables and {batches / 2**30:.1f} GiB "
                    f"of batches, {share}; cap rows with workload.max_rows=N (largest table {biggest.name!r}: "
                    f"{biggest.rows} rows)")


def workload_summary(spec: WorkloadSpec) -> dict:
    out = {"name": spec.name, "tables": spec.num_tables, "batch_size": spec.batch_size,
           "num_batches": spec.num_batches, "mode": spec.mode, "seed": spec.seed,
           "lookups_per_sample": spec.lookups_per_sample, "table_bytes": spec.total_bytes,
           "dims": sorted({t.dim for t in spec.tables}), "trace": spec.trace}
    if spec.row_cap:
        out["row_cap"] = spec.row_cap
        out["capped_tables"] = spec.capped_tables
        out["original_table_bytes"] = float(sum(r * t.row_bytes for r, t in zip(spec.original_rows, spec.tables,
                                                                                    strict=True)))
    return out


def execute(cfg: Config) -> list[dict]:
    """Run the configured benchmark and return its records (nothing is written here)."""
    from embedding.backends import BACKENDS, check_backend_names

    check_backend_names(cfg.backend.names)
    if not (cfg.backend.names or cfg.cache.policy != "off" or cfg.nmp.enabled):
        raise BackendError(f"unknown backend(s) (none given); choose from {sorted(BACKENDS)}")
    if cfg.placement.device == "cuda" and not torch.cuda.is_available():
        raise BackendError("placement.device=cuda but torch sees no GPU here; use placement=cpu")
    run_t0 = time.perf_counter()
    spec = build_workload(cfg.workload)
    _check_memory(spec, cfg.bench.max_memory_fraction)
    if cfg.bench.threads:
        torch.set_num_threads(cfg.bench.threads)
    generate_batches(replace(spec, num_batches=1, batch_size=min(spec.batch_size, 8)))  # compile/load numba code
    with LoadProbe(torch.get_num_threads()) as gen_load:
        t0 = time.perf_counter()
        batches = generate_batches(spec)
        gen_s = time.perf_counter() - t0
    lookups = sum(b.num_lookups for b in batches)
    stats = trace_statistics(batches, spec.num_tables)
    weights = init_weights(spec)
    base = {"run_id": new_run_id(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_sha": git_sha(),
            "config": OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True), "env": environment(),
            "workload": workload_summary(spec), "workload_stats": stats["overall"],
            "placement": cfg.placement.name, "precision": cfg.backend.precision}
    records = [dict(base, kind="generation", backend=None, load=gen_load.result, metrics=[
        metric("generation_rate", lookups / gen_s, "indices/s",
               f"{lookups} indices of {len(batches)} batches (lengths, indices, dense features) in one timed "
               "call of generate_batches, before any backend ran" + (" (read from the trace)" if spec.trace else ""))])]
    progress = _progress(len(cfg.backend.names) * (2 if cfg.bench.model else 1), cfg.output.progress)
    equal_dims = len({t.dim for t in spec.tables}) == 1 and spec.tables[0].dim == spec.dense.bottom_mlp[-1]
    measured_calls = cfg.bench.warmup + cfg.bench.repeats  # of the first backend, the one the check runs on
    overhead_budget = measured_calls // 10  # so the check costs ≤ 10% of that backend's share of the run
    overhead, overhead_s = None, 0.0
    for i, name in enumerate(cfg.backend.names):
        result = run_backend(name, spec, batches, weights, cfg.placement, cfg.backend, cfg.bench,
                             overhead_calls=overhead_budget if i == 0 and cfg.bench.overhead else None)
        records.append(dict(base, kind="lookup", backend=name, kernel=result.kernel, optimizer=result.optimizer,
                            metrics=result.metrics, load=result.load))
        if result.overhead:
            overhead, overhead_s = dict(base, kind="overhead", backend=name, metrics=result.overhead,
                                        load=result.load), result.overhead_s
        progress.update()
        if cfg.bench.model:
            if equal_dims:
                m = run_model(name, spec, batches, weights, cfg.placement, cfg.backend, cfg.bench)
                records.append(dict(base, kind="model", backend=name, kernel=m.kernel, optimizer=m.optimizer,
                                    metrics=m.metrics, load=m.load))
            progress.update()
    progress.close()
    if cfg.cache.policy != "off":
        from embedding.cache.run import run_cache

        records.append(dict(base, kind="cache", backend=None, metrics=run_cache(cfg.cache, spec, batches,
                                                                               cfg.placement.device)))
    if cfg.nmp.enabled:
        from embedding.nmp.run import run_nmp

        records.append(dict(base, kind="nmp", backend=None, metrics=run_nmp(cfg.nmp, spec, batches)))
    if cfg.bench.ceilings and cfg.backend.names:
        from .ceilings import measure_ceilings

        ceil = measure_ceilings(weights, batches, torch.device(cfg.placement.device), cfg.bench.ceiling_buffer_mib)
        records.append(dict(base, kind="ceiling", backend=None, metrics=ceil))
        gather = next(m["value"] for m in ceil if m["name"] == "gather_workload_bw")
        for r in records:
            if r["kind"] == "lookup":
                rows_bw = next(m["value"] for m in r["metrics"] if m["name"] == "rows_bw")
                r["metrics"].append(metric("ratio_to_gather", rows_bw / gather, "×",
                                           "rows_bw of this backend / gather_workload_bw (plain index_select of the same rows) in the same run"))
    if overhead:
        run_s = time.perf_counter() - run_t0
        overhead["metrics"].append(metric(
            "overhead_check_share", 100 * overhead_s / run_s, "%",
            f"wall time of the harness-overhead check ({overhead_s:.2f} s, ≤ {overhead_budget} calls of "
            f"{overhead['backend']} = 10% of its {measured_calls} measured calls) / wall time of the whole run "
            f"({run_s:.1f} s)"))
        records.append(overhead)
    return records


def _rescue(records: list[dict], path: str, error: OSError) -> None:
    """The records file failed after measuring (device full, removed folder): keep the measurements elsewhere."""
    fd, tmp = tempfile.mkstemp(prefix="dlrmbench-records-", suffix=".jsonl")
    with os.fdopen(fd, "w") as f:
        f.writelines(json.dumps(r, default=str) + "\n" for r in records)
    print(f"dlrmbench: error: cannot append to {path} ({error.strerror or error}); the {len(records)} records "
          f"were written to {tmp} instead", file=sys.stderr)
    raise SystemExit(1)


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="backends", disable=None if enabled else True, file=sys.stderr, leave=False)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> str | None:
    if skip_finished_job(cfg):  # a multirun job whose config already has records (output.resume=false forces it)
        return SKIPPED
    try:
        check_output_file(cfg.output.records, "output.records")
        records = execute(OmegaConf.to_object(cfg))  # dataclasses: each part's __post_init__ validates it
    except INPUT_ERRORS as e:
        print(f"dlrmbench run: error: {one_line(e)}", file=sys.stderr)
        if HydraConfig.get().mode.name == "MULTIRUN":
            raise  # Hydra marks only this job failed; the sweep goes on
        raise SystemExit(2) from None
    try:
        append_records(cfg.output.records, records)
    except OSError as e:
        _rescue(records, cfg.output.records, e)
    print_table(records)
    print(f"\n{len(records)} records appended to {cfg.output.records} (run {records[0]['run_id']})")
    return None


def _combinations(argv: list[str]) -> list[list[str]]:
    """The override lists of a single run (argv) or of each job of a command-line sweep (`-m a=1,2 b=x,y`)."""
    overrides = [a for a in argv if a not in ("-m", "--multirun")]
    if len(overrides) == len(argv):
        return [overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def cli(argv: list[str]) -> int:
    """`dlrmbench run [overrides]`: compose and check the config first (one line, exit 2 on bad input), then run
    the Hydra app (a single run, or a sweep with -m)."""
    flags = [a for a in argv if a.startswith("-") and a not in ("-m", "--multirun")]
    if not flags:  # --help, --cfg, -c ... go straight to Hydra
        try:
            for job in _combinations(argv)[:64]:
                cfg = compose_config([o for o in job if not o.startswith("hydra")])
                check_output_file(cfg.output.records, "output.records")
                if not cfg.workload.trace:  # cheap without a trace (a trace is read once, by the run itself)
                    _check_memory(build_workload(cfg.workload), cfg.bench.max_memory_fraction)
        except CONFIG_ERRORS as e:
            print(f"dlrmbench run: error: {one_line(e)}", file=sys.stderr)
            return 2
    sys.argv = ["dlrmbench run", *argv]
    try:
        main()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
