#!/usr/bin/env bash
# The test command: installs what is missing, builds with warnings as errors, runs every test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh" -DKVGATE_WERROR=ON
build=${KVGATE_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j "${KVGATE_JOBS:-$(nproc)}" --timeout 600
