#!/bin/sh
# The two profiles of job.py (2 ranks, gloo, CPU torch from `make test-frameworks`' venv or any torch 2.x):
# nostack/ (with_stack=False) and stack/ (with_stack=True), gzipped. Run from the repository's root.
set -e
here=sample_traces/cpu-gloo-stack
torchrun=${TORCHRUN:-.venvs/torch/bin/torchrun}
for kind in nostack stack; do
    mkdir -p "$here/$kind"
    STACK=$([ "$kind" = stack ] && echo 1 || echo 0) OUTDIR="$here/$kind" \
        "$torchrun" --nproc_per_node 2 --master_port 29531 "$here/job.py"
    gzip -f "$here/$kind"/*.pt.trace.json
done
