#!/usr/bin/env bash
# One GPU round for the tile reader (issue 37) on the device machine, from the repository root
# with .devdeps carried: build readkv_cuda_test, run the tile reader's GPU-vs-CPU tests,
# compute-sanitizer memcheck and racecheck on them, then the first timings against FP8 on the
# same shapes (TILE_TIMINGS="T,B,R ..."; the disabled TileTiming test). Everything lands in $OUT
# (round.tgz: tests.txt, tests.json, memcheck.txt, racecheck.txt, timing.txt, logs). Each step
# has a time limit so a hang still returns what came before it. BENCH="ARGS;ARGS..." also builds kvgate (in the
# background, from the start) and runs `kvgate bench attention --device cuda ARGS` per entry into
# bench_N.json / bench_N.txt (their tables also in bench.txt). PROFILE=1 ends with
# scripts/gpu_tile_profile.sh's ncu tables into $OUT/prof.
set -uo pipefail
# The device tool returns at most 8 files: everything is written to a work folder and packed
# into $OUT/round.tgz at the end; steps.txt, timing.txt and bench.txt are written to $OUT as the
# round goes.
FINAL=${OUT:-/tmp/kvgate-gpu-tile}
B=${BUILD_DIR:-/tmp/kvgate-gpu-tile-build}
OUT=$(mktemp -d)
mkdir -p "$FINAL"
pack() { tar czf "$FINAL/round.tgz" -C "$OUT" .; }
trap pack EXIT
trap 'exit 143' TERM INT  # a time limit still packs what came before it
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$FINAL/steps.txt"; }
source .devdeps/unpack-debs.sh > "$OUT/devdeps.log" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
  --format=csv,noheader | tee "$OUT/gpu.txt"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_WERROR=ON -DKVGATE_GIT_COMMIT="${COMMIT:-}" > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
timeout "${BUILD_LIMIT:-360}" cmake --build "$B" -j"$(nproc)" --target readkv_cuda_test \
  > "$OUT/build.log" 2>&1 || { grep -B2 -A12 -m5 "error" "$OUT/build.log" | head -80; tail -5 "$OUT/build.log"; exit 1; }
stamp "build done"
if [[ -n "${BENCH:-}" ]]; then
  cmake --build "$B" -j"$(nproc)" --target kvgate kvgate-serve > "$OUT/build_kvgate.log" 2>&1 &
  KVGATE_BUILD=$!
fi
T="$B/readkv/cuda/readkv_cuda_test"
FILTER=${TILE_FILTER:-'Tile*:*TileKernelTest*:AttentionBenchGpuTest.*'}
timeout 120 "$T" --gtest_filter="$FILTER" --gtest_output=json:"$OUT/tests.json" > "$OUT/tests.txt" 2>&1
stamp "tests rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.txt" | tr '\n' ' ')"
grep -E 'FAILED|Failure|error|differ|Expected|Which is|actual' "$OUT/tests.txt" | head -40
SAN=/usr/local/cuda/bin/compute-sanitizer
SFILTER=${SAN_FILTER:-'*TileKernelTest*:TileAttentionTest.*:TileRelayoutTest.*'}
if [[ "${SANITIZE:-1}" == 1 ]]; then
  for tool in memcheck racecheck; do
    timeout "${SAN_LIMIT:-150}" "$SAN" --tool "$tool" --error-exitcode 9 "$T" \
      --gtest_filter="$SFILTER" > "$OUT/$tool.txt" 2>&1
    stamp "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.txt" | tail -1)"
  done
fi
for spec in ${TILE_TIMINGS:-32768,16,2 32768,16,4 8192,1,2 16384,16,2,8,2,64 16384,16,7,2,8,2,64}; do
  KVGATE_TILE_TIMING=$spec timeout 90 "$T" --gtest_also_run_disabled_tests \
    --gtest_filter='TileTiming*' 2>&1 | grep -E 'tile reader|FAIL|rror' | tee -a "$FINAL/timing.txt"
done
if [[ "${PROFILE:-0}" == 1 ]]; then
  OUT=$OUT/prof BUILD_DIR=$B bash scripts/gpu_tile_profile.sh > "$OUT/profile.log" 2>&1
  stamp "profile rc=$?"
  cat "$OUT/prof/ncu_kernels.txt" | tee -a "$FINAL/timing.txt"
  grep -E "Tile(Logits|Values)<|Duration|DRAM Throughput|Eligible Warps|Achieved Occ|Block Limit (Reg|Shared)|stalled waiting" \
    "$OUT/prof/ncu_details.txt" | head -24
fi
if [[ -n "${BENCH:-}" ]]; then
  wait "$KVGATE_BUILD" || { grep -B2 -A12 -m5 error "$OUT/build_kvgate.log" | head -60; exit 1; }
  stamp "kvgate built"
  n=0
  IFS=';' read -ra points <<< "$BENCH"
  for args in "${points[@]}"; do
    # shellcheck disable=SC2086 # each entry is a word list
    timeout "${BENCH_LIMIT:-200}" "$B/apps/kvgate" bench attention --device cuda $args \
      --json "$OUT/bench_$n.json" > "$OUT/bench_$n.txt" 2>&1
    stamp "bench $n rc=$? ($args)"
    grep -vE '^(  |T=|streaming)' "$OUT/bench_$n.txt" | tee -a "$FINAL/bench.txt" | tail -14
    n=$((n + 1))
  done
fi
stamp "round done"
