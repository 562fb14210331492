#!/usr/bin/env bash
# One whole round on the CUDA host (the `device` tool's machine: Ubuntu 24.04, CUDA 13, python3
# torch with CUDA): build the whole project against that libtorch, run the CTest suites that do
# not need Node/Chromium/Prometheus, then serve the built-in model on the GPU with each KV backend
# and run a passkey/QA check and a short decode-throughput load against it. Everything it
# measures lands in $OUT (round.json + logs). Run from the repository root with .devdeps and
# gates/report/node_modules carried:
#   OUT=/tmp/round bash scripts/gpu_round.sh
set -uo pipefail
OUT=${OUT:-/tmp/kvgate-gpu-round}
B=${BUILD_DIR:-/tmp/kvgate-gpu-build}
mkdir -p "$OUT"
start=$(date +%s)
source .devdeps/unpack-debs.sh > "$OUT/devdeps.log" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_WERROR=ON > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" -- -k 0 > "$OUT/build.log" 2>&1 || { grep -A8 "error:" "$OUT/build.log" | head -120; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
(cd "$B" && ctest -j8 -L "codec|engine|model|server|stats|history|gates|loadgen|checks" \
   -E "openai|Chromium|prometheus" --timeout 300 > "$OUT/ctest.log" 2>&1)
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | head -20
KV="$B/apps/kvgate"
results="[]"
while IFS= read -r backend; do
  [[ -z "$backend" ]] && continue
  # shellcheck disable=SC2086
  "$KV" serve $backend --device cuda --log-level warn > "$OUT/serve.out" 2> "$OUT/serve.err" &
  pid=$!
  for _ in $(seq 600); do grep -q '^listening on ' "$OUT/serve.out" && break; sleep 0.1; done
  url="http://$(awk '/^listening on /{print $3}' "$OUT/serve.out")"
  tag=$(echo "$backend" | tr ' :' '_-' | tr -d '-')
  "$KV" check passkey --url "$url" --items 44 --lengths 1024,2048,4096,8192 --concurrency 8 \
    --json "$OUT/passkey_$tag.json" > /dev/null
  "$KV" check qa --url "$url" --items 30 --lengths 1024,4096,8192 --concurrency 8 \
    --json "$OUT/qa_$tag.json" > /dev/null
  for c in 1 8; do
    "$KV" load --url "$url" --concurrency "$c" --requests $((5 * c)) --warmup "$c" \
      --input-len 160 --input-dist constant --output-len 64 --output-dist constant --seed 1 \
      --quiet --json "$OUT/load_${tag}_c$c.json" > /dev/null
  done
  kill -TERM "$pid"; wait "$pid"
  results=$(python3 - "$results" "$backend" "$OUT" "$tag" << 'PY'
import json, sys
results, backend, out, tag = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def all_row(path):
    return next(r for r in json.load(open(path))["summary"] if r["subset"] == "all")
row = {"backend": backend, "passkey": all_row(f"{out}/passkey_{tag}.json"),
       "qa": all_row(f"{out}/qa_{tag}.json")}
for c in (1, 8):
    s = json.load(open(f"{out}/load_{tag}_c{c}.json"))["summary"]
    row[f"batch{c}_output_tok_s"] = s["output_token_throughput"]
    row[f"batch{c}_tpot_p50_ms"] = s["tpot"]["p50_ms"]
results.append(row)
print(json.dumps(results))
PY
)
  echo "$backend: $(echo "$results" | python3 -c 'import json,sys; r=json.load(sys.stdin)[-1]; print(r["passkey"]["correct"], "/", r["passkey"]["count"], "passkeys; QA F1", round(r["qa"]["mean_score"],1), "; tok/s b1", round(r["batch1_output_tok_s"],1), "b8", round(r["batch8_output_tok_s"],1))')"
done << 'LIST'
--kv dense
--kv fp8
--kv readkv --store-bits 8 --read-bits 4 --reader tile
LIST
echo "$results" > "$OUT/round.json"
echo "total: $(( $(date +%s) - start )) s"
