"""ddltrace.heap_reuse: freed blocks are used again instead of faulting in new pages (glibc only)."""

import subprocess
import sys
from pathlib import Path

import pytest

# Blocks of 1 to 16 MiB, each freed before the next (as the import's pieces and columns are): the minor page faults
# the allocations cost, in a fresh process with or without keep_freed_memory().
_SCRIPT = """
import resource, sys
from ddltrace.heap_reuse import keep_freed_memory
if sys.argv[1] == "keep" and not keep_freed_memory():
    print("unsupported"); raise SystemExit
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for mib in range(1, 17):
    block = bytearray(mib << 20)  # zero-filled: every page touched
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> str:
    return subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_kept_blocks_are_reused_instead_of_faulting_in_new_pages():
    kept = _faults("keep")
    if kept == "unsupported":
        pytest.skip("the C library has no mallopt (not glibc)")
    default = int(_faults("default"))
    touched = sum(range(1, 17)) << 20 >> 12  # pages of the 16 blocks: each a fresh mapping by default
    assert default > touched // 2
    assert int(kept) < default // 4  # only the heap's growth to the largest block faults


@pytest.mark.parametrize("verb", ["import", "analyze"])
def test_the_commands_that_read_traces_keep_freed_memory(tmp_path, monkeypatch, capsys, verb):
    """``import`` and ``analyze`` set it before they read (``report`` does as ``analyze`` does); recorded here
    instead of set, so that this test process keeps glibc's defaults."""
    from ddltrace import heap_reuse
    from ddltrace.cli import main

    calls = []
    monkeypatch.setattr(heap_reuse, "keep_freed_memory", lambda: calls.append(verb) or True)
    store = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd" / "seq-w2" / "store"
    trace = Path(__file__).resolve().parent / "data" / "torch_gloo"
    argv = (["analyze", str(store), "--quiet"] if verb == "analyze"
            else ["import", str(trace), "--out", str(tmp_path / "store")])
    assert main(argv) == 0
    assert calls == [verb]
