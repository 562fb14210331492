#!/usr/bin/env python3
"""End to end: `kvgate run` on a small policy with real local servers (built-in model, CPU).

Checks that the run gives a verdict (exit 0/1/2, the same in its JSON), that the history holds a
complete run with every raw row (quality items of both systems, 2 x pairs load runs with their
per-request records, gate results, ledgers), that `kvgate history regate` decides the same gates
from the stored rows alone, that report.html renders in headless Chromium with every chart drawn,
and that a bad policy is refused with `file:line: key: what` and exit 3 before anything runs.

usage: kvgate_run_test.py KVGATE_BINARY
"""
import csv
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile

PAIRS = 5
PASSKEYS = 10
QA_ITEMS = 12
REQUESTS, WARMUP = 12, 1

POLICY = f"""
name = "e2e-small"
seed = 7

[baseline]
kind = "local"
args = ["--kv", "fp8", "--threads", "1"]

[candidate]
kind = "local"
args = ["--kv", "readkv", "--store-bits", "8", "--read-bits", "4", "--reader", "flexible",
        "--threads", "1"]

[candidate.extra_body.readkv]
read_bits = 4
reader = "flexible"
key_bits = 6
value_bits = 2

[slo]
ttft_ms = 5000
tpot_ms = 500

[quality.passkey]
items = {PASSKEYS}
lengths = [1024, 2048]
depths = [0.0, 0.5, 1.0]

[quality.qa]
items = {QA_ITEMS}
lengths = [1024, 2048]

[load]
pairs = {PAIRS}
rate_rps = 4.0
requests = {REQUESTS - WARMUP}
warmup = {WARMUP}
prompt_words = 32
output_tokens = 8
max_duration_s = 60

[gates]
passkey_required = {PASSKEYS}
bootstrap_resamples = 500
"""

failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)


def kvgate(*args, timeout=900):
    return subprocess.run([KVGATE, *args], capture_output=True, text=True, timeout=timeout)


def charts_drawn(page, work):
    dom = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={work}/chromium-profile", "--virtual-time-budget=5000",
         "--dump-dom", f"file://{page}"],
        capture_output=True, text=True, timeout=120).stdout
    drawn = re.search(r'data-charts-drawn="(\d+)"', dom)
    expected = re.search(r'data-charts-expected="(\d+)"', dom)
    return (int(drawn.group(1)) if drawn else None, int(expected.group(1)) if expected else None)


def main():
    with tempfile.TemporaryDirectory(prefix="kvgate_e2e_") as work:
        policy, db, out = f"{work}/small.toml", f"{work}/history.db", f"{work}/out"
        with open(policy, "w") as f:
            f.write(POLICY)

        # A bad policy is refused before any server starts, naming file, line and key.
        with open(f"{work}/bad.toml", "w") as f:
            f.write(POLICY.replace("rate_rps = 4.0", "rate_rps = -4.0"))
        bad = kvgate("run", "--policy", f"{work}/bad.toml", "--db", db, "--out", out, timeout=60)
        check(bad.returncode == 3, f"bad policy exits 3 (got {bad.returncode})")
        check(re.search(r"bad\.toml:\d+: load\.rate_rps", bad.stderr) is not None,
              f"bad policy error names file:line: key ({bad.stderr.strip()!r})")
        check(not os.path.exists(db) or kvgate("history", "list", "--db", db, "--json").stdout
              .strip() in ("[]", ""), "a refused policy records no run")

        run = kvgate("run", "--policy", policy, "--db", db, "--out", out, "--json",
                     "--metrics-port", "0")
        sys.stderr.write(run.stderr[-4000:])
        check(run.returncode in (0, 1, 2), f"kvgate run gives a verdict (exit {run.returncode})")
        check("live metrics on http://127.0.0.1:" in run.stderr, "--metrics-port 0 serves metrics")
        outcome = json.loads(run.stdout)
        verdict = outcome["verdict"]
        expected_exit = {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 2}[verdict]
        check(outcome["exit_code"] == run.returncode == expected_exit,
              f"verdict {verdict} matches exit code {run.returncode}")
        gate_names = {g["gate"] for g in outcome["gates"]}
        check({"passkey", "qa_f1", "p99", "goodput"} <= {n.split("/")[0] for n in gate_names},
              f"all four gates decided ({sorted(gate_names)})")
        p99 = next(g for g in outcome["gates"] if g["gate"] == "p99")
        noise = p99["details"].get("sampling_noise", {})
        sizes = [(REQUESTS - WARMUP) * k for k in (1, 2, 4, 8)]
        check(noise.get("requests_per_run") == sizes
              and all(len(noise.get(key, [])) == len(sizes)
                      and all(isinstance(w, (int, float)) and math.isfinite(w)
                              for w in noise[key])
                      for key in ("ttft_half_width", "tpot_half_width")),
              f"the P99 gate reports its sampling noise per requests per run ({noise}; "
              f"{p99['reason']})")

        show = json.loads(kvgate("history", "show", "latest", "--db", db, "--json").stdout)
        run_row = show.get("run", show)
        check(run_row["status"] == "complete", f"history run is complete ({run_row['status']})")
        check(run_row["verdict"] == verdict, "history verdict equals the run's")
        # Where the servers ran: the placement recorded with the leg, in the text view too.
        cpus = sorted(os.sched_getaffinity(0))
        text = kvgate("history", "show", "latest", "--db", db).stdout
        line = next((l for l in text.splitlines() if l.strip().startswith("placement:")), "")
        want = (f"baseline on CPUs {cpus[-1]}" if len(cpus) == 2 else "baseline on CPUs ")
        check(want in line and "candidate on CPUs " in line and
              (len(cpus) == 1 or "the suite and its load generator on CPUs " in line),
              f"history show names where the servers ran ({line.strip()!r}, CPUs {cpus})")

        export = json.loads(kvgate("history", "export", "latest", "--db", db).stdout)
        loads = export["load_runs"]
        check(len(loads) == 2 * PAIRS, f"{2 * PAIRS} load runs stored ({len(loads)})")
        check(all(len(r["requests"]) == REQUESTS for r in loads),
              f"every load run keeps all {REQUESTS} request records "
              f"({sorted({len(r['requests']) for r in loads})})")
        check(len(export["quality_items"]) == 2 * (PASSKEYS + QA_ITEMS),
              f"quality items of both systems stored ({len(export['quality_items'])})")
        check(len(export["gate_results"]) == len(outcome["gates"]), "every gate result stored")
        check(len(export["ledgers"]) > 0, f"ledgers stored ({len(export['ledgers'])})")

        # The same rows as CSV tables, read back with Python's own csv module.
        csv_requests = list(csv.DictReader(io.StringIO(
            kvgate("history", "export", "latest", "--db", db, "--format", "csv").stdout)))
        check(len(csv_requests) == sum(len(r["requests"]) for r in loads),
              f"CSV requests: one row per stored request ({len(csv_requests)})")
        first = loads[0]["requests"][0]
        row = csv_requests[0]
        check(int(row["scheduled_ns"]) == first["scheduled_ns"]
              and int(row["end_ns"]) == first["end_ns"], "CSV request row equals the JSON record")
        if first["first_token_ns"] >= 0:
            want = (first["first_token_ns"] - first["scheduled_ns"]) / 1e6
            check(abs(float(row["ttft_ms"]) - want) < 1e-9, f"CSV ttft_ms {row['ttft_ms']} = {want}")
        csv_runs = list(csv.DictReader(io.StringIO(kvgate(
            "history", "export", "latest", "--db", db, "--format", "csv", "--table",
            "load_runs").stdout)))
        check(len(csv_runs) == 2 * PAIRS and "summary.ttft.p99_ms" in csv_runs[0],
              f"CSV load_runs: {len(csv_runs)} rows with the flattened summary")
        bad = kvgate("history", "export", "latest", "--db", db, "--format", "csv", "--table", "x")
        check(bad.returncode != 0 and "table" in bad.stderr, "an unknown CSV table is refused")

        regate = kvgate("history", "regate", "latest", "--db", db, "--json")
        again = json.loads(regate.stdout)
        check(again["identical"], "regate from the stored rows gives identical gates")
        check(again["verdict"] == verdict and regate.returncode == run.returncode,
              f"regate verdict {again['verdict']} (exit {regate.returncode}) equals the run's")

        # The item-by-item quality evidence, and the report written again from the history.
        with open(outcome["report_json"]) as f:
            dis = json.load(f)["quality"]["disagreements"]
        for check_name, items in (("passkey", PASSKEYS), ("qa", QA_ITEMS)):
            got = dis["checks"].get(check_name, {})
            check(got.get("paired_items") == items,
                  f"{check_name}: every item paired baseline/candidate ({got.get('paired_items')})")
        listed = sum(c["differ"] for c in dis["checks"].values())
        check(len(dis["items"]) == listed, f"every differing item listed ({len(dis['items'])})")
        again_dir = f"{work}/again"
        rerun = kvgate("history", "report", "latest", "--db", db, "--out", again_dir)
        check(rerun.returncode == 0, f"history report exits 0 ({rerun.returncode})")
        with open(f"{again_dir}/report.json") as f:
            rewritten = json.load(f)
        with open(outcome["report_json"]) as f:
            first = json.load(f)
        check(rewritten["verdict"] == verdict and rewritten["quality"] == first["quality"],
              "history report rewrites the same verdict and quality")

        drawn, expected = charts_drawn(outcome["report_html"], work)
        check(expected is not None and drawn == expected and expected > 0,
              f"report.html draws its charts in Chromium ({drawn} of {expected})")
        with open(outcome["report_json"]) as f:
            check(json.load(f)["verdict"] == verdict, "report.json carries the verdict")

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    KVGATE = sys.argv[1]
    sys.exit(main())
