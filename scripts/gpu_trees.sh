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
  [[ $entry == *=* && $label =~ ^[A-Za-z0-9_-]+$ ]] ||
    { echo "$0: bad entry '$entry' (LABEL=REV, a label of letters, digits, - and _)" >&2; exit 2; }
  commit=$(git rev-parse --verify --quiet "$rev^{commit}") ||
    { echo "$0: '$rev' (for $label) is not a commit" >&2; exit 2; }
  git archive --format=tar.gz -o ".baseline/$label.tar.gz" "$commit" -- . ':(exclude)bench/results' \
    ':(exclude)models' ':(exclude)readkv/cuda/bench/results'
  echo "$label: ${commit:0:7} -> .baseline/$label.tar.gz ($(du -h ".baseline/$label.tar.gz" | cut -f1))" >&2
  if [[ $label == baseline ]]; then
    baseline="BASELINE=.baseline/baseline.tar.gz BASELINE_COMMIT=${commit:0:7}"
  else
    candidates+=("$label=.baseline/$label.tar.gz")
  fi
done
parts=()
[[ -n $baseline ]] && parts+=("$baseline")
[[ ${#candidates[@]} -gt 0 ]] && parts+=("CANDIDATES=\"${candidates[*]}\"")
echo "${parts[*]}"
