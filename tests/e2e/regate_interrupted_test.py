#!/usr/bin/env python3
"""`kvgate history regate` on a stored H200 run that was cut after 4.5 of its 5 load pairs
(bench/results/2026-11-30-h200-long-chunk512-c39d3c1-interrupted): the pair whose candidate was
never measured makes the load gates INCONCLUSIVE, named as incomplete -- not a goodput of 0 (a
FAIL) nor a missing P99 -- while the quality gates are decided from the stored items as usual.

Usage: regate_interrupted_test.py KVGATE REPO_ROOT
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

KVGATE, ROOT = sys.argv[1], sys.argv[2]
DB = os.path.join(ROOT, "bench", "results", "2026-11-30-h200-long-chunk512-c39d3c1-interrupted",
                  "kvgate.db")


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
    print(f"ok: {what}")


with tempfile.TemporaryDirectory() as tmp:
    db = os.path.join(tmp, "kvgate.db")
    shutil.copy(DB, db)  # regate reads; the committed file is never opened for writing
    done = subprocess.run([KVGATE, "history", "regate", "1", "--db", db, "--json"],
                          capture_output=True, text=True)
    check(done.returncode in (0, 1, 2), f"regate answers with a verdict (stderr: {done.stderr})")
    out = json.loads(done.stdout)
    gates = {row["gate"]: row["recomputed"] for row in out["gates"]}
    for name in ("p99", "goodput"):
        g = gates[name]
        check(g["status"] == "INCONCLUSIVE", f"{name}: INCONCLUSIVE (got {g['status']})")
        check("pair 4 has no candidate load run" in g["reason"],
              f"{name}: the reason names the incomplete pair ({g['reason']})")
    check(gates["passkey"]["status"] == "FAIL" and gates["passkey"]["observed"] == 199,
          "passkey still decided from the stored items: 199/200, FAIL")
    check(out["verdict"] == "NO-GO" and done.returncode == 1, "verdict NO-GO, exit 1")
