"""The `serving` config group (Hydra structured config) and its checks.

Every check runs before anything is measured; a failing one raises `ServingError` whose message names the bad value
and what is allowed (the CLI prints it as one line and exits 2).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from embedding.spec import SpecError

__all__ = ["QueryConfig", "ServerConfig", "LoadGenConfig", "SearchConfig", "WhatIfConfig", "ServingConfig", "ServingError",
           "check_serving", "SCENARIOS", "SIZE_KINDS"]

SCENARIOS = ("Server", "Offline", "SingleStream")
SIZE_KINDS = ("fixed", "uniform", "lognormal", "mlperf")
WORKER_KINDS = ("thread", "process")


class ServingError(SpecError):
    """A serving setting that cannot run; the message names the value and what is allowed."""


@dataclass
class QueryConfig:
    """How many samples (user–item pairs) one query carries."""

    size: str = "fixed"
    """fixed | uniform | lognormal (DeepRecSys, heavy tail) | mlperf (MLPerf DLRM's aggregation quantiles)"""
    mean: float = 64
    """fixed: the size; lognormal: mu of the underlying normal is log(mean) - sigma²/2, so E[size] = mean"""
    low: int = 1
    high: int = 1024
    """uniform: [low, high]; lognormal: sizes are clipped to [1, high] (DeepRecSys clips at max_mini_batch_size)"""
    sigma: float = 1.0
    """lognormal: sigma of the underlying normal"""
    count: int = 1024
    """distinct queries LoadGen may draw from (its sample library)"""
    pool_samples: int = 4096
    """generated samples the queries are cut from (sparse features from the workload generator)"""
    seed: int = 0


@dataclass
class ServerConfig:
    """The system under test: queue → batcher → workers."""

    workers: int = 1
    """inference workers (each a thread that forms batches; see worker_kind)"""
    intra_threads: int = 1
    """torch intra-op threads per worker (workers × intra_threads ≤ cores avoids oversubscription)"""
    max_batch: int = 256
    """samples per batch the batcher forms (0 = one query per batch, however large: the naive server)"""
    max_wait_ms: float = 0.0
    """longest a batch waits for more work after its first piece arrived; < 0 = wait until full (static batching)"""
    split: int = 0
    """queries above this many samples are cut into pieces of at most this size (0 = never split)"""
    worker_kind: str = "thread"
    """thread (the worker thread runs the DLRM itself) | process (each worker thread hands its batches to a worker
    process owning its own model copy: no shared GIL; spawned once per setup, outside the timed runs)"""
    gpu_threshold: int = 0
    """queries of more than this many samples go whole to a GPU lane (0 = off; needs CUDA, refused without it)"""
    service: str = "dlrm"
    """dlrm (the project's DLRM inference) | fixed (validation only: a timed wait of `fixed_ms` per query)"""
    fixed_ms: float = 5.0
    backend: str = "torch"
    """lookup backend for the DLRM: torch | fbgemm | torchrec"""


@dataclass
class LoadGenConfig:
    scenario: str = "Server"
    """Server | Offline | SingleStream"""
    target_qps: float = 100.0
    latency_ms: float = 30.0
    """the latency bound (Server)"""
    percentile: float = 99.0
    """the bound's percentile, in (0, 100)"""
    min_duration_ms: int = 3000
    min_query_count: int = 64
    max_duration_ms: int = 0
    """0 = LoadGen's default"""
    seed: int = 0
    """LoadGen's schedule and sample-index seeds (repeat k of `serve run` uses seed + k)"""
    repeats: int = 1
    """`serve run`: LoadGen runs of the same point, to show the spread (VALID count, min/median/max latency)"""


@dataclass
class SearchConfig:
    bisection_steps: int = 4
    """LoadGen runs per setting after the bracket is found (the budget: counted runs, no clock)"""
    bracket_runs: int = 8
    """at most this many runs doubling/halving the QPS to find a VALID/INVALID bracket (none found: the highest
    VALID QPS seen is reported with bracketed=false)"""
    worker_kinds: list[str] = field(default_factory=lambda: ["process", "thread"])
    workers: list[int] = field(default_factory=lambda: [2, 1])
    splits: list[int] = field(default_factory=lambda: [0, 64])
    max_batches: list[int] = field(default_factory=lambda: [256, 512, 1024])
    """ours' max batch sizes: the smallest is always searched, a larger one only when one batch of that many
    samples, measured before the search, takes ≤ bound / `batch_headroom` (`search.admitted_batches`); each
    admitted size adds one probe run per (kind, workers, split). Why 512 and 1024: under LoadGen Offline (3 runs
    each, 2026-12-02) two workers with batches ≤ 512 or ≤ 1024 served 1.07–1.18× the queries/s of the same
    workers with batches ≤ 256 on RM2 and 1.26–1.57× on RM1 and RM3 (results/validation/
    serving_targets_20261201.md, section 16); 512 keeps a step where 1024 is not admitted (RM2's 1024-sample batch
    took 100–129 ms that day against a 400 / 4 ms threshold)"""
    batch_headroom: float = 4.0
    """a larger max batch is searched only when its batch time × this ≤ the latency bound"""
    max_wait_ms: list[float] = field(default_factory=lambda: [0.0])
    static_batches: list[int] = field(default_factory=lambda: [128, 256, 512])
    max_settings: int = 3
    """ours: at most this many (kind, workers, split, batch, wait) settings get a full bisection"""
    confirm_repeats: int = 2
    """repeats of a kind's best QPS that must all be VALID before it is reported"""
    confirm_ladder: list[float] = field(default_factory=lambda: [1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5])
    """confirmation backs off down these fractions of a kind's highest VALID QPS until one repeats VALID (the same
    rule for naive, static and ours; at most len × confirm_repeats runs)"""
    others_cpu_max: float = -1.0
    """≥ 0 turns on the disturbance guard (for a machine shared with other jobs): a search or confirmation run
    during which other processes used more than this many cores (the kernel's CPU counters) is disturbed, run
    again if INVALID, at most `disturbed_reruns` times (counted), and a confirmation stops at one still disturbed.
    Off (< 0) by default: with nothing else running (2026-12-02, RM3) 15 of 74 runs read 0.26–0.53 cores of
    "others", all overloaded ones (kernel work for the server's own backlog, not billed to its process), and
    static's confirmation stopped on them"""
    disturbed_reruns: int = 2
    """the guard's reruns of one disturbed INVALID run"""
    confirm_bisect_steps: int = 2
    """then bisect this many times between the level that held and the failed one above it (each midpoint by the
    same repeats rule; ≤ steps × confirm_repeats more runs), so a figure is not up to one ladder step low"""
    confirm_above: bool = True
    """when a setting's top level (its best VALID search QPS) holds, walk up the mirrored ladder (best / 0.95,
    best / 0.9, …) while levels hold, then bisect below the first that fails: the figure is then bounded by a
    failed confirmation above it, not capped at the search's best 3 s run (≤ (len(ladder) - 1 +
    confirm_bisect_steps) × confirm_repeats more runs; the same rule for naive, static and ours)"""
    confirm_top: int = 2
    """confirm this many of static's and of ours' settings (best search QPS first; naive has one) and report each
    kind's best confirmed one: the 3 s runs that rank them over-state what holds for 10 s by different factors"""
    confirm_duration_ms: int = 10000
    """LoadGen's min duration of each confirmation run (0 = the search runs' serving.loadgen.min_duration_ms):
    longer than a search run so that a VALID verdict near the knee rests on more queries"""


@dataclass
class WhatIfConfig:
    """`serve whatif`: the cache and bursty-arrival questions asked of the model (the RecNMP one needs no knob)."""

    cache_fraction: float = 0.2
    """LRU cache of this fraction of each table's rows in DRAM, the tables on `slow_tier`"""
    slow_tier: str = "direct"
    """direct (a file read with O_DIRECT: a disk tier) | mmap (the same file through the page cache)"""
    burst: float = 4.0
    """bursty arrivals (model only: LoadGen's Server makes Poisson arrivals): on-state rate ÷ mean rate"""
    on_fraction: float = 0.2
    on_ms: float = 50.0


@dataclass
class ServingConfig:
    name: str = "serving"
    workload: str = "smoke"
    """the conf/workload preset the server runs (a `workload=...` override wins)"""
    max_rows: int = 0
    """row cap applied to that workload (0 = the workload's own `max_rows`): the scale knob that makes RM1–RM3 fit"""
    query: QueryConfig = field(default_factory=QueryConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    loadgen: LoadGenConfig = field(default_factory=LoadGenConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    whatif: WhatIfConfig = field(default_factory=WhatIfConfig)
    log_dir: str = "results/serving"
    """LoadGen's summary and detail logs go under here, one folder per run"""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ServingError(message)


def check_serving(cfg: ServingConfig, cuda: bool = False) -> None:
    """Validate every serving knob (raises ServingError naming the first bad one); `cuda`: a CUDA device is present
    (the GPU offload threshold is refused without one rather than silently measuring a CPU-only server)."""
    q, s, lg = cfg.query, cfg.server, cfg.loadgen
    _require(lg.scenario in SCENARIOS, f"serving.loadgen.scenario={lg.scenario!r}: must be one of {list(SCENARIOS)}")
    _require(lg.target_qps > 0, f"serving.loadgen.target_qps={lg.target_qps}: must be > 0")
    _require(lg.latency_ms > 0, f"serving.loadgen.latency_ms={lg.latency_ms}: the latency bound must be > 0")
    _require(0 < lg.percentile < 100, f"serving.loadgen.percentile={lg.percentile}: must lie in (0, 100)")
    _require(lg.min_duration_ms >= 0, f"serving.loadgen.min_duration_ms={lg.min_duration_ms}: must be ≥ 0")
    _require(lg.repeats >= 1, f"serving.loadgen.repeats={lg.repeats}: must be ≥ 1")
    _require(lg.min_query_count >= 1, f"serving.loadgen.min_query_count={lg.min_query_count}: must be ≥ 1")
    _require(q.size in SIZE_KINDS, f"serving.query.size={q.size!r}: must be one of {list(SIZE_KINDS)}")
    _require(q.mean >= 1, f"serving.query.mean={q.mean}: must be ≥ 1")
    _require(1 <= q.low <= q.high, f"serving.query low={q.low} high={q.high}: need 1 ≤ low ≤ high")
    _require(q.sigma > 0, f"serving.query.sigma={q.sigma}: must be > 0")
    _require(q.count >= 1, f"serving.query.count={q.count}: must be ≥ 1")
    largest = {"fixed": int(q.mean), "uniform": q.high, "lognormal": q.high, "mlperf": 700}[q.size]
    _require(q.pool_samples >= largest,
             f"serving.query.pool_samples={q.pool_samples}: must be ≥ the largest {q.size} query ({largest})")
    _require(s.workers >= 1, f"serving.server.workers={s.workers}: must be ≥ 1")
    _require(s.intra_threads >= 1, f"serving.server.intra_threads={s.intra_threads}: must be ≥ 1")
    _require(s.max_batch >= 0, f"serving.server.max_batch={s.max_batch}: must be ≥ 0 (0 = one query per batch)")
    _require(s.split >= 0, f"serving.server.split={s.split}: must be ≥ 0 (0 = never split)")
    _require(s.worker_kind in WORKER_KINDS, f"serving.server.worker_kind={s.worker_kind!r}: must be one of "
             f"{list(WORKER_KINDS)}")
    _require(s.gpu_threshold >= 0, f"serving.server.gpu_threshold={s.gpu_threshold}: must be ≥ 0 (0 = off)")
    _require(s.gpu_threshold == 0 or cuda, f"serving.server.gpu_threshold={s.gpu_threshold}: GPU offload needs a "
             "CUDA device and this machine has none; use 0 (off)")
    _require(s.gpu_threshold == 0 or s.service == "dlrm",
             "serving.server.gpu_threshold needs serving.server.service=dlrm (the fixed service has no GPU copy)")
    _require(s.service in ("dlrm", "fixed"), f"serving.server.service={s.service!r}: must be dlrm or fixed")
    _require(s.fixed_ms > 0, f"serving.server.fixed_ms={s.fixed_ms}: must be > 0")
    _require(s.max_wait_ms < 0 or s.max_batch > 0 or s.max_wait_ms == 0,
             "serving.server.max_wait_ms needs max_batch > 0 (batches of one query never wait)")
    sc = cfg.search
    _require(sc.bisection_steps >= 1, f"serving.search.bisection_steps={sc.bisection_steps}: must be ≥ 1")
    _require(sc.bracket_runs >= 1, f"serving.search.bracket_runs={sc.bracket_runs}: must be ≥ 1")
    for name in ("max_batches", "static_batches", "workers"):
        vals = getattr(sc, name)
        _require(len(vals) > 0 and all(v >= 1 for v in vals), f"serving.search.{name}={list(vals)}: need values ≥ 1")
    _require(all(v >= 0 for v in sc.splits), f"serving.search.splits={list(sc.splits)}: need values ≥ 0")
    _require(sc.batch_headroom >= 1, f"serving.search.batch_headroom={sc.batch_headroom}: must be ≥ 1 (a batch "
             "longer than the bound cannot meet it)")
    _require(sc.confirm_repeats >= 1, f"serving.search.confirm_repeats={sc.confirm_repeats}: must be ≥ 1")
    lad = list(sc.confirm_ladder)
    _require(len(lad) > 0 and all(0 < f <= 1 for f in lad) and all(lad[i] > lad[i + 1] for i in range(len(lad) - 1)),
             f"serving.search.confirm_ladder={lad}: need fractions in (0, 1], strictly decreasing")
    _require(sc.disturbed_reruns >= 0, f"serving.search.disturbed_reruns={sc.disturbed_reruns}: must be ≥ 0")
    _require(sc.confirm_bisect_steps >= 0,
             f"serving.search.confirm_bisect_steps={sc.confirm_bisect_steps}: must be ≥ 0 (0 = the ladder only)")
    _require(sc.confirm_top >= 1, f"serving.search.confirm_top={sc.confirm_top}: must be ≥ 1")
    _require(sc.confirm_duration_ms >= 0, f"serving.search.confirm_duration_ms={sc.confirm_duration_ms}: must be ≥ 0 "
             "(0 = the search runs' min duration)")
    _require(len(sc.worker_kinds) > 0 and all(k in WORKER_KINDS for k in sc.worker_kinds),
             f"serving.search.worker_kinds={list(sc.worker_kinds)}: need one or more of {list(WORKER_KINDS)}")
    w = cfg.whatif
    _require(0 < w.cache_fraction <= 1, f"serving.whatif.cache_fraction={w.cache_fraction}: must lie in (0, 1]")
    _require(w.slow_tier in ("direct", "mmap"), f"serving.whatif.slow_tier={w.slow_tier!r}: must be direct or mmap")
    _require(w.burst > 1 and 0 < w.on_fraction < 1 and w.burst * w.on_fraction < 1,
             f"serving.whatif burst={w.burst} on_fraction={w.on_fraction}: need burst > 1, 0 < on_fraction < 1 and "
             "burst × on_fraction < 1 (the off state's rate must stay ≥ 0)")
    _require(w.on_ms > 0, f"serving.whatif.on_ms={w.on_ms}: must be > 0")
