#!/usr/bin/env bash
# Profiles one tile-reader call and one FP8 call (the TileTiming test at TILE_TIMING, default
# 32768,16,2) under ncu: per kernel time, DRAM bytes, warp instructions, registers and occupancy
# (ncu_kernels.txt), then the full sections of TileLogits and TileValues (ncu_details.txt).
# Builds readkv_cuda_test first, like gpu_tile.sh. From the repository root with .devdeps carried.
set -uo pipefail
OUT=${OUT:-/tmp/kvgate-gpu-tile}
B=${BUILD_DIR:-/tmp/kvgate-gpu-tile-build}
mkdir -p "$OUT"
source .devdeps/unpack-debs.sh > /dev/null 2>&1
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_BENCHMARKS=OFF \
  -DKVGATE_WERROR=ON > /dev/null 2>&1 || exit 1
cmake --build "$B" -j"$(nproc)" --target readkv_cuda_test > "$OUT/build.log" 2>&1 ||
  { grep -B2 -A12 -m5 error "$OUT/build.log" | head -60; exit 1; }
T="$B/readkv/cuda/readkv_cuda_test"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
run() { KVGATE_TILE_TIMING=${TILE_TIMING:-32768,16,2} "$@" "$T" --gtest_also_run_disabled_tests \
  --gtest_filter='TileTiming*'; }
run env | grep 'tile reader'
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
M=$M,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,launch__grid_size,launch__occupancy_limit_registers,l1tex__t_bytes.sum,lts__t_bytes.sum
run timeout 200 "$NCU" --kernel-name-base function -k 'regex:Tile|Split' --launch-skip 15 \
  --launch-count 7 --metrics "$M" --csv --page raw > "$OUT/ncu_kernels.csv" 2>"$OUT/ncu_err.txt"
python3 - "$OUT/ncu_kernels.csv" <<'PY' | tee "$OUT/ncu_kernels.txt"
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
head, data = rows[0], rows[2:]
cols = [("gpu__time_duration.sum", "ns"), ("dram__bytes_read.sum", "read B"),
        ("dram__bytes_write.sum", "write B"), ("smsp__inst_executed.sum", "warp inst"),
        ("launch__registers_per_thread", "regs"),
        ("sm__warps_active.avg.pct_of_peak_sustained_active", "active %"),
        ("launch__grid_size", "grid")]
at = {name: head.index(name) for name, _ in cols if name in head}
name_at = head.index("Kernel Name")
print("kernel".ljust(28) + "".join(label.rjust(14) for _, label in cols))
for r in data:
    print(r[name_at].split("(")[0][-28:].ljust(28) +
          "".join(r[at[n]].rjust(14) if n in at else "-".rjust(14) for n, _ in cols))
PY
run timeout 200 "$NCU" -k 'regex:TileLogits|TileValues' --launch-skip 6 --launch-count 2 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section LaunchStats --section ComputeWorkloadAnalysis \
  > "$OUT/ncu_details.txt" 2>&1
grep -E 'TileLogits|TileValues|Duration|Throughput|Warp Cycles Per Issued|Issued Warp|Eligible|Achieved Occupancy|Registers|Stall|No Eligible|Block Limit|Theoretical Occ|Executed Ipc|L1/TEX Hit|L2 Hit' "$OUT/ncu_details.txt" | head -90
