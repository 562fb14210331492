#!/usr/bin/env bash
# The other trees of a kernel round, made here before the `device` call: for each LABEL=REV, a
# `git archive` of REV at .baseline/LABEL.tar.gz (without the committed results and models, which
# the round does not build), then the line to give scripts/gpu_kernels.sh. "baseline=REV" makes
# the BASELINE tree. Carry .baseline with the call.
#   scripts/gpu_trees.sh baseline=main slices=wip/values-slices sort=wip/values-sort-parallel
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
[[ $# -gt 0 ]] || { echo "usage: $0 LABEL=REV ..." >&2; exit 2; }
mkdir -p .baseline
candidates=() baseline=""
for entry in "$@"; do
  label=${entry%%=*} rev=${entry#*=}
  # The labels gpu_kernels.sh takes (build directories and output files are named after them).
  [[ $entry == *=* && $label =~ ^[A-Za-z0-9_-]+$ && $label != logs ]] ||
    { echo "$0: bad entry '$entry' (LABEL=REV; a label of letters, digits, - and _," \
        "not 'logs')" >&2; exit 2; }
  commit=$(git rev-parse --verify --quiet "$rev^{commit}") ||
    { echo "$0: '$rev' (for $label) is not a commit" >&2; exit 2; }
  tarball=.baseline/$label.tar.gz
  git archive --format=tar.gz -o "$tarball" "$commit" -- . ':(exclude)bench/results' \
    ':(exclude)models' ':(exclude)readkv/cuda/bench/results'
  echo "$label: ${commit:0:7} -> $tarball ($(du -h "$tarball" | cut -f1))" >&2
  if [[ $label == baseline ]]; then
    baseline="BASELINE=$tarball BASELINE_COMMIT=${commit:0:7}"
  else
    candidates+=("$label=$tarball")
  fi
done
parts=()
[[ -n $baseline ]] && parts+=("$baseline")
[[ ${#candidates[@]} -gt 0 ]] && parts+=("CANDIDATES=\"${candidates[*]}\"")
echo "${parts[*]}"
