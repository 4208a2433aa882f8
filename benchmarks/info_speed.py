"""``ddltrace info`` speed: the wall time of a fresh ``python -m ddltrace info STORE`` (interpreter start and module
imports included), the fastest of ``--repeat`` runs, with that run's CPU time (user + system), and whether the
command imported pandas.

    .venv/bin/python benchmarks/info_speed.py [STORE ...] [--repeat N] [--before COMMIT]

Without STORE: the committed ps-sgd runs par-w4 (5 ranks, 6,259 events) and par-w8. ``--before COMMIT`` measures
ddltrace as it was at COMMIT too (its tree exported with ``git archive`` and put first on the children's
PYTHONPATH, as benchmarks/ipm_import_speed.py does), interleaved with this tree's runs so that a busy spell on the
machine hits both alike.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ipm_import_speed import _tree_env, _wall  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STORES = [ROOT / "sample_traces" / "ps-sgd" / name / "store" for name in ("par-w4", "par-w8")]
_PANDAS = ("import contextlib, io, sys\nfrom ddltrace.cli import main\n"
           "with contextlib.redirect_stdout(io.StringIO()):\n    main(['info', sys.argv[1]])\n"
           "print('pandas' in sys.modules)")


def _imports_pandas(store: Path, env: dict | None) -> bool:
    """Whether ``ddltrace info STORE`` imported pandas (its ``main`` in one more fresh process, asked after)."""
    done = subprocess.run([sys.executable, "-c", _PANDAS, str(store)], capture_output=True, text=True, env=env,
                          cwd=tempfile.gettempdir())
    return done.stdout.strip().splitlines()[-1] == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stores", nargs="*", type=Path, default=STORES)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--before", metavar="COMMIT", help="also measure ddltrace at COMMIT")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        envs: dict[str, dict | None] = {"now": None}
        if args.before:
            envs = {f"before ({args.before})": _tree_env(args.before, Path(tmp) / "before"), **envs}
        for store in args.stores:
            store = store.resolve()
            runs: dict[str, list[tuple[float, float]]] = {label: [] for label in envs}
            for _ in range(args.repeat):
                for label, env in envs.items():
                    runs[label].append(_wall([sys.executable, "-m", "ddltrace", "info", str(store)], env))
            shown = []
            for label, env in envs.items():
                wall, cpu = min(runs[label])
                shown.append(f"{label}: {wall:.3f} s wall ({cpu:.3f} s CPU), pandas imported: "
                             f"{'yes' if _imports_pandas(store, env) else 'no'}")
            print(f"{store.relative_to(ROOT) if store.is_relative_to(ROOT) else store}, best of {args.repeat}: "
                  + "; ".join(shown))


if __name__ == "__main__":
    main()
