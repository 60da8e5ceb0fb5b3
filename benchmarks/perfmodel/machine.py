"""What machine a calibration or a trained model was measured on, and whether the one in use is the same.

A fingerprint: CPU model, logical cores, last-level cache bytes, physical memory, the load average when taken,
and a 1-second memory-bandwidth probe (numpy copies of a 64 MiB array, best of the copies: the least loaded
figure). `check_machine` compares a stored fingerprint with this machine: a different CPU model or core count,
or a bandwidth probe off by more than `BW_TOLERANCE`, gives one warning line per mismatch.
"""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["fingerprint", "check_machine", "llc_bytes", "cpu_model", "bandwidth_probe", "loadavg", "BW_TOLERANCE",
           "check_hardware_file"]

BW_TOLERANCE = 0.35  # a loaded 2-core machine's probe moves by ~20%; a different memory system by more
_DEFAULT_LLC = 32 * 2**20


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def llc_bytes() -> int:
    """Bytes of the largest (last-level) CPU cache per sysfs; 32 MiB when it cannot be read."""
    best = 0
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            size = (d / "size").read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best or _DEFAULT_LLC


def loadavg() -> list[float]:
    """1, 5 and 15-minute load averages (what every timed figure is recorded beside)."""
    return [round(x, 2) for x in os.getloadavg()]


def bandwidth_probe(seconds: float = 1.0, mib: int = 64) -> float:
    """Copy bandwidth in bytes/s (read + write counted) of numpy copies of a `mib` MiB array for about
    `seconds`: the best copy, i.e. the least disturbed by other processes."""
    src = np.ones(mib * 2**20 // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity: `taskset -c 0` gives 1 on a 2-core machine)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fingerprint(probe_s: float = 1.0) -> dict[str, Any]:
    """This machine, as stored in a calibration file or a trained model's provenance."""
    return {"cpu_model": cpu_model(), "cores": usable_cores(), "llc_bytes": llc_bytes(),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "copy_bandwidth": round(bandwidth_probe(probe_s), -6), "loadavg": loadavg(),
            "host": platform.node()}


def check_machine(stored: dict[str, Any] | None, here: dict[str, Any] | None = None,
                  what: str = "calibration") -> list[str]:
    """Warning lines (empty when it matches) for using a `what` measured on `stored` on this machine (`here`,
    fingerprinted when not given). A file without a fingerprint gets one warning: it cannot be checked."""
    if not stored:
        return [f"warning: the {what} has no machine fingerprint; it cannot be checked against this machine "
                "(re-run it to record one)"]
    here = here or fingerprint()
    out = []
    for key in ("cpu_model", "cores"):
        if stored.get(key) != here.get(key):
            out.append(f"warning: the {what} was measured on {key} {stored.get(key)!r}, this machine has "
                       f"{here.get(key)!r}: its figures may not hold here")
    a, b = float(stored.get("copy_bandwidth") or 0), float(here.get("copy_bandwidth") or 0)
    if a > 0 and b > 0 and abs(b / a - 1) > BW_TOLERANCE:
        out.append(f"warning: the {what}'s memory-bandwidth probe read {a / 1e9:.1f} GB/s, this machine reads "
                   f"{b / 1e9:.1f} GB/s now (load {here.get('loadavg')}): a different or a busier machine")
    return out


def check_hardware_file(path: str) -> list[str]:
    """Warnings for a hardware YAML written by `dlrmbench calibrate` used on this machine; presets (no `device:
    cpu` calibration) and unreadable files give none (loading them reports their own errors)."""
    import yaml

    p = Path(path)
    if p.suffix not in (".yaml", ".yml") or not p.is_file():
        return []
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError):
        return []
    if not isinstance(data, dict) or "calibration" not in data:
        return []
    return [f"{w} ({path})" for w in check_machine(data.get("machine"))]
