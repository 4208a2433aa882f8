#!/bin/bash
# On a machine with an NVIDIA GPU (Python 3.12 with torch, pyarrow, psutil, nvidia-ml-py; no network):
# ddltrace's GPU paths for real, and real GPU traces of a small DDP job with known pathologies.
# Expects, beside this script: whl/ (ddltrace's wheel and the wheels the GPU machine lacks), train_gpu.py.
# Writes everything into $OUT (default ./gpu-out), the stores and ground truth as one gpu_runs.tar.gz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$here"/whl/*.whl || exit 1
export PYTHONPATH=$site PATH=$site/bin:$PATH PYTHONUNBUFFERED=1
work=$(mktemp -d) && cd "$work" || exit 1
echo "== calibrate --quick (GPU description, copy bandwidths, GEMM rates)"
( time python3 -m ddltrace calibrate --quick --out profile.json ) 2>&1 | tail -40
job() { name=$1; shift; echo "== run $name"
  ( time python3 -m ddltrace run --framework pytorch --steps 5-9 --out "$name.store" -- torchrun "$@" --truth-log "$name" ) 2>&1 | tail -25
  python3 -m ddltrace info "$name.store" 2>&1 | head -40; }
job healthy   --nproc-per-node 2 "$here/train_gpu.py"
job straggler --nproc-per-node 2 "$here/train_gpu.py" --straggle-rank 1 --straggle-ms 40
job hostbound --nproc-per-node 2 "$here/train_gpu.py" --host-ms 30
job nccl1     --nproc-per-node 1 "$here/train_gpu.py" --backend nccl
tar czf "$OUT/gpu_runs.tar.gz" ./*.store ./*.jsonl profile.json
ls -la "$OUT"
