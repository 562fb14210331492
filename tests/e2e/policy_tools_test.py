#!/usr/bin/env python3
"""The policy tools against real servers: policies/tools/choose_kv_split.sh serves the built-in
model (CPU, loopback) for a dense row, an FP8 row and a ReadKV split row, scores a tiny
development set and keeps each row's check JSON; policies/tools/compare_items.py then compares
them item by item, and refuses files that do not hold the same items; policies/tools/bench_args.py
turns a policy's server into `kvgate bench decode` arguments.

Usage: policy_tools_test.py BUILD_DIR   (the build holding apps/kvgate)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def main(build):
    with tempfile.TemporaryDirectory(prefix="kvgate_policy_tools_") as work:
        keep = os.path.join(work, "items")
        env = dict(os.environ, KEEP_DIR=keep, PASSKEYS="3", QA="3", PASSKEY_LENGTHS="512",
                   QA_LENGTHS="512", CONFIGS="dense fp8 constrained:6:2")
        scan = subprocess.run([os.path.join(ROOT, "policies/tools/choose_kv_split.sh"), build],
                              env=env, capture_output=True, text=True, timeout=600)
        check(scan.returncode == 0,
              f"choose_kv_split.sh exits 0 ({scan.returncode}: {scan.stderr[-300:]})")
        rows = {m.group(1): (int(m.group(2)), int(m.group(3)))
                for m in re.finditer(r"^(\S+)\s+(\d+)/(\d+)\s+[\d.]+$", scan.stdout, re.M)}
        check(set(rows) == {"dense", "fp8", "constrained:6:2"},
              f"one row per configuration ({sorted(rows)})")
        check(all(total == 3 for _, total in rows.values()), f"3 passkeys scored per row ({rows})")
        for name in ("dense", "fp8", "constrained_6_2"):
            for c in ("passkey", "qa"):
                path = os.path.join(keep, f"{name}.{c}.json")
                check(os.path.exists(path), f"kept {name}.{c}.json")

        def compare(a, b, *extra):
            tool = os.path.join(ROOT, "policies/tools/compare_items.py")
            return subprocess.run([sys.executable, tool, os.path.join(keep, a),
                                   os.path.join(keep, b), *extra],
                                  capture_output=True, text=True, timeout=60)

        same = compare("dense.qa.json", "dense.qa.json")
        check(same.returncode == 0 and same.stdout.startswith("qa: 3 items, 0 flips"),
              f"a file against itself: no flips ({same.stdout.strip()})")
        other = compare("fp8.qa.json", "constrained_6_2.qa.json", "--limit", "2")
        m = re.match(r"qa: 3 items, (\d+) flips \((\d+) won, (\d+) lost by B\)", other.stdout)
        check(other.returncode == 0 and m is not None
              and int(m.group(1)) == int(m.group(2)) + int(m.group(3)),
              f"flips are wins plus losses ({other.stdout.strip()})")
        mixed = compare("fp8.qa.json", "fp8.passkey.json")
        check(mixed.returncode != 0 and "different checks" in mixed.stderr,
              f"a QA file against a passkey file is refused ({mixed.stderr.strip()})")
        with open(os.path.join(keep, "fp8.qa.json")) as f:
            doc = json.load(f)
        doc["items"] = doc["items"][:2]
        short = os.path.join(keep, "short.qa.json")
        with open(short, "w") as f:
            json.dump(doc, f)
        # Known flips: B wins item 0 and loses item 1 by 100 points each, and item 2 is equal.
        with open(os.path.join(keep, "fp8.qa.json")) as f:
            base = json.load(f)
        a_doc, b_doc = json.loads(json.dumps(base)), json.loads(json.dumps(base))
        for item, (sa, sb) in zip(a_doc["items"], [(0.0, 100.0), (100.0, 0.0), (50.0, 50.0)]):
            item["score"] = sa
        for item, (sa, sb) in zip(b_doc["items"], [(0.0, 100.0), (100.0, 0.0), (50.0, 50.0)]):
            item["score"] = sb
        for name, d in (("a.qa.json", a_doc), ("b.qa.json", b_doc)):
            with open(os.path.join(keep, name), "w") as f:
                json.dump(d, f)
        known = compare("a.qa.json", "b.qa.json")
        check(known.stdout.startswith("qa: 3 items, 2 flips (1 won, 1 lost by B), "
                                      "B - A = +0.00 points, 95% half-width 113.16"),
              "two known flips counted, sd 100 -> half-width 1.96*100/sqrt(3) "
              f"({known.stdout.strip()})")
        # By subset: items 0 and 1 in "depth=x", item 2 in "depth=y".
        for name, d in (("a.qa.json", a_doc), ("b.qa.json", b_doc)):
            for item, sub in zip(d["items"], ["depth=x", "depth=x", "depth=y"]):
                item["subsets"] = ["length=512", sub]
            with open(os.path.join(keep, name), "w") as f:
                json.dump(d, f)
        split = compare("a.qa.json", "b.qa.json", "--by-subset").stdout.splitlines()
        check(len(split) == 4 and split[1].startswith("  depth=x: 2 items, 2 flips (1 won, 1 lost")
              and split[2].startswith("  depth=y: 1 items, 0 flips")
              and split[3].startswith("  length=512: 3 items, 2 flips"),
              f"one line per subset, each with its own items ({split})")
        # Sizing: 4 groups (all, depth=x, depth=y, length=512; depth=y's one item has no spread),
        # z = the normal quantile of 0.8^(1/4); depth=x's sd 141.4 over 2 of the 3 items sets it.
        sized = compare("a.qa.json", "b.qa.json", "--by-subset", "--power", "0.8")
        check(sized.returncode == 0 and sized.stdout.splitlines()[-1] ==
              "items for every subset to pass with probability 0.8 at a true drop of 0: "
              "381255 in all (set by depth=x)",
              f"--power sizes the set by its widest subset ({sized.stdout.strip()[-120:]})")
        alone = compare("a.qa.json", "b.qa.json", "--power", "0.8")
        check(alone.returncode != 0 and "--power needs --by-subset" in alone.stderr,
              f"--power without --by-subset is refused ({alone.stderr.strip()})")
        fewer = compare("fp8.qa.json", "short.qa.json")
        check(fewer.returncode != 0 and "same items" in fewer.stderr,
              f"files with different items are refused ({fewer.stderr.strip()})")

        # bench_args.py: a server's bench decode words from a policy, --max-batch as --batch.
        def bench_args(*argv):
            return subprocess.run([sys.executable,
                                   os.path.join(ROOT, "policies/tools/bench_args.py"), *argv],
                                  capture_output=True, text=True, timeout=60)

        long_policy = os.path.join(ROOT, "policies/h200-long.toml")
        cand = bench_args(long_policy, "candidate")
        check(cand.returncode == 0 and cand.stdout.split() == [
                  "--model", "models/long-16k", "--device", "cuda", "--kv", "readkv",
                  "--store-bits", "8", "--read-bits", "5", "--reader", "tile",
                  "--kv-split", "8:2", "--outlier-cap", "2", "--byte-keys", "--value-window",
                  "1024", "--batch", "16"],
              f"the candidate's args, --max-batch 16 as --batch 16 ({cand.stdout.strip()})")
        base = bench_args(long_policy, "baseline", "4")
        check(base.returncode == 0 and base.stdout.split()[-2:] == ["--batch", "4"]
              and "--max-batch" not in base.stdout, f"a given batch wins ({base.stdout.strip()})")
        no_batch = os.path.join(work, "no_batch.toml")
        with open(no_batch, "w") as f:
            f.write('[baseline]\nargs = ["--kv", "fp8"]\n')
        refused = bench_args(no_batch, "baseline")
        check(refused.returncode != 0 and "no --max-batch" in refused.stderr,
              f"a server without --max-batch is refused ({refused.stderr.strip()})")
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
