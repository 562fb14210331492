#!/usr/bin/env bash
# The H200 policy's read budget and K/V split, chosen on the development seed before the gates'
# seed is run (issue 35): one GPU round that builds kvgate against the host's libtorch and runs
# policies/tools/choose_kv_split.sh with the servers' engine flags and the quality lengths of
# POLICY (default policies/h200-long.toml: the 16K model, `--device cuda --max-batch 16`,
# passkeys at 16384 bytes, QA at 16000), on DEV_SEED (default 777001, which neither `kvgate run`
# nor the model's held-out evaluation uses). Into $OUT: split_scan.txt (one
# line per configuration: passkeys found, QA F1), checks.tar.gz (every configuration's check JSON,
# to compare items across rows with policies/tools/compare_items.py) and build.log.
# Run from the repository root with .devdeps carried:
#   OUT=/tmp/scan CONFIGS="fp8 tile:7:2:2 ..." bash scripts/gpu_choose_split.sh
# Optional: CONFIGS (choose_kv_split.sh's syntax), PASSKEYS (default 200), QA (default 100), POLICY.
set -uo pipefail
OUT=${OUT:?the output folder}
B=${BUILD_DIR:-/tmp/kvgate-gpu-build}
POLICY=${POLICY:-policies/h200-long.toml}
mkdir -p "$OUT"
start=$(date +%s)
# The engine flags (the baseline's args without its --kv, which each row sets) and the lengths.
mapfile -t from_policy < <(python3 - "$POLICY" <<'PY'
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))
args = list(p["baseline"]["args"])
if "--kv" in args:
    i = args.index("--kv")
    del args[i:i + 2]
print(" ".join(args))
print(",".join(map(str, p["quality"]["passkey"]["lengths"])))
print(",".join(map(str, p["quality"]["qa"]["lengths"])))
PY
)
[[ ${#from_policy[@]} == 3 ]] || { echo "cannot read $POLICY" >&2; exit 3; }
source .devdeps/unpack-debs.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/split_scan.txt"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_WERROR=ON > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target kvgate kvgate-serve >> "$OUT/build.log" 2>&1 \
  || { grep -A8 "error" "$OUT/build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
keep=$(mktemp -d)
SERVE_ARGS="${from_policy[0]}" PASSKEY_LENGTHS="${from_policy[1]}" QA_LENGTHS="${from_policy[2]}" \
  PASSKEYS=${PASSKEYS:-200} QA=${QA:-100} \
  CONFIGS=${CONFIGS:?configurations to scan} KEEP_DIR="$keep" \
  bash policies/tools/choose_kv_split.sh "$B" 2>&1 | tee -a "$OUT/split_scan.txt"
rc=${PIPESTATUS[0]}
tar czf "$OUT/checks.tar.gz" -C "$keep" .
echo "scan: exit $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/split_scan.txt"
exit "$rc"
