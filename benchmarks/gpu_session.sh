#!/usr/bin/env bash
# One GPU session, prepared: both GPU benchmarks in one command, their tables written to $OUT.
# Device time is scarce and a session may get one machine once, so this is the whole run; each script has its
# own time limit, and what finished is kept if a later one is cut short.
#
# Here, once: bash ../shared/gpu/wheels.sh   (the wheels into .whl/, git-ignored; carry it along)
# There:      bash benchmarks/gpu_session.sh  (from the project root; at most 520 s of benchmarks, by the limits below)
set -u
OUT=${OUT:-$(mktemp -d)}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
# the step: 448 px over every checkpointing mode, the chart size with and without the GPU default
timeout 200 python3 benchmarks/gpu_pgd.py --sizes 448x448 --batches 1,4,16,32,64,128 \
  --json "$OUT/gpu_pgd_448.json" 2>&1 | tee "$OUT/gpu_pgd_448.txt"
timeout 120 python3 benchmarks/gpu_pgd.py --sizes 896x672 --batches 1,8,16,32 --checkpoints none,mlp+norms \
  --json "$OUT/gpu_pgd_896.json" 2>&1 | tee "$OUT/gpu_pgd_896.txt"
# the protocol, end to end, projected to GPU-hours
timeout 200 python3 benchmarks/gpu_audit.py --model 3b 2>&1 | tee "$OUT/gpu_audit.txt"
echo "tables in $OUT"
