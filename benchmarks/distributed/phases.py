"""Which phase each local rank is in, so the launcher can end a job whose phase outlasts `dist.timeout_s` and say
which phase it was.

Phases of a rank: rendezvous (from its start until it joined the process group: imports, store, peers), sharding
(composing the case, receiving the plan, building the sharded module), verify (dist.verify), steps (the timed
steps), done. Each rank writes its phase to `rank<R>` in the folder named by DLRMBENCH_PHASE_DIR, which the local
launcher sets; a watchdog thread in the launcher reads them. Under torchrun (no folder) nothing is written.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

__all__ = ["ENV", "PHASES", "report_phase", "Watchdog"]

ENV = "DLRMBENCH_PHASE_DIR"
PHASES = ("rendezvous", "sharding", "verify", "steps", "done")


def report_phase(phase: str, case: int = 0) -> None:
    """This rank enters `phase` (of case `case`); a no-op unless started by the local launcher."""
    folder, rank = os.environ.get(ENV), os.environ.get("RANK")
    if not folder or rank is None:
        return
    path = Path(folder) / f"rank{rank}"
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(f"{phase} {case}")
        os.replace(tmp, path)
    except OSError:  # the launcher removed its folder: it is ending the job
        pass


class Watchdog(threading.Thread):
    """Polls the ranks' phases; when one rank has been in one phase (other than done) for more than `timeout_s`,
    kills every rank (its process group: the launcher's agent then reports the job failed) and keeps why in
    `expired` = (phase, late ranks)."""

    def __init__(self, folder: str, world: int, timeout_s: float, module: str, poll_s: float = 0.25) -> None:
        super().__init__(daemon=True, name="dlrmbench-dist-watchdog")
        self.folder, self.world, self.timeout_s, self.module, self.poll_s = Path(folder), world, timeout_s, module, poll_s
        self.expired: tuple[str, list[int]] | None = None
        self.phases: dict[int, str] = {}
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)

    def _read(self, rank: int) -> str:
        try:
            return (self.folder / f"rank{rank}").read_text().strip() or "rendezvous 0"
        except OSError:
            return "rendezvous 0"

    def run(self) -> None:
        start = time.monotonic()
        seen = {r: ("rendezvous 0", start) for r in range(self.world)}
        while not self._stop_event.wait(self.poll_s):
            now = time.monotonic()
            for r in range(self.world):
                state = self._read(r)
                if state != seen[r][0]:
                    seen[r] = (state, now)
            self.phases = {r: s.split()[0] for r, (s, _) in seen.items()}
            late = [r for r, (s, t) in seen.items() if not s.startswith("done") and now - t > self.timeout_s]
            if late:
                self.expired = (seen[late[0]][0].split()[0], late)
                self._kill()
                return

    def _kill(self) -> None:
        """SIGKILL each rank's process group (the agent starts every rank in a session of its own)."""
        for pid in _children(os.getpid(), self.module):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def _children(parent: int, module: str) -> list[int]:
    """Direct child processes of `parent` whose command line runs `module` (the ranks, not other children)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == parent and module in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                    errors="replace"):
                out.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return out
