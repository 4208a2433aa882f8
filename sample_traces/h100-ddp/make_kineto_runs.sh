#!/bin/bash
# Raw Kineto traces (torch.profiler's own files) of the four jobs, with per-step ground truth.
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
work=$(mktemp -d) && cd "$work" || exit 1
export PYTHONUNBUFFERED=1
k() { name=$1; shift; echo "== $name"; mkdir -p "$name"; torchrun "$@" --steps 8 --kineto "$name" --truth-log "$name/truth" 2>&1 | grep -v Warning | tail -5; ls -la "$name"; }
k healthy    --nproc-per-node 2 "$here/train_gpu.py"
k straggler1 --nproc-per-node 2 "$here/train_gpu.py" --straggle-rank 1 --straggle-ms 40
k straggler0 --nproc-per-node 2 "$here/train_gpu.py" --straggle-rank 0 --straggle-ms 40
k hostbound  --nproc-per-node 2 "$here/train_gpu.py" --host-ms 30
k nccl1      --nproc-per-node 1 "$here/train_gpu.py" --backend nccl
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > gpu.csv
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" > torch.txt
tar czf "$OUT/kineto_runs.tar.gz" healthy straggler1 straggler0 hostbound nccl1 gpu.csv torch.txt
ls -la "$OUT"
