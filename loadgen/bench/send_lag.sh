#!/usr/bin/env bash
# The generator's send lag where the suite runs it: the default policy's two servers up (FP8 and
# ReadKV, as `kvgate run` starts them), one open-loop `kvgate load` at 2 req/s against the FP8 one
# while the other idles, and the run's send lag and TTFT printed on one line (median and worst
# send lag, P50 and P99 TTFT, VALID or not under the current rule). How the validity rule's
# bound was chosen (docs/definitions.md, "Validity of a load run").
#   loadgen/bench/send_lag.sh BUILD_DIR [LABEL] [SERVER_ARGS] [LOAD_ARGS] [SERVER_ENV]
# e.g. `loadgen/bench/send_lag.sh build threads1 "--threads 1"` or
# `loadgen/bench/send_lag.sh build fifo "" "--realtime-priority 50"`.
set -u
K=$1/apps/kvgate
label=${2:-default}; server_args=${3:-}; load_args=${4:-}; server_env=${5:-}
d=$(mktemp -d)
trap 'kill $b $c 2>/dev/null; wait $b $c 2>/dev/null; rm -rf "$d"' EXIT
# shellcheck disable=SC2086  # the argument strings are word lists
env $server_env "$K" serve --kv fp8 $server_args --host 127.0.0.1 --port 0 >"$d/b.out" 2>/dev/null &
b=$!
# shellcheck disable=SC2086
env $server_env "$K" serve --kv readkv --store-bits 8 --read-bits 4 --reader flexible \
  --kv-split 6:2 $server_args --host 127.0.0.1 --port 0 >"$d/c.out" 2>/dev/null &
c=$!
for _ in $(seq 300); do grep -q listening "$d/b.out" && grep -q listening "$d/c.out" && break; sleep 0.2; done
port=$(grep -o "[0-9]*$" "$d/b.out")
# shellcheck disable=SC2086
"$K" load --url "http://127.0.0.1:$port" --rate 2 --requests 42 --warmup 2 --input-len 96 \
  --output-len 32 --seed 7 --quiet --json "$d/run.json" $load_args >/dev/null 2>&1
python3 - "$d/run.json" "$label" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
v, s = j["validity"], j["summary"]
lag = v["send_lag"]
print(f"{sys.argv[2]:16s} {'VALID' if v['valid'] else 'INVALID':7s} send lag p50 "
      f"{lag['p50_ms']:.3f} ms, worst {lag['max_ms']:.3f} ms; TTFT p50 {s['ttft']['p50_ms']:.1f} "
      f"ms, p99 {s['ttft']['p99_ms']:.1f} ms")
PY
