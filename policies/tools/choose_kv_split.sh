#!/usr/bin/env bash
# How the default candidate's K/V split was chosen: every ReadKV(8, R) read configuration in
# CONFIGS is served with the built-in model (CPU) and scored on a *development* passkey set and
# QA set (seed DEV_SEED, disjoint from the seeds `kvgate run` and the model's held-out evaluation
# use), so the choice does not peek at the sets the gates are decided on. Prints one line per
# configuration: passkeys correct, QA F1.
#
# Usage: policies/tools/choose_kv_split.sh [BUILD_DIR]   (default: build)
# Env: DEV_SEED (default 777001), PASSKEYS (default 60), QA (default 48), R (default 4),
# PASSKEY_LENGTHS (default 1024,2048,4096,8192), QA_LENGTHS (default 1024,4096,8192),
# SERVE_ARGS (more `kvgate serve` flags, e.g. "--model models/long-16k --device cuda"; on a CUDA
# device only the tile reader runs), CONFIGS (space-separated: "reader" reads R with the
# equal split, "reader:RK:RV" reads R = (RK + RV) / 2 with that split, "reader:RK:RV:CAP" adds
# `--outlier-cap CAP`, "fp8" and "dense" serve those caches as reference rows), KEEP_DIR (keep each configuration's check JSON there as
# CONFIG.passkey.json / CONFIG.qa.json, ':' written as '_', to compare items across rows).
set -euo pipefail
BUILD=${1:-build}
KVGATE="$BUILD/apps/kvgate"
DEV_SEED=${DEV_SEED:-777001}
PASSKEYS=${PASSKEYS:-60}
QA=${QA:-48}
R=${R:-4}
PASSKEY_LENGTHS=${PASSKEY_LENGTHS:-1024,2048,4096,8192}
QA_LENGTHS=${QA_LENGTHS:-1024,4096,8192}
read -r -a serve_args <<< "${SERVE_ARGS:-}"
[[ -x "$KVGATE" ]] || { echo "missing $KVGATE (build it first)" >&2; exit 3; }
WORK=$(mktemp -d)
PID=""
cleanup() {
  if [[ -n "$PID" ]]; then kill "$PID" 2> /dev/null || true; wait "$PID" 2> /dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
half=$(python3 -c "print(int($R))")
CONFIGS=${CONFIGS:-"constrained flexible:$half:$half flexible:$((half + 1)):$((half - 1)) flexible:$((half + 2)):$((half - 2)) flexible:$((half + 3)):$((half - 3))"}
echo "== dev seed $DEV_SEED, $PASSKEYS passkeys ($PASSKEY_LENGTHS), $QA QA items ($QA_LENGTHS), ReadKV(8,$R) ${SERVE_ARGS:-}, $(date -u +%FT%TZ)"
printf "%-22s %10s %8s\n" "reader[:RK:RV]" "passkeys" "QA F1"
for config in $CONFIGS; do
  IFS=: read -r reader rk rv cap <<< "$config"
  if [[ "$reader" == fp8 || "$reader" == dense ]]; then
    args=(--kv "$reader")
  elif [[ -n "${rk:-}" ]]; then
    args=(--kv readkv --store-bits 8 --read-bits "$(python3 -c "print(($rk + $rv) / 2)")"
          --reader "$reader" --kv-split "$rk:$rv")
    [[ -n "${cap:-}" ]] && args+=(--outlier-cap "$cap")
  else
    args=(--kv readkv --store-bits 8 --read-bits "$R" --reader "$reader")
  fi
  "$KVGATE" serve "${serve_args[@]}" "${args[@]}" --log-level warn > "$WORK/serve.out" 2> "$WORK/serve.err" &
  PID=$!
  for _ in $(seq 300); do grep -q '^listening on ' "$WORK/serve.out" && break; sleep 0.1; done
  url="http://$(awk '/^listening on /{print $3}' "$WORK/serve.out")"
  "$KVGATE" check passkey --url "$url" --items "$PASSKEYS" --seed "$DEV_SEED" \
    --lengths "$PASSKEY_LENGTHS" --json "$WORK/passkey.json" > /dev/null || true
  "$KVGATE" check qa --url "$url" --items "$QA" --seed "$DEV_SEED" --lengths "$QA_LENGTHS" \
    --json "$WORK/qa.json" > /dev/null || true
  python3 - "$WORK/passkey.json" "$WORK/qa.json" "$config" << 'PY'
import json, sys
p, q = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
def overall(doc):  # the "all" row of the check's per-subset summary
    return next(row for row in doc["summary"] if row["subset"] == "all")
po, qo = overall(p), overall(q)
print("%-22s %10s %8.1f" % (sys.argv[3], "%d/%d" % (po["correct"], po["count"]), qo["mean_score"]))
PY
  if [[ -n "${KEEP_DIR:-}" ]]; then
    mkdir -p "$KEEP_DIR"
    cp "$WORK/passkey.json" "$KEEP_DIR/${config//:/_}.passkey.json"
    cp "$WORK/qa.json" "$KEEP_DIR/${config//:/_}.qa.json"
  fi
  kill -TERM "$PID"; wait "$PID" || true; PID=""
done
