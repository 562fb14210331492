#!/usr/bin/env python3
"""Each kernel's time and measured DRAM traffic in an Nsight Compute run, against the traffic model.

Reads the CSV that `ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,
dram__bytes_write.sum[,lts__t_sectors_srcunit_tex_op_write.sum][,smsp__inst_executed.sum,
sm__cycles_elapsed.avg.per_second]` prints for the launches it profiled (the profiled program's
own output may come before and between its lines), and prints per launch: the kernel, its time,
the bytes it read from and wrote to DRAM, the rate they make, with the L2 metric the bytes its
stores wrote into L2 (spilled registers included), and with the last two its warp instructions
and its issue floor as a share of its time (the floor: the time its instructions take when each
of the SMs' 4 schedulers issues one every cycle at the measured SM clock; --sms, default 132, an
H100's or H200's). The launches form calls: a call starts at each launch of the first launch's
kernel (TilePrepare for the tile reader, TileLogits for its byte keys, the split kernel for
dense and FP8). With --bench, the
JSON that `kvgate bench attention --json` wrote in the same run (one row: the profiled point), it
then sets one call's measured bytes against the row's modelled physical traffic
(`traffic_bytes.total`, readkv/cuda/src/traffic.cc), the call's time against its two floors
(issue, and the model's bytes at the run's streaming-read rate), and each kernel's reads and
writes against the model's share of that kernel (`traffic_kernels`, where the JSON has them).

ncu replays each kernel with its caches flushed (its default cache control), so reads are cold,
as the bench's rotated buffers make them; writes still in L2 when a kernel ends are not counted
as its DRAM writes.

  ncu_kernel_ledger.py NCU_CSV [--bench BENCH_JSON] [--sms N]

Exit 0 done; 2 bad input (named).
"""
import argparse
import csv
import re
import signal
import sys

from compare_bench import BadInput, load_bench

METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")
# Optional: the L2 sectors the kernel's own stores write (all it writes, spilled registers
# included, whether or not they reach DRAM before it ends).
L2_WRITE = "lts__t_sectors_srcunit_tex_op_write.sum"
# Optional, as a pair: the warp instructions the kernel executed and its SM clock.
INST = "smsp__inst_executed.sum"
CLOCK = "sm__cycles_elapsed.avg.per_second"
SCHEDULERS_PER_SM = 4  # each issues at most one warp instruction a cycle
OPTIONAL = (L2_WRITE, INST, CLOCK)
INSTRUCTIONS = {"inst": 1, "Kinst": 1e3, "Minst": 1e6, "Ginst": 1e9}
HERTZ = {"hz": 1, "Khz": 1e3, "Mhz": 1e6, "Ghz": 1e9, "cycle/second": 1, "cycle/msecond": 1e3,
         "cycle/usecond": 1e6, "cycle/nsecond": 1e9}
SECTOR_BYTES = {"sector": 32, "Ksector": 32e3, "Msector": 32e6, "Gsector": 32e9}
TIME_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
           "second": 1e6, "s": 1e6}
BYTES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
         "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
         "Kibyte": 1024, "Mibyte": 1024 ** 2, "Gibyte": 1024 ** 3,
         "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def fail(message):
    raise BadInput(message)


def short_name(name):
    """A kernel's name without its parameter list, return type and namespaces
    ("void ns::TileValues<64, 4>(ns::TileArgs)" -> "TileValues<64, 4>")."""
    name = name.strip()
    if name.endswith(")"):  # the parameter list: from the "(" that matches the last ")"
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    # Anonymous namespaces: the demangler's form, then ncu's. ncu prints "unnamed>::" where the
    # demangler has "(anonymous namespace)::", so inside template arguments the argument list's own
    # "<" stands before it ("SplitDecodeKernel<unnamed>::Fp8Rows<3>, ...>"), and at a name's start
    # nothing does ("unnamed>::CombineSplits(...)", as an H200's ncu printed them).
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"(?<![\w>])<unnamed>::", "", name)
    name = name.replace("unnamed>::", "")
    if name.startswith("void "):
        name = name[len("void "):]
    head, bracket, rest = name.partition("<")  # the namespaces before the template arguments
    return head.split("::")[-1] + bracket + rest


def read_launches(path):
    """[(id, kernel, {metric: value in us or bytes})] in launch order."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        fail(f"{path}: no ncu CSV header (a line starting with \"ID\",)")
    header = next(csv.reader([lines[start]]))
    for column in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"):
        if column not in header:
            fail(f"{path}: the CSV header has no '{column}' column")
    col = {name: header.index(name) for name in header}
    launches = {}
    for line in lines[start + 1:]:
        if not line.startswith('"'):
            continue  # the profiled program's output, or ncu's own ==PROF== lines
        row = next(csv.reader([line]))
        if len(row) != len(header):
            continue
        metric, unit = row[col["Metric Name"]], row[col["Metric Unit"]]
        if metric not in METRICS + OPTIONAL:
            continue
        scale = (TIME_US if metric.startswith("gpu__time") else SECTOR_BYTES if metric == L2_WRITE
                 else INSTRUCTIONS if metric == INST else HERTZ if metric == CLOCK else BYTES)
        if unit not in scale:
            fail(f"{path}: unit '{unit}' of {metric} is not one this script knows")
        try:
            value = float(row[col["Metric Value"]].replace(",", "")) * scale[unit]
        except ValueError:
            fail(f"{path}: {metric} of launch {row[col['ID']]} is not a number: "
                 f"'{row[col['Metric Value']]}'")
        launch = launches.setdefault(int(row[col["ID"]]),
                                     {"kernel": short_name(row[col["Kernel Name"]])})
        launch[metric] = value
    if not launches:
        fail(f"{path}: no launch with {', '.join(METRICS)}")
    # The optional metrics are optional for the whole run, not per launch: all have one or none;
    # the instructions and the clock come together (the issue floor needs both).
    present = tuple(m for m in OPTIONAL if any(m in launch for launch in launches.values()))
    if (INST in present) != (CLOCK in present):
        have, lack = (INST, CLOCK) if INST in present else (CLOCK, INST)
        fail(f"{path}: the launches have {have} but not {lack}: the issue floor needs both")
    required = METRICS + present
    result = []
    for launch_id in sorted(launches):
        launch = launches[launch_id]
        missing = [m for m in required if m not in launch]
        if missing:
            fail(f"{path}: launch {launch_id} ({launch['kernel']}) lacks {', '.join(missing)}")
        result.append((launch_id, launch["kernel"], launch))
    return result


def model_row(path):
    """The one row of a bench JSON: (label, traffic_bytes.total, traffic_kernels or [], the run's
    streaming-read rate in GB/s or None)."""
    doc = load_bench(path)
    rows = [r for r in doc.get("rows", []) if not r.get("anchor")]
    if len(rows) != 1:
        fail(f"{path}: {len(rows)} kernel rows; the profiled point's bench must have one "
             f"(one --tokens, --batch and --kv)")
    row = rows[0]
    total = row.get("traffic_bytes", {}).get("total")
    if not isinstance(total, (int, float)):
        fail(f"{path}: its row has no traffic_bytes.total")
    kernels = row.get("traffic_kernels", [])  # absent in JSON of before the model had it
    for k in kernels:
        if not (isinstance(k, dict) and isinstance(k.get("kernel"), str) and
                all(isinstance(k.get(f), (int, float)) for f in ("read", "write"))):
            fail(f"{path}: a traffic_kernels entry is not {{kernel, read, write}}: {k!r}")
    gbps = (doc.get("stream") or {}).get("gbps")
    if gbps is not None and not (isinstance(gbps, (int, float)) and gbps > 0):
        fail(f"{path}: stream.gbps is not a positive number: {gbps!r}")
    return f"{row['kv']} {row['tokens']} x {row['batch']}", float(total), kernels, gbps


def print_by_kernel(kernels, launches, calls, l2):
    """The model's bytes per launch (traffic_kernels) against the measured ones, per call: a
    measured launch counts for the model's kernel its name starts with. Writes are the L2 sectors
    the kernel wrote when the CSV has them (l2; what the model counts), else its DRAM writes."""
    written = "L2 written" if l2 else "DRAM write"
    print(f"{'by kernel, per call (MB)':<26} {'read model':>11} {'DRAM read':>9} {'ratio':>7} "
          f"{'write model':>12} {written:>10} {'ratio':>7}")

    def ratio(measured, model):
        return f"{measured / model:6.3f}x" if model > 0 else f"{'--':>7}"

    matched = set()
    for k in kernels:
        read = write = 0.0
        for launch_id, kernel, m in launches:
            if kernel.startswith(k["kernel"]):
                read += m["dram__bytes_read.sum"]
                write += m[L2_WRITE] if l2 else m["dram__bytes_write.sum"]
                matched.add(launch_id)
        read, write = read / calls, write / calls
        print(f"{k['kernel']:<26} {k['read'] / 1e6:11.2f} {read / 1e6:9.2f} "
              f"{ratio(read, k['read'])} {k['write'] / 1e6:12.2f} {write / 1e6:10.2f} "
              f"{ratio(write, k['write'])}")
    for kernel in sorted({kernel for i, kernel, _ in launches if i not in matched}):
        print(f"{kernel}: profiled, but no kernel of the model's is a prefix of its name")


def issue_floor_us(m, sms):
    """The time a launch's warp instructions take at one per scheduler and cycle, in us."""
    return m[INST] / (sms * SCHEDULERS_PER_SM * m[CLOCK]) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="ncu --csv output with the three metrics (and the optional)")
    parser.add_argument("--bench", help="the same run's `kvgate bench attention --json` file")
    parser.add_argument("--sms", type=int, default=132,
                        help="the device's SMs, for the issue floor (default 132)")
    args = parser.parse_args()
    if args.sms <= 0:
        fail(f"--sms must be positive, not {args.sms}")

    launches = read_launches(args.csv)
    first = launches[0][1]
    calls = sum(1 for _, kernel, _ in launches if kernel == first)
    l2 = L2_WRITE in launches[0][2]  # then in every launch (read_launches)
    issue = INST in launches[0][2]  # with CLOCK, likewise
    print(f"{'kernel':<44} {'time us':>9} {'DRAM read MB':>13} {'write MB':>9} {'GB/s':>7}" +
          (f" {'L2 written MB':>14}" if l2 else "") +
          (f" {'M inst':>9} {'issue floor':>11}" if issue else ""))
    total_time = total_read = total_write = total_floor = 0.0
    for _, kernel, m in launches:
        time_us = m["gpu__time_duration.sum"]
        read, write = m["dram__bytes_read.sum"], m["dram__bytes_write.sum"]
        rate = (read + write) / (time_us * 1e3) if time_us > 0 else 0.0
        line = f"{kernel:<44} {time_us:9.1f} {read / 1e6:13.2f} {write / 1e6:9.2f} {rate:7.0f}"
        if l2:
            line += f" {m[L2_WRITE] / 1e6:14.2f}"
        if issue:
            floor = issue_floor_us(m, args.sms)
            share = f"{100.0 * floor / time_us:10.1f}%" if time_us > 0 else f"{'--':>11}"
            line += f" {m[INST] / 1e6:9.2f} {share}"
            total_floor += floor
        print(line)
        total_time += time_us
        total_read += read
        total_write += write
    per_call = (total_read + total_write) / calls
    call_time = total_time / calls
    print(f"{f'one call (mean of {calls})':<44} {call_time:9.1f} "
          f"{total_read / calls / 1e6:13.2f} {total_write / calls / 1e6:9.2f}")
    if issue:
        print(f"issue floor of one call: {total_floor / calls:.1f} us, "
              f"{100.0 * total_floor / total_time:.1f}% of its time ({args.sms} SMs x "
              f"{SCHEDULERS_PER_SM} schedulers at each launch's SM clock)")
    if args.bench:
        label, model, kernels, gbps = model_row(args.bench)
        ratio = per_call / model if model > 0 else float("nan")
        print(f"model ({label}): {model / 1e6:.2f} MB physical traffic per call; "
              f"measured DRAM read + write {per_call / 1e6:.2f} MB = {ratio:.3f}x the model")
        if gbps is not None:
            floor = model / (gbps * 1e3)
            print(f"bytes floor of one call: {floor:.1f} us, {100.0 * floor / call_time:.1f}% of "
                  f"its time (the model's bytes at the run's streaming read, {gbps:.0f} GB/s)")
        if kernels:
            print_by_kernel(kernels, launches, calls, l2)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    try:
        main()
    except BadInput as e:
        print(f"ncu_kernel_ledger.py: {e}", file=sys.stderr)
        sys.exit(2)
