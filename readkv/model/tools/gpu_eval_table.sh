#!/bin/bash
# The quality table of one model on a CUDA host, in one bounded call: optional calibration
# (`calibrate`, CPU, as models/README.md documents), then `eval` through every KV backend at once
# (dense on CUDA; fp8 and ReadKV(8,4)/(8,2) with the flexible and the tile reader, one process
# each), each under a time limit. A backend that runs out of time is reported
# with the items it finished and its seconds per item (from the --verbose lines).
# Results go to $OUT: calibration.json (when calibrated), table.json (the summary) and
# table.tar.gz (every eval JSON and log). Run from the repository root, with .devdeps carried:
#   OUT=/tmp/out MODEL=models CALIBRATE=1 LIMIT_S=150 bash readkv/model/tools/gpu_eval_table.sh
# BUILD_DIR: a build of readkv_model_tool (built here as gpu_train.sh does when it is missing).
set -uo pipefail
start=$(date +%s)
OUT=${OUT:-/tmp/kvgate-table-out}
MODEL=${MODEL:-models}
LIMIT_S=${LIMIT_S:-150}           # per backend, all backends at once
GRID=${GRID:---per-cell 2 --qa-per-cell 4 --batch 16}
B=${BUILD_DIR:-/tmp/build-model}
mkdir -p "$OUT/table"
source .devdeps/unpack-debs.sh >/dev/null
export PKG_CONFIG_PATH=/opt/devdeps/usr/lib/x86_64-linux-gnu/pkgconfig:${PKG_CONFIG_PATH:-}
if [ ! -f "$B/build.ninja" ]; then
  cmake -S readkv/model/tools/standalone -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DEXTRA_INCLUDE="$PWD/build-gpudeps/include" >"$OUT/table/configure.log" 2>&1 \
    || { tail -40 "$OUT/table/configure.log"; exit 1; }
fi
cmake --build "$B" -j"$(nproc)" >"$OUT/table/build.log" 2>&1 \
  || { grep -m5 -A12 "error" "$OUT/table/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
if [ "${CALIBRATE:-0}" = 1 ]; then
  t=$(date +%s)
  "$B/readkv_model_tool" calibrate --model "$MODEL" --samples 16 --threads "$(nproc)" \
    || exit 1
  cp "$MODEL/calibration.json" "$OUT/calibration.json"
  echo "calibrate: $(( $(date +%s) - t )) s"
fi
declare -A kv=(
  [dense]="--kv dense"
  [fp8]="--kv fp8"
  [readkv_8_4_flexible]="--kv readkv --store-bits 8 --read-bits 4 --reader flexible"
  [readkv_8_4_tile]="--kv readkv --store-bits 8 --read-bits 4 --reader tile"
  [readkv_8_2_flexible]="--kv readkv --store-bits 8 --read-bits 2 --reader flexible"
  [readkv_8_2_tile]="--kv readkv --store-bits 8 --read-bits 2 --reader tile"
)
for name in "${!kv[@]}"; do
  # shellcheck disable=SC2086  # flag lists
  ( s=$(date +%s)
    timeout "$LIMIT_S" "$B/readkv_model_tool" eval --model "$MODEL" --device cuda --threads 2 \
      ${kv[$name]} $GRID --verbose --out "$OUT/table/eval_$name.json" \
      >/dev/null 2>"$OUT/table/eval_$name.log"
    echo "$? $(( $(date +%s) - s ))" >"$OUT/table/eval_$name.rc" ) &
done
wait
python3 - "$OUT/table" <<'EOF'
import json, os, sys
d = sys.argv[1]
rows = {}
for f in sorted(os.listdir(d)):
    if not f.endswith('.rc'):
        continue
    name = f[5:-3]
    rc, secs = open(os.path.join(d, f)).read().split()
    row = {'rc': int(rc), 'wall_s': int(secs)}
    js = os.path.join(d, f'eval_{name}.json')
    if int(rc) == 0 and os.path.exists(js):
        j = json.load(open(js))
        for k in ('passkey_correct', 'passkey_items', 'passkey_by_length', 'qa_f1', 'qa_items',
                  'qa_f1_by_length', 'seconds', 'logical_read_bytes', 'weights_digest'):
            row[k] = j.get(k)
    else:
        lines = [l for l in open(os.path.join(d, f'eval_{name}.log')) if l.startswith(('passkey', 'qa'))]
        row['items_done'] = len(lines)
        row['seconds_per_item'] = int(secs) / len(lines) if lines else None
        row['passkey_done_ok'] = sum(1 for l in lines if l.startswith('passkey') and ' ok ' in l)
        row['passkey_done'] = sum(1 for l in lines if l.startswith('passkey'))
    rows[name] = row
json.dump(rows, open(os.path.join(d, '..', 'table.json'), 'w'), indent=1)
for name, r in rows.items():
    print(name, {k: v for k, v in r.items() if k not in ('passkey_by_length', 'qa_f1_by_length')})
EOF
tar -czf "$OUT/table.tar.gz" -C "$OUT" table && rm -rf "$OUT/table"
echo "total: $(( $(date +%s) - start )) s"
