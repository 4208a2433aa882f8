#!/bin/bash
# NVML's utilisation against the trace's busy time: one rank on NCCL, 40 profiled steps, the sampler at 50 Hz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$here"/whl/*.whl || exit 1
export PYTHONPATH=$site PATH=$site/bin:$PATH PYTHONUNBUFFERED=1
work=$(mktemp -d) && cd "$work" || exit 1
r() { name=$1; shift; echo "== $name"; python3 -m ddltrace run --no-progress --framework pytorch --steps 5-44 --sample-hz 50 --out "$name.store" -- torchrun --nproc-per-node 1 "$here/train_gpu.py" --backend nccl --steps 50 --truth-log "$name" "$@" 2>&1 | grep -v Warn | tail -3; }
r nvml-busy
r nvml-host20 --host-ms 20
r nvml-host60 --host-ms 60
tar czf "$OUT/nvml_runs.tar.gz" ./*.store ./*.jsonl
ls -la "$OUT"
