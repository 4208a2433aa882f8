"""A TF 1.2-era GPU timeline written by others (blackbox_tf1_timeline): TF1's GPU tracer saves every kernel to
``/stream:all`` and every copy to ``/gpu:0/memcpy`` as well as to the stream it ran on. Each copy must be counted
once, as a copy, and each kernel once: checked against the file itself, read here with json."""

from __future__ import annotations

import json
import re
from collections import Counter

from shared_data import corpus, needs

from ddltrace.cli import main

TF1_GPU = corpus("blackbox_tf1_timeline", "timeline_01.json")


def _file_device_work(path):
    """(copies, kernels) of the file: each a list of (name, ts, dur) in µs. Copies are the events of the GPU's
    ``/memcpy`` process (TF1 puts only copies there); kernels the events of its ``/stream:N`` processes that are
    not one of those copies."""
    events = json.loads(path.read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    def on(pattern):
        return Counter((e["name"], e["ts"], e["dur"]) for e in events
                       if e.get("ph") == "X" and re.search(pattern, procs.get(e["pid"], "")))
    copies, streams = on(r"/gpu:0/memcpy Compute$"), on(r"/gpu:0/stream:\d+ Compute$")
    assert copies and not copies - streams  # every copy is on its stream too
    return list(copies.elements()), list((streams - copies).elements())


@needs(TF1_GPU)
def test_each_copy_and_kernel_counted_once(capsys):
    copies, kernels = _file_device_work(TF1_GPU)
    assert main(["analyze", str(TF1_GPU), "--json", "--quiet"]) == 0
    gpu = json.loads(capsys.readouterr().out)["stores"][0]["gpu"]
    classes = {row["class"]: row for row in gpu["kernel_classes"]}
    assert set(classes) == {"compute", "memcpy"}
    assert classes["memcpy"]["kernels"] == len(copies) == 2
    assert classes["memcpy"]["sum_ns"] == sum(dur for _n, _t, dur in copies) * 1000
    assert classes["compute"]["kernels"] == len(kernels) == 7
    assert classes["compute"]["sum_ns"] == sum(dur for _n, _t, dur in kernels) * 1000
    assert sum(row["copies"] for row in gpu["copies"]) == len(copies)
