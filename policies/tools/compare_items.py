#!/usr/bin/env python3
"""Item-by-item comparison of two `kvgate check passkey|qa --json` files over the same items.

Prints, for B against A: items compared, items whose score differs (flips), how many B won and
lost, the mean score difference (B - A, in points) and the half-width of a 95% normal-
approximation interval of that mean (1.96 * sd / sqrt(n); the QA gate itself bootstraps, to
about the same width): what the F1 gate's interval looks like at this flip rate, and how many
items would bring the half-width under --limit points (default 1).

With --by-subset, the same line for every subset the items name ("depth=0-33%", ...): the QA
gate decides each subset on its own, and a drop can hide in one of them.

Usage: compare_items.py A.json B.json [--limit 1.0] [--by-subset]
"""
import argparse
import json
import math
import sys


def scores(path):
    with open(path) as f:
        doc = json.load(f)
    items = doc["items"]
    return (doc.get("check", "?"), {item["item_id"]: float(item["score"]) for item in items},
            {item["item_id"]: item.get("subsets", []) for item in items})


def summary(label, diffs, limit):
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n)
    need = str(math.ceil((1.96 * sd / limit) ** 2)) if sd > 0 else "any number"
    won = sum(d > 0 for d in diffs)
    lost = sum(d < 0 for d in diffs)
    return (f"{label}: {n} items, {won + lost} flips ({won} won, {lost} lost by B), "
            f"B - A = {mean:+.2f} points, 95% half-width {half:.2f}; "
            f"items for a half-width under {limit:g}: {need}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--limit", type=float, default=1.0)
    parser.add_argument("--by-subset", action="store_true")
    args = parser.parse_args()
    check_a, a, subsets = scores(args.a)
    check_b, b, _ = scores(args.b)
    if check_a != check_b:
        sys.exit(f"different checks: {check_a} vs {check_b}")
    ids = sorted(set(a) & set(b))
    if not ids or len(ids) != len(a) or len(ids) != len(b):
        sys.exit(f"the files must hold the same items ({len(a)} vs {len(b)}, {len(ids)} shared)")
    print(summary(check_a, [b[i] - a[i] for i in ids], args.limit))
    if args.by_subset:
        for name in sorted({s for i in ids for s in subsets[i]}):
            diffs = [b[i] - a[i] for i in ids if name in subsets[i]]
            print("  " + summary(name, diffs, args.limit))


if __name__ == "__main__":
    main()
