"""Every command in README.md's ```bash blocks runs and exits 0: as written, or smoke-sized (extra overrides that
shrink a long one), or filled in (a placeholder such as FILE), each in a fresh folder that links the repository's
`conf/` and `results/baselines/` so relative paths work and every output stays in the folder. Commands that cannot
run here are listed in NOT_HERE with the reason. A README command in neither table fails the test.

Adding a README command: one line in RUNS (or NOT_HERE). Smoke sizes: TINY for `dlrmbench run`.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
COMMANDS = ("dlrmbench", "make", "python", "bash", "torchrun", "taskset")


@dataclass(frozen=True)
class Run:
    extra: str = ""
    """appended to the command: overrides or options that make a long command smoke-sized"""
    instead: str = ""
    """run this instead ({repo} = the repository): a placeholder filled in, or a make target's recipe"""
    setup: tuple[str, ...] = ()
    """run first in the same folder: the inputs the command names"""
    slow: bool = False


TINY = ("workload.max_rows=20000 workload.batch_size=64 workload.num_batches=2 bench.repeats=2 bench.warmup=1 "
        "bench.ceiling_buffer_mib=16 output.progress=false")
TRACE = "dlrmbench trace write day0.pt.gz workload=smoke workload.num_batches=8"  # 8 × 512 = 4096 samples
TIMED = "--rounds 3 --repeats 1"
COLLECT_TINY = "--families 2 --lookups 2 --repeats 2 --plans greedy_size,all_rw,all_cw,one_rank"
CALIBRATE_TINY = "--rows 2000 --repeats 2 --steps 2 --rounds 1"
SERVE_TINY = ("serving.loadgen.min_query_count=40 serving.loadgen.min_duration_ms=300 serving.max_rows=20000 "
              "serving.loadgen.percentile=90")
SEARCH_TINY = ("serving.search.bisection_steps=1 serving.search.bracket_runs=2 serving.search.max_settings=1 "
               "serving.search.confirm_repeats=1 serving.search.confirm_ladder=[1.0,0.5] "
               "serving.search.confirm_duration_ms=300 serving.search.static_batches=[128]")
RECORDS = f"dlrmbench run workload=smoke backend=torch {TINY}"
PLANS = ("dlrmbench plan --tables criteo_kaggle --hardware dgx_h100 --optimizer greedy_size --out a.json "
         "--no-torchrec-estimate",
         "dlrmbench plan --tables criteo_kaggle --hardware dgx_h100 --optimizer round_robin --out b.json "
         "--no-torchrec-estimate")

RUNS: dict[str, Run] = {
    "make bench": Run(instead=f"python -m benchmarks.run {TINY}", slow=True),  # its recipe, not its venv install
    "make perf": Run(instead="python -m pytest -q {repo}/benchmarks/perf --benchmark-disable", slow=True),
    "dlrmbench run [hydra overrides]": Run(instead=f"dlrmbench run workload=smoke {TINY}", slow=True),
    "dlrmbench run workload=rm2 backend=fbgemm workload.mode=train": Run(extra=TINY, slow=True),
    "dlrmbench run workload=criteo_terabyte workload.max_rows=1000000": Run(extra=TINY, slow=True),
    "dlrmbench run -m backend=torch,fbgemm,torchrec workload=smoke,rm3": Run(extra=TINY, slow=True),
    "dlrmbench run workload=trace workload.trace=day0.pt.gz workload.batch_size=4096":
        Run(extra="bench.repeats=2 bench.warmup=1 bench.ceiling_buffer_mib=16", setup=(TRACE,), slow=True),
    "dlrmbench run workload=table_list workload.table_list=conf/tables/example.csv": Run(extra=TINY, slow=True),
    "dlrmbench run workload=smoke backend=none cache=lru": Run(),
    "dlrmbench run workload=smoke backend=none nmp=recnmp_base": Run(slow=True),
    "dlrmbench trace stats FILE [--json]": Run(instead="dlrmbench trace stats day0.pt.gz --json", setup=(TRACE,),
                                               slow=True),
    "dlrmbench trace write OUT.pt.gz [overrides]": Run(instead="dlrmbench trace write out.pt.gz workload=smoke"),
    "dlrmbench plan --tables criteo_terabyte --hardware dgx_h100 --optimizer ours --out plan.json": Run(slow=True),
    "dlrmbench compare a.json b.json --png compare.png": Run(setup=PLANS, slow=True),
    "dlrmbench device-bw --out results/hardware/my_gpu.yaml": Run(extra="--device cpu --rows 65536 --repeats 2",
                                                                  slow=True),
    "dlrmbench run -m +sweep=backends_workloads": Run(extra=TINY, slow=True),
    "dlrmbench sweep plans --help": Run(),
    "dlrmbench report results/records.jsonl --out results/report": Run(setup=(RECORDS,), slow=True),
    "dlrmbench regress deterministic": Run(slow=True),
    "dlrmbench regress timed --save results/timed-1.json": Run(extra=TIMED, slow=True),
    "dlrmbench regress timed --baseline results/timed-1.json results/timed-2.json results/timed-3.json":
        Run(extra=f"{TIMED} --threshold 0.9", setup=tuple(f"dlrmbench regress timed --save results/timed-{i}.json {TIMED}"
                                                           for i in (1, 2, 3)), slow=True),
    "python -m benchmarks.regress_power --runs 5":
        Run(instead="python -m benchmarks.regress_power --runs 1 --baseline-runs 1 --conditions quiet", slow=True),
    "python -m benchmarks.regress_walls": Run(extra="--plan-repeats 1 --skip fault", slow=True),
    "dlrmbench perfmodel collect": Run(extra=COLLECT_TINY, slow=True),
    "dlrmbench perfmodel train": Run(setup=(f"dlrmbench perfmodel collect {COLLECT_TINY}",), slow=True),
    "dlrmbench perfmodel evaluate": Run(setup=(f"dlrmbench perfmodel collect {COLLECT_TINY}",
                                               "dlrmbench perfmodel train"), slow=True),
    "dlrmbench validate-cost --quick": Run(extra="--repeats 2 --workloads small4", slow=True),
    "dlrmbench validate-cost --rescore latest": Run(setup=("dlrmbench validate-cost --repeats 2 --rounds 1 "
                                                           "--workloads small4",), slow=True),
    "dlrmbench calibrate --refit results/hardware/calibrated.yaml --out results/hardware/refit.yaml":
        Run(setup=(f"dlrmbench calibrate {CALIBRATE_TINY}",), slow=True),
    "taskset -c 0 dlrmbench perfmodel collect --records results/perfmodel/one_core.jsonl --families 6 "
    "--first-family 100 --kinds step": Run(instead="taskset -c 0 dlrmbench perfmodel collect --records "
                                           "results/perfmodel/one_core.jsonl --families 1 --first-family 100 "
                                           "--kinds step --repeats 2 --plans greedy_size,all_rw", slow=True),
    "dlrmbench perfmodel evaluate --records results/perfmodel/one_core.jsonl":
        Run(setup=(f"dlrmbench perfmodel collect {COLLECT_TINY}", "dlrmbench perfmodel train",
                   "dlrmbench perfmodel collect --records results/perfmodel/one_core.jsonl --families 1 "
                   "--first-family 100 --kinds step --repeats 2 --plans greedy_size,all_rw"), slow=True),
    "dlrmbench plan --tables smoke --hardware results/hardware/calibrated.yaml --ranks 2 --cost-model learned "
    "--out p.json": Run(setup=(f"dlrmbench calibrate {CALIBRATE_TINY}", f"dlrmbench perfmodel collect {COLLECT_TINY}",
                              "dlrmbench perfmodel train"), slow=True),
    "dlrmbench serve": Run(extra=SERVE_TINY, slow=True),
    "dlrmbench serve serving=deeprecsys_rm1 serving.loadgen.target_qps=10": Run(extra=SERVE_TINY, slow=True),
    "dlrmbench serve serving=deeprecsys_rm1 serving.loadgen.target_qps=200 serving.server.worker_kind=process "
    "serving.server.workers=2": Run(extra=SERVE_TINY, slow=True),
    "dlrmbench serve search serving=deeprecsys_rm3": Run(extra=f"{SERVE_TINY} {SEARCH_TINY}", slow=True),
    "dlrmbench serve validate serving.loadgen.min_query_count=2000": Run(extra=SERVE_TINY, slow=True),
    "dlrmbench serve overhead": Run(extra=SERVE_TINY, slow=True),
    "dlrmbench serve whatif serving=deeprecsys_rm1 serving.loadgen.target_qps=80": Run(extra=SERVE_TINY, slow=True),
    "dlrmbench dist workload=smoke dist.plan=ours": Run(extra="dist.warmup=1 dist.repeats=2", slow=True),
    "dlrmbench dist +dist=dlrm dist.world_size=4 dist.verify=true workload.max_rows=100000":
        Run(extra="workload.batch_size=64 workload.num_batches=2 dist.warmup=1 dist.repeats=2", slow=True),
    "dlrmbench calibrate": Run(extra="--rows 2000 --repeats 2 --steps 2 --rounds 2", slow=True),
    "dlrmbench validate-cost": Run(extra="--quick --repeats 2", slow=True),
    "dlrmbench compare-plans workload=rm2 workload.max_rows=200000":
        Run(extra="--quick workload.max_rows=20000 workload.batch_size=64 workload.num_batches=2", slow=True),
}

NOT_HERE: dict[str, str] = {
    "make test": "runs the whole test suite, this test included (CI's .ci/run runs it)",
    "dlrmbench run placement=gpu backend=torch workload.batch_size=65536": "needs a CUDA GPU",
    "bash benchmarks/gpu_check.sh results/gpu/mine": "needs a CUDA GPU (it runs the CUDA tests)",
    "torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:29500 --rdzv-id=$JOB -m "
    "benchmarks.distributed.worker +dist=h200_node placement=gpu dist.world_size=16 dist.run_id=$JOB "
    "dist.hardware=h200_x8 workload=dcnv2 workload.max_rows=4000000": "two nodes of 8 GPUs",
    "dlrmbench dist -m hydra/launcher=submitit_dist +dist=h200_node placement=gpu dist.plan=ours,torchrec,best_greedy "
    "workload=rm1,rm2,rm3 hydra.launcher.partition=<yours>": "a Slurm cluster with GPUs (hydra-submitit-launcher)",
}


def readme_commands(text: str | None = None) -> list[str]:
    """Commands of the ```bash blocks: continuation lines joined, comments and blank lines dropped."""
    text = README.read_text() if text is None else text
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            cmd = " ".join(re.sub(r"(^|\s)#.*$", "", line).split())
            if cmd:
                out.append(cmd)
    return out


def _argv(cmd: str) -> list[str]:
    words = shlex.split(cmd.format(repo=REPO))
    if words[0] == "taskset":  # taskset -c CPUS COMMAND: the command as it would run alone
        return words[:3] + _argv(shlex.join(words[3:]))
    head = {"dlrmbench": [sys.executable, "-m", "benchmarks.cli"], "python": [sys.executable]}
    return head.get(words[0], [words[0]]) + words[1:]


def _sh(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    return subprocess.run(_argv(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)


def test_every_readme_command_is_run_or_listed() -> None:
    commands = readme_commands()
    assert commands and all(c.split()[0] in COMMANDS for c in commands), commands
    unknown = [c for c in commands if c not in RUNS and c not in NOT_HERE]
    assert not unknown, f"README commands neither in RUNS nor in NOT_HERE (tests/test_readme.py): {unknown}"
    stale = [c for c in [*RUNS, *NOT_HERE] if c not in commands]
    assert not stale, f"RUNS / NOT_HERE entries no longer in README.md: {stale}"


def test_readme_parser_joins_continuations_and_drops_comments() -> None:
    text = "x\n```bash\nmake a   # note\n\ndlrmbench b \\\n  c=1  # more\n```\n```python\nnot = 1\n```\n"
    assert readme_commands(text) == ["make a", "dlrmbench b c=1"]


@pytest.mark.parametrize("command", [pytest.param(c, marks=[pytest.mark.slow] if r.slow else [], id=c[:60])
                                     for c, r in RUNS.items()])
def test_readme_command_exits_0(command: str, tmp_path: Path) -> None:
    run = RUNS[command]
    (tmp_path / "conf").symlink_to(REPO / "conf")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "baselines").symlink_to(REPO / "results" / "baselines")
    for cmd in run.setup:
        r = _sh(cmd, tmp_path)
        assert r.returncode == 0, f"setup {cmd!r} failed:\n{r.stderr[-3000:]}"
    cmd = f"{run.instead or command} {run.extra}".strip()
    r = _sh(cmd, tmp_path)
    assert r.returncode == 0, f"{cmd!r} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
