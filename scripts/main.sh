#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs kvgate's main command on the built-in
# default. Until `kvgate run` exists (issue 5) this is the codec demo: one ReadKV decode step at
# 8K tokens for each backend and reader, with its error and its four ledgers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh"
kvgate="${KVGATE_BUILD_DIR:-$root/build}/apps/kvgate"
"$kvgate" --version
"$kvgate" codec table --store-bits 4
common=(--tokens 8192 --heads-q 32 --heads-kv 8 --head-dim 128 --seed 1 --json)
for kv in "dense" "fp8 --fp8-scale head" "readkv --store-bits 4 --read-bits 4 --reader full" \
          "readkv --store-bits 8 --read-bits 4 --reader constrained" \
          "readkv --store-bits 8 --read-bits 2 --reader constrained" \
          "readkv --store-bits 8 --read-bits 2 --reader flexible"; do
  echo "== kvgate codec attention --kv $kv"
  # shellcheck disable=SC2086
  "$kvgate" codec attention --kv $kv "${common[@]}"
done
