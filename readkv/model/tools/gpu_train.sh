#!/bin/bash
# Trains the built-in model on a CUDA host, in one bounded run (the device tool allows 600 s a
# call): standalone build of readkv_model_tool, `train` until the deadline leaves room for the
# final evaluation, then `eval` of the saved checkpoint through the runtime on CUDA (dense KV).
# Results go to $OUT: model/{config.json,model.safetensors}, train_log.jsonl, eval_cuda_dense.json,
# build/configure logs. Run from the repository root, with .devdeps carried:
#   OUT=/tmp/out DEADLINE_S=560 bash readkv/model/tools/gpu_train.sh
# Optional: BUILD_DIR (default /tmp/build-model; a repo path under build*/ survives between calls
# on a warm machine), BASELINE=<model dir> (also evaluated, same sets and flags, into
# eval_baseline_dense.json, so old and new are compared in one call), KEEP_DIR (a copy of the
# trained model for a later call on the same machine), EVAL_FLAGS (the eval grid).
set -uo pipefail
start=$(date +%s)
OUT=${OUT:-/tmp/kvgate-train-out}
DEADLINE_S=${DEADLINE_S:-560}     # whole script, seconds
EVAL_RESERVE_S=${EVAL_RESERVE_S:-70}
SEED=${SEED:-20261129}
mkdir -p "$OUT/model"
source .devdeps/unpack-debs.sh >/dev/null
export PKG_CONFIG_PATH=/opt/devdeps/usr/lib/x86_64-linux-gnu/pkgconfig:${PKG_CONFIG_PATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
B=${BUILD_DIR:-/tmp/build-model}
EVAL_FLAGS=${EVAL_FLAGS:---per-cell 4 --qa-per-cell 8 --batch 16}
cmake -S readkv/model/tools/standalone -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DEXTRA_INCLUDE=$PWD/build-gpudeps/include >"$OUT/configure.log" 2>&1 \
  || { tail -40 "$OUT/configure.log"; exit 1; }
cmake --build $B -j"$(nproc)" >"$OUT/build.log" 2>&1 \
  || { grep -m5 -A12 "error" "$OUT/build.log"; exit 1; }
now=$(date +%s)
echo "build: $((now - start)) s"
train_s=$((DEADLINE_S - (now - start) - EVAL_RESERVE_S))
echo "training for $train_s s"
$B/readkv_model_tool train --out "$OUT/model" --seed "$SEED" --steps 100000 \
  --time-limit "$train_s" --log "$OUT/train_log.jsonl" "$@" \
  | grep -E '"event":"(start|check|done)"'
echo "train: exit ${PIPESTATUS[0]} after $(( $(date +%s) - now )) s"
if [ -n "${KEEP_DIR:-}" ]; then mkdir -p "$KEEP_DIR" && cp "$OUT"/model/* "$KEEP_DIR"/; fi
# shellcheck disable=SC2086  # EVAL_FLAGS is a list of flags
timeout $((DEADLINE_S - ($(date +%s) - start))) \
  $B/readkv_model_tool eval --model "$OUT/model" --device cuda --kv dense $EVAL_FLAGS \
  --out "$OUT/eval_cuda_dense.json" \
  | grep -E '"(passkey_correct|passkey_items|qa_f1|qa_items|seconds)"'
if [ -n "${BASELINE:-}" ]; then
  echo "baseline $BASELINE:"
  # shellcheck disable=SC2086
  timeout $((DEADLINE_S - ($(date +%s) - start))) \
    $B/readkv_model_tool eval --model "$BASELINE" --device cuda --kv dense $EVAL_FLAGS \
    --out "$OUT/eval_baseline_dense.json" \
    | grep -E '"(passkey_correct|passkey_items|qa_f1|qa_items|seconds)"'
fi
echo "total: $(( $(date +%s) - start )) s"
