#!/usr/bin/env python3
"""How much of the P99 gate's interval is sampling noise, from a stored `kvgate run`.

Reads the run's load runs from a kvgate history database (opened read-only), recomputes each
run's P99 TTFT and TPOT from its measured requests with kvgate's definitions (TTFT = scheduled
send -> first token; TPOT = (end - first token) / (output tokens - 1); percentile p of n sorted
samples = the one at index floor(n p), clamped), and checks them against the summaries kvgate
stored. Then, per side, it pools the measured requests of all its runs and resamples runs of N
requests: the spread of their P99 (coefficient of variation) and the 95% half-width that the
gate's interval of the mean per-pair log-ratio would have over the run's number of pairs,
from this noise alone. Pooling ignores differences between runs, so this is a lower bound: if
the half-width here is not well under the gate's margin (5%), more pairs cannot fix it, more
requests per run can.

Usage: p99_noise.py DB [--run ID] [--sizes 64,128,256,512,1024] [--resamples 400] [--seed 1]
"""
import argparse
import json
import math
import os
import random
import sqlite3
import statistics
import sys

# Two-sided 95% t quantiles for 1..20 degrees of freedom; beyond, 2.0 (within 3% of the truth).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086]


def percentile(samples, p):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(math.floor(len(ordered) * p)))]


def load(db_path, run_id):
    try:
        # Read-only. A read-only connection to a WAL database creates -wal and -shm files it then
        # cannot remove, which would be left beside a stored history (in the repository, say):
        # with no -wal file there is nothing to replay, so the file is opened as immutable and
        # nothing is created; with one (a live or crashed writer's), it is read as SQLite must.
        immutable = "" if os.path.exists(db_path + "-wal") else "&immutable=1"
        db = sqlite3.connect(f"file:{db_path}?mode=ro{immutable}", uri=True)
        if run_id is None:
            row = db.execute("SELECT MAX(run_id) FROM load_runs").fetchone()
            run_id = row[0]
        if run_id is None:
            sys.exit(f"{db_path}: no load runs stored")
        runs = db.execute(
            "SELECT id, label, pair_index, summary_json FROM load_runs WHERE run_id = ? "
            "ORDER BY pair_index, label", (run_id,)).fetchall()
        if not runs:
            sys.exit(f"{db_path}: run {run_id} has no load runs")
        out = []
        for load_id, label, pair, summary in runs:
            requests = db.execute(
                "SELECT scheduled_ns, first_token_ns, end_ns, completion_tokens FROM load_requests "
                "WHERE load_run_id = ? AND warmup = 0 AND http_status = 200 AND error_cause = '' "
                "AND first_token_ns >= 0 AND end_ns >= 0", (load_id,)).fetchall()
            ttft = [(f - s) / 1e6 for s, f, _, _ in requests]
            tpot = [(e - f) / 1e6 / (n - 1) for _, f, e, n in requests if n >= 2]
            out.append((label, pair, ttft, tpot, summary))
        return run_id, out
    except sqlite3.Error as e:
        sys.exit(f"{db_path}: cannot read the history: {e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--run", type=int, default=None)
    parser.add_argument("--sizes", default="64,128,256,512,1024")
    parser.add_argument("--resamples", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    run_id, runs = load(args.db, args.run)
    print(f"run {run_id}: {len(runs)} load runs")
    print(f"{'label':>10} {'pair':>4} {'measured':>8} {'P99 TTFT ms':>12} {'P99 TPOT ms':>12}")
    pooled = {}
    for label, pair, ttft, tpot, summary in runs:
        p_ttft, p_tpot = percentile(ttft, 0.99), percentile(tpot, 0.99)
        stored = json.loads(summary)
        for name, mine in (("ttft", p_ttft), ("tpot", p_tpot)):
            theirs = stored.get(name, {}).get("p99_ms")
            if theirs is None or abs(theirs - mine) > 1e-6 * max(1.0, abs(theirs)):
                sys.exit(f"{label} pair {pair}: P99 {name} {mine} differs from the stored {theirs}")
        print(f"{label:>10} {pair:>4} {len(tpot):>8} {p_ttft:>12.3f} {p_tpot:>12.3f}")
        side = pooled.setdefault(label, {"ttft": [], "tpot": []})
        side["ttft"] += ttft
        side["tpot"] += tpot
    pairs = len({pair for _, pair, _, _, _ in runs})
    t = T975[pairs - 2] if 2 <= pairs <= 21 else 2.0
    rng = random.Random(args.seed)
    labels = sorted(pooled)
    print(f"resampled runs of N requests from each side's pooled measured requests "
          f"({args.resamples} per N); half-width over {pairs} pairs, from this noise alone:")
    print(f"{'N':>6} " + " ".join(f"{'cv ' + m + ' ' + l:>18}" for m in ("TTFT", "TPOT")
                                   for l in labels) + f" {'±TTFT %':>8} {'±TPOT %':>8}")
    for n in sizes:
        cvs = {}
        for metric in ("ttft", "tpot"):
            for label in labels:
                values = [percentile(rng.choices(pooled[label][metric], k=n), 0.99)
                          for _ in range(args.resamples)]
                cvs[(metric, label)] = statistics.pstdev(values) / statistics.fmean(values)
        half = {m: 100 * (math.exp(t * math.sqrt(sum(cvs[(m, l)] ** 2 for l in labels))
                                   / math.sqrt(pairs)) - 1) for m in ("ttft", "tpot")}
        print(f"{n:>6} " + " ".join(f"{cvs[(m, l)]:>18.4f}" for m in ("ttft", "tpot")
                                    for l in labels)
              + f" {half['ttft']:>8.1f} {half['tpot']:>8.1f}")


if __name__ == "__main__":
    main()
