#!/bin/bash
# One bounded call on the CUDA host (the device tool allows 600 s): build the kvgate binary, train
# (continue) the built-in model for TRAIN_S seconds with the arguments given, then put the kept
# checkpoint through scripts/gpu_model_gate.sh: the dense and FP8 caches asked the exact passkey
# items of the policy's gates (a model fit for the policy finds all of them under both) and QA on
# the development seed. Nothing here chooses among checkpoints by the gates' items: training keeps
# its best checkpoint by its own held-out checks (a seed the suite never uses), and the gate only
# says whether that checkpoint is fit. Into $OUT, six files (the device tool returns at most
# eight): model/ (config, weights, calibration), train_log.jsonl, model_gate.txt, and
# gate-checks.tar.gz (the check JSONs); the build logs stay in the build folder.
#   OUT=/tmp/o TRAIN_S=300 bash readkv/model/tools/gpu_train_gate.sh --init-from models/long-16k ...
# Run from the repository root with .devdeps carried.
set -uo pipefail
start=$(date +%s)
OUT=${OUT:?the output folder}
TRAIN_S=${TRAIN_S:-300}
B=${BUILD_DIR:-/tmp/kvgate-train-build}
mkdir -p "$OUT/model"
source .devdeps/unpack-debs.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_BUILD_TESTS=OFF > "$B.configure.log" 2>&1 || { tail -40 "$B.configure.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target kvgate kvgate-serve > "$B.build.log" 2>&1 \
  || { grep -A8 "error" "$B.build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
t0=$(date +%s)
"$B/apps/kvgate" train --out "$OUT/model" --steps 100000 --time-limit "$TRAIN_S" \
  --log "$OUT/train_log.jsonl" "$@" | grep -E '"event":"(start|check|done)"' | cut -c1-300
echo "train: exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
# The FP8 and ReadKV caches read the model's calibration (bound to its weights digest).
"$B/apps/kvgate" calibrate --model "$OUT/model" --samples 16 | tail -2
t0=$(date +%s)
rm -rf "$B.gate"  # a warm machine keeps the last call's
KVGATE="$B/apps/kvgate" MODEL="$OUT/model" OUT="$B.gate" bash scripts/gpu_model_gate.sh
cp "$B.gate/model_gate.txt" "$OUT/" && tar -C "$B.gate" -czf "$OUT/gate-checks.tar.gz" .
echo "gate: $(( $(date +%s) - t0 )) s; total $(( $(date +%s) - start )) s"
