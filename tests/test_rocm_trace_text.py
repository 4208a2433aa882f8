"""The text and the report of a one-rank ROCm trace (HTA's amd_trace: an MI250, hip* runtime calls): what the input
holds that stops several GPU analyses ("device work on 1 rank, no communication kernel, ...") is said once, with
the analyses it stops; --json keeps an entry per analysis, each with that reason."""

from __future__ import annotations

import json

import pytest
from shared_data import SHARED

from ddltrace.cli import main

TRACE = SHARED / "hta_traces/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
pytestmark = pytest.mark.skipif(not TRACE.exists(), reason="the shared real traces are not here")


@pytest.fixture(scope="module")
def amd(tmp_path_factory):
    """The trace's store and its report (markdown, html)."""
    root = tmp_path_factory.mktemp("amd")
    store, out = root / "store", root / "report"
    assert main(["import", str(TRACE), "--out", str(store), "--progress", "never"]) == 0
    assert main(["report", str(store), "--out", str(out)]) == 0
    return store, (out / "report.md").read_text(), (out / "report.html").read_text()


def _device_holding(doc: dict) -> tuple[str, set[str]]:
    """What the store holds on its device (the reason's ``holds`` shared by the GPU analyses), and their titles."""
    gpu = [s for s in doc["not_made"] if s["analysis"].startswith("gpu_") and "device work on 1 rank" in s["holds"]]
    assert len(gpu) >= 3 and len({s["holds"] for s in gpu}) == 1
    return gpu[0]["holds"], {s["title"] for s in gpu}


def test_a_reason_shared_by_several_analyses_is_said_once(amd, capsys):
    store = amd[0]
    assert main(["analyze", str(store), "--json"]) == 0
    holds, titles = _device_holding(json.loads(capsys.readouterr().out))
    assert main(["analyze", str(store)]) == 0
    text = capsys.readouterr().out
    assert text.count(holds) == 1
    after = text.split(f"  Where the input holds {holds}:\n", 1)[1].splitlines()
    said = after[:next(i for i, line in enumerate(after + [""]) if not line.startswith("    - "))]
    assert {line[len("    - "):].split(": needs ", 1)[0] for line in said} == titles


def test_the_report_says_it_once_too(amd):
    from html import escape

    from ddltrace.report.render import _md_escape

    store, md, page = amd
    doc = json.loads((store.parent / "report" / "findings.json").read_text())
    holds, titles = _device_holding(doc)
    assert md.count(_md_escape(holds)) == 1 and page.count(escape(holds)) == 1
    said = md.split(_md_escape(f"Where the input holds {holds}:"), 1)[1].split("\n\n", 2)[1]
    assert {line.split("**")[1] for line in said.splitlines()} == {_md_escape(t) for t in titles}


def _runtime_calls() -> set[str]:
    """The runtime calls of the trace itself (its ``cuda_runtime`` / ``hip_runtime`` events' names)."""
    import gzip

    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]
    return {e["name"] for e in events if str(e.get("cat", "")).lower() in {"cuda_runtime", "hip_runtime"}}


def test_the_launch_statistics_are_named_by_the_runtime_the_trace_holds(amd, capsys):
    """The trace's runtime calls are HIP's (hipLaunchKernel, ...): the launch statistics say HIP, not CUDA, in the
    text, --json and the report; a CUDA trace's still say CUDA (tests/test_gpu_analyses.py)."""
    from html import escape

    from ddltrace.report.render import _md_escape

    calls = _runtime_calls()
    assert "hipLaunchKernel" in calls and not any(c.startswith("cu") for c in calls)
    store, md, page = amd
    assert main(["analyze", str(store)]) == 0
    text = capsys.readouterr().out
    assert main(["analyze", str(store), "--json"]) == 0
    (gpu,) = [s["gpu"] for s in json.loads(capsys.readouterr().out)["stores"]]
    assert {r["runtime"] for r in gpu["launches"]} == {"HIP"}
    title = "HIP launch statistics (HTA's definitions; each runtime launch call (hipLaunchKernel, "
    assert gpu["definitions"]["launches"].startswith(title)
    assert title in text and _md_escape(title) in md and escape(title) in page
    for said in (text, md, page, gpu["definitions"]["launches"]):
        assert "CUDA launch" not in said and "cudaLaunchKernel" not in said


def test_beside_another_store_the_reason_said_once_names_its_store(amd, capsys):
    """With HTA's negative_queue_length_values_check beside it (one rank too, with communication kernels), the
    reason only amd_trace gives is said once naming it ("Where STORE holds ...:"), not "the input", which there
    is two stores."""
    store = amd[0]
    other = TRACE.parent.parent / "negative_queue_length_values_check"
    assert main(["analyze", str(store), "--json"]) == 0
    holds, _ = _device_holding(json.loads(capsys.readouterr().out))
    assert main(["analyze", str(store), str(other), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert f"  Where {store} holds {holds}:\n" in text and "Where the input holds" not in text
