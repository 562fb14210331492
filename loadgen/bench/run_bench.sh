#!/usr/bin/env bash
# The load generator's benchmark (issue 4), on this machine against a trivial local endpoint
# (kvgate_loadgen_fixture_server: one event-loop thread, 1-token SSE completions, no delay):
#   (a) the highest open-loop rate held with >= 99% achieved and P99 send lag <= 1 ms
#       (Poisson arrivals, 5 s per rate, rates stepped up until a run is INVALID);
#   (b) SSE events parsed per second (Google Benchmark on SseParser and CompletionStream);
#   (c) plain request rate, closed loop with 16 connections, as a ratio to wrk -t1 -c16 on the
#       same endpoint with the same POST body, in the same run.
#
# Usage: loadgen/bench/run_bench.sh [BUILD_DIR]   (default: build)
# Needs: the targets kvgate_loadgen_bench, kvgate_loadgen_fixture_server and
# kvgate_loadgen_load_bench built in BUILD_DIR; wrk and python3 on PATH.
set -euo pipefail

BUILD=${1:-build}
DURATION=${DURATION:-5}
RATES=${RATES:-"500 1000 1500 2000 2500 3000 3500 4000 5000 6000 8000"}
FIXTURE="$BUILD/loadgen/kvgate_loadgen_fixture_server"
LOAD="$BUILD/loadgen/kvgate_loadgen_load_bench"
SSE_BENCH="$BUILD/loadgen/kvgate_loadgen_bench"
for exe in "$FIXTURE" "$LOAD" "$SSE_BENCH"; do
  [[ -x "$exe" ]] || { echo "missing $exe (build it first)" >&2; exit 3; }
done
command -v wrk > /dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 3; }

WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then kill "$SERVER_PID" 2> /dev/null || true; wait "$SERVER_PID" 2> /dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

field() {  # field JSON_LINE NAME
  python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

echo "== machine: $(nproc) cores, $(uname -sr), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"

echo
echo "== (b) SSE parsing (Google Benchmark)"
"$SSE_BENCH" --benchmark_min_time=1 --benchmark_counters_tabular=true 2>&1 | grep -E "BM_|Benchmark|---"

"$FIXTURE" > "$WORK/server.out" &
SERVER_PID=$!
for _ in $(seq 50); do
  grep -q '^PORT ' "$WORK/server.out" 2> /dev/null && break
  sleep 0.1
done
PORT=$(awk '/^PORT /{print $2}' "$WORK/server.out")
URL="http://127.0.0.1:$PORT"
echo
echo "== endpoint: $URL/v1/completions (fixture server, pid $SERVER_PID)"

# ladder PRIORITY: steps the offered rate up until a run is INVALID or has errors; prints every
# run and the highest rate held. PRIORITY 0 = normal scheduling, else SCHED_FIFO priority of the
# sending thread (LoadSettings::realtime_priority).
ladder() {
  local priority=$1 held=0 line rate
  printf "%10s %12s %10s %14s %14s %9s  %s\n" "offered" "achieved" "fraction" "lag P50 (ms)" \
    "lag P99 (ms)" "errors" "result"
  for rate in $RATES; do
    line=$("$LOAD" --url "$URL" --rate "$rate" --duration "$DURATION" --realtime-priority "$priority")
    printf "%10s %12.1f %10.4f %14.3f %14.3f %9s  %s\n" "$rate" "$(field "$line" achieved_rps)" \
      "$(field "$line" achieved_fraction)" "$(field "$line" send_lag_p50_ms)" \
      "$(field "$line" send_lag_p99_ms)" "$(field "$line" errored)" "$(field "$line" result_line)"
    if [[ "$(field "$line" valid)" == "True" && "$(field "$line" errored)" == "0" ]]; then
      held=$rate
    else
      break
    fi
  done
  echo "highest open-loop rate held: $held req/s (goal >= 2000)"
}

echo
echo "== (a) open-loop rate held (Poisson, ${DURATION} s per rate, VALID = P99 send lag <= 1 ms and achieved >= 99%)"
echo "-- normal scheduling"
ladder 0
if chrt -f 50 true 2> /dev/null; then
  echo "-- sending thread under SCHED_FIFO 50 (--realtime-priority 50; the server stays normal)"
  ladder 50
else
  echo "-- SCHED_FIFO not permitted here; skipping the --realtime-priority ladder"
fi

echo
echo "== (c) plain request rate vs wrk (16 connections, ${DURATION} s, same POST body)"
BODY=$(python3 -c 'import json; print(json.dumps({"model": "fixture-model", "prompt": " ".join(["the"] * 16), "max_tokens": 1, "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}))')
cat > "$WORK/post.lua" << EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$BODY'
EOF
WRK_OUT=$(wrk -t1 -c16 -d"${DURATION}s" -s "$WORK/post.lua" "$URL/v1/completions")
WRK_RPS=$(echo "$WRK_OUT" | awk '/Requests\/sec:/{print $2}')
line=$("$LOAD" --url "$URL" --concurrency 16 --duration "$DURATION")
OUR_RPS=$(field "$line" request_throughput_rps)
echo "wrk -t1 -c16:             $WRK_RPS req/s"
echo "kvgate closed loop c=16:  $OUR_RPS req/s ($(field "$line" completed) completed, $(field "$line" errored) errors)"
python3 -c "import sys; print('ratio kvgate / wrk: %.3f (goal >= 0.5)' % (float(sys.argv[1]) / float(sys.argv[2])))" "$OUR_RPS" "$WRK_RPS"
