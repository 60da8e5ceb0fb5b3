"""When a measurement cannot be trusted: the machine's load while timing, and rankings that the spread could flip.

A run records, per timed backend, the 1-minute load average before and after, the CPU time its process got against
wall time × threads, and the hypervisor's steal share (Linux /proc/stat). `trust_notes` turns that and the
interquartile ranges of the rows into the lines printed under the run's table; `flagged` names the rows that
`dlrmbench report` marks.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

__all__ = ["LoadProbe", "busy_reason", "interval", "overlapping_pairs", "trust_notes", "flagged"]

STEAL_LIMIT = 0.05
"""Above this share of CPU ticks stolen by the hypervisor while timing, the figures are marked."""


def _cpu_ticks() -> tuple[int, int] | None:
    """(steal ticks, all ticks) of the machine from /proc/stat; None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass
class LoadProbe:
    """`with LoadProbe(threads) as p: ...` then `p.result`: the machine's load over the block (a record's `load`)."""

    threads: int
    result: dict = field(default_factory=dict)

    def __enter__(self) -> LoadProbe:
        self._load0 = os.getloadavg()[0]
        self._ticks0 = _cpu_ticks()
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        ticks = _cpu_ticks()
        steal = None
        if self._ticks0 and ticks and ticks[1] > self._ticks0[1]:
            steal = (ticks[0] - self._ticks0[0]) / (ticks[1] - self._ticks0[1])
        self.result = {"loadavg_before": self._load0, "loadavg_after": os.getloadavg()[0], "cpus": _cpus(),
                       "threads": self.threads, "wall_s": wall, "cpu_s": cpu,
                       "cpu_share": cpu / (wall * self.threads) if wall > 0 else None, "steal_share": steal,
                       "method": "os.getloadavg()[0] before/after the timed calls; cpu_share = process CPU "
                                 "seconds / (wall seconds × torch threads); steal_share = Δsteal / Δall ticks of "
                                 "/proc/stat over the timed calls"}


def busy_reason(load: dict | None) -> str | None:
    """Why the machine was too busy to trust this figure, or None: load average above the cores, or steal."""
    if not load:
        return None
    peak = max(load.get("loadavg_before", 0.0), load.get("loadavg_after", 0.0))
    why = []
    if peak > load.get("cpus", 1):
        why.append(f"load average {load['loadavg_before']:.1f}→{load['loadavg_after']:.1f} on {load['cpus']} cores")
    if (load.get("steal_share") or 0.0) > STEAL_LIMIT:
        why.append(f"{100 * load['steal_share']:.0f}% of CPU time stolen by the hypervisor")
    if why and load.get("cpu_share") is not None:
        why.append(f"the process got {100 * load['cpu_share']:.0f}% of wall × {load['threads']} threads")
    return ", ".join(why) or None


def interval(m: dict) -> tuple[float, float, str]:
    """The spread a metric's ranking is judged by: its interquartile range, or min–max for older records."""
    if "p25" in m and "p75" in m:
        return min(m["p25"], m["p75"]), max(m["p25"], m["p75"]), "interquartile range"
    return m.get("min", m["value"]), m.get("max", m["value"]), "min–max"


def overlapping_pairs(rows: list[tuple[str, dict]]) -> list[tuple[str, str]]:
    """Neighbours in the ranking (by median) whose spreads overlap: their order could flip on a re-run."""
    ranked = sorted(rows, key=lambda r: r[1]["value"])
    out = []
    for (a, ma), (b, mb) in zip(ranked, ranked[1:], strict=False):
        lo_a, hi_a, _ = interval(ma)
        lo_b, hi_b, _ = interval(mb)
        if lo_a <= hi_b and lo_b <= hi_a:
            out.append((a, b))
    return out


def trust_notes(rows: list[tuple[str, dict, dict | None]]) -> list[str]:
    """Lines for under a table of (label, time metric, load) rows: busy machine, rankings that could flip."""
    notes = []
    for label, _, load in rows:
        why = busy_reason(load)
        if why:
            notes.append(f"! {label}: machine busy while timing ({why}); its figures may be off")
    pairs = overlapping_pairs([(label, m) for label, m, _ in rows])
    if pairs:
        kind = interval(rows[0][1])[2]
        notes.append("! ranking could flip: " + "; ".join(f"{a} and {b}" for a, b in pairs)
                     + f" ({kind}s of their timed calls overlap)")
    return notes


def flagged(rows: list[tuple[str, dict, dict | None]]) -> dict[str, str]:
    """label → why its point is marked in a report (busy machine, or a spread overlapping a neighbour's)."""
    out: dict[str, str] = {}
    for label, _, load in rows:
        why = busy_reason(load)
        if why:
            out[label] = f"machine busy ({why})"
    for a, b in overlapping_pairs([(label, m) for label, m, _ in rows]):
        for x, y in ((a, b), (b, a)):
            out[x] = "; ".join(filter(None, [out.get(x), f"spread overlaps {y}'s"]))
    return out
