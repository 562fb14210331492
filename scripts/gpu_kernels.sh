#!/usr/bin/env bash
# One GPU round for the decode-attention kernels (issue 8) on the CUDA host (the `device` tool's
# machine): build the kernels' consistency tests (and `kvgate` for the bench unless
# KERNELS_ONLY=1), run the GPU-vs-CPU tests, compute-sanitizer memcheck and racecheck on a subset,
# then `kvgate bench attention` on the issue's grid. Everything lands in $OUT: tests.json,
# sanitizer logs, bench.json and bench.txt, bench_baseline.* for BASELINE (and, with PROFILE=1,
# per-kernel times, DRAM bytes and issue floors from ncu at PROFILE_POINTS against the traffic
# model, profile.txt). Run from the repository root with .devdeps carried:
#   OUT=/tmp/kernels bash scripts/gpu_kernels.sh
# BASELINE=.baseline/baseline.tar.gz (a `git archive` of another commit, made and carried as
# scripts/gpu_trees.sh does; BASELINE_COMMIT names it in the JSON) builds that tree beside this
# one and benches it on the same points in the same round, so before/after ratios come from one
# run on one machine. CANDIDATES="LABEL=.baseline/LABEL.tar.gz ..." does the same for other trees
# (e.g. branches to try) and also runs their kernel tests (tests_LABEL.txt; with
# SANITIZE_CANDIDATES=1 their compute-sanitizer runs too). The other trees build while this one
# does. POINTS="ARGS1;ARGS2;..." (or POINTS=standard, the rounds' usual three sets, or
# POINTS="standard;ARGS;..." those and more) benches several point sets (each a `kvgate bench
# attention` argument list, e.g. one geometry each) instead of BENCH_ARGS, this tree and the
# others one after the other per set, into bench_pN.*, bench_baseline_pN.* and bench_LABEL_pN.*.
# Every bench's medians also go to summary.txt, and with a baseline or candidates each set's runs
# side by side (readkv/cuda/bench/compare_bench.py, this tree the reference). REPEATS=N benches
# the POINTS sets N times over, the trees alternating within each repeat, so a difference can be
# told from the machine's drift (repeat K > 0 into bench_pN_rK.*, bench_baseline_pN_rK.*, ...).
# MODEL_TESTS=1 also builds readkv_model_test and runs its GPU tests (model_gpu.txt) after the
# kernel tests. DECODE="MODE ..." (e.g. "auto off") times the served decode step after the
# benches: `kvgate bench decode` with DECODE_POLICY's candidate server (policies/h200-long.toml)
# at each `--one-pass` MODE, the modes alternating REPEATS times, and its FP8 baseline once
# (decode_*.json; the step lines in summary.txt).
# SOURCE_PROFILE="REGEX|ARGS" samples where the warps of the kernels matching REGEX wait (ncu
# SourceCounters + WarpStateStats) in one call of `kvgate bench attention ARGS` (ARGS without
# --iters or --min-total-ms, which every profile sets: NCU_BENCH_ARGS; SOURCE_COUNT
# kernels from the SOURCE_SKIP-th matching launch on, default 1 and 20): the SASS table as
# source_profile.csv.gz, its summary (readkv/cuda/bench/ncu_sass_summary.py) as
# source_profile.txt. TILE_BENCH="T,B ..." times the tile reader at those points without kvgate
# (below). PACK=1 ends by packing $OUT into round.tgz beside summary.txt (the device
# tool returns at most 8 files). Every round lists where each tree's tile kernels spill
# (spills*.txt, from cuobjdump's SASS).
set -uo pipefail
REPEATS=${REPEATS:-1}
[[ $REPEATS =~ ^[1-9][0-9]?$ ]] || { echo "REPEATS: must be 1-99, got '$REPEATS'"; exit 1; }
# What every ncu profile (PROFILE_POINTS, SOURCE_PROFILE) adds to its bench's arguments. Given
# twice, an option with a value is refused by the bench ("At Most 1 required") and the profile
# comes back empty after the whole round, so points holding one are refused before anything builds.
NCU_BENCH_ARGS=(--iters 20 --min-total-ms 1 --no-anchor)
refuse_profile_repeats() {  # refuse_profile_repeats NAME ARGS: exits when ARGS repeats a value option
  local name=$1 arg words
  read -r -a words <<< "$2"
  for arg in "${words[@]}"; do
    case $arg in
      --iters | --iters=* | --min-total-ms | --min-total-ms=*)
        echo "$name: leave $arg out of its arguments (the profile sets it)"; exit 1 ;;
    esac
  done
}
[[ -n "${SOURCE_PROFILE:-}" ]] && refuse_profile_repeats SOURCE_PROFILE "${SOURCE_PROFILE##*|}"
if [[ -n "${PROFILE_POINTS:-}" ]]; then
  IFS=';' read -r -a points_to_check <<< "$PROFILE_POINTS"
  for point in "${points_to_check[@]}"; do refuse_profile_repeats PROFILE_POINTS "$point"; done
fi
OUT=${OUT:-/tmp/kvgate-gpu-kernels}
B=${BUILD_DIR:-/tmp/kvgate-gpu-build}
mkdir -p "$OUT"
start=$(date +%s)
LOGS="$B-logs"; mkdir -p "$LOGS"
source .devdeps/unpack-debs.sh > "$LOGS/devdeps.log" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
  --format=csv,noheader | tee "$OUT/gpu.txt"
# The bench JSON's git_commit: COMMIT if given, else git's answer at this configure (an empty
# value makes CMake ask again instead of keeping a build directory's older cached one).
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_WERROR=ON -DKVGATE_GIT_COMMIT="${COMMIT:-}" > "$LOGS/configure.log" 2>&1 || { tail -40 "$LOGS/configure.log"; exit 1; }
# Other trees (each a `git archive` tarball, carried), built beside this one and while it builds
# (the kernels' translation unit compiles on one core): BASELINE (kvgate; benched as
# bench_baseline*) and CANDIDATES="LABEL=FILE ..." (kvgate and readkv_cuda_test, whose tests run
# after this tree's; benched as bench_LABEL*, with LABEL as the JSON's git_commit).
declare -A TREE_DIR TREE_PID
CANDIDATE_LABELS=()
start_tree() {  # start_tree LABEL TARBALL COMMIT TARGET...
  local label=$1 tarball=$2 commit=$3
  shift 3
  local dir="$B-$label"
  mkdir -p "$dir-src" && tar xzf "$tarball" -C "$dir-src" || exit 1
  [[ -d gates/report/node_modules ]] && cp -r gates/report/node_modules "$dir-src/gates/report/"
  (cmake -S "$dir-src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DKVGATE_BUILD_BENCHMARKS=OFF -DKVGATE_GIT_COMMIT="$commit" &&
     cmake --build "$dir" -j"$(nproc)" --target "$@") > "$LOGS/build-$label.log" 2>&1 &
  TREE_PID[$label]=$!
  TREE_DIR[$label]=$dir
}
wait_tree() {  # wait_tree LABEL: its build's end (the round stops if it failed)
  wait "${TREE_PID[$1]}" || { grep -B2 -A12 "error" "$LOGS/build-$1.log" | head -80; exit 1; }
  echo "$1 build done: $(( $(date +%s) - start )) s"
}
if [[ "${KERNELS_ONLY:-0}" != 1 ]]; then
  # A label names build directories ($B-LABEL, beside $B-logs) and output files: letters, digits,
  # - and _, once each, and not "baseline" (BASELINE's) or "logs". Every entry is checked before
  # any build starts.
  for entry in ${CANDIDATES:-}; do
    label=${entry%%=*}
    [[ $label =~ ^[A-Za-z0-9_-]+$ && $label != baseline && $label != logs && $entry == *=* &&
       " ${CANDIDATE_LABELS[*]} " != *" $label "* ]] ||
      { echo "CANDIDATES: bad entry '$entry'"; exit 1; }
    CANDIDATE_LABELS+=("$label")
  done
  # `kvgate bench` runs its benches through kvgate-serve (which links libtorch): build both.
  [[ -n "${BASELINE:-}" ]] &&
    start_tree baseline "$BASELINE" "${BASELINE_COMMIT:-baseline}" kvgate kvgate-serve
  for entry in ${CANDIDATES:-}; do
    start_tree "${entry%%=*}" "${entry#*=}" "${entry%%=*}" kvgate kvgate-serve readkv_cuda_test
  done
fi
targets=(readkv_cuda_test)
[[ "${KERNELS_ONLY:-0}" == 1 ]] || targets+=(kvgate kvgate-serve)
[[ "${MODEL_TESTS:-0}" == 1 ]] && targets+=(readkv_model_test)
cmake --build "$B" -j"$(nproc)" --target "${targets[@]}" > "$LOGS/build.log" 2>&1 ||
  { grep -B2 -A12 "error" "$LOGS/build.log" | head -150; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
T="$B/readkv/cuda/readkv_cuda_test"
"$T" > "$OUT/tests.txt" 2>&1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|Failure|error|Expected|Which is|differ" \
  "$OUT/tests.txt" | head -60
echo "tests: $(( $(date +%s) - start )) s"
if [[ "${MODEL_TESTS:-0}" == 1 ]]; then  # the model's GPU cache and CUDA tests
  "$B/readkv/model/readkv_model_test" --gtest_filter='*GpuKvCache*:*Cuda*:*Gpu*' \
    > "$OUT/model_gpu.txt" 2>&1
  echo "model GPU tests: $(grep -E "^\[  (PASSED|FAILED) " "$OUT/model_gpu.txt" | tr "\n" " ")" |
    tee -a "$OUT/summary.txt"
fi
# Where the tile kernels spill: ptxas -v gives only how many bytes, and the CPU machine has no
# disassembler. Each kernel with local loads or stores (STL/LDL in cuobjdump's SASS) and their
# addresses, for this tree and each candidate: spills[_LABEL].txt and a line in summary.txt.
spill_sites() {  # spill_sites SUFFIX BUILD_DIR
  local obj
  obj=$(find "$2" -name tile_attention.cu.o -print -quit 2> /dev/null)
  [[ -n $obj ]] && command -v cuobjdump > /dev/null || return 0
  cuobjdump -sass "$obj" | awk '
    /Function : / { fn = $3 }
    / (STL|LDL)[. ]/ {
      if (match($0, /\/\*[0-9a-f]+\*\//)) at[fn] = at[fn] " 0x" substr($0, RSTART + 2, RLENGTH - 4)
      n[fn]++
    }
    END { for (f in n) printf "%s: %d local accesses at%s\n", f, n[f], at[f] }' > "$OUT/spills$1.txt"
  echo "spill sites${1:+ (${1#_})}: $(wc -l < "$OUT/spills$1.txt") kernels (spills$1.txt)" |
    tee -a "$OUT/summary.txt"
}
spill_sites "" "$B"
for label in "${CANDIDATE_LABELS[@]}"; do
  wait_tree "$label"
  "${TREE_DIR[$label]}/readkv/cuda/readkv_cuda_test" > "$OUT/tests_$label.txt" 2>&1
  echo "tests ($label): $(grep -E "^\[  (PASSED|FAILED) " "$OUT/tests_$label.txt" | tr "\n" " ")"
  spill_sites "_$label" "${TREE_DIR[$label]}"
done
# TILE_BENCH="T,B ...": the tile reader beside dense and FP8 at those points (32/8/128) through
# the bench's own harness inside the test binary (AttentionBenchGpuTest with KVGATE_TILE_BENCH),
# so a KERNELS_ONLY=1 round times it without building kvgate.
n=0
for point in ${TILE_BENCH:-}; do
  KVGATE_TILE_BENCH=$point "$T" --gtest_filter='AttentionBenchGpuTest.TileRowsRunBeside*' \
    > "$OUT/tile_bench_$n.txt" 2>&1
  { echo "== tile bench $point (exit $?)"; grep -E "^ +[0-9]+ +[0-9]+ |FAILED|Failure" \
      "$OUT/tile_bench_$n.txt"; } | tee -a "$OUT/summary.txt"
  n=$((n + 1))
done
SAN=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
if [[ -x "$SAN" && "${SANITIZE:-1}" == 1 ]]; then
  # The dense and FP8 kernels' schedules (every SplitKernelTest case runs each), the 16 equal
  # sequences being the one whose automatic choice is a cluster schedule; the tile reader's
  # kernels. TileAppendTest's prefill appends tokens of one tile from many blocks of one launch
  # (atomics into shared words).
  filter='*SplitKernelTest*T1000_255_3000*:*SplitKernelTest*T300_1_1024_777*:'
  filter+='DecodeAttentionTest.*:*SplitKernelTest*T640_640_640*:*TileKernelTest*:'
  filter+='TileAttentionTest.*:*TileAppendTest*'
  # This tree's tests, and with SANITIZE_CANDIDATES=1 each candidate's too (sanitizer_TOOL_LABEL.txt;
  # ~50 s per tool and tree on the H200), so that a branch that wins can land from this round.
  sanitized=("")
  [[ "${SANITIZE_CANDIDATES:-0}" == 1 ]] && sanitized+=("${CANDIDATE_LABELS[@]}")
  for label in "${sanitized[@]}"; do
    binary=$T suffix=""
    [[ -n "$label" ]] && binary="${TREE_DIR[$label]}/readkv/cuda/readkv_cuda_test" suffix="_$label"
    for tool in memcheck racecheck; do
      "$SAN" --tool "$tool" --error-exitcode 9 "$binary" --gtest_filter="$filter" \
        > "$OUT/sanitizer_$tool$suffix.txt" 2>&1
      echo "compute-sanitizer $tool${label:+ ($label)}: exit $? ($(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' \
        "$OUT/sanitizer_$tool$suffix.txt") clean summaries)"
    done
  done
  echo "sanitizers: $(( $(date +%s) - start )) s"
fi
# One `kvgate bench attention` run into $OUT/STEM.json and STEM.txt, its medians appended to
# summary.txt and shown.
bench_into() {  # bench_into STEM KVGATE ARGS...
  local stem=$1 kvgate=$2
  shift 2
  "$kvgate" bench attention --device cuda "$@" --json "$OUT/$stem.json" > "$OUT/$stem.txt" 2>&1 ||
    { echo "== $stem FAILED (exit $?):"; head -3 "$OUT/$stem.txt"; } | tee -a "$OUT/summary.txt"
  # A row's time, and the lines under a one-pass row (its shape, phases, SM loads, last blocks
  # to end, Values warps), indented under it.
  local under="one pass|two launches|phases|by SM load|last to end|values warps"
  { echo "== $stem: $*"; grep -E "^ +[0-9]+ +[0-9]+ |^ +($under): " "$OUT/$stem.txt" |
      awk '$1 ~ /^(one|two|phases:|by|last|values)$/ {$1 = $1; print "    " $0; next}
           {printf "  %s x %s %s: %s us\n", $1, $2, $3, $4}'; } | tee -a "$OUT/summary.txt"
  echo "bench ($stem): $(( $(date +%s) - start )) s"
}
# POINTS=standard: the kernel rounds' usual sets (BENCHMARKS.md, "Decode-attention kernels"):
# 32/8/128 at 8K and 32K x 1 and 16 for FP8 and four tile-reader reads (byte keys among them),
# then issue 37's served geometry (8/2/64) twice, with the served read (tile:8:5:8:2) and its
# byte-key form, then the served model's own (long-16k: 4/2/64) with the byte-key form in
# windows of 1024, as kvgate serve runs it. "standard;ARGS;..." adds sets after them.
if [[ "${POINTS:-}" == standard || "${POINTS:-}" == "standard;"* ]]; then
  more=${POINTS#standard}
  POINTS="--tokens 8192,32768 --batch 1,16 --heads-q 32 --heads-kv 8 --head-dim 128 \
--kv fp8,tile:8:4,tile:8:2,tile:8:4.5:7:2,tile-kbytes:8:4.5:8:1 --no-anchor --iters 30"
  model="--tokens 16384 --batch 16 --heads-q 8 --heads-kv 2 --head-dim 64 \
--kv fp8,tile:8:5:8:2,tile-kbytes:8:5:8:2,tile:8:2 --no-anchor --iters 30"
  served="--tokens 16384 --batch 16 --heads-q 4 --heads-kv 2 --head-dim 64 --outlier-cap 2 \
--value-window 1024 --kv fp8,tile-kbytes:8:5:8:2 --no-anchor --iters 30"
  POINTS="$POINTS;$model;$model;$served$more"
fi
if [[ "${KERNELS_ONLY:-0}" != 1 && -n "${POINTS:-}" ]]; then
  [[ -n "${BASELINE:-}" ]] && wait_tree baseline
  IFS=';' read -r -a point_sets <<< "$POINTS"
  for ((r = 0; r < REPEATS; r++)); do
    rs=""; ((r > 0)) && rs="_r$r"  # the first repeat keeps the single round's names
    for i in "${!point_sets[@]}"; do
      read -r -a args <<< "${point_sets[$i]}"
      bench_into "bench_p$i$rs" "$B/apps/kvgate" "${args[@]}"
      [[ -n "${BASELINE:-}" ]] &&
        bench_into "bench_baseline_p$i$rs" "${TREE_DIR[baseline]}/apps/kvgate" "${args[@]}"
      for label in "${CANDIDATE_LABELS[@]}"; do
        bench_into "bench_${label}_p$i$rs" "${TREE_DIR[$label]}/apps/kvgate" "${args[@]}"
      done
    done
  done
  # Each set's runs side by side, this tree's first, per repeat (also into summary.txt).
  if [[ -n "${BASELINE:-}" || ${#CANDIDATE_LABELS[@]} -gt 0 ]]; then
    for ((r = 0; r < REPEATS; r++)); do
      rs=""; ((r > 0)) && rs="_r$r"
      for i in "${!point_sets[@]}"; do
        runs=("$OUT/bench_p$i$rs.json")
        [[ -n "${BASELINE:-}" ]] && runs+=("$OUT/bench_baseline_p$i$rs.json")
        for label in "${CANDIDATE_LABELS[@]}"; do runs+=("$OUT/bench_${label}_p$i$rs.json"); done
        { echo "== compared, set $i, repeat $r (readkv/cuda/bench/compare_bench.py)"
          python3 readkv/cuda/bench/compare_bench.py "${runs[@]}" 2>&1; } | tee -a "$OUT/summary.txt"
      done
    done
  fi
elif [[ "${KERNELS_ONLY:-0}" != 1 ]]; then
  read -r -a args <<< "${BENCH_ARGS:---tokens 8192,32768,131072 --batch 1,16 --heads-q 32 \
    --heads-kv 8 --head-dim 128 --kv dense,fp8,tile:8:4,tile:8:2}"
  bench_into bench "$B/apps/kvgate" "${args[@]}"
  # The baseline and candidates on VARIANT_ARGS (default: BENCH_ARGS), each against this tree in
  # the same round.
  if [[ -n "${BASELINE:-}${CANDIDATES:-}" ]]; then
    read -r -a args <<< "${VARIANT_ARGS:-${BENCH_ARGS:?VARIANT_ARGS or BENCH_ARGS}}"
  fi
  if [[ -n "${BASELINE:-}" ]]; then
    wait_tree baseline
    bench_into bench_baseline "${TREE_DIR[baseline]}/apps/kvgate" "${args[@]}"
  fi
  for label in "${CANDIDATE_LABELS[@]}"; do
    bench_into "bench_$label" "${TREE_DIR[$label]}/apps/kvgate" "${args[@]}"
  done
fi
if [[ -n "${DECODE:-}" && "${KERNELS_ONLY:-0}" != 1 ]]; then
  policy=${DECODE_POLICY:-policies/h200-long.toml}
  args=$(python3 policies/tools/bench_args.py "$policy" candidate) || exit 1
  read -r -a cand <<< "$args"
  args=$(python3 policies/tools/bench_args.py "$policy" baseline) || exit 1
  read -r -a fp8 <<< "$args"
  decode_into() {  # decode_into LABEL ARGS...: one `kvgate bench decode`, its step line kept
    local label=$1
    shift
    "$B/apps/kvgate" bench decode "$@" --context "${DECODE_CONTEXT:-16000}" --steps 48 \
      --warmup 8 --json "$OUT/decode_$label.json" > "$LOGS/decode_$label.txt" 2>&1
    echo "== decode $label (exit $?): $(grep -E " step |per step|one_pass|rror" "$LOGS/decode_$label.txt" |
      head -3 | tr -s ' ')" | tee -a "$OUT/summary.txt"
  }
  for ((r = 0; r < REPEATS; r++)); do
    for mode in $DECODE; do decode_into "${mode}_r$r" "${cand[@]}" --one-pass "$mode"; done
    ((r == 0)) && decode_into fp8 "${fp8[@]}"
  done
  echo "decode: $(( $(date +%s) - start )) s"
fi
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [[ "${PROFILE:-0}" == 1 ]]; then
  # Per-kernel GPU time, DRAM bytes, the bytes the kernel's stores write into L2 (spilled
  # registers included), its warp instructions and SM clock (its issue floor) of one tile-reader
  # call at a few points (ncu replays each kernel with its caches flushed: slow, so few): the
  # sixth call's five launches (PROFILE_KV=fp8 or dense: four launches of the split kernels
  # after 24, two calls of two launches each), set against the traffic model, per kernel too, by
  # readkv/cuda/bench/ncu_kernel_ledger.py.
  # PROFILE_POINTS="ARGS1;ARGS2;..." gives the points as `kvgate bench attention` arguments, each
  # with one --kv (default: 32K x 16 and 32K x 1 of the 32/8/128 geometry at PROFILE_KV).
  kv=${PROFILE_KV:-tile:8:4}
  default_points="--tokens 32768 --batch 16 --kv $kv;--tokens 32768 --batch 1 --kv $kv"
  IFS=';' read -r -a profile_points <<< "${PROFILE_POINTS:-$default_points}"
  n=0
  for point in "${profile_points[@]}"; do
    read -r -a args <<< "$point"
    rm -f "$LOGS/ncu-bench.json"
    # The split kernels (dense, FP8): four launches after 24; the tile reader (whose calls are
    # five launches, the only ones the regex names): the sixth call's five; with --value-window
    # three; byte keys (tile-kbytes, no TilePrepare) one fewer, and one (TileWindowPass) with
    # --one-pass.
    kernels='regex:SplitDecode|CombineSplits' skip=24 count=4
    tile=0
    [[ $point == *tile:* || $point == *tile-kbytes:* ]] && tile=1
    [[ $tile == 1 ]] &&
      kernels='regex:Tile(Prepare|Logits|Select|Values|Combine|WindowValues|WindowPass)' \
        skip=25 count=5
    [[ $tile == 1 && $point == *--value-window* ]] && skip=15 count=3
    if [[ $point == *tile-kbytes:* ]]; then count=$((count - 1)); skip=$((5 * count)); fi
    [[ $point == *tile-kbytes:* && $point == *--one-pass* ]] && skip=5 count=1
    metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
    metrics+=,lts__t_sectors_srcunit_tex_op_write.sum,smsp__inst_executed.sum
    metrics+=,sm__cycles_elapsed.avg.per_second
    "$NCU" --metrics "$metrics" --csv \
      --launch-skip "$skip" --launch-count "$count" -k "$kernels" \
      "$B/apps/kvgate" bench attention "${args[@]}" "${NCU_BENCH_ARGS[@]}" \
      --json "$LOGS/ncu-bench.json" > "$LOGS/ncu.csv" 2>&1
    echo "ncu ${args[*]}:" | tee -a "$OUT/profile.txt"
    python3 readkv/cuda/bench/ncu_kernel_ledger.py "$LOGS/ncu.csv" --bench "$LOGS/ncu-bench.json" \
      2>&1 | tee -a "$OUT/profile.txt"
    grep -E '^"' "$LOGS/ncu.csv" > "$OUT/profile_ncu_$n.csv"  # ncu's rows, as it printed them
    n=$((n + 1))
  done
fi
if [[ -n "${SOURCE_PROFILE:-}" ]]; then
  regex=${SOURCE_PROFILE%|*}  # the last "|" ends the regex, which may hold "|" itself
  read -r -a args <<< "${SOURCE_PROFILE##*|}"
  "$NCU" --section SourceCounters --section WarpStateStats --import-source yes \
    -k "regex:$regex" --launch-skip "${SOURCE_SKIP:-20}" --launch-count "${SOURCE_COUNT:-1}" \
    -o "$LOGS/source" -f "$B/apps/kvgate" bench attention --device cuda "${args[@]}" \
    "${NCU_BENCH_ARGS[@]}" > "$LOGS/ncu-source.log" 2>&1 || tail -5 "$LOGS/ncu-source.log"
  "$NCU" -i "$LOGS/source.ncu-rep" --page source --csv --print-source sass > "$LOGS/source.csv" 2>&1
  gzip -c "$LOGS/source.csv" > "$OUT/source_profile.csv.gz"
  python3 readkv/cuda/bench/ncu_sass_summary.py "$LOGS/source.csv" --top 30 --regions \
    > "$OUT/source_profile.txt" 2>&1
  head -60 "$OUT/source_profile.txt"
  echo "source profile: $(( $(date +%s) - start )) s"
fi
if [[ "${PACK:-0}" == 1 ]]; then
  (cd "$OUT" && tar czf /tmp/kvgate-round.tgz --exclude=summary.txt . &&
    find . -maxdepth 1 -type f ! -name summary.txt -delete && mv /tmp/kvgate-round.tgz round.tgz)
  echo "packed: $OUT/round.tgz ($(du -h "$OUT/round.tgz" | cut -f1)); left beside it: $(ls "$OUT" | tr "\n" " ")"
fi
