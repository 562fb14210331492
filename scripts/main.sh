#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs `kvgate run` on the built-in default
# policy (policies/default.toml: the FP8 baseline against the ReadKV candidate, both `kvgate
# serve` on the built-in model, on CPU, started and stopped by the suite on free loopback ports).
# The history goes to ./kvgate.db, the reports to ./kvgate-out (override with KVGATE_DB and
# KVGATE_OUT). The exit status is kvgate run's: 0 GO, 1 NO-GO, 2 INCONCLUSIVE, 3 could not run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
# Only what the main job runs: kvgate and kvgate-serve (the default policy serves the built-in
# model: `kvgate serve` runs kvgate-serve), without the tests and benchmarks (the tests' command
# builds those), and without the CUDA kernels where no GPU is (they are ~5 of its ~15 CPU-minutes
# and the main job runs on the CPU there). A CPU build gets its own folder so that it never
# reconfigures the tests' CUDA build in build/.
# The CPU build also leaves out debug information (-O2 as the default build type, without -g):
# on the 2-core machine -g is ~27% of a heavy file's compile time (readkv/model's runtime.cc
# 27.9 against 20.3 CPU-s, server.cc 15.2 against 11.7, 2026-12-05), and nothing in the main job
# reads it. The tests' build keeps it.
if nvidia-smi -L >/dev/null 2>&1; then
  cuda=ON build=${KVGATE_BUILD_DIR:-$root/build} flags=()
else
  cuda=OFF build=${KVGATE_BUILD_DIR:-$root/build-cpu}
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG"
         "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG")
fi
KVGATE_BUILD_DIR=$build KVGATE_TARGETS="kvgate kvgate-serve" "$root/scripts/build.sh" \
  -DKVGATE_ENABLE_CUDA=$cuda -DKVGATE_BUILD_TESTS=OFF -DKVGATE_BUILD_BENCHMARKS=OFF "${flags[@]}"
kvgate="$build/apps/kvgate"
"$kvgate" --version
exec "$kvgate" run --db "${KVGATE_DB:-$root/kvgate.db}" --out "${KVGATE_OUT:-$root/kvgate-out}"
