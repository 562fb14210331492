#!/usr/bin/env bash
# Run from the repository root after a build (./scripts/build.sh); prints synthetic_sweep.txt.
# Value weights normalised per window (--value-window-local) against the row's softmax in the
# same windows and against the row's allocation: kvgate codec attention (synthetic, one planted
# token per KV head), rel L2 error vs exact FP64, over seeds 1-10.
K=./build/apps/kvgate
run() {  # label args...
  local label=$1; shift
  for variant in "0" "512" "512 --value-window-local" "1024" "1024 --value-window-local" \
                 "2048 --value-window-local"; do
    errs=()
    for seed in $(seq 1 10); do
      # shellcheck disable=SC2086 # variant is a word list
      e=$($K codec attention "$@" --value-window $variant --seed $seed --json |
          python3 -c "import json,sys; print(json.load(sys.stdin)['rel_l2_error'])")
      errs+=("$e")
    done
    python3 - "$label" "$variant" "${errs[@]}" <<'PY'
import sys, statistics as st
label, v, errs = sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3:]]
print(f"{label:30s} window {v:26s}: mean {st.mean(errs):.5f}  min {min(errs):.5f}  max {max(errs):.5f}")
PY
  done
}
run "16K 4/2/64 tile R5 8:2 cap 2" --tokens 16384 --heads-q 4 --heads-kv 2 --head-dim 64 --kv readkv --reader tile --read-bits 5 --kv-split 8:2 --outlier-cap 2
run "16K 8/2/64 tile R5 8:2 cap 2" --tokens 16384 --heads-q 8 --heads-kv 2 --head-dim 64 --kv readkv --reader tile --read-bits 5 --kv-split 8:2 --outlier-cap 2
run "8K 32/8/128 tile (8,2)"       --tokens 8192 --heads-q 32 --heads-kv 8 --head-dim 128 --kv readkv --reader tile --read-bits 2
run "8K 32/8/128 tile (8,4) 6:2"   --tokens 8192 --heads-q 32 --heads-kv 8 --head-dim 128 --kv readkv --reader tile --read-bits 4 --kv-split 6:2
