"""Result records: one JSON object per line, appended atomically, loadable with `pandas.read_json(lines=True)`.

Each record carries the run id, time, git sha, the resolved config, the environment, the workload and its
statistics, and metrics with unit, method and spread.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import time
import uuid
from pathlib import Path

import torch

from embedding.files import umask_mode

__all__ = ["environment", "git_sha", "new_run_id", "append_records", "read_records", "metric", "umask_mode"]

_ROOT = Path(__file__).resolve().parent.parent




def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]


def git_sha() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha or "unknown") + ("-dirty" if dirty else "")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return "not installed"


def environment() -> dict:
    fbgemm = _version("fbgemm-gpu-cpu")
    if fbgemm == "not installed":
        fbgemm = _version("fbgemm-gpu")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"python": platform.python_version(), "torch": torch.__version__, "fbgemm_gpu": fbgemm,
            "torchrec": _version("torchrec"), "numpy": _version("numpy"), "cpu": _cpu_model(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "gpu": gpu,
            "cuda": torch.version.cuda, "platform": platform.platform(), "host": platform.node()}


def metric(name: str, value: float, unit: str, method: str, **extra) -> dict:
    return {"name": name, "value": float(value), "unit": unit, "method": method, **extra}


def append_records(path: str | os.PathLike, records: list[dict]) -> None:
    """Append records, one line each, in a single O_APPEND write (so concurrent writers never interleave lines)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = "".join(json.dumps(r, default=_json_default, allow_nan=False) + "\n" for r in records).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # the umask decides, as for any new file
    try:
        written = os.write(fd, payload)
        if written != len(payload):
            raise OSError(f"short write to {path}: {written} of {len(payload)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def read_records(path: str | os.PathLike) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _json_default(obj):
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
