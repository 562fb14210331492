#!/usr/bin/env bash
# One whole go/no-go round on the CUDA host (the `device` tool's machine: Ubuntu 24.04, CUDA 13,
# python3 torch with CUDA): build kvgate against that libtorch, then `kvgate run` on a GPU policy
# (default policies/h200-long.toml: FP8 vs ReadKV, both served with --device cuda at 16K). Into
# $OUT: report.json, report.html, kvgate.db (the history), outcome.json (`kvgate run --json`),
# run.log (its progress lines), decode_bench.txt (`kvgate bench decode` with each server's args)
# and logs.tgz (build log, GPU KV test log, server logs, decode-{baseline,candidate}.json): seven
# files, the device tool returns at most eight.
# The CUDA KV backends' tests (readkv_model_test *Gpu*) run first; the round stops if they fail.
# Run from the repository root with .devdeps and gates/report/node_modules carried; COMMIT names
# the commit the tree is (the host's copy has no .git); RUN_LIMIT_S bounds `kvgate run` (below):
#   COMMIT=$(git rev-parse --short=12 HEAD) OUT=/tmp/run bash scripts/gpu_run.sh
# A run longer than one call goes in legs (docs/product.md, "Runs in legs"): bring the history
# back from $OUT, carry it into the next call (an ignored path, e.g. .gpu-history/kvgate.db) and
# name it with HISTORY, and the run to continue with RESUME; the same COMMIT is required.
# DECODE_BENCH=0 and GPU_TESTS=0 leave out what the first leg already measured:
#   HISTORY=.gpu-history/kvgate.db RESUME=1 DECODE_BENCH=0 GPU_TESTS=0 COMMIT=... bash scripts/gpu_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/kvgate-gpu-run}
B=${BUILD_DIR:-/tmp/kvgate-gpu-build}
POLICY=${POLICY:-policies/h200-long.toml}
WORK=$(mktemp -d)
mkdir -p "$OUT"
start=$(date +%s)
source .devdeps/unpack-debs.sh > "$WORK/devdeps.log" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$WORK/gpu.txt"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_WERROR=ON -DKVGATE_GIT_COMMIT="${COMMIT:-unknown}" > "$WORK/configure.log" 2>&1 \
  || { tail -40 "$WORK/configure.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target kvgate kvgate-serve readkv_model_test > "$WORK/build.log" 2>&1 \
  || { grep -A8 "error" "$WORK/build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
# The CUDA KV backends the servers will use, against the CPU codec first.
if [[ ${GPU_TESTS:-1} != 0 ]]; then
  "$B/readkv/model/readkv_model_test" --gtest_filter='*Gpu*' > "$WORK/gpu_kv_test.log" 2>&1 \
    || { grep -E "Failure|FAILED|error" "$WORK/gpu_kv_test.log" | head -20; exit 1; }
  grep -E "worst relative|passkeys on the GPU|PASSED" "$WORK/gpu_kv_test.log"
fi
# The decode step of each server as the policy starts it (its args, --max-batch as the batch), at
# 16K context: `kvgate bench decode` times what separates the two once prompts are in.
sides="baseline candidate"
[[ ${DECODE_BENCH:-1} == 0 ]] && sides=""
for side in $sides; do
  args=$(python3 policies/tools/bench_args.py "$POLICY" "$side") || exit 1
  # shellcheck disable=SC2086 # args is a word list by construction
  "$B/apps/kvgate" bench decode $args --context 16000 --steps 64 --warmup 8 \
    --json "$WORK/decode-$side.json" 2>&1 | tee -a "$OUT/decode_bench.txt" | grep -E "step|prefill"
done
# The device tool ends a call at 10 minutes: past RUN_LIMIT_S (default 480 s) kvgate gets SIGTERM,
# stops its servers and records the run `interrupted` with every row so far (a 4.5-pair chunked
# run was cut by the call limit itself on 2026-11-30 and left no logs.tgz).
resume=()
if [[ -n ${HISTORY:-} ]]; then
  cp "$HISTORY" "$OUT/kvgate.db" || exit 1
  [[ -n ${RESUME:-} ]] && resume=(--resume "$RESUME")
fi
timeout --signal=TERM --kill-after=30 "${RUN_LIMIT_S:-480}" \
  "$B/apps/kvgate" run --policy "$POLICY" --db "$OUT/kvgate.db" --out "$WORK/run" --json \
  "${resume[@]}" > "$OUT/outcome.json" 2> "$OUT/run.log"
rc=$?
[[ $rc == 124 ]] && echo "kvgate run: stopped at RUN_LIMIT_S=${RUN_LIMIT_S:-480} s (recorded interrupted)"
echo "kvgate run: exit $rc after $(( $(date +%s) - start )) s"
cp "$WORK/run/report.json" "$WORK/run/report.html" "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$WORK" --exclude 'run/report.*' . 2>/dev/null
grep -E "verdict|gate|passkey|QA|pair" "$OUT/run.log" | tail -30
exit $rc
