#!/usr/bin/env python3
"""Item-by-item comparison of two `kvgate check passkey|qa --json` files over the same items.

Prints, for B against A: items compared, items whose score differs (flips), how many B won and
lost, the mean score difference (B - A, in points) and the half-width of a 95% normal-
approximation interval of that mean (1.96 * sd / sqrt(n); the QA gate itself bootstraps, to
about the same width): what the F1 gate's interval looks like at this flip rate, and how many
items would bring the half-width under --limit points (default 1).

With --by-subset, the same line for every subset the items name ("depth=0-33%", ...): the QA
gate decides each subset on its own, and a drop can hide in one of them.

With --power P (and --by-subset), how many items a policy should run so that, if B truly drops
nothing against A, every subset's 95% interval ends under --limit with probability P: per subset
n = ((1.96 + z) sd / limit)^2 with z the normal quantile of P^(1/k) over the k subsets (as if
independent), scaled to the whole set by the subset's share of the items. Computed on a
development seed, it sizes the gates' run without looking at the gates' seed (the half-width
rule above gives only even odds at a true drop of 0).

Usage: compare_items.py A.json B.json [--limit 1.0] [--by-subset [--power 0.8]]
"""
import argparse
import json
import math
import statistics
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
    parser.add_argument("--power", type=float, default=None,
                        help="with --by-subset: the items for every subset to pass with this "
                             "probability at a true drop of 0")
    args = parser.parse_args()
    if args.power is not None and not (args.by_subset and 0.5 <= args.power < 1):
        sys.exit("--power needs --by-subset and a probability in [0.5, 1)")
    check_a, a, subsets = scores(args.a)
    check_b, b, _ = scores(args.b)
    if check_a != check_b:
        sys.exit(f"different checks: {check_a} vs {check_b}")
    ids = sorted(set(a) & set(b))
    if not ids or len(ids) != len(a) or len(ids) != len(b):
        sys.exit(f"the files must hold the same items ({len(a)} vs {len(b)}, {len(ids)} shared)")
    print(summary(check_a, [b[i] - a[i] for i in ids], args.limit))
    if args.by_subset:
        names = sorted({s for i in ids for s in subsets[i]})
        for name in names:
            diffs = [b[i] - a[i] for i in ids if name in subsets[i]]
            print("  " + summary(name, diffs, args.limit))
        if args.power is not None:
            print(sized(ids, a, b, subsets, names, args.limit, args.power))


def sized(ids, a, b, subsets, names, limit, power):
    """The whole set's items for every subset (and all) to pass with `power` at a drop of 0."""
    groups = [("all", list(ids))] + [(n, [i for i in ids if n in subsets[i]]) for n in names]
    z = statistics.NormalDist().inv_cdf(power ** (1 / len(groups)))
    worst, need = "", 0
    for name, members in groups:
        diffs = [b[i] - a[i] for i in members]
        if len(diffs) < 2:
            continue
        sd = statistics.stdev(diffs)
        total = math.ceil(((1.96 + z) * sd / limit) ** 2 * len(ids) / len(diffs))
        if total > need:
            worst, need = name, total
    return (f"items for every subset to pass with probability {power:g} at a true drop of 0: "
            f"{need} in all (set by {worst})")


if __name__ == "__main__":
    main()
