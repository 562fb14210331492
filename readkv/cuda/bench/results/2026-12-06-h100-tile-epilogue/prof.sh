#!/usr/bin/env bash
# Source profile of the byte-key tile reader at the served point (issue 37): where the
# instructions and stalls of TileLogits<64,4,1> and TileWindowValues<64,4> are.
srv="--tokens 16384 --batch 16 --heads-q 8 --heads-kv 2 --head-dim 64"
export POINTS="$srv --no-anchor --iters 30 --kv fp8,tile-kbytes:8:5:8:2 --value-window 1024 --outlier-cap 2"
export SOURCE_PROFILE="TileLogits|TileWindowValues|$srv --kv tile-kbytes:8:5:8:2 --value-window 1024 --outlier-cap 2"
export SOURCE_COUNT=2 SKIP_TESTS=1 SANITIZE=0 PACK=1
timeout ${ROUND_LIMIT_S:-540} bash scripts/gpu_kernels.sh
