#!/usr/bin/env bash
# Configures and builds kvgate into build/ (Ninja, ccache). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DKVGATE_WERROR=ON; KVGATE_TARGETS="a b" builds only those
# targets (and what they need) instead of everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVGATE_BUILD_DIR:-$root/build}
jobs=${KVGATE_JOBS:-$(nproc)}
# Let ccache reuse objects across checkouts in different folders (CI clones elsewhere).
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
cmake -S "$root" -B "$build" -G Ninja "$@" >/dev/null
targets=()
for target in ${KVGATE_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
