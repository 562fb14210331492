#!/usr/bin/env bash
# A same-round A/B of the served decode step on the CUDA host (the `device` tool's machine): this
# tree against a BASELINE tree, both built here side by side, the CUDA KV backend and runtime
# tests (readkv_model_test *Gpu*) of this tree first, then `kvgate bench decode` with each
# server's args of POLICY (default policies/h200-long.toml: FP8 baseline, ReadKV candidate),
# alternating trees for REPEATS rounds (the bench's run-to-run spread is ~5%: compare medians
# across repeats, not one pair). Into $OUT: summary.txt (every median) and logs.tgz (build and
# test logs, each bench's JSON).
# Run from the repository root with .devdeps and gates/report/node_modules carried, and the
# baseline made and carried as .baseline/base.tar.gz:
#   git archive --format=tar.gz -o .baseline/base.tar.gz REV -- . ':(exclude)bench/results' \
#     ':(exclude)models' ':(exclude)readkv/cuda/bench/results'
#   COMMIT=<this tree> BASELINE_COMMIT=REV OUT=/tmp/ab bash scripts/gpu_decode_ab.sh
# Without .baseline/base.tar.gz it benches this tree alone. CONTEXT, BATCH (default: the policy's
# --max-batch), STEPS set the bench.
set -uo pipefail
start=$(date +%s)
OUT=${OUT:-/tmp/kvgate-decode-ab}
POLICY=${POLICY:-policies/h200-long.toml}
B=${BUILD_DIR:-/tmp/kvgate-ab-build}
BB=$B-baseline
L=$(mktemp -d)
S=$OUT/summary.txt
mkdir -p "$OUT"
elapsed() { echo "$(( $(date +%s) - start )) s"; }
source .devdeps/unpack-debs.sh > "$L/devdeps.log" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$S"
baseline=0
if [[ -f .baseline/base.tar.gz ]]; then
  baseline=1
  mkdir -p "$BB-src" && tar xzf .baseline/base.tar.gz -C "$BB-src"
  cp -r gates/report/node_modules "$BB-src/gates/report/"
  ( cmake -S "$BB-src" -B "$BB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
      -DKVGATE_GIT_COMMIT="${BASELINE_COMMIT:-baseline}" > "$L/configure-baseline.log" 2>&1 &&
    cmake --build "$BB" -j"$(( $(nproc) / 2 ))" --target kvgate kvgate-serve \
      > "$L/build-baseline.log" 2>&1
    echo "baseline build: exit $? after $(elapsed)" >> "$S" ) &
fi
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_WERROR=ON -DKVGATE_GIT_COMMIT="${COMMIT:-unknown}" > "$L/configure.log" 2>&1 \
  || { tail -30 "$L/configure.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target kvgate kvgate-serve readkv_model_test > "$L/build.log" 2>&1 \
  || { grep -B2 -A10 "error" "$L/build.log" | head -60; exit 1; }
echo "build: $(elapsed)" | tee -a "$S"
"$B/readkv/model/readkv_model_test" --gtest_filter='*Gpu*' > "$L/gpu_tests.log" 2>&1
rc=$?
grep -E "^\[  (PASSED|FAILED) |Failure|Expected|Which is" "$L/gpu_tests.log" | head -12 | tee -a "$S"
[[ $rc == 0 ]] || { echo "GPU tests failed: no bench" | tee -a "$S"; tar czf "$OUT/logs.tgz" -C "$L" .; exit 1; }
wait
trees=(new)
# `kvgate bench decode` runs kvgate-serve beside kvgate: a tree without it has no bench.
[[ $baseline == 1 && -x "$BB/apps/kvgate" && -x "$BB/apps/kvgate-serve" ]] && trees+=(base)
for rep in $(seq 1 "${REPEATS:-2}"); do
  for tree in "${trees[@]}"; do
    kvgate=$B/apps/kvgate
    [[ $tree == base ]] && kvgate=$BB/apps/kvgate
    for side in baseline candidate; do
      # The server's args from the policy, --max-batch as the bench's batch (as gpu_run.sh).
      args=$(python3 policies/tools/bench_args.py "$POLICY" "$side" ${BATCH:+"$BATCH"}) || exit 1
      # shellcheck disable=SC2086 # args is a word list by construction
      line=$(timeout 120 "$kvgate" bench decode $args --context "${CONTEXT:-16000}" \
        --steps "${STEPS:-48}" --warmup 8 --json "$L/decode-$tree-$side-$rep.json" 2>&1 |
        grep -E " step ")
      echo "== $tree $side (repeat $rep):$line" | tee -a "$S"
    done
  done
done
tar czf "$OUT/logs.tgz" -C "$L" .
echo "total: $(elapsed)" | tee -a "$S"
