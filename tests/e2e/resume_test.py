#!/usr/bin/env python3
"""`kvgate run --resume`: a run cut twice by SIGTERM (inside the baseline's QA check, then
between the two members of load pair 1) and resumed twice on real `kvgate serve` processes ends
with every gate decided from evidence measured once each:

  - leg 1's answered items are kept as stored (none asked again, none lost to the stop);
  - the QA and passkey items of both systems are each stored exactly once, over the legs;
  - load pair 0, measured whole in leg 2, is not measured again; pair 1, cut, is measured again
    whole in leg 3 and its leg-2 rows are kept, marked superseded, read by no gate;
  - `kvgate history regate` decides the same gates from the rows;
  - a complete run, and a run under another policy, are refused with exit 3 and nothing changed.

usage: resume_test.py KVGATE_BINARY [--keep DIR]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

failures = []
QA_ITEMS = 40
PASSKEYS = 4
PAIRS = 5


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)


POLICY = f"""name = "resume-e2e"
seed = 47

[baseline]
kind = "local"
args = ["--kv", "fp8", "--threads", "1", "--max-batch", "4"]

[candidate]
kind = "local"
args = ["--kv", "fp8", "--threads", "1", "--max-batch", "4"]

[slo]
ttft_ms = 10000
tpot_ms = 1000

[quality.passkey]
items = {PASSKEYS}
lengths = [512]
depths = [0.0, 1.0]

[quality.qa]
items = {QA_ITEMS}
lengths = [512]

[load]
pairs = {PAIRS}
concurrency = 2
requests = 8
warmup = 1
prompt_words = 24
output_tokens = 8
max_duration_s = 120

[gates]
passkey_required = {PASSKEYS}
bootstrap_resamples = 500
"""


def run_until(args, stop_when, what):
    """Runs kvgate, sends SIGTERM after the first progress line for which stop_when(line) holds;
    returns (exit code, every stderr line)."""
    proc = subprocess.Popen([KVGATE] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines, signalled = [], False
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if not signalled and stop_when is not None and stop_when(line):
            proc.send_signal(signal.SIGTERM)
            signalled = True
    proc.stdout.read()
    code = proc.wait(timeout=600)
    check(signalled, f"{what}: the stop point was reached")
    return code, lines


def export(db):
    done = subprocess.run([KVGATE, "history", "export", "1", "--db", db], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def items_by_key(out):
    return {(q["check"], q["label"], q["item_id"]): q for q in out["quality_items"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kvgate")
    parser.add_argument("--keep", default="")
    args = parser.parse_args()
    global KVGATE
    KVGATE = args.kvgate
    work = args.keep or tempfile.mkdtemp(prefix="kvgate_resume_")
    os.makedirs(work, exist_ok=True)
    policy, db, out = f"{work}/policy.toml", f"{work}/kvgate.db", f"{work}/out"
    with open(policy, "w") as f:
        f.write(POLICY)
    base = ["run", "--policy", policy, "--db", db, "--out", out]

    # Leg 1: cut inside the baseline's QA check.
    code, lines = run_until(base, lambda l: "baseline: QA 12/" in l, "leg 1")
    check(code == 3, f"leg 1: SIGTERM ends the run with exit 3 (got {code})")
    leg1 = export(db)
    check(leg1["run"]["status"] == "interrupted", "leg 1: the run is interrupted")
    check(leg1["run"]["planned"] == {"passkey": PASSKEYS, "qa": QA_ITEMS},
          f"the run records the items it plans ({leg1['run']['planned']})")
    qa1 = [q for q in leg1["quality_items"] if q["check"] == "qa"]
    check(all(q["label"] == "baseline" for q in qa1) and 12 <= len(qa1) < QA_ITEMS,
          f"leg 1: the baseline QA items answered before the stop are stored ({len(qa1)} of "
          f"{QA_ITEMS}; before, a cut check lost them all)")
    check(all("not sent" not in q["extra"].get("error", "") for q in qa1),
          "leg 1: no item the stop left unsent is stored")
    interim = subprocess.run([KVGATE, "history", "regate", "1", "--db", db, "--json"],
                             capture_output=True, text=True)
    gates1 = {row["gate"]: row["recomputed"] for row in json.loads(interim.stdout)["gates"]}
    check(gates1["qa_f1"]["status"] == "INCONCLUSIVE" and
          f"of the policy's {QA_ITEMS} QA items were measured on both sides" in gates1["qa_f1"]["reason"],
          f"leg 1: regated, the QA gate waits for the planned items ({gates1['qa_f1']['reason']})")
    check(gates1["passkey"]["status"] == "INCONCLUSIVE",
          f"leg 1: so does the passkey gate ({gates1['passkey']['reason']})")

    # Leg 2: resumed, then cut between the members of load pair 1.
    code, lines = run_until(base + ["--resume", "1"], lambda l: "pair 1 baseline:" in l,
                            "leg 2")
    check(code == 3, f"leg 2: SIGTERM ends the run with exit 3 (got {code})")
    check(any("resumed as leg 2" in l for l in lines), "leg 2: says it resumed the run")
    check(any(f"baseline: QA check, {QA_ITEMS - len(qa1)} items ({len(qa1)} stored by earlier "
              f"legs)" in l for l in lines),
          "leg 2: asks the baseline only the QA items leg 1 did not store")
    leg2 = export(db)
    by_key1, by_key2 = items_by_key(leg1), items_by_key(leg2)
    check(all(by_key2[k] == v for k, v in by_key1.items()),
          "leg 2: leg 1's items are kept exactly as stored")
    pairs2 = [(r["pair_index"], r["label"], r["summary"].get("stopped")) for r in leg2["load_runs"]]
    check(sum(1 for p in pairs2 if p[0] == 0) == 2 and (1, "baseline", False) in pairs2,
          f"leg 2: pair 0 and pair 1's baseline are stored ({pairs2})")

    # Leg 3: resumed to the end.
    done = subprocess.run([KVGATE] + base + ["--resume", "1", "--json"], capture_output=True,
                          text=True, timeout=900)
    check(done.returncode in (0, 1, 2), f"leg 3: the run ends with a verdict (exit "
                                        f"{done.returncode}; {done.stderr[-500:]})")
    check("pair 0: measured whole by an earlier leg" in done.stderr,
          "leg 3: pair 0 is not measured again")
    logs = sorted(n for n in os.listdir(out) if n.endswith(".log"))
    check(logs == ["baseline.leg2.log", "baseline.leg3.log", "baseline.log",
                   "candidate.leg2.log", "candidate.leg3.log", "candidate.log"],
          f"each leg keeps its servers' logs ({logs})")
    final = export(db)
    check(final["run"]["status"] == "complete" and len(final["legs"]) == 3,
          f"the run is complete, in 3 legs ({final['run']['status']}, {len(final['legs'])})")
    check([leg["leg"] for leg in final["legs"]] == [1, 2, 3] and
          all(leg["ended_at"] for leg in final["legs"]) and
          "SIGINT/SIGTERM" in final["legs"][0]["end_reason"],
          "each leg is recorded with its end and why it ended")
    keys = [(q["check"], q["label"], q["item_id"]) for q in final["quality_items"]]
    for check_name, count in (("qa", QA_ITEMS), ("passkey", PASSKEYS)):
        for label in ("baseline", "candidate"):
            n = sum(1 for k in keys if k[0] == check_name and k[1] == label)
            check(n == count, f"{label} {check_name}: each of {count} items stored once ({n})")
    check(len(keys) == len(set(keys)), "no item is stored twice")
    by_key3 = items_by_key(final)
    check(all(by_key3[k] == v for k, v in by_key2.items()), "leg 3 keeps every earlier item")
    current = [r for r in final["load_runs"] if r["superseded_in_leg"] is None]
    superseded = [r for r in final["load_runs"] if r["superseded_in_leg"] is not None]
    check(sorted((r["pair_index"], r["label"]) for r in current) ==
          sorted((p, l) for p in range(PAIRS) for l in ("baseline", "candidate")),
          "every pair has exactly one current member per side")
    check(all(r["pair_index"] == 0 and r["leg"] == 2 for r in current if r["leg"] != 3),
          "pair 0 keeps its leg-2 members; the others are leg 3's")
    check(len(superseded) >= 1 and all(r["pair_index"] == 1 and r["superseded_in_leg"] == 3
                                       for r in superseded),
          f"pair 1's leg-2 rows are kept, superseded in leg 3 ({len(superseded)})")
    outcome = json.loads(done.stdout)
    regate = subprocess.run([KVGATE, "history", "regate", "1", "--db", db, "--json"],
                            capture_output=True, text=True)
    check(json.loads(regate.stdout).get("identical") is True,
          "regate decides the same gates from the stored rows")
    verdicts = {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 2}
    check(sorted(g["gate"] for g in outcome["gates"]) == ["goodput", "p99", "passkey", "qa_f1"]
          and verdicts.get(outcome["verdict"]) == done.returncode,
          f"the four gates are decided and the exit code is the verdict's ({outcome['verdict']})")

    # Refusals: nothing changes.
    done = subprocess.run([KVGATE] + base + ["--resume", "1"], capture_output=True, text=True)
    check(done.returncode == 3 and "is complete" in done.stderr,
          f"a complete run is not resumed (exit {done.returncode}: {done.stderr.strip()[-200:]})")
    other = f"{work}/other.toml"
    with open(other, "w") as f:
        f.write(POLICY.replace("seed = 47", "seed = 48"))
    done = subprocess.run([KVGATE, "run", "--policy", other, "--db", db, "--out", out,
                           "--resume", "1"], capture_output=True, text=True)
    check(done.returncode == 3 and "began under another policy" in done.stderr,
          f"another policy is refused (exit {done.returncode}: {done.stderr.strip()[-200:]})")
    missing = subprocess.run([KVGATE, "run", "--policy", policy, "--db", f"{work}/none.db",
                              "--out", out, "--resume", "1"], capture_output=True, text=True)
    check(missing.returncode == 3 and "no such file" in missing.stderr
          and not os.path.exists(f"{work}/none.db"),
          f"a history that does not exist is not created to resume in ({missing.stderr.strip()})")
    after = export(db)
    check(len(after["legs"]) == 3 and after["run"]["status"] == "complete" and
          len(after["quality_items"]) == len(final["quality_items"]),
          "the refusals changed nothing")

    if failures:
        print(f"{len(failures)} check(s) failed; files in {work}")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
