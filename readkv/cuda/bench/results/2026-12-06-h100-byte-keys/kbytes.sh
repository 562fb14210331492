#!/usr/bin/env bash
# Byte-key round (issue 37), one device call: build (readkv_cuda_test, kvgate, kvgate-serve,
# readkv_model_test), the kernel tests, `kvgate bench attention` at the served point (windows of
# 1024 and rows) with tile and tile-kbytes rows, `kvgate bench decode` of FP8, the candidate and
# the candidate with --byte-keys, the model's GPU cache tests, compute-sanitizer on the byte-key
# tests, then the issue's 32K x 16 and 8K x 1 points. A step starts only before DEADLINE s.
# Everything packed into $OUT/round.tgz, the progress in $OUT/summary.txt.
set -uo pipefail
start=$(date +%s)
B=${BUILD_DIR:-/tmp/kb-build}
OUT=${OUT:-/tmp/kb-out}
DEADLINE=${DEADLINE:-500}
mkdir -p "$OUT"
W=$OUT/w; mkdir -p "$W"
S=$OUT/summary.txt
say() { echo "$*" | tee -a "$S"; }
left() { (( $(date +%s) - start < DEADLINE )) || { say "skipped past ${DEADLINE} s: $*"; return 1; }; }
pack() { cp "$0" "$W/" 2>/dev/null; (cd "$OUT" && tar czf round.tgz w); }
trap pack EXIT
source .devdeps/unpack-debs.sh > "$W/devdeps.log" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$S"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_WERROR=ON -DKVGATE_GIT_COMMIT="${COMMIT:-}" > "$W/configure.log" 2>&1 || { tail -30 "$W/configure.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target readkv_cuda_test kvgate kvgate-serve readkv_model_test \
  > "$W/build.log" 2>&1 || { grep -B2 -A12 "error" "$W/build.log" | head -100; exit 1; }
say "build: $(( $(date +%s) - start )) s"
T=$B/readkv/cuda/readkv_cuda_test
timeout 120 "$T" > "$W/tests.txt" 2>&1
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Expected|Which is" "$W/tests.txt" | head -40 | tee -a "$S"
say "kernel tests: $(( $(date +%s) - start )) s"
K=$B/apps/kvgate
bench() {  # bench STEM ARGS...
  local stem=$1; shift
  left "bench $stem" || return 0
  timeout 120 "$K" bench attention --device cuda "$@" --json "$W/$stem.json" > "$W/$stem.txt" 2>&1
  { echo "== $stem (exit $?): $*"; grep -E "^ +[0-9]+ +[0-9]+ |error|Error" "$W/$stem.txt" | head -30; } | tee -a "$S"
}
s="--tokens 16384 --batch 16 --heads-q 8 --heads-kv 2 --head-dim 64 --outlier-cap 2 --no-anchor --iters 30"
bench served $s --kv fp8,tile:8:5:8:2,tile-kbytes:8:5:8:2 --value-window 1024
bench served_row $s --kv fp8,tile:8:5:8:2,tile-kbytes:8:5:8:2
say "served: $(( $(date +%s) - start )) s"
base="--model models/long-16k --device cuda --batch 16 --context 16000 --steps 64 --warmup 8"
cand="--kv readkv --store-bits 8 --read-bits 5 --reader tile --kv-split 8:2 --outlier-cap 2"
for side in fp8 tile kbytes kbytes_w; do
  case $side in
    fp8) a="--kv fp8";; tile) a=$cand;; kbytes) a="$cand --byte-keys";;
    kbytes_w) a="$cand --byte-keys --value-window 1024";;
  esac
  left "decode $side" || break
  timeout 90 "$K" bench decode $base $a > "$W/decode_$side.txt" 2>&1
  { echo "== decode $side (exit $?): $a"; grep -E "step|prefill" "$W/decode_$side.txt" | head -4; } | tee -a "$S"
done
say "decode: $(( $(date +%s) - start )) s"
if left "model GPU tests"; then
  timeout 120 "$B/readkv/model/readkv_model_test" --gtest_filter='*GpuKvCache*' > "$W/model_gpu.txt" 2>&1
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|worst" "$W/model_gpu.txt" | head -30 | tee -a "$S"
  say "model GPU tests: $(( $(date +%s) - start )) s"
fi
SAN=/usr/local/cuda/bin/compute-sanitizer
f='*kbytes*:TileAppendTest.ByteKey*'
for tool in memcheck racecheck; do
  left "sanitizer $tool" || break
  timeout 120 "$SAN" --tool $tool --error-exitcode 9 "$T" --gtest_filter="$f" > "$W/sanitizer_$tool.txt" 2>&1
  say "compute-sanitizer $tool: exit $? ($(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$W/sanitizer_$tool.txt") clean), $(grep -E '^\[  PASSED' "$W/sanitizer_$tool.txt")"
done
bench small --tokens 8192 --batch 1 --heads-q 32 --heads-kv 8 --head-dim 128 --no-anchor --iters 30 \
  --kv fp8,tile:8:4.5:8:1,tile-kbytes:8:4.5:8:1,tile-kbytes:8:5:8:2
bench big --tokens 32768 --batch 16 --heads-q 32 --heads-kv 8 --head-dim 128 --no-anchor --iters 20 \
  --kv fp8,tile:8:4.5:8:1,tile-kbytes:8:4.5:8:1,tile-kbytes:8:5:8:2
say "done: $(( $(date +%s) - start )) s"
