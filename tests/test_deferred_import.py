"""A module imported at its first use (ddltrace/deferred_import.py), and ``ddltrace import`` forking a large file's
readers before pyarrow is loaded, then loading it while they read. Each case runs in a fresh interpreter: deferring
only acts on modules not yet imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from shared_data import SHARED, needs


def _fresh(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_deferred_module_is_imported_at_its_first_attribute_and_then_read_directly():
    seen = _fresh("""
        import json, sys
        from ddltrace import deferred_import
        assert "colorsys" not in sys.modules
        deferred_import.defer("colorsys")
        import colorsys as c                              # the import statement loads nothing
        before = deferred_import.deferred("colorsys"), "rgb_to_hls" in vars(c)
        value = c.rgb_to_hls(1.0, 0.0, 0.0)               # the first attribute read loads it
        after = deferred_import.deferred("colorsys"), "rgb_to_hls" in vars(c), sys.modules["colorsys"] is not c
        import os
        deferred_import.defer("os")                       # already imported: left as it is
        print(json.dumps({"before": before, "value": value, "after": after, "os": sys.modules["os"] is os}))
    """)
    assert seen["before"] == [True, False]
    assert seen["value"] == [0.0, 0.5, 1.0]
    assert seen["after"] == [False, True, True]
    assert seen["os"] is True


def test_a_submodule_of_a_deferred_package_imports():
    seen = _fresh("""
        import json
        from ddltrace import deferred_import
        deferred_import.defer("email")
        import email.message
        print(json.dumps({"loaded": not deferred_import.deferred("email"),
                          "class": email.message.EmailMessage.__name__}))
    """)
    assert seen == {"loaded": True, "class": "EmailMessage"}


@needs(SHARED / "hta_traces" / "df_index_resolver" / "df_index_resolver.json.gz")
def test_import_forks_a_large_files_readers_before_loading_pyarrow(tmp_path):
    """``ddltrace import`` of a Kineto file large enough to be shared: pyarrow is still unloaded when the readers
    are forked and loaded by the hook that runs while they read; the store holds what one process reading alone
    writes."""
    trace = SHARED / "hta_traces" / "df_index_resolver" / "df_index_resolver.json.gz"
    seen = _fresh(f"""
        import json, sys
        from ddltrace import deferred_import
        from ddltrace.cli import main
        at = {{}}
        import ddltrace.commands.import_trace  # (imports nothing of pyarrow)
        real_while = ddltrace.commands.import_trace._while_readers_read
        def while_readers_read(*args):
            at["forked"] = deferred_import.deferred("pyarrow")
            real_while(*args)
            at["loaded_by_hook"] = not deferred_import.deferred("pyarrow") and "pyarrow._compute" in sys.modules
        ddltrace.commands.import_trace._while_readers_read = while_readers_read
        code = main(["import", {str(trace)!r}, "--out", {str(tmp_path / "s")!r}, "--jobs", "2",
                     "--progress", "never"])
        alone = main(["import", {str(trace)!r}, "--out", {str(tmp_path / "one")!r}, "--jobs", "1",
                      "--progress", "never"])
        from ddltrace.store import TraceStore
        shared, one = (dict(TraceStore.open({str(tmp_path)!r} + "/" + name).iter_timeline()) for name in ("s", "one"))
        same = shared.keys() == one.keys() and all(shared[r].equals(one[r]) for r in one)
        print(json.dumps({{"code": (code, alone), "deferred_when_forked": at.get("forked"),
                          "loaded": at.get("loaded_by_hook"), "same": same, "rows": sum(map(len, one.values()))}}))
    """)
    assert seen["code"] == [0, 0] and seen["deferred_when_forked"] is True and seen["loaded"] is True
    assert seen["same"] is True and seen["rows"] > 100_000
