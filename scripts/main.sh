#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs `kvgate run` on the built-in default
# policy (policies/default.toml: the FP8 baseline against the ReadKV candidate, both `kvgate
# serve` on the built-in model, on CPU, started and stopped by the suite on free loopback ports).
# The history goes to ./kvgate.db, the reports to ./kvgate-out (override with KVGATE_DB and
# KVGATE_OUT). The exit status is kvgate run's: 0 GO, 1 NO-GO, 2 INCONCLUSIVE, 3 could not run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh"
kvgate="${KVGATE_BUILD_DIR:-$root/build}/apps/kvgate"
"$kvgate" --version
exec "$kvgate" run --db "${KVGATE_DB:-$root/kvgate.db}" --out "${KVGATE_OUT:-$root/kvgate-out}"
