"""The wheel installs into a fresh virtual environment, with collectors/ and analyses/ as subpackages."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_wheel_in_a_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(dist), str(REPO)], check=True, timeout=300, cwd=tmp_path)
    wheels = list(dist.glob("ddltrace-*.whl"))
    assert len(wheels) == 1
    env_dir = tmp_path / "venv"
    # The fresh venv sees this environment's site-packages for the dependencies (no network needed),
    # but ddltrace itself comes only from the wheel: the editable install is not visible there.
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([sys.executable, "-c", "import numpy, os; print(os.path.dirname(os.path.dirname("
                           "numpy.__file__)))"], capture_output=True, text=True, check=True).stdout.strip()
    pth = next((env_dir / "lib").glob("python3*/site-packages"))
    (pth / "deps.pth").write_text(site + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheels[0])],
                   check=True, timeout=300)
    code = ("import ddltrace, ddltrace.collectors, ddltrace.analyses, ddltrace.store;"
            "print(ddltrace.__version__, ddltrace.collectors.__file__, ddltrace.analyses.__file__)")
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    version, collectors, analyses = result.stdout.split()
    assert str(env_dir) in collectors and collectors.endswith("ddltrace/collectors/__init__.py")
    assert str(env_dir) in analyses and analyses.endswith("ddltrace/analyses/__init__.py")
    cli = subprocess.run([str(env_dir / "bin" / "ddltrace"), "--version"], capture_output=True, text=True,
                         timeout=120)
    assert cli.stdout.strip() == f"ddltrace {version}"
