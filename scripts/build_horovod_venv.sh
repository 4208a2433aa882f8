#!/usr/bin/env bash
# Build .venvs/horovod: torch 2.13.0 (CPU) + Horovod 0.28.1 from source with Gloo (no MPI, TF, MXNet), for
# tests/frameworks/test_horovod.py. Horovod 0.28.1 compiles its PyTorch extension as C++14, and torch 2.13's
# headers stop with "#error C++17 or later compatible compiler is required to use PyTorch": the sdist's two
# CMAKE_CXX_STANDARD 14 lines are set to 17 (what later Horovod sources do), nothing else changes.
# About 6 min on 2 cores (niced), 1.1 GB. Usage: scripts/build_horovod_venv.sh [PYTHON] [VENV]
set -euo pipefail
PYTHON=${1:-python3}
VENV=${2:-.venvs/horovod}
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0 numpy cmake wheel setuptools packaging psutil cloudpickle pyyaml cffi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$VENV/bin/pip" download -q --no-deps --no-binary :all: horovod==0.28.1 -d "$work"
tar xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
    "$work/horovod-0.28.1/CMakeLists.txt" "$work/horovod-0.28.1/horovod/torch/CMakeLists.txt"
HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
    HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS=-j"$(nproc)" \
    nice -n 19 "$VENV/bin/pip" install -q --no-build-isolation --no-cache-dir "$work/horovod-0.28.1"
"$VENV/bin/python" -c "import horovod.torch as hvd; assert hvd.gloo_built(), 'Horovod built without Gloo'"
