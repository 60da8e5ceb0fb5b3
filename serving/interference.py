"""Other processes' CPU during a LoadGen run, and re-running a run they disturbed.

Why: on a shared machine a measurement lock does not stop unlocked work (tests, builds), and a serving run near the
knee is decided by a few seconds of lost CPU: one disturbed run can move a confirmed figure by a ladder step. So each
run records how many cores other processes used meanwhile, from the kernel's own counters (Linux /proc): all CPUs'
busy time minus the busy time of this process and its descendants (worker processes), over the elapsed CPU time.
No clock decides anything: the share is a ratio of CPU counters.

`run_guarded` repeats an INVALID run whose share exceeded a limit, at most `reruns` times; every run is returned
(counted), the last one is the answer, and it says whether it was still disturbed. A disturbed VALID run is kept:
the server met the bound with less CPU than it would have had, so it meets it without the others too.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuCounters", "read_counters", "others_cores", "run_guarded"]


@dataclass(frozen=True)
class CpuCounters:
    busy: int
    """all CPUs' non-idle jiffies (user, nice, system, irq, softirq, steal)"""
    total: int
    """all CPUs' jiffies"""
    own: int
    """utime + stime of the process and its live descendants"""
    cpus: int


def _stat_fields(text: str) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces and parentheses): state is field 0."""
    return text[text.rindex(")") + 2:].split()


def read_counters(root: int | None = None, proc: Path = Path("/proc")) -> CpuCounters | None:
    """The counters now (None where /proc/stat is not there: not Linux)."""
    try:
        cpu = (proc / "stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    vals = [int(v) for v in cpu[1:9]]  # user nice system idle iowait irq softirq steal
    busy = vals[0] + vals[1] + vals[2] + vals[5] + vals[6] + vals[7]
    total = sum(vals)
    cpus = sum(1 for line in (proc / "stat").read_text().splitlines() if line[:3] == "cpu" and line[3:4].isdigit())
    root = os.getpid() if root is None else root
    parent: dict[int, int] = {}
    times: dict[int, int] = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = _stat_fields((d / "stat").read_text())
        except (OSError, ValueError):
            continue  # the process ended meanwhile
        parent[int(d.name)] = int(f[1])
        times[int(d.name)] = int(f[11]) + int(f[12])  # utime, stime (fields 14, 15 of stat)
    own, tree = 0, {root}
    grew = True
    while grew:
        grew = False
        for pid, pp in parent.items():
            if pp in tree and pid not in tree:
                tree.add(pid)
                grew = True
    own = sum(times.get(pid, 0) for pid in tree)
    return CpuCounters(busy, total, own, max(cpus, 1))


def others_cores(before: CpuCounters | None, after: CpuCounters | None) -> float | None:
    """Cores' worth of CPU that other processes used between two readings (None when not measurable)."""
    if before is None or after is None or after.total <= before.total:
        return None
    elapsed = (after.total - before.total) / after.cpus  # jiffies per CPU
    others = (after.busy - before.busy) - (after.own - before.own)
    return max(0.0, others / elapsed)


def run_guarded(once: Callable[[], dict], counters: Callable[[], CpuCounters | None], max_cores: float,
                reruns: int) -> list[dict]:
    """Run `once()`; while it is not VALID and other processes used more than `max_cores` cores during it, run
    again (at most `reruns` more). Each run gets `others_cpu_cores` and `disturbed`; all runs are returned, the answer last."""
    runs = []
    for _ in range(reruns + 1):
        before = counters()
        p = once()
        share = others_cores(before, counters())
        p["others_cpu_cores"] = share
        p["disturbed"] = share is not None and share > max_cores
        runs.append(p)
        if not p["disturbed"] or p.get("verdict") == "VALID":  # VALID despite the others: holds without them too
            break
    return runs
