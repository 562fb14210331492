#!/usr/bin/env python3
"""The `kvgate bench decode` arguments of one server of a policy: its `args` with --max-batch
turned into --batch (or BATCH when given), printed as one line of words. scripts/gpu_run.sh and
scripts/gpu_decode_ab.sh bench each server's decode step this way.

Usage: bench_args.py POLICY.toml baseline|candidate [BATCH]
"""
import sys
import tomllib


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[2] not in ("baseline", "candidate"):
        sys.exit(__doc__.strip().splitlines()[-1])
    with open(sys.argv[1], "rb") as f:
        args = list(tomllib.load(f)[sys.argv[2]]["args"])
    if "--max-batch" not in args:
        sys.exit(f"{sys.argv[1]}: [{sys.argv[2]}] args have no --max-batch")
    i = args.index("--max-batch")
    batch = sys.argv[3] if len(sys.argv) == 4 else args[i + 1]
    del args[i:i + 2]
    print(" ".join(args + ["--batch", batch]))


if __name__ == "__main__":
    main()
