#!/usr/bin/env bash
# Issue 37, 2026-12-06 fifth session, call 4: the served point's Value window (512, 1024, 2048) on
# byte keys, alternating, and 8K x 1 at 512 and 1024; then the development-seed scan of byte keys
# in windows of 2048 (the 1024 scan is bench/results/2026-12-06-gpu-fold-dev-seed/).
set -uo pipefail
start=$(date +%s)
B=/tmp/w-build
W=/tmp/w-out; mkdir -p "$W"
S=$W/summary.txt
say() { echo "$*" | tee -a "$S"; }
source .devdeps/unpack-debs.sh > "$W/devdeps.log" 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a "$S"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_GIT_COMMIT="${COMMIT:-}" > "$W/configure.log" 2>&1 || exit 1
cmake --build "$B" -j16 --target kvgate kvgate-serve > "$W/build.log" 2>&1 ||
  { grep -B2 -A10 error "$W/build.log" | head -40; exit 1; }
say "build: $(( $(date +%s) - start )) s"
K=$B/apps/kvgate
srv="--tokens 16384 --batch 16 --heads-q 8 --heads-kv 2 --head-dim 64 --outlier-cap 2 --no-anchor --iters 30 --kv fp8,tile-kbytes:8:5:8:2"
sml="--tokens 8192 --batch 1 --heads-q 32 --heads-kv 8 --head-dim 128 --no-anchor --iters 30 --kv fp8,tile-kbytes:8:4.5:8:1"
for r in 1 2; do
  for w in 512 1024 2048; do
    timeout 60 "$K" bench attention --device cuda $srv --value-window $w --json "$W/served_w${w}_$r.json" > "$W/served_w${w}_$r.txt" 2>&1
    say "served w$w r$r: $(grep -E '^ +[0-9]+ +[0-9]+ ' "$W/served_w${w}_$r.txt" | awk '{print $3, $4}' | tr '\n' ' ')"
  done
  for w in 512 1024; do
    timeout 60 "$K" bench attention --device cuda $sml --value-window $w --json "$W/small_w${w}_$r.json" > "$W/small_w${w}_$r.txt" 2>&1
    say "small w$w r$r: $(grep -E '^ +[0-9]+ +[0-9]+ ' "$W/small_w${w}_$r.txt" | awk '{print $3, $4}' | tr '\n' ' ')"
  done
done
say "bench: $(( $(date +%s) - start )) s"
export PASSKEYS=200 QA=400 PASSKEY_LENGTHS=16384 QA_LENGTHS=16000
E="--model models/long-16k --device cuda --max-batch 16"
SERVE_ARGS="$E --byte-keys --value-window 2048" CONFIGS="tile:8:2:2" KEEP_DIR=$W/w2048 \
  timeout 200 bash policies/tools/choose_kv_split.sh "$B" > "$W/scan_w2048.txt" 2>&1
tail -n 3 "$W/scan_w2048.txt" | tee -a "$S"
say "done: $(( $(date +%s) - start )) s"
cp "$0" "$W/"
(cd "$W" && tar czf "$OUT/round.tgz" .)
cp "$S" "$OUT/"
