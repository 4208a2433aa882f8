"""One Chrome trace file read by several processes (collectors/importers/chrome_split.py) gives what one process
reads: every real Chrome-format trace here (Kineto, TF1 and TF2 trace viewer, MXNet, Horovod, CNTK's begin/end
pairs), cut into many small pieces so that pieces end everywhere (begin/end pairs, flow arrows and metadata across
pieces), and each importer's whole output compared: timeline and counter tables, rank, clock, info, the report's
counts and problems. Damage, or a reader process lost, and the file is read again by one process, with the same
result and the same problems as ever."""

from __future__ import annotations

import gzip
import os
import pickle
import re
from pathlib import Path

import pytest
from ctrl_c import default_sigint
from shared_data import CORPUS_DIRS, REPO, SHARED

from ddltrace.collectors.importers import Categorizer, chrome, chrome_split, detect
from ddltrace.collectors.importers import source as source_module
from ddltrace.collectors.importers.base import FileReport, ImportContext
from ddltrace.errors import DdltraceError

CHROME_FORMATS = {"kineto", "tf1", "tf2", "mxnet", "horovod", "cntk", "chrome"}


def _chrome_files() -> list[Path]:
    roots = [REPO / "tests" / "data", SHARED / "hta_traces", SHARED / "gpu_traces", SHARED / "cntk_traces",
             *CORPUS_DIRS]
    files = sorted({p for root in roots if root.is_dir() for p in root.rglob("*.json*") if p.is_file()})
    return [p for p in files if not p.name.endswith(".md")]


def _read(path: Path, processes: int) -> tuple[list, FileReport]:
    report = FileReport(str(path))
    importer = detect(path)
    ctx = ImportContext(Categorizer(), "auto", 0, report, processes)
    parts = [(p.rank, p.clock, p.info, p.table, p.counter_table) for p in importer.read(path, ctx)]
    return parts, report


@pytest.fixture
def small_pieces(monkeypatch):
    """Every file split, in pieces of about 64 KiB (read in 64 KiB chunks)."""
    monkeypatch.setattr(chrome_split, "MIN_PLAIN", 0)
    monkeypatch.setattr(chrome_split, "MIN_GZIP", 0)
    monkeypatch.setattr(chrome, "PIECE_SIZE", 64 << 10)
    monkeypatch.setattr(chrome, "SHARED_PIECE_SIZE", 64 << 10)
    monkeypatch.setattr(source_module, "READ_SIZE", 64 << 10)
    monkeypatch.setattr(source_module, "GZIP_READ_SIZE", 4 << 10)


def _same(one: tuple[list, FileReport], many: tuple[list, FileReport]) -> None:
    (parts1, report1), (parts2, report2) = one, many
    assert len(parts1) == len(parts2) > 0
    for (rank1, clock1, info1, table1, counters1), (rank2, clock2, info2, table2, counters2) in zip(
            parts1, parts2, strict=True):
        assert (rank1, clock1, info1) == (rank2, clock2, info2)
        assert table1.equals(table2, check_metadata=True)
        assert (counters1 is None) == (counters2 is None)
        assert counters1 is None or counters1.equals(counters2, check_metadata=True)
    assert (report1.events, report1.intervals, dict(report1.skipped), report1.problems) == \
           (report2.events, report2.intervals, dict(report2.skipped), report2.problems)


def test_every_real_chrome_trace_reads_the_same_with_three_processes(small_pieces, monkeypatch):
    split = []
    real = chrome_split.read_split

    def counted(*args, **kwargs):
        trace = real(*args, **kwargs)
        split.append(trace is not None)
        return trace

    monkeypatch.setattr(chrome_split, "read_split", counted)
    checked = []
    for path in _chrome_files():
        try:
            if detect(path).name not in CHROME_FORMATS:
                continue
        except DdltraceError:  # a JSON file of no format ddltrace reads (a PyTorch execution trace of the corpus)
            continue
        _same(_read(path, 1), _read(path, 3))
        checked.append(path.name)
    assert len(checked) >= 10, checked  # the repo's own real traces alone are 10
    assert split.count(True) == len(checked), "some file was read by one process after all"


def test_a_damaged_file_is_read_again_by_one_process_with_the_same_problems(tmp_path, small_pieces):
    source = REPO / "tests" / "data" / "torch_gloo" / "rank0.pt.trace.json.gz"
    text = gzip.decompress(source.read_bytes())
    middle = re.compile(rb"\},\s*\{").search(text, len(text) // 2).start() + 1  # between two events
    damaged = tmp_path / "damaged.pt.trace.json"
    damaged.write_bytes(text[:middle] + b', {"ph": "X", "name": [1, 2' + text[middle:])  # an event never closed
    one, many = _read(damaged, 1), _read(damaged, 3)
    assert one[1].problems and "JSON at byte" in one[1].problems[0]
    _same(one, many)


def test_a_reader_process_lost_means_one_process_reads_the_file(small_pieces, monkeypatch):
    path = REPO / "tests" / "data" / "torch_gloo" / "rank0.pt.trace.json.gz"
    monkeypatch.setattr(chrome_split, "_worker", lambda *args: os._exit(1))  # each forked reader dies at once
    split = []
    real = chrome_split.read_split
    monkeypatch.setattr(chrome_split, "read_split", lambda *args: split.append(real(*args)) or split[-1])
    _same(_read(path, 1), _read(path, 2))
    assert split == [None]


def test_a_reader_killed_while_sending_its_pieces_means_one_process_reads_the_file(small_pieces, monkeypatch):
    """What a reader killed halfway through writing its pieces leaves in the pipe (the start of a pickle) is
    taken as nothing sent: the file is read by one process, not a traceback."""
    path = REPO / "tests" / "data" / "torch_gloo" / "rank0.pt.trace.json.gz"

    def cut_short(path, make, share, claims, write_end):
        os.write(write_end, pickle.dumps([(1, {"piece": list(range(1000))})])[:100])
        os._exit(0)

    monkeypatch.setattr(chrome_split, "_worker", cut_short)
    split = []
    real = chrome_split.read_split
    monkeypatch.setattr(chrome_split, "read_split", lambda *args: split.append(real(*args)) or split[-1])
    _same(_read(path, 1), _read(path, 2))
    assert split == [None]


def test_a_reader_with_less_of_the_machine_decodes_fewer_pieces_and_the_result_is_the_same(small_pieces,
                                                                                        monkeypatch):
    """Pieces go to the reader that reaches them first, not every n-th to each: a forked reader slowed down (as by
    another job on its core) leaves most pieces to the caller, and the joined trace is the one process's."""
    import time

    path = SHARED / "hta_traces" / "trace_filter" / "sampled_rank-0.json.gz"  # 1.8 MB of text: 27 pieces
    real_worker, real_collect, sent = chrome_split._worker, chrome_split._collect, []

    def slow_worker(path, make, share, claims, write_end):
        real_worker(path, make, share, lambda piece: time.sleep(0.02) or claims(piece), write_end)

    def collect(read_end):
        pieces = real_collect(read_end)
        sent.append(None if pieces is None else len(pieces))
        return pieces

    monkeypatch.setattr(chrome_split, "_worker", slow_worker)
    monkeypatch.setattr(chrome_split, "_collect", collect)
    split = []
    real = chrome_split.read_split
    monkeypatch.setattr(chrome_split, "read_split", lambda *args: split.append(real(*args)) or split[-1])
    _same(_read(path, 1), _read(path, 2))
    assert split[0] is not None and sent[0] is not None
    total = _pieces_of(path)
    assert total >= 8 and sent[0] < total / 4, (sent[0], total)  # (every other piece: half)


def _pieces_of(path: Path) -> int:
    """How many pieces a shared reading of ``path`` cuts (with the fixture's piece size)."""
    from ddltrace.collectors.importers.chrome import _Builder, _Reader
    from ddltrace.collectors.importers.source import ByteSource

    reader = _Reader(ByteSource(path), _Builder(str(path)), share=(0, 1), make=lambda: _Builder(str(path)))
    reader.run()
    return reader.piece


def test_each_piece_is_claimed_by_exactly_one_of_several_processes():
    """Three forked processes claim pieces 0..299 in order at once, through one claim pipe: each piece is taken
    once, by one of them."""
    import time

    claims, taken = chrome_split._Claims(), []
    children = []
    for _ in range(3):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            mine = [piece for piece in range(300) if claims(piece) and not time.sleep(0.001)]  # (a piece's work)
            os.write(write_end, pickle.dumps(mine))
            os._exit(0)
        os.close(write_end)
        children.append((pid, read_end))
    for pid, read_end in children:
        with os.fdopen(read_end, "rb") as pipe:
            taken.append(pickle.loads(pipe.read()))
        os.waitpid(pid, 0)
    claims.close()
    assert sorted(piece for mine in taken for piece in mine) == list(range(300)), [len(mine) for mine in taken]


def test_a_reader_lost_holding_the_claim_token_means_one_process_reads_the_file(small_pieces, monkeypatch):
    """A reader that dies between taking the claim token and putting it back leaves the others nothing to claim
    with: after ``CLAIM_WAIT_S`` the caller reads the file alone, with the one process's result."""
    path = REPO / "tests" / "data" / "torch_gloo" / "rank0.pt.trace.json.gz"

    def dies_holding_the_token(path, make, share, claims, write_end):
        import select

        while select.select([claims.read_end], [], [])[0] and len(os.read(claims.read_end, 8)) != 8:
            pass  # (the pipe is non-blocking for every reader: wait for the token, take it)
        os._exit(0)

    monkeypatch.setattr(chrome_split, "_worker", dies_holding_the_token)
    monkeypatch.setattr(chrome_split, "CLAIM_WAIT_S", 0.5)
    split = []
    real = chrome_split.read_split
    monkeypatch.setattr(chrome_split, "read_split", lambda *args: split.append(real(*args)) or split[-1])
    _same(_read(path, 1), _read(path, 2))
    assert split == [None]


def test_small_files_are_read_by_one_process(tmp_path):
    path = REPO / "tests" / "data" / "torch_gloo" / "rank0.pt.trace.json.gz"
    assert path.stat().st_size < chrome_split.MIN_GZIP and not chrome_split.worth_splitting(path)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * chrome_split.MIN_PLAIN)
    assert chrome_split.worth_splitting(big)


def test_ctrl_c_during_a_shared_reading_stops_every_reader_and_writes_no_store(tmp_path):
    """Ctrl-C reaches the whole foreground process group: the readers forked for the file ignore it, the
    command stops them, exits 130 and leaves no store and no process behind."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    big = tmp_path / "big.json"
    event = b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": %d, "dur": 3},\n'
    with big.open("wb") as out:
        out.write(b'{"traceEvents": [\n')
        for block in range(64):
            out.write(b"".join(event % (block * 10000 + i) for i in range(10000)))
        out.write(b'{"ph": "X", "cat": "cpu_op", "name": "last", "pid": 1, "tid": 2, "ts": 1, "dur": 1}]}')
    assert big.stat().st_size > chrome_split.MIN_PLAIN
    command = subprocess.Popen([sys.executable, "-m", "ddltrace", "import", str(big), "--out", str(tmp_path / "s"),
                                "--jobs", "2", "--format", "chrome"], stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=default_sigint)
    parent, readers, deadline = psutil.Process(command.pid), [], time.monotonic() + 60
    while not readers and time.monotonic() < deadline and command.poll() is None:
        readers = parent.children()
        time.sleep(0.005)
    assert readers, "no reader was forked"
    os.killpg(command.pid, signal.SIGINT)
    _, err = command.communicate(timeout=60)
    assert command.returncode == 130, err
    assert not (tmp_path / "s").exists() and not list(tmp_path.glob(".s.*"))
    assert not any(r.is_running() and r.status() != psutil.STATUS_ZOMBIE for r in readers)
