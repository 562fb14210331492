#!/usr/bin/env python3
"""Known-truth controls: `kvgate run` end to end on real `kvgate serve` processes whose only
difference is a known injected slowdown (`kvgate serve --inject-step-delay-ms`, a test aid: the
engine sleeps that long in every decode step). Both serve the same KV backend, so quality is
identical and only the performance gates can tell them apart. The suite must find the truth:

  baseline slowed, candidate not   -> GO (exit 0): every gate PASS, goodput from the load runs
  candidate slowed, baseline not   -> NO-GO (exit 1), the P99 gate FAIL
  neither slowed                   -> the P99 gate does not FAIL (no false alarm)

usage: known_truth_test.py KVGATE_BINARY [--delay-ms D] [--only go,nogo,same] [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

failures = []

PASSKEYS = 5
QA_ITEMS = 8
PAIRS = 5


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)


def server(delay_ms):
    args = ["--kv", "fp8", "--threads", "1", "--max-batch", "4"]
    if delay_ms > 0:
        args += ["--inject-step-delay-ms", str(delay_ms)]
    return "kind = \"local\"\nargs = [" + ", ".join(f'"{a}"' for a in args) + "]"


def policy(name, baseline_delay_ms, candidate_delay_ms):
    return f"""name = "{name}"
seed = 31

[baseline]
{server(baseline_delay_ms)}

[candidate]
{server(candidate_delay_ms)}

[slo]
ttft_ms = 10000
tpot_ms = 1000

[quality.passkey]
items = {PASSKEYS}
lengths = [512]
depths = [0.0, 0.5, 1.0]

[quality.qa]
items = {QA_ITEMS}
lengths = [512]

[load]
pairs = {PAIRS}
concurrency = 2
requests = 12
warmup = 1
prompt_words = 24
output_tokens = 16
max_duration_s = 120

[gates]
passkey_required = {PASSKEYS}
bootstrap_resamples = 500
"""


def run(work, name, baseline_delay_ms, candidate_delay_ms):
    path = f"{work}/{name}.toml"
    with open(path, "w") as f:
        f.write(policy(name, baseline_delay_ms, candidate_delay_ms))
    done = subprocess.run([KVGATE, "run", "--policy", path, "--db", f"{work}/{name}.db",
                           "--out", f"{work}/{name}-out", "--json"],
                          capture_output=True, text=True, timeout=1200)
    try:
        outcome = json.loads(done.stdout)
    except json.JSONDecodeError:
        sys.stderr.write(done.stderr[-3000:])
        check(False, f"{name}: kvgate run printed its outcome as JSON (exit {done.returncode})")
        return None, {}
    gates = {g["gate"]: g for g in outcome.get("gates", [])}
    for gate in gates.values():
        print(f"     {name}: {gate['gate']:8s} {gate['status']:13s} {gate['reason']}", flush=True)
    return done.returncode, gates


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kvgate")
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--only", default="go,nogo,same")
    parser.add_argument("--keep", default="")
    args = parser.parse_args()
    global KVGATE
    KVGATE = args.kvgate
    only = set(args.only.split(","))
    # No pinning here: the suite places its servers itself (policy [placement], default "split":
    # the suite and its load generator on their own CPUs, both servers on the same others), and
    # the controls test that placement with the gates. Left to the OS on a 2-core machine, one of
    # two identical servers sat beside the load generator for a whole run and they measured 0.86x
    # to 1.27x in goodput with tight intervals (a false P99 FAIL in about half the full-suite runs
    # of 2026-12-06, a false GO once); this test pinned itself to one CPU until the suite did
    # (docs/gates.md, "Where local servers run").
    work = args.keep or tempfile.mkdtemp(prefix="kvgate_known_truth_")
    os.makedirs(work, exist_ok=True)
    d = args.delay_ms

    if "go" in only:
        code, gates = run(work, "go", d, 0)
        check(code == 0, f"go: a baseline slowed by {d} ms a step against an unslowed candidate "
                         f"is GO, exit 0 (exit {code})")
        check(gates and all(g["status"] == "PASS" for g in gates.values()),
              "go: every gate PASS")
        goodput = gates.get("goodput", {})
        check(goodput.get("status") == "PASS" and goodput.get("observed", 0) >= 1.10,
              f"go: the GO rests on a measured goodput gain (ratio {goodput.get('observed')})")
    if "nogo" in only:
        code, gates = run(work, "nogo", 0, d)
        check(code == 1, f"nogo: a candidate slowed by {d} ms a step is NO-GO, exit 1 "
                         f"(exit {code})")
        check(gates.get("p99", {}).get("status") == "FAIL",
              f"nogo: the P99 gate FAILs ({gates.get('p99', {}).get('reason')})")
    if "same" in only:
        code, gates = run(work, "same", 0, 0)
        check(code in (0, 1, 2), f"same: identical servers get a verdict (exit {code})")
        check(gates.get("p99", {}).get("status") in ("PASS", "INCONCLUSIVE"),
              f"same: identical servers: no false FAIL on P99 "
              f"({gates.get('p99', {}).get('status')}: {gates.get('p99', {}).get('reason')})")
        check(gates.get("passkey", {}).get("status") == "PASS" and
              gates.get("qa_f1", {}).get("status") == "PASS",
              "same: identical backends pass both quality gates")
    print(f"{len(failures)} failed" if failures else "all known-truth controls passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
