#!/usr/bin/env bash
# One GPU session, prepared: both GPU benchmarks in one command, their tables written to $OUT.
# Device time is scarce (15 minutes a task, a machine's start included) and a session may get one machine once,
# so this is the whole run, in the order of what the targets need: the 448 px step over the
# checkpointing modes (matmul share, memory per sample and its time), the protocol's GPU-hours, then the chart
# size. Each script stops starting work at its budget and writes its table as it goes, and `timeout` backs that
# up, so a part cut short keeps what it measured and the next part still runs.
#
# Here, once: bash ../shared/gpu/wheels.sh   (the wheels into .whl/, git-ignored; carry it along)
# There:      OUT=$OUT bash benchmarks/gpu_session.sh   (from the project root; about 8 minutes; run timeout 580)
set -u
OUT=${OUT:-$(mktemp -d)}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$OUT/gpu.txt"
# the step at 448 px: no checkpointing until it runs out of memory, then the GPU default, then the other modes
timeout 220 python3 benchmarks/gpu_pgd.py --sizes 448x448 --batches 1,16,32,64,128 --repeat 2 --budget 170 \
  --json "$OUT/gpu_pgd_448.json" 2>&1 | tee "$OUT/gpu_pgd_448.txt"
# the protocol, end to end, projected to GPU-hours (448 px, the command once, then 896 x 672)
timeout 190 python3 benchmarks/gpu_audit.py --model 3b --questions 16 --steps 4 2>&1 | tee "$OUT/gpu_audit.txt"
# the chart size: no checkpointing against the GPU default
timeout 100 python3 benchmarks/gpu_pgd.py --sizes 896x672 --batches 1,8,16,32 --checkpoints none,mlp+norms \
  --repeat 2 --budget 60 --json "$OUT/gpu_pgd_896.json" 2>&1 | tee "$OUT/gpu_pgd_896.txt"
echo "tables in $OUT"
