"""Whether a record set's ranks are still running (``ddltrace recover`` refuses a set whose job is alive): a rank
file's header names its pid, and a process with that pid now is the rank only if it started after the run and
before the file's last write."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import psutil

from ddltrace.collectors import record_sets

HEADER = struct.Struct("<iiiQI")  # at byte 20: rank, world size, pid, records written, state (runtime.c)
INITIALISED = 1


def _rank_file(folder, rank: int, pid: int) -> None:
    (folder / f"rank-{rank:05d}.pmpi").write_bytes(b"\0" * 20 + HEADER.pack(rank, 2, pid, 0, INITIALISED))


def test_a_pid_that_is_another_process_now_is_not_a_live_rank(tmp_path):
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        born = psutil.Process(rank.pid).create_time()
        (tmp_path / record_sets.JOB_FILE).write_text(json.dumps({"ddltrace_started": born - 2}))
        _rank_file(tmp_path, 0, rank.pid)  # alive, started after the run and before its file was written
        _rank_file(tmp_path, 1, 1)  # pid 1: started at boot, before the run (a namespaced rank's pid on the host)
        assert psutil.Process(1).create_time() < born - 2
        assert record_sets.load(tmp_path).live_ranks == [0]
        old = born - 1.5  # the file last written before the process with its pid started: a reused pid
        os.utime(tmp_path / "rank-00000.pmpi", (old, old))
        assert record_sets.load(tmp_path).live_ranks == []
        assert not record_sets.load(tmp_path).job_alive
    finally:
        rank.kill()
        rank.wait()
