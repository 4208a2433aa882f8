"""Python stacks of each rank, sampled by py-spy (``py-spy record --pid P --format chrometrace``).

py-spy attaches with ptrace/process_vm_readv; where that is not permitted (containers without
CAP_SYS_PTRACE, ``kernel.yama.ptrace_scope`` = 3) it fails at once: :class:`PySpyRecorder` says so in its
:attr:`notes` and the run goes on without stacks.

Samples become timeline rows on lane ``python`` (source ``py-spy``, category ``other``): one row per
interval during which the sampled stack stayed the same, named by the collapsed stack, outermost frame
first: ``"<module> (train.py:40);load_batch (data.py:12)"``. Idle samples (a thread asleep or blocked) are
kept (``--idle``): py-spy's chrometrace without them keeps the last busy stack open across the idle time,
so a sleep or a blocking read was counted to the function that ran before it. So time per data-loading function is a
group-by on ``name``. These rows overlap the rank's MPI rows (lane ``main``): sum categories per lane.
py-spy's times are relative to its start; the start is taken from this clock when py-spy is started
(error: py-spy's start-up, a few ms).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ddltrace.collectors.mpi_env import find_tool

if TYPE_CHECKING:
    import pandas as pd

LANE = "python"


class PySpyRecorder:
    """Attach py-spy to processes as they appear; :meth:`stop` collects what each one wrote."""

    def __init__(self, out_dir: str | Path, rate_hz: int = 100, pyspy: str | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.rate_hz = rate_hz
        self.pyspy = pyspy or os.environ.get("DDLTRACE_PYSPY") or find_tool("py-spy")
        self.notes: list[str] = []
        self._running: dict[int, tuple[subprocess.Popen, int, Path]] = {}
        if self.pyspy is None:
            self.notes.append("py-spy: not found beside this Python or on PATH; no Python stacks recorded")

    def attach(self, pid: int) -> None:
        """Start sampling process ``pid`` (once per pid)."""
        if self.pyspy is None or pid in self._running:
            return
        out = self.out_dir / f"pyspy-{pid}.json"
        err = open(self.out_dir / f"pyspy-{pid}.stderr", "w")  # noqa: SIM115 - kept open by the child
        cmd = [self.pyspy, "record", "--pid", str(pid), "--format", "chrometrace", "--rate", str(self.rate_hz),
               "--output", str(out), "--nonblocking", "--idle"]
        start_ns = time.time_ns()
        # beside the stacks, where py-spy's times start: `ddltrace recover` places them (py-spy outlives a killed run)
        (self.out_dir / f"pyspy-{pid}.start").write_text(str(start_ns))
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        except OSError as exc:
            self.notes.append(f"py-spy: cannot start {self.pyspy} ({exc.strerror}); no Python stacks for pid {pid}")
            return
        finally:
            err.close()
        self._running[pid] = (proc, start_ns, out)

    def stop(self, timeout_s: float = 10.0) -> dict[int, pd.DataFrame]:
        """Wait for every py-spy (it stops when its process ends; else it is told to stop) and return, per
        pid, the rows (lane, name, start_ns, dur_ns) of its stacks. Failures go to :attr:`notes`."""
        deadline = time.monotonic() + timeout_s
        out: dict[int, pd.DataFrame] = {}
        for pid, (proc, start_ns, path) in self._running.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if not path.exists() or path.stat().st_size == 0:
                err = (self.out_dir / f"pyspy-{pid}.stderr").read_text(errors="replace").strip()
                first = next((line for line in err.splitlines() if line.strip()), f"exit code {proc.returncode}")
                refused = any(w in err.lower() for w in ("permission", "ptrace", "operation not permitted"))
                what = "ptrace not permitted" if refused else "failed"
                self.notes.append(f"py-spy: {what} for pid {pid} ({first.strip()}); run continued without its "
                                  "Python stacks")
                continue
            out[pid] = stacks_to_rows(path, start_ns)
        return out


def saved_stacks(folder: Path) -> tuple[dict[int, pd.DataFrame], list[str]]:
    """The stacks a run's py-spy processes left in ``folder`` (``pyspy-PID.json`` beside its ``.start``), per pid,
    for ``ddltrace recover``: py-spy writes its file when its process ends, also after the run that started it was
    killed. A file that is empty, cut or not py-spy's is named in the notes and left out."""
    out: dict[int, pd.DataFrame] = {}
    notes: list[str] = []
    for path in sorted(folder.glob("pyspy-*.json")) if folder.is_dir() else []:
        pid = path.stem.removeprefix("pyspy-")
        start = path.with_suffix(".start")
        try:
            out[int(pid)] = stacks_to_rows(path, int(start.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # (json's errors are ValueErrors)
            notes.append(f"py-spy: {path} cannot be read ({type(exc).__name__}: {exc}); its stacks left out")
    return out, notes


def stacks_to_rows(path: Path, start_ns: int) -> pd.DataFrame:
    """Rows (lane, name, start_ns, dur_ns) from py-spy's chrometrace file: B/E events per thread are
    replayed, and each interval with one stack becomes a row named by the collapsed stack."""
    import pandas as pd  # here: a node agent attaches py-spy before pandas is loaded
    events = json.loads(Path(path).read_text() or "[]")
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    rows: list[tuple[str, str, int, int]] = []
    stacks: dict[object, list[str]] = {}
    since: dict[object, int] = {}
    tids = sorted({e.get("tid") for e in events if e.get("ph") in ("B", "E")}, key=str)
    main_tid = tids[0] if len(tids) == 1 else None
    for ev in sorted((e for e in events if e.get("ph") in ("B", "E")), key=lambda e: e["ts"]):
        tid, ts = ev.get("tid"), start_ns + int(float(ev["ts"]) * 1000)
        stack = stacks.setdefault(tid, [])
        if stack and ts > since.get(tid, ts):
            lane = LANE if tid == main_tid else f"{LANE}:{tid}"
            rows.append((lane, ";".join(stack), since[tid], ts - since[tid]))
        args = ev.get("args") or {}
        frame = f"{ev.get('name', '?')} ({Path(str(args.get('filename', '?'))).name}:{args.get('line', '?')})"
        if ev["ph"] == "B":
            stack.append(frame)
        elif stack:
            stack.pop()
        since[tid] = ts
    return pd.DataFrame(rows, columns=["lane", "name", "start_ns", "dur_ns"])
