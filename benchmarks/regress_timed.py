"""The timed regression check: kernels timed against an in-process reference, decided on between-run noise.

Measuring: every probe pairs a kernel with a reference kernel on the same data: a frozen copy of what the kernel
did when the check was built (`regress_reference`), so that load slows both alike (np.unique or a bare library op
beside the kernel moved 9–10% between loaded runs and hid a 25% slowdown) and only a code change moves the ratio.
A sample is the CPU time
(`time.process_time`, torch on one thread) of `calls` calls of each, the two interleaved, the order alternating; a
round's figure is the median ratio kernel/reference of `repeats` such pairs. A run is `rounds` rounds, the probes
interleaved round by round, so a burst of load hits one round of every probe rather than one probe.

Deciding (`decide`): a run's figure is the median of its round ratios. Baseline = one or more saved runs (each its
own process). The change is now / median(baseline runs) − 1; the noise is the largest of the spread between the
baseline runs, the spread between rounds scaled to a run, and a floor. A probe is flagged slower when the change
exceeds max(threshold, k × noise) AND at least 3/4 of the rounds are above half that bar, so a whole run shifted by
the machine's load is judged against how much whole runs move, not against the spread inside one run. When
measuring, a flagged probe is measured again, fresh, and is a REGRESSION only if the re-measure is flagged too.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["FORMAT", "Probe", "Rule", "timed_probes", "measure_run", "decide", "load_run", "run_payload"]

FORMAT = "dlrmbench-regress-timed/3"
LRU_FRACTION = 0.02
"""cache size of the LRU probe, as a share of each table's rows: small enough that every smoke table's cache is
smaller than its distinct rows, so the probe times the LRU kernel, not the everything-fits shortcut (a sort)"""


@dataclass(frozen=True)
class Probe:
    """A kernel and its reference; one sample is `calls` calls of either. `planted` > 1 makes the kernel really do
    that many times its work (round(calls × planted) calls): the power benchmark's planted slowdown, never set
    otherwise."""

    reference: Callable[[], object]
    kernel: Callable[[], object]
    calls: int
    what: str
    planted: float = 1.0

    def reference_sample(self) -> None:
        for _ in range(self.calls):
            self.reference()

    def kernel_sample(self) -> None:
        for _ in range(round(self.calls * self.planted)):
            self.kernel()


@dataclass(frozen=True)
class Rule:
    """The decision rule's knobs (see the module docstring)."""

    threshold: float = 0.10
    """relative change that matters at all (0.10 = 10%)"""
    k: float = 3.0
    """how many times the run-to-run noise a change must exceed"""
    noise_floor: float = 0.03
    """least run-to-run noise assumed (log ratio), as a single baseline run cannot show the between-run spread"""
    consistent: float = 0.75
    """share of the rounds that must lie above half the bar"""


def timed_probes(planted: dict[str, float] | None = None) -> dict[str, Probe]:
    """name → Probe: the hot kernels, each with a reference of the same data and size."""
    import torch

    from embedding.backends import build_backend, init_weights
    from embedding.cache.workload import simulate_batches, table_capacities, table_streams
    from embedding.generate import generate_batches

    from .compose import compose_workload
    from .regress_reference import frozen_lru_hits

    planted = planted or {}
    spec = compose_workload(["workload=smoke"])
    batches = generate_batches(spec)
    weights = init_weights(spec)
    backend = build_backend("torch", spec, weights, torch.device("cpu"), "fp32", 0.01)
    inputs = backend.prepare(batches[0])  # (indices shifted to the concatenated table, offsets, T, B)
    table = torch.cat([w for w in weights])  # rows of all tables, as the backend's one fused bag holds them
    streams = [np.ascontiguousarray(k, dtype=np.int64) for k in table_streams(batches, len(spec.tables))]
    capacities = table_capacities(spec.tables, "per_table", 0, 0, LRU_FRACTION)

    def forward() -> None:
        with torch.no_grad():
            backend.forward(inputs)

    def frozen_forward() -> None:  # the fused forward as written when the check was built: the library op the
        # backend wraps, then the same (T·B, D) → (B, T·D) layout copy; the same memory traffic, frozen
        idx, off, T, B = inputs
        with torch.no_grad():
            pooled = torch.nn.functional.embedding_bag(idx, table, off, mode="sum", include_last_offset=True)
            pooled.view(T, B, -1).transpose(0, 1).reshape(B, -1)

    probes = {
        "torch_forward/frozen_forward": Probe(frozen_forward, forward, 40, "torch backend forward of one smoke batch "
                                              "/ a frozen copy of its fused forward (embedding_bag + layout)"),
        "lru_simulate/frozen_lru": Probe(
            lambda: frozen_lru_hits(streams, capacities),
            lambda: simulate_batches(batches, spec.tables, "lru", capacity_fraction=LRU_FRACTION), 8,
            "exact LRU simulation of the smoke batches / a frozen copy of the LRU kernel on the same streams"),
    }
    unknown = sorted(set(planted) - set(probes))
    if unknown:
        raise ValueError(f"--plant {unknown[0]!r}: no such probe; probes are {', '.join(probes)}")
    return {n: Probe(p.reference, p.kernel, p.calls, p.what, planted.get(n, 1.0)) for n, p in probes.items()}


def _round_ratio(probe: Probe, repeats: int, clock: Callable[[], float]) -> float:
    ratios = np.empty(repeats)
    for i in range(repeats):
        spent = {}
        for which in (("reference", "kernel") if i % 2 == 0 else ("kernel", "reference")):
            t0 = clock()
            getattr(probe, which + "_sample")()
            spent[which] = clock() - t0
        ratios[i] = spent["kernel"] / max(spent["reference"], 1e-9)
    return float(np.median(ratios))


def measure_run(probes: dict[str, Probe], rounds: int, repeats: int,
                clock: Callable[[], float] = time.process_time) -> dict[str, list[float]]:
    """name → `rounds` round ratios (kernel/reference), the probes interleaved round by round; torch on 1 thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for p in probes.values():  # warm-up (numba compilation, allocator), not timed
            p.reference_sample()
            p.kernel_sample()
        out: dict[str, list[float]] = {n: [] for n in probes}
        for _ in range(rounds):
            for name, p in probes.items():
                out[name].append(_round_ratio(p, repeats, clock))
        return out
    finally:
        torch.set_num_threads(threads)


def run_payload(probes: dict[str, Probe], ratios: dict[str, list[float]], rounds: int, repeats: int,
                load: str, load_before: Sequence[float]) -> dict:
    """What `--save` writes: one run, with how it was measured."""
    from .records import environment, git_sha

    env = environment()
    return {"format": FORMAT, "what": "round ratios kernel/reference of CPU time, one process (machine-specific)",
            "clock": "time.process_time, torch threads 1", "rounds": rounds, "repeats": repeats,
            "background_load": load, "loadavg_before": list(load_before), "loadavg_after": list(os.getloadavg()),
            "git_sha": git_sha(), "env": {k: env[k] for k in ("python", "torch", "numpy", "platform")},
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "probes": {n: {"what": p.what, "calls": p.calls, "planted": p.planted, "rounds": ratios[n]}
                       for n, p in probes.items()}}


def load_run(path: str, role: str = "baseline") -> dict[str, list[float]]:
    """name → round ratios of a file `--save` wrote; anything else is one ValueError naming the file and the fault."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{role} {path}: no such file (make one with dlrmbench regress timed --save FILE)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{role} {path}: cannot read it ({e.__class__.__name__}: {e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{role} {path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format", "no 'format' field") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{role} {path}: not a timed run of format {FORMAT} (found {found}); "
                         "save one with dlrmbench regress timed --save FILE")
    probes = data.get("probes")
    if not isinstance(probes, dict) or not probes:
        raise ValueError(f"{role} {path}: 'probes' must be a non-empty object of name → {{rounds: [...]}}")
    out = {}
    for name, p in probes.items():
        rounds = p.get("rounds") if isinstance(p, dict) else None
        if (not isinstance(rounds, list) or len(rounds) < 3
                or not all(isinstance(x, int | float) and math.isfinite(x) and x > 0 for x in rounds)):
            raise ValueError(f"{role} {path}: probe {name!r} needs 'rounds': a list of ≥ 3 positive finite ratios")
        out[name] = [float(x) for x in rounds]
    return out


@dataclass
class Decision:
    verdict: str  # ok | slower | faster
    change: float  # now / baseline − 1, on the run medians
    bar: float  # relative change needed: max(threshold, k × noise)
    noise: float  # run-to-run noise (log ratio) that the bar is built on
    consistent: float  # share of the rounds beyond half the bar (in the flagged direction)

    def note(self, baseline_runs: int, rounds: int) -> str:
        return (f"median of {rounds} rounds vs {baseline_runs} baseline run(s); bar ±{self.bar:.1%} "
                f"(noise {self.noise:.3f}); {self.consistent:.0%} of rounds beyond half the bar")


def decide(baseline_runs: Sequence[Sequence[float]], now: Sequence[float], rule: Rule = Rule()) -> Decision:
    """Compare one run's round ratios with several baseline runs' (see the module docstring); all in log ratio."""
    base = [np.log(np.asarray(r, dtype=float)) for r in baseline_runs]
    cur = np.log(np.asarray(now, dtype=float))
    medians = np.array([np.median(r) for r in base])
    center = float(np.median(medians))
    between = float(np.std(medians, ddof=1)) if len(medians) >= 2 else 0.0
    rounds = [*base, cur]
    within = float(np.sqrt(np.mean([np.median(np.abs(r - np.median(r))) ** 2 for r in rounds]))) * 1.4826
    noise = max(rule.noise_floor, between, within / math.sqrt(min(len(r) for r in rounds)))
    bar = max(math.log1p(rule.threshold), rule.k * noise * math.sqrt(1 + 1 / len(base)))
    shift = float(np.median(cur)) - center
    direction = 1.0 if shift >= 0 else -1.0
    consistent = float(np.mean(direction * (cur - center) > bar / 2))
    verdict = "ok"
    if abs(shift) > bar and consistent >= rule.consistent:
        verdict = "slower" if shift > 0 else "faster"
    return Decision(verdict, math.expm1(shift), math.expm1(bar), noise, consistent)
