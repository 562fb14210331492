#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang-14 (fuzzer coverage + ASan + UBSan on every
# object) into their own build directory and runs each for FUZZ_SECONDS (default 60) from the
# committed seeds in fuzz/corpus/<target>/. Fails on any crash, leak, timeout, OOM or sanitizer
# report, and prints each target's executions per second and total executions (libFuzzer's
# final stats). New inputs and crash artifacts go to the build directory, never into the repo.
#   FUZZ_SECONDS=60 FUZZ_TARGETS="policy sse" KVGATE_FUZZ_BUILD_DIR=... scripts/fuzz.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVGATE_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${KVGATE_JOBS:-$(nproc)}
targets=(${FUZZ_TARGETS:-http_request policy safetensors cache_object sse})
cc=${FUZZ_CC:-clang-14}
cxx=${FUZZ_CXX:-clang++-14}
for tool in "$cc" "$cxx"; do
  command -v "$tool" >/dev/null || { echo "fuzz: $tool not found (apt-get install clang-14 libfuzzer-14-dev libclang-rt-14-dev)" >&2; exit 1; }
done

export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
# The project's warning set is gcc's (-Wshadow=local); warnings-as-errors is the gcc build's job.
warn="-Wno-unknown-warning-option"
start=$(date +%s)
# Debug keeps assertions on; -O1 keeps executions per second useful.
cmake -S "$root" -B "$build" -G Ninja -DKVGATE_FUZZ=ON -DKVGATE_BUILD_TESTS=OFF \
  -DKVGATE_BUILD_BENCHMARKS=OFF -DKVGATE_ENABLE_CUDA=OFF -DKVGATE_WERROR=OFF \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DCMAKE_C_FLAGS="$san $warn -fno-omit-frame-pointer" -DCMAKE_CXX_FLAGS="$san $warn -fno-omit-frame-pointer" \
  >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]/%/_fuzz}"
echo "fuzz: built ${#targets[@]} targets in $(( $(date +%s) - start )) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=()
summary=()
for t in "${targets[@]}"; do
  work=$build/fuzz-run/$t
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  log=$work/log.txt
  echo "fuzz: $t for $seconds s"
  rc=0
  # The scratch corpus comes first: libFuzzer writes new inputs there, the seeds stay untouched.
  "$build/fuzz/${t}_fuzz" "$work/corpus" "$root/fuzz/corpus/$t" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  units=$(ls "$work/corpus" | wc -l)
  if ((rc != 0)) || grep -qE '^(==[0-9]+==ERROR|SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer)|runtime error:' "$log"; then
    failed+=("$t")
    echo "fuzz: $t FAILED (exit $rc); log $log, artifacts:"
    ls -l "$work/artifacts"
    grep -m1 -A30 -E 'ERROR|runtime error|deadly signal' "$log" || tail -40 "$log"
  fi
  summary+=("$(printf '%-14s %10s exec/s %12s execs  cov %6s  new units %5s  peak rss %5s MB' \
    "$t" "${rate:-?}" "${execs:-?}" "${cov:-?}" "$units" "${rss:-?}")")
done
echo "fuzz: results (${seconds} s each, $(nproc) cores, $(date -u +%F))"
printf '  %s\n' "${summary[@]}"
echo "fuzz: finished in $(( $(date +%s) - start )) s"
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
