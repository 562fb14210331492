#!/usr/bin/env python3
"""policies/tools/p99_noise.py on a stored H200 run: its P99s agree with kvgate's own summaries,
the noise shrinks with requests per run, and a damaged or missing history is refused by name.

Usage: p99_noise_test.py REPO_ROOT
"""
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile

ROOT = sys.argv[1]
TOOL = os.path.join(ROOT, "policies", "tools", "p99_noise.py")
DB = os.path.join(ROOT, "bench", "results", "2026-11-30-h200-long-values-mma", "kvgate.db")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
    print(f"ok: {what}")


done = run(DB, "--sizes", "64,1024", "--resamples", "200")
check(done.returncode == 0, f"the tool reads the stored run (stderr: {done.stderr.strip()})")
# Hostile-test finding (2026-12-02): the read-only open left a -shm (and an empty -wal) beside
# the stored history in the repository.
check(not os.path.exists(DB + "-shm") and not os.path.exists(DB + "-wal"),
      "reading the stored history leaves no -shm or -wal file behind")
ROW = r"^\s+(baseline|candidate)\s+(\d)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$"
rows = re.findall(ROW, done.stdout, re.M)
check(len(rows) == 10, f"10 load runs listed (got {len(rows)})")
check(all(int(r[2]) == 64 for r in rows), "64 measured requests in each")
low = [r for r in rows if r[0] == "baseline" and r[1] == "1"]
check(low and abs(float(low[0][4]) - 17.385) < 0.001, "the low FP8 run's P99 TPOT, 17.385 ms")
halves = re.findall(r"^\s+(64|1024)\s+(?:[\d.]+\s+){4}([\d.]+)\s+([\d.]+)$", done.stdout, re.M)
check(len(halves) == 2, "one noise row per N")
check(float(halves[0][2]) > 2 * float(halves[1][2]),
      f"the TPOT half-width shrinks from N=64 to N=1024 ({halves[0][2]} -> {halves[1][2]})")

with tempfile.TemporaryDirectory() as tmp:
    damaged = os.path.join(tmp, "damaged.db")
    shutil.copy(DB, damaged)
    with sqlite3.connect(damaged) as db:
        db.execute("UPDATE load_runs SET summary_json = "
                   "json_set(summary_json, '$.tpot.p99_ms', 1.0) "
                   "WHERE label = 'candidate' AND pair_index = 2")
    bad = run(damaged)
    check(bad.returncode != 0 and "candidate pair 2: P99 tpot" in bad.stderr,
          f"a summary that disagrees is named ({bad.stderr.strip()})")
    text = os.path.join(tmp, "not.db")
    with open(text, "w") as f:
        f.write("not a database\n" * 100)
    for path in (text, os.path.join(tmp, "missing.db")):
        refused = run(path)
        check(refused.returncode != 0 and "cannot read the history" in refused.stderr,
              f"{os.path.basename(path)} refused ({refused.stderr.strip()})")
print("p99_noise: all checks passed")
