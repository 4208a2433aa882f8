"""An MXNet profile cut inside its first event is named truncated, not malformed (the Chrome reader's salvage of the
last piece of a file: the decoder failed only at the ']' the reader puts after it).

Real MXNet profiles: the shared GPU one (``../shared/gpu_traces``, skipped where absent) and the repository's
``tests/data/mxnet_dist_sync`` rank 0. Each test finds in the input itself where its first event starts and ends.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import SHARED

from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.errors import DdltraceError

GPU_PROFILE = SHARED / "gpu_traces" / "mxnet_gpu_mnist_cnn_profile.json"
DIST_SYNC = Path(__file__).parent / "data" / "mxnet_dist_sync" / "profile_dist_sync_rank0.json.gz"
needs_gpu_profile = pytest.mark.skipif(not GPU_PROFILE.is_file(), reason=f"{GPU_PROFILE} is not here")


def _first_event(text: bytes) -> tuple[int, int]:
    """Where the first event of the file's traceEvents array starts (its '{') and ends (one past its '}')."""
    key = text.index(b'"traceEvents"')
    start = text.index(b"{", text.index(b"[", key))
    _event, end = json.JSONDecoder().raw_decode(text.decode(), start)
    return start, end


def _dist_sync(tmp_path: Path) -> bytes:
    return gzip.decompress(DIST_SYNC.read_bytes())


@needs_gpu_profile
def test_mxnet_profile_cut_100_bytes_in_is_truncated(tmp_path):
    text = GPU_PROFILE.read_bytes()
    start, end = _first_event(text)
    assert start < 100 < end  # the cut lies inside the first event: no event is whole
    cut = tmp_path / "mxnet_cut.json"
    cut.write_bytes(text[:100])
    done = subprocess.run([sys.executable, "-m", "ddltrace", "import", str(cut), "--out", str(tmp_path / "store")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert str(cut) in lines[0] and "JSON truncated at byte 100" in lines[0] and "malformed" not in lines[0]
    assert f"the last {len(text[start:100])} bytes (an incomplete event)" in lines[0]
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("profile", [pytest.param("gpu", marks=needs_gpu_profile), "dist_sync"])
def test_every_cut_inside_the_first_event_is_truncated(tmp_path, profile):
    text = GPU_PROFILE.read_bytes() if profile == "gpu" else _dist_sync(tmp_path)
    start, end = _first_event(text)
    cut = tmp_path / "cut.json"
    for size in range(start + 1, end):
        cut.write_bytes(text[:size])
        with pytest.raises(DdltraceError) as caught:
            read_chrome(cut)
        said = str(caught.value)
        assert "truncated" in said and "malformed" not in said, (size, text[start:size], said)


def test_cut_inside_a_later_event_keeps_every_whole_event_before_it(tmp_path):
    text = _dist_sync(tmp_path)
    doc = json.loads(text)
    decoder, events, pos = json.JSONDecoder(), [], _first_event(text)[0]
    while len(events) < 40:  # the first 40 events' spans in the text
        _event, end = decoder.raw_decode(text.decode(), pos)
        events.append((pos, end))
        pos = text.index(b"{", end) if len(events) < len(doc["traceEvents"]) else end
    start, end = events[30]
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[:(start + end) // 2])
    trace = read_chrome(cut)
    assert trace.read == 30  # the 30 whole events before the cut, each read
    assert any("JSON truncated" in p for p in trace.problems)
    assert not any("malformed" in p for p in trace.problems)
