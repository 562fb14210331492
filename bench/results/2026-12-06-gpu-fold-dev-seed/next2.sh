#!/usr/bin/env bash
# Next session's first call (issue 37 / 35), carry .devdeps and gates/report/node_modules:
# 1. the development-seed quality of the window epilogue (e7c129e: e against a warp's reference
#    maximum, p scaled in f32) on byte keys in windows of 1024 against FP8 (scan_c's command of
#    bench/results/2026-12-06-gpu-byte-keys-dev-seed/, now at HEAD);
# 2. the served decode step, three alternating rounds, FP8 and byte keys in windows of 1024.
# Then, if the scan holds (200/200, F1 within noise of FP8): switch policies/h200-long.toml's
# candidate to --byte-keys --value-window 1024 and rerun the gates in legs (.gpu-history/leg.sh
# on a frozen tree), ~25 min of device time.
set -uo pipefail
start=$(date +%s)
OUT=${OUT:-/tmp/n2}; mkdir -p "$OUT"
B=/tmp/n2-build
source .devdeps/unpack-debs.sh > "$OUT/devdeps.log" 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_GIT_COMMIT="${COMMIT:-}" > "$OUT/configure.log" 2>&1 || exit 1
cmake --build "$B" -j16 --target kvgate kvgate-serve > "$OUT/build.log" 2>&1 ||
  { grep -B2 -A10 error "$OUT/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
export PASSKEYS=200 QA=400 PASSKEY_LENGTHS=16384 QA_LENGTHS=16000
E="--model models/long-16k --device cuda --max-batch 16"
SERVE_ARGS="$E" CONFIGS="fp8" KEEP_DIR=$OUT/a \
  timeout 200 bash policies/tools/choose_kv_split.sh "$B" > "$OUT/scan_a.txt" 2>&1
SERVE_ARGS="$E --byte-keys --value-window 1024" CONFIGS="tile:8:2:2" KEEP_DIR=$OUT/c \
  timeout 200 bash policies/tools/choose_kv_split.sh "$B" > "$OUT/scan_c.txt" 2>&1
tail -8 "$OUT/scan_a.txt" "$OUT/scan_c.txt"
echo "scan: $(( $(date +%s) - start )) s"
base="--model models/long-16k --device cuda --batch 16 --context 16000 --steps 64 --warmup 8"
cand="--kv readkv --store-bits 8 --read-bits 5 --reader tile --kv-split 8:2 --outlier-cap 2"
for round in 1 2 3; do
  for side in fp8 kbytes_w; do
    a="--kv fp8"; [[ $side == kbytes_w ]] && a="$cand --byte-keys --value-window 1024"
    timeout 90 "$B/apps/kvgate" bench decode $base $a > "$OUT/decode_${side}_$round.txt" 2>&1
    echo "== $side $round: $(grep -E 'step' "$OUT/decode_${side}_$round.txt" | head -2 | tr '\n' ' ')"
  done
done
(cd "$OUT" && tar czf round.tgz --exclude=round.tgz . )
