#!/usr/bin/env python3
"""Where a kernel's warps wait, from an Nsight Compute source export.

Input: the CSV that `ncu -i REPORT.ncu-rep --page source --csv --print-source sass` prints for a
report taken with `--section SourceCounters --section WarpStateStats --import-source yes` (one
block per kernel: a "Kernel Name" line, a header line, one line per SASS instruction; ncu may
print a kernel twice, the first is used). Output, per kernel whose name contains FILTER (all when
omitted): its stall samples and executed warp instructions, the largest stall reasons, and the
TOP instructions with the most samples, in program order, each with its share and its largest
stall reason. With --regions, also the executed instructions and samples (and their largest
stall reasons) between consecutive SM clock reads (CS2R ... SR_CLOCKLO): for TileWindowPass,
whose phase stamps (TileDecodeDebug::phases) are compiled in at its phase boundaries, the
phases' shares in program order (code the compiler moved out of line is counted where it sits).

    python3 ncu_sass_summary.py source.csv [FILTER] [--top N] [--regions]

Used for the source profiles docs/performance-notes.md cites (e.g. "the radix passes' rescans,
~37% of Select's stall samples"); scripts/gpu_kernels.sh runs it for SOURCE_PROFILE.
"""
import argparse
import collections
import csv
import signal
import sys


def read_kernels(path):
    """[(kernel name, header, rows)] in file order, each kernel name once."""
    kernels, seen, current = [], set(), None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                name = row[1] if len(row) > 1 else ""
                current = None if name in seen else {"name": name, "header": None, "rows": []}
                if current is not None:
                    seen.add(name)
                    kernels.append(current)
            elif current is None:
                continue
            elif row[0] == "Address":
                current["header"] = row
            elif current["header"] is not None:
                current["rows"].append(row)
    return [k for k in kernels if k["header"] is not None]


def number(text):
    try:
        return float(text.replace(",", "")) if text else 0.0
    except ValueError:
        return 0.0


def stall_reasons(header, rows, stalls):
    """Stall samples of `rows` by reason (the stall_* columns at `stalls`, prefix dropped)."""
    reasons = collections.Counter()
    for r in rows:
        for i in stalls:
            if i < len(r):
                reasons[header[i][len("stall_"):]] += number(r[i])
    return reasons


def summarise(kernel, top, out, regions=False):
    header, rows = kernel["header"], kernel["rows"]
    try:
        samples_at = header.index("Warp Stall Sampling (All Samples)")
        executed_at = header.index("Instructions Executed")
        source_at = header.index("Source")
    except ValueError as missing:
        out.write(f"== {kernel['name']}: not a SourceCounters export ({missing})\n")
        return
    stalls = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    samples = [number(r[samples_at]) if samples_at < len(r) else 0.0 for r in rows]
    total = sum(samples)
    executed = sum(number(r[executed_at]) for r in rows if executed_at < len(r))
    out.write(f"== {kernel['name']}\n   {total:.0f} stall samples, {executed:.0f} warp instructions\n")
    if total == 0:
        return
    reasons = stall_reasons(header, rows, stalls)
    out.write("   " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in reasons.most_common(7)) + "\n")
    if regions:
        summarise_regions(header, rows, stalls, samples, executed_at, source_at, total, out)
    hottest = sorted(range(len(rows)), key=lambda k: -samples[k])[:top]
    for k in sorted(hottest):
        r = rows[k]
        reason = max(stalls, key=lambda i: number(r[i]) if i < len(r) else 0.0)
        out.write(f"   {k:5d} {100 * samples[k] / total:5.1f}% {header[reason][6:]:16s} "
                  f"{r[source_at].strip()[:90]}\n")


def summarise_regions(header, rows, stalls, samples, executed_at, source_at, total, out):
    """Per stretch of SASS between SM clock reads: instructions, samples, top stall reasons."""
    marks = [k for k, r in enumerate(rows) if "SR_CLOCKLO" in r[source_at]]
    if not marks:
        out.write("   regions: no SM clock read in this kernel\n")
        return
    edges = [0] + marks + [len(rows)]
    out.write("   regions (rows between SM clock reads): instructions, samples, stall reasons\n")
    for n, (lo, hi) in enumerate(zip(edges, edges[1:])):
        if hi <= lo:
            continue
        part = rows[lo:hi]
        executed = sum(number(r[executed_at]) for r in part if executed_at < len(r))
        sampled = sum(samples[lo:hi])
        reasons = stall_reasons(header, part, stalls)
        top = ", ".join(f"{k} {100 * v / max(sampled, 1):.0f}%" for k, v in reasons.most_common(4))
        out.write(f"   region {n} rows {lo}-{hi}: {executed:.0f} instructions, "
                  f"{sampled:.0f} samples ({100 * sampled / max(total, 1):.0f}%): {top}\n")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("filter", nargs="?", default="")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--regions", action="store_true")
    args = parser.parse_args()
    kernels = [k for k in read_kernels(args.csv) if args.filter in k["name"]]
    if not kernels:
        sys.exit(f"ncu_sass_summary: no kernel matching '{args.filter}' in {args.csv}")
    for kernel in kernels:
        summarise(kernel, args.top, sys.stdout, args.regions)


if __name__ == "__main__":
    main()
