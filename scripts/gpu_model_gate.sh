#!/usr/bin/env bash
# The quality a model brings to the H200 go/no-go before any candidate is compared: `kvgate serve
# --device cuda` on MODEL with the dense and the FP8 KV cache, each asked the exact passkey items
# of a policy's quality.passkey (its seed, lengths, depths, digits: the gates' items) and, on a
# development seed the gates never use, QA items at the policy's QA length. A model is fit for
# the policy only if both caches find every passkey: no candidate can pass where the production
# cache misses a key. Writes $OUT/model_gate.txt and the check JSONs (model-<kv>-<check>.json).
#   KVGATE=build/apps/kvgate MODEL=models/long-16k OUT=/tmp/o bash scripts/gpu_model_gate.sh
# Optional: POLICY (default policies/h200-long.toml), DEV_SEED (default 777001), QA_ITEMS (100),
# DEVICE (cuda; cpu for a smoke test), PASSKEY_ITEMS (200).
set -uo pipefail
KVGATE=${KVGATE:?the kvgate binary}
MODEL=${MODEL:?the model directory}
OUT=${OUT:?the output folder}
POLICY=${POLICY:-policies/h200-long.toml}
mkdir -p "$OUT"
read -r seed lengths depths digits max_tokens qa_len < <(python3 - "$POLICY" <<'PY'
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))
k, q = p["quality"]["passkey"], p["quality"]["qa"]
print(p["seed"], ",".join(map(str, k["lengths"])), ",".join(map(str, k["depths"])),
      k.get("key_digits", 5), k.get("max_tokens", 8), max(q["lengths"]))
PY
)
for kv in dense fp8; do
  log=$(mktemp)
  "$KVGATE" serve --model "$MODEL" --device "${DEVICE:-cuda}" --max-batch 16 --kv "$kv" --host 127.0.0.1 \
    --port 0 > "$log" 2> "$log.err" &
  pid=$!
  for _ in $(seq 600); do
    grep -q "listening on" "$log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if ! grep -q "listening on" "$log"; then
    # A server that died or never listened is the model gate's failure, said with its reason.
    echo "$kv: kvgate serve did not start (exit $(wait "$pid"; echo $?)); its stderr:" \
      | tee -a "$OUT/model_gate.txt"
    tail -5 "$log.err" | sed "s/^/  /" | tee -a "$OUT/model_gate.txt"
    kill "$pid" 2>/dev/null; status=1; continue
  fi
  url="http://$(grep -o 'listening on [0-9.:]*' "$log" | cut -d' ' -f3)"
  "$KVGATE" check passkey --url "$url" --items "${PASSKEY_ITEMS:-200}" --seed "$seed" --lengths "$lengths" \
    --depths "$depths" --key-digits "$digits" --max-tokens "$max_tokens" --concurrency 16 \
    --json "$OUT/model-$kv-passkey.json" | tail -3 | sed "s/^/$kv passkey: /" \
    | tee -a "$OUT/model_gate.txt"
  "$KVGATE" check qa --url "$url" --items "${QA_ITEMS:-100}" --seed "${DEV_SEED:-777001}" \
    --lengths "$qa_len" --concurrency 16 --json "$OUT/model-$kv-qa.json" | tail -2 \
    | sed "s/^/$kv qa (dev seed): /" | tee -a "$OUT/model_gate.txt"
  kill "$pid"; wait "$pid" 2>/dev/null
done
exit "${status:-0}"
