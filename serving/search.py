"""The operating-point search: the highest target QPS at which LoadGen calls a server setting VALID.

Budgets, not clocks: each setting costs a counted number of LoadGen runs. `bisect_qps` brackets the boundary by
doubling or halving from a start (at most `bracket_runs` runs), then bisects it `steps` times; the answer is the
highest VALID QPS seen. Three servers are compared at the same bound:
- naive: one query at a time (one worker, all cores' intra-op threads, no batching, no splitting);
- static: a fixed batch size B: the batcher waits until B samples are queued (no timeout; LoadGen's flush ends a
  run), one worker with all cores' intra-op threads, no splitting; the best B of a list;
- ours: worker kind (threads or processes) × workers × split size × max batch × max wait (DeepRecSched's knobs
  plus the pool); a max batch above the list's smallest is searched only when one batch of that size, measured
  before the search, takes ≤ bound / batch_headroom (`admitted_batches`). Batching is dynamic: a free worker takes
  whatever is queued up to max batch and waits at most max wait for more (0: not at all). The candidate "thread,
  1 worker, no split, wait 0" is the greedy batcher of MLPerf's reference server. Each candidate is first tried
  once at the best QPS found so far (naive, static); of those VALID there, the `max_settings` with the lowest
  latency at the bound's percentile get a bisection upwards (a single probe above the best would reject a better
  setting on one noisy run).
Runs: naive and each static B cost ≤ bracket_runs + steps; each candidate one probe, a bisected one ≤ bracket_runs
+ steps more. Then each kind's top settings (naive's one, static's and ours' best `confirm_top`, by search QPS):
if no INVALID run lies above a setting's best VALID QPS, `extend_bracket` (≤ bracket_runs + steps); and `confirm`:
repeats at its best VALID QPS, backing off down a fixed ladder of fractions of it until a level repeats VALID,
then bisecting between the held level and the failed one above it (≤ (len(ladder) + confirm_bisect_steps)
× confirm_repeats); where the top level holds (`confirm_above`), walking up the mirrored ladder until a level
fails and bisecting below it (≤ (len(ladder) - 1 + confirm_bisect_steps) × confirm_repeats more). Each kind
reports its best confirmed setting. Every run is counted.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .config import SearchConfig, ServerConfig

__all__ = ["Setting", "SearchResult", "bisect_qps", "confirm", "naive_setting", "static_settings", "our_candidates",
           "admitted_batches",
           "search_all", "extend_bracket", "CONFIRM_LADDER",
           "top_settings", "best_confirmed", "confirm_top", "confirm_story"]

RunFn = Callable[["Setting", float], dict]

CONFIRM_LADDER = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)
"""confirmation's back-off: fractions of a setting's highest VALID QPS, tried in order until one repeats VALID"""


@dataclass
class Setting:
    label: str
    kind: str  # naive | static | ours
    server: ServerConfig


@dataclass
class SearchResult:
    setting: Setting
    best_qps: float = 0.0
    best_point: dict | None = None
    points: list[dict] = field(default_factory=list)
    bracketed: bool = False
    """an INVALID run above the best VALID one was seen (else best_qps is only a lower bound)"""
    confirmed_qps: float = 0.0
    """the highest ladder level of best_qps whose repeats were all VALID (0 = none confirmed)"""
    confirmed_fraction: float = 0.0
    """that level as a fraction of best_qps"""
    confirm_points: list[dict] = field(default_factory=list)
    confirm_trail: list[tuple[float, int, int]] = field(default_factory=list)
    """each level tried: (QPS, VALID repeats, runs spent)"""
    confirm_disturbed: bool = False
    """confirmation stopped at a run that other processes disturbed (the caller's reruns spent): the figure is
    what held before it (0 on the ladder), not a verdict on the server"""
    confirm_unbounded: bool = False
    """confirmation walked up from the top level (`above`) and every level held: the figure is a lower bound"""

    @property
    def runs(self) -> int:
        return len(self.points)

    @property
    def confirm_runs(self) -> int:
        return len(self.confirm_points)


def _valid(p: dict) -> bool:
    return p.get("verdict") == "VALID"


def bisect_qps(run: Callable[[float], dict], start: float, steps: int, bracket_runs: int,
               result: SearchResult, lo: float = 0.0) -> SearchResult:
    """Bracket then bisect the VALID/INVALID boundary in target QPS; every run is kept in result.points."""
    def probe(q: float) -> bool:
        p = run(q)
        result.points.append(p)
        ok = _valid(p)
        if ok and q > result.best_qps:
            result.best_qps, result.best_point = q, p
        return ok

    hi = None
    q = start
    for _ in range(bracket_runs):
        if probe(q):
            lo = q
            q *= 2
        else:
            hi = q
            if lo > 0:
                break
            q /= 2
        if hi is not None and lo > 0:
            break
    if hi is None or lo <= 0:
        return result
    result.bracketed = True
    for _ in range(steps):
        mid = (lo + hi) / 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return result


def confirm(run: Callable[[float, int], dict], result: SearchResult, repeats: int,
            ladder: tuple[float, ...] | list[float] = CONFIRM_LADDER, bisect_steps: int = 0,
            above: bool = False) -> SearchResult:
    """Confirm the setting's highest VALID QPS (`best_qps`) by `repeats` runs that are all VALID; when one fails,
    back off down a fixed ladder of fractions of it (1.0, 0.95, 0.9, 0.8, … by default) until a level holds. Then,
    when a level above the held one failed, bisect between the two `bisect_steps` times (each midpoint held or
    failed by the same repeats rule), so the figure is not up to one ladder step low. The same rule for naive,
    static and ours. `run(qps, k)` is the k-th repeat at that level (the caller may give repeats their own
    LoadGen seed and a longer run). An INVALID run marked `disturbed` (other processes' CPU, the caller's
    reruns spent) stops the confirmation: a failure under disturbance says nothing about the server, so the
    ladder does not walk down on it; the figure is what held before (0 on the ladder) and `confirm_disturbed`
    says why. Worst case (len(ladder) + bisect_steps) × repeats runs, all counted; each
    level tried is kept in `result.confirm_trail` as (qps, VALID repeats, runs). The level above the confirmed
    one (it failed its repeats) or, at the top level, the search's INVALID run above `best_qps` makes the
    confirmed figure a measured bound, not only a lower one.

    `above`: when the top level holds, the figure may lie above the search's best (the 3 s run that failed above
    it is one noisy run), so walk up the mirrored ladder (best_qps / f for the ladder's fractions below 1: 1/0.95,
    1/0.9, …) while levels hold, then bisect between the last held level and the failed one the same way. At most
    (len(ladder) - 1 + bisect_steps) × repeats more runs; if every level up holds, the figure is the highest one
    and only a lower bound (`confirm_unbounded`)."""
    top = result.best_qps
    if top <= 0:
        return result

    def holds(q: float) -> bool:
        ok = 0
        for k in range(repeats):
            p = run(q, k)
            result.confirm_points.append(p)
            if p.get("disturbed") and not _valid(p):
                result.confirm_disturbed = True
            if not _valid(p) or result.confirm_disturbed:
                break
            ok += 1
        result.confirm_trail.append((q, ok, min(ok + 1, repeats)))
        return ok == repeats

    failed = None
    for f in ladder:
        q = top * f
        if holds(q):
            result.confirmed_qps, result.confirmed_fraction = q, f
            break
        if result.confirm_disturbed:
            return result
        failed = q
    if result.confirmed_qps <= 0:
        return result
    if failed is None:  # the top level held
        if not above:
            return result
        for f in [f for f in ladder if f < 1.0]:
            q = top / f
            if not holds(q):
                failed = q
                break
            result.confirmed_qps, result.confirmed_fraction = q, q / top
        if failed is None or result.confirm_disturbed:
            result.confirm_unbounded = failed is None
            return result
    lo, hi = result.confirmed_qps, failed
    for _ in range(bisect_steps):
        if result.confirm_disturbed:
            break
        mid = (lo + hi) / 2
        if holds(mid):
            lo = mid
        else:
            hi = mid
    if lo > result.confirmed_qps:
        result.confirmed_qps, result.confirmed_fraction = lo, lo / top
    return result


def extend_bracket(run: Callable[[float], dict], result: SearchResult, steps: int, bracket_runs: int) -> SearchResult:
    """A setting with no INVALID run above its best VALID QPS: keep doubling from there (at most `bracket_runs`
    runs) and bisect the bracket found (`steps` runs), so its figure is bounded from above too. Counted runs."""
    if result.bracketed or result.best_qps <= 0:
        return result
    return bisect_qps(run, result.best_qps * 2, steps, bracket_runs, result, lo=result.best_qps)


def confirm_story(result: SearchResult, repeats: int) -> str:
    """One line: each ladder level tried (QPS, fraction, VALID repeats / runs) and what was confirmed."""
    top = result.best_qps
    steps = ", ".join(f"{q:.1f} ({q / top:.2f}x): {ok}/{repeats} VALID in {n} run(s)"
                      for q, ok, n in result.confirm_trail) if top > 0 else "nothing VALID to confirm"
    if result.confirmed_qps > 0:
        end = f"confirmed {result.confirmed_qps:.1f} QPS ({result.confirmed_fraction:.2f}x of the best VALID run)"
    else:
        end = "none confirmed"
    if result.confirm_disturbed:
        end += "; stopped at a run disturbed by other processes"
    if result.confirm_unbounded:
        end += "; every level above held (a lower bound)"
    return f"{result.setting.label}: {steps} → {end}; {result.confirm_runs} confirmation runs"


def top_settings(results: list[SearchResult], k: int) -> dict[str, list[SearchResult]]:
    """The settings each kind confirms, best VALID QPS first: naive's one, static's best `k` and ours' best `k` of
    those its search bisected (a candidate only probed is not reported). Why more than one: the 3 s runs that
    rank them over-state what holds for 10 s by different factors, so the runner-up may hold higher."""
    def best(kind: str, n: int) -> list[SearchResult]:
        pool = [r for r in results if r.setting.kind == kind and r.best_qps > 0 and (kind != "ours" or r.runs > 1)]
        return sorted(pool, key=lambda r: -r.best_qps)[:n]
    return {"naive": best("naive", 1), "static": best("static", k), "ours": best("ours", k)}


def best_confirmed(tops: dict[str, list[SearchResult]]) -> dict[str, SearchResult | None]:
    """Each kind's setting with the highest confirmed QPS (a tie goes to the higher search rank); ours may choose
    any static setting, so it falls back to static's when that confirmed higher (or ours had none)."""
    def best(rs: list[SearchResult]) -> SearchResult | None:
        held = [r for r in rs if r.confirmed_qps > 0]
        return max(held, key=lambda r: r.confirmed_qps) if held else (rs[0] if rs else None)
    out = {kind: best(rs) for kind, rs in tops.items()}
    st, ours = out["static"], out["ours"]
    if st is not None and (ours is None or st.confirmed_qps > ours.confirmed_qps):
        out["ours"] = st
    return out


def confirm_top(run: Callable[..., dict], results: list[SearchResult], cfg: SearchConfig,
                log: Callable[[str], None] = print) -> tuple[dict[str, list[SearchResult]],
                                                             dict[str, SearchResult | None]]:
    """Confirm each kind's top settings (`top_settings`, cfg.confirm_top of static and of ours) in the order naive,
    static, ours, best first; return them and each kind's best confirmed one (`best_confirmed`). A runner-up whose
    best VALID QPS is not above what its kind already confirmed (for ours: or static) is skipped.
    With `confirm_above` a figure may exceed its best VALID run, so the skip is then the search's ranking, not a
    proof (the runner-up would have to hold above its own best 3 s run, where its search failed).
    A setting with no INVALID run above its best first gets `extend_bracket`.
    `run(setting, qps)` is a search run, `run(setting, qps, k)` a confirmation repeat; the caller counts every run."""
    tops = top_settings(results, cfg.confirm_top)
    held = {"naive": 0.0, "static": 0.0, "ours": 0.0}
    for kind, rs in tops.items():
        for i, r in enumerate(rs):
            if i > 0 and r.best_qps <= held[kind]:  # it would have to hold above its own best VALID run
                log(f"not confirming {kind}: {r.setting.label}, best VALID {r.best_qps:.1f} QPS ≤ {held[kind]:.1f} "
                    "already confirmed")
                continue
            if not r.bracketed:
                extend_bracket(lambda q, st=r.setting: run(st, q), r, cfg.bisection_steps, cfg.bracket_runs)
                log(f"{kind} ({r.setting.label}): no INVALID run above it, bracket extended upwards: best VALID "
                    f"{r.best_qps:.1f} QPS, {'bracketed' if r.bracketed else 'still no INVALID above'} "
                    f"({r.runs} runs)")
            log(f"confirming {kind}: {r.setting.label} from its best VALID {r.best_qps:.1f} QPS, "
                f"{cfg.confirm_repeats} repeats per level, ladder {list(cfg.confirm_ladder)} from the top"
                + (" (up its mirror if the top holds)" if cfg.confirm_above else "")
                + f", then {cfg.confirm_bisect_steps} bisection step(s) below the failed level")
            confirm(lambda q, k, st=r.setting: run(st, q, k), r, cfg.confirm_repeats, tuple(cfg.confirm_ladder),
                    cfg.confirm_bisect_steps, above=cfg.confirm_above)
            log(f"confirm {kind}: " + confirm_story(r, cfg.confirm_repeats))
            held[kind] = max(held[kind], r.confirmed_qps, held["static"] if kind == "ours" else 0.0)
    return tops, best_confirmed(tops)


def naive_setting(base: ServerConfig, cores: int) -> Setting:
    return Setting("naive", "naive", replace(base, workers=1, worker_kind="thread", intra_threads=cores, max_batch=0,
                                             split=0, max_wait_ms=0.0))


def static_settings(base: ServerConfig, cfg: SearchConfig, cores: int,
                    batches: list[int] | None = None) -> list[Setting]:
    """Each of cfg.static_batches, and each of ours' admitted max batch sizes `batches` above them: the best static
    B is searched over every batch size ours may use, so ours' margin over it is not a larger batch alone."""
    sizes = list(cfg.static_batches)
    sizes += sorted(b for b in set(batches or []) if b > max(sizes))
    return [Setting(f"static B={b}", "static", replace(base, workers=1, worker_kind="thread", intra_threads=cores,
                                                        max_batch=b, split=0, max_wait_ms=-1.0))
            for b in sizes]


def admitted_batches(batches: list[int], service_ms: dict[int, float], bound_ms: float,
                     headroom: float) -> list[int]:
    """The max batch sizes ours searches: the smallest of `batches` always; a larger one only when one batch of that
    many samples, measured before the search (`service_ms[b]`), takes at most `bound_ms / headroom`. Why: a query
    behind a batch in service waits for it, then rides in the next, so its latency near capacity is a few batch
    times; a batch that is a sizeable part of the bound trades the bound for throughput the search cannot use.
    No size measured (missing from `service_ms`) is not admitted. Sorted, without repeats."""
    sizes = sorted(set(batches))
    if not sizes:
        return []
    return [sizes[0]] + [b for b in sizes[1:] if b in service_ms and service_ms[b] * headroom <= bound_ms]


def our_candidates(base: ServerConfig, cfg: SearchConfig, cores: int,
                   batches: list[int] | None = None) -> list[Setting]:
    """Every combination of the search lists, in list order (so put the likeliest first: only `max_settings` get a
    bisection). One process worker is one thread worker plus a pipe: skipped. Intra-op threads = cores / workers,
    so workers × intra-op threads never exceeds the cores. `batches`: the max batch sizes admitted
    (`admitted_batches`; default all of cfg.max_batches)."""
    out = []
    batches = list(cfg.max_batches) if batches is None else batches
    for kind, w, s, b, wait in itertools.product(cfg.worker_kinds, cfg.workers, cfg.splits, batches,
                                                 cfg.max_wait_ms):
        if (s and s > b) or (kind == "process" and w == 1):
            continue
        threads = max(1, cores // w)
        out.append(Setting(f"ours {kind} w={w} split={s} B={b} wait={wait:g}", "ours",
                           replace(base, worker_kind=kind, workers=w, intra_threads=threads, max_batch=b, split=s,
                                   max_wait_ms=wait)))
    return out


def search_all(run: RunFn, base: ServerConfig, cfg: SearchConfig, start_qps: float, cores: int,
               log: Callable[[str], None] = print, rank_key: str = "p99_ms",
               batches: list[int] | None = None) -> list[SearchResult]:
    """Naive, every static B, then our candidates; returns one SearchResult per setting tried. `rank_key`: the
    run's latency at the bound's percentile, which orders the candidates VALID at the probe. `batches`: ours' max
    batch sizes (`admitted_batches`; default all of cfg.max_batches)."""
    results: list[SearchResult] = []
    naive = naive_setting(base, cores)
    r = bisect_qps(lambda q: run(naive, q), start_qps, cfg.bisection_steps, cfg.bracket_runs,
                   SearchResult(naive))
    results.append(r)
    log(f"{naive.label}: {r.best_qps:.1f} QPS ({r.runs} LoadGen runs)")
    best = max(r.best_qps, start_qps / 4)
    for st in static_settings(base, cfg, cores, batches):
        r = bisect_qps(lambda q, st=st: run(st, q), max(best, start_qps), cfg.bisection_steps,
                       cfg.bracket_runs, SearchResult(st))
        results.append(r)
        log(f"{st.label}: {r.best_qps:.1f} QPS ({r.runs} LoadGen runs)")
        best = max(best, r.best_qps)
    # ours: every candidate once at the best QPS so far; those VALID there, most headroom first (lowest latency at
    # the bound's percentile in that run), get a bisection upwards: at most max_settings of them
    probe_q, probed = best, []
    for st in our_candidates(base, cfg, cores, batches):
        r = SearchResult(st)
        p = run(st, probe_q)
        r.points.append(p)
        if _valid(p):
            r.best_qps, r.best_point = probe_q, p
            probed.append((p.get(rank_key, float("inf")), len(probed), r))
        results.append(r)
        log(f"{st.label}: {'VALID' if _valid(p) else 'INVALID'} at {probe_q:.1f} QPS (1 LoadGen run)")
    for _, _, r in sorted(probed, key=lambda x: x[:2])[:cfg.max_settings]:
        st = r.setting
        bisect_qps(lambda q, st=st: run(st, q), probe_q * 1.25, cfg.bisection_steps, cfg.bracket_runs, r,
                   lo=probe_q)
        log(f"{st.label}: {r.best_qps:.1f} QPS ({r.runs} LoadGen runs)")
    return results
