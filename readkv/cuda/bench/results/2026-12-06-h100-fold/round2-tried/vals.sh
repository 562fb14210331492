#!/usr/bin/env bash
# Round 2 of 2026-12-06's fifth session (issue 37): this tree (TileWindowValues: weights' inputs
# hoisted + L2 prefetch of the planes' first lines), HOIST (.baseline/hoist.tar.gz: the hoist
# alone) and REF (.baseline/ref.tar.gz: f4cbeef, the fold) built side by side; this tree's
# kernel tests and the model's GPU tests, HOIST's kernel tests, benches of the three trees
# alternating (served and 8K x 1 twice, 32K x 16 once), sanitizers on this tree's tile tests.
set -uo pipefail
start=$(date +%s)
B=/tmp/v-build
OUT=${OUT:-/tmp/v-out}
DEADLINE=${DEADLINE:-450}
W=$OUT/w; mkdir -p "$W"
S=$OUT/summary.txt
say() { echo "$*" | tee -a "$S"; }
left() { (( $(date +%s) - start < DEADLINE )) || { say "skipped past ${DEADLINE} s: $*"; return 1; }; }
pack() { cp "$0" "$W/" 2>/dev/null; (cd "$OUT" && tar czf round.tgz w && rm -rf w); }
trap pack EXIT
source .devdeps/unpack-debs.sh > "$W/devdeps.log" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$S"
declare -A PID
for t in hoist ref; do
  mkdir -p "/tmp/v-$t-src" && tar xzf ".baseline/$t.tar.gz" -C "/tmp/v-$t-src"
  cp -r gates/report/node_modules "/tmp/v-$t-src/gates/report/" 2>/dev/null
  (cmake -S "/tmp/v-$t-src" -B "/tmp/v-$t" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DKVGATE_BUILD_BENCHMARKS=OFF -DKVGATE_GIT_COMMIT="$t" &&
   cmake --build "/tmp/v-$t" -j5 --target readkv_cuda_test kvgate kvgate-serve) > "$W/build-$t.log" 2>&1 &
  PID[$t]=$!
done
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_WERROR=ON -DKVGATE_GIT_COMMIT="${COMMIT:-}" > "$W/configure.log" 2>&1 || { tail -30 "$W/configure.log"; exit 1; }
cmake --build "$B" -j8 --target readkv_cuda_test kvgate kvgate-serve readkv_model_test \
  > "$W/build.log" 2>&1 || { grep -B2 -A12 "error" "$W/build.log" | head -60; exit 1; }
say "build: $(( $(date +%s) - start )) s"
T=$B/readkv/cuda/readkv_cuda_test
timeout 120 "$T" > "$W/tests.txt" 2>&1
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" "$W/tests.txt" | head -20 | tee -a "$S"
timeout 150 "$B/readkv/model/readkv_model_test" --gtest_filter='*GpuKvCache*:*Cuda*:*Gpu*' > "$W/model_gpu.txt" 2>&1
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" "$W/model_gpu.txt" | head -20 | tee -a "$S"
for t in hoist ref; do wait "${PID[$t]}" || { say "$t build failed"; tail -20 "$W/build-$t.log"; }; done
say "trees built: $(( $(date +%s) - start )) s"
timeout 120 /tmp/v-hoist/readkv/cuda/readkv_cuda_test > "$W/tests_hoist.txt" 2>&1
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$W/tests_hoist.txt" | head -5 | sed 's/^/hoist: /' | tee -a "$S"
bench() {  # bench STEM ARGS...: this tree, HOIST, REF, same point
  local stem=$1; shift
  left "bench $stem" || return 0
  for side in this hoist ref; do
    local bin=$B/apps/kvgate
    [[ $side != this ]] && bin=/tmp/v-$side/apps/kvgate
    timeout 100 "$bin" bench attention --device cuda "$@" --json "$W/${stem}_$side.json" > "$W/${stem}_$side.txt" 2>&1
    { echo "== $stem $side (exit $?)"; grep -E "^ +[0-9]+ +[0-9]+ |rror" "$W/${stem}_$side.txt" | grep -v " fp8 " | head -12; } | tee -a "$S"
  done
}
srv="--tokens 16384 --batch 16 --heads-q 8 --heads-kv 2 --head-dim 64 --outlier-cap 2 --no-anchor --iters 30"
sml="--tokens 8192 --batch 1 --heads-q 32 --heads-kv 8 --head-dim 128 --no-anchor --iters 30"
say "served: $srv --kv fp8,tile-kbytes:8:5:8:2 --value-window 1024; small: $sml --kv fp8,tile-kbytes:8:4.5:8:1 --value-window 512"
bench served_1 $srv --kv fp8,tile-kbytes:8:5:8:2 --value-window 1024
bench small_1 $sml --kv fp8,tile-kbytes:8:4.5:8:1 --value-window 512
bench served_2 $srv --kv fp8,tile-kbytes:8:5:8:2 --value-window 1024
bench small_2 $sml --kv fp8,tile-kbytes:8:4.5:8:1 --value-window 512
bench big --tokens 32768 --batch 16 --heads-q 32 --heads-kv 8 --head-dim 128 --no-anchor --iters 20 \
  --kv fp8,tile-kbytes:8:4.5:8:1 --value-window 1024
grep -h " fp8 " "$W"/served_1_this.txt "$W"/small_1_this.txt "$W"/big_this.txt | sed 's/^/fp8: /' | tee -a "$S"
SAN=/usr/local/cuda/bin/compute-sanitizer
f='*TileKernelTest*:TileAttentionTest.*:*TileAppendTest*'
for tool in memcheck racecheck; do
  left "sanitizer $tool" || break
  timeout 110 "$SAN" --tool $tool --error-exitcode 9 "$T" --gtest_filter="$f" > "$W/sanitizer_$tool.txt" 2>&1
  say "compute-sanitizer $tool: exit $? ($(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$W/sanitizer_$tool.txt") clean), $(grep -E '^\[  PASSED' "$W/sanitizer_$tool.txt")"
done
say "done: $(( $(date +%s) - start )) s"
