#!/usr/bin/env python3
"""Item-by-item comparison of two `kvgate check passkey|qa --json` files over the same items.

Prints, for B against A: items compared, items whose score differs (flips), how many B won and
lost, the mean score difference (B - A, in points) and the half-width of a 95% normal-
approximation interval of that mean (1.96 * sd / sqrt(n); the QA gate itself bootstraps, to
about the same width): what the F1 gate's interval looks like at this flip rate, and how many
items would bring the half-width under --limit points (default 1).

Usage: compare_items.py A.json B.json [--limit 1.0]
"""
import argparse
import json
import math
import sys


def scores(path):
    with open(path) as f:
        doc = json.load(f)
    return doc.get("check", "?"), {item["item_id"]: float(item["score"]) for item in doc["items"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--limit", type=float, default=1.0)
    args = parser.parse_args()
    check_a, a = scores(args.a)
    check_b, b = scores(args.b)
    if check_a != check_b:
        sys.exit(f"different checks: {check_a} vs {check_b}")
    ids = sorted(set(a) & set(b))
    if not ids or len(ids) != len(a) or len(ids) != len(b):
        sys.exit(f"the files must hold the same items ({len(a)} vs {len(b)}, {len(ids)} shared)")
    diffs = [b[i] - a[i] for i in ids]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n)
    need = str(math.ceil((1.96 * sd / args.limit) ** 2)) if sd > 0 else "any number"
    won = sum(d > 0 for d in diffs)
    lost = sum(d < 0 for d in diffs)
    print(f"{check_a}: {n} items, {won + lost} flips ({won} won, {lost} lost by B), "
          f"B - A = {mean:+.2f} points, 95% half-width {half:.2f}; "
          f"items for a half-width under {args.limit:g}: {need}")


if __name__ == "__main__":
    main()
