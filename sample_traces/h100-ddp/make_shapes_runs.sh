#!/bin/bash
# gloo's collectives with their payload bytes (record_shapes): torch.profiler's own trace and a ddltrace run store.
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$here"/whl/*.whl || exit 1
export PYTHONPATH=$site PATH=$site/bin:$PATH PYTHONUNBUFFERED=1
work=$(mktemp -d) && cd "$work" || exit 1
mkdir -p shapes && torchrun --nproc-per-node 2 "$here/train_gpu.py" --steps 8 --kineto shapes --record-shapes --truth-log shapes/truth 2>&1 | grep -v Warn | tail -3
python3 -c "import torchvision; m=torchvision.models.resnet18(num_classes=100); print(sum(p.numel() for p in m.parameters()), sum(b.numel()*b.element_size() for b in m.buffers()))" > shapes/params.txt
python3 -m ddltrace run --no-progress --framework pytorch --record-shapes --steps 5-6 --out run-shapes.store -- torchrun --nproc-per-node 2 "$here/train_gpu.py" --steps 8 --truth-log run-shapes 2>&1 | grep -v Warn | tail -3
tar czf "$OUT/shapes_runs.tar.gz" shapes run-shapes.store run-shapes.rank*.jsonl
ls -la "$OUT" shapes; cat shapes/params.txt
