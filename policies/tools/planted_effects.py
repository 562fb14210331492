#!/usr/bin/env python3
"""How small an effect the performance gates detect at a policy's load sizes: `kvgate run` on two
`kvgate serve` processes that differ only by a planted slowdown (`--inject-step-delay-ms`, the
test aid: the engine sleeps that long in every decode step) of one side, for several sizes of the
slowdown, each side in turn. Both serve the same KV backend, so quality is identical and only the
P99 and goodput gates can tell them apart. Prints one row per planted effect (Markdown with
--markdown): the delay, the side slowed, and each performance gate's status, estimate and
interval, plus the verdict.

The policy's [load] section (pairs, concurrency or rate, requests, prompt and output sizes) and
[slo] and [gates] are taken as they are; its servers are replaced by `kvgate serve --kv fp8` (with
its other serve args kept), and its quality checks are cut to 5 passkeys and 8 QA items at 512
bytes, which both sides answer alike.

usage: planted_effects.py KVGATE POLICY --delays-ms 0.25,0.5,1,2 [--sides baseline,candidate]
                          [--work DIR] [--markdown]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib


def section(text, name):
    """The text of one [name] table of a TOML file (up to the next table header)."""
    match = re.search(r"(?ms)^\[" + re.escape(name) + r"\]\s*$(.*?)(?=^\[|\Z)", text)
    if not match:
        sys.exit(f"the policy has no [{name}] table")
    return f"[{name}]\n" + match.group(1).strip() + "\n"


def server(args, delay_ms):
    keep = []
    skip = {"--kv": 1, "--store-bits": 1, "--read-bits": 1, "--reader": 1, "--kv-split": 1,
            "--outlier-cap": 1, "--outlier-threshold": 1}
    i = 0
    while i < len(args):
        if args[i] in skip:
            i += 1 + skip[args[i]]
            continue
        keep.append(args[i])
        i += 1
    keep = ["--kv", "fp8"] + keep
    if delay_ms > 0:
        keep += ["--inject-step-delay-ms", str(delay_ms)]
    return 'kind = "local"\nargs = [' + ", ".join(json.dumps(a) for a in keep) + "]\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kvgate")
    parser.add_argument("policy")
    parser.add_argument("--delays-ms", default="0.25,0.5,1,2")
    parser.add_argument("--sides", default="baseline,candidate")
    parser.add_argument("--work", default="")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    text = open(args.policy).read()
    policy = tomllib.loads(text)
    work = args.work or tempfile.mkdtemp(prefix="kvgate_planted_")
    os.makedirs(work, exist_ok=True)
    load, slo, gates = section(text, "load"), section(text, "slo"), section(text, "gates")
    gates = re.sub(r"(?m)^passkey_required\s*=.*$", "passkey_required = 5", gates)
    rows = []
    for side in args.sides.split(","):
        for delay in [float(d) for d in args.delays_ms.split(",")]:
            name = f"{side}-{delay:g}ms"
            slowed = {"baseline": delay if side == "baseline" else 0.0,
                      "candidate": delay if side == "candidate" else 0.0}
            body = (f'name = "planted-{name}"\nseed = {policy.get("seed", 20261129)}\n\n'
                    f"[baseline]\n{server(policy['baseline']['args'], slowed['baseline'])}\n"
                    f"[candidate]\n{server(policy['candidate']['args'], slowed['candidate'])}\n"
                    f"{slo}\n[quality.passkey]\nitems = 5\nlengths = [512]\n"
                    f"depths = [0.0, 0.5, 1.0]\n\n[quality.qa]\nitems = 8\nlengths = [512]\n\n"
                    f"{load}\n{gates}")
            path = f"{work}/{name}.toml"
            with open(path, "w") as f:
                f.write(body)
            done = subprocess.run([args.kvgate, "run", "--policy", path, "--db", f"{work}/{name}.db",
                                   "--out", f"{work}/{name}-out", "--json", "--quiet"],
                                  capture_output=True, text=True, timeout=3600)
            outcome = json.loads(done.stdout)
            by_gate = {g["gate"]: g for g in outcome["gates"]}
            row = {"delay_ms": delay, "slowed": side, "verdict": outcome["verdict"]}
            for gate in ("p99", "goodput"):
                g = by_gate[gate]
                interval = g.get("interval") or {}
                row[gate] = (g["status"], g["observed"], interval.get("lo"), interval.get("hi"))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    if args.markdown:
        print("| planted delay | side slowed | P99 gate (worst ratio, interval) | "
              "goodput gate (ratio, interval) | verdict |")
        print("|---|---|---|---|---|")
    for r in rows:
        cells = []
        for gate in ("p99", "goodput"):
            status, observed, lo, hi = r[gate]
            span = f"[{lo:.3f}, {hi:.3f}]" if lo is not None else "-"
            cells.append(f"{status} {observed:.3f} {span}")
        if args.markdown:
            print(f"| {r['delay_ms']:g} ms | {r['slowed']} | {cells[0]} | {cells[1]} | "
                  f"{r['verdict']} |")
        else:
            print(f"{r['delay_ms']:6g} ms  {r['slowed']:9s}  p99 {cells[0]:34s} "
                  f"goodput {cells[1]:34s} {r['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
