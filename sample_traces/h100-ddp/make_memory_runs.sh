#!/bin/bash
# The allocator's events (profile_memory) with the allocator's own peak over the profiled steps as the truth.
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
work=$(mktemp -d) && cd "$work" || exit 1
export PYTHONUNBUFFERED=1
mkdir -p memory && torchrun --nproc-per-node 1 "$here/train_gpu.py" --backend nccl --steps 8 --kineto memory --profile-memory --truth-log memory/truth 2>&1 | grep -v Warn | tail -3
mkdir -p memory2 && torchrun --nproc-per-node 2 "$here/train_gpu.py" --steps 8 --kineto memory2 --profile-memory --truth-log memory2/truth 2>&1 | grep -v Warn | tail -3
cat memory/*.json memory2/*memory*.json; ls -la memory memory2
tar czf "$OUT/memory_runs.tar.gz" memory memory2
