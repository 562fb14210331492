# Summarises `ncu --metrics gpu__time_duration.sum --csv` output: launches and time per kernel
# name, then the last 130 launches in order (one decode step and more). Usage: ncu_sum.py FILE.csv
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = None
out = []
for r in rows:
    if r and r[0] == "ID": hdr = r; continue
    if hdr and len(r) == len(hdr): out.append(dict(zip(hdr, r)))
print("kernels profiled:", len(out))
# decode steps are the last kernels; print counts and sums by name over all, and the order of
# the final step's kernels (after the last prefill-looking launch)
agg = collections.OrderedDict()
for d in out:
    n = d["Kernel Name"][:90]
    v = float(d["Metric Value"].replace(",", ""))
    a = agg.setdefault(n, [0, 0.0]); a[0] += 1; a[1] += v
for n, (c, s) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"{c:6d} {s/1e3:10.1f} us total {s/c/1e3:8.2f} us each  {n}")
print("--- last 130 launches (ns):")
for d in out[-130:]:
    print(d["Metric Value"].replace(",", ""), d["Kernel Name"][:100])
