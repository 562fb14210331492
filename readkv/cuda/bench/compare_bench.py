#!/usr/bin/env python3
"""Medians of several `kvgate bench attention` runs of the same points, side by side.

Input: JSON files written by `kvgate bench attention --json` (e.g. one per tree of a kernel round:
scripts/gpu_kernels.sh's bench_pN.json, bench_baseline_pN.json, bench_LABEL_pN.json). The first
is the reference. Output, per point (tokens x batch, kv): each run's median time in us and, for
the others, its change against the reference in percent; with --markdown a table to paste into
BENCHMARKS.md. Each column is named by its file's git_commit, unless --labels names them.

    python3 compare_bench.py REFERENCE.json OTHER.json [OTHER.json ...] [--labels A,B,...]
                             [--markdown]

The runs must measure the same thing: their configs (geometry, iterations, seed, chunking) must
agree, or the comparison is refused with the fields that differ (exit 2); a point missing from
some run is shown as missing, never dropped. Exit 0 done; 2 bad input (named).
"""
import argparse
import json
import signal
import sys

# Config fields that change what a row measures. `kv`, `tokens` and `batch` only choose which
# rows exist; rows are matched by them.
SAME_CONFIG = ("heads_q", "heads_kv", "head_dim", "iters", "min_total_ms", "seed",
               "chunk_tokens", "ragged")


class BadInput(Exception):
    pass


def load_bench(path):
    """The document of one `kvgate bench attention --json` file (also ncu_kernel_ledger.py's)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}")
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not JSON: {e}")
    if not isinstance(doc, dict) or doc.get("bench") != "attention":
        raise BadInput(f"{path}: not a `kvgate bench attention` JSON (no \"bench\": \"attention\")")
    return doc


def run_label(doc):
    """A run's default column name: its git_commit."""
    return str(doc.get("git_commit", "?"))


def load_run(path):
    """(label, config, {(tokens, batch, kv): median_us}) of one bench JSON file."""
    doc = load_bench(path)
    rows = {}
    for i, row in enumerate(doc.get("rows", [])):
        try:
            key = (int(row["tokens"]), int(row["batch"]), str(row["kv"]))
            median = float(row["time"]["median_us"])
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{path}: row {i} lacks tokens, batch, kv or time.median_us")
        if key in rows:
            raise BadInput(f"{path}: row {i} repeats {key[0]} x {key[1]} {key[2]}")
        rows[key] = median
    if not rows:
        raise BadInput(f"{path}: no rows")
    return run_label(doc), doc.get("config", {}), rows


def check_configs(paths, configs):
    """Raises BadInput naming every SAME_CONFIG field on which a run differs from the first."""
    differing = []
    for path, config in zip(paths[1:], configs[1:]):
        for field in SAME_CONFIG:
            if config.get(field) != configs[0].get(field):
                differing.append(f"{path}: {field} = {config.get(field)!r} "
                                 f"(reference {configs[0].get(field)!r})")
    if differing:
        raise BadInput("runs of different configs:\n  " + "\n  ".join(differing))


def compare(runs):
    """[(tokens, batch, kv, [median or None per run], [change vs the first or None])] in the
    reference's row order, then rows only the others have."""
    keys = list(runs[0].keys())
    for rows in runs[1:]:
        keys += [k for k in rows if k not in keys]
    table = []
    for key in keys:
        medians = [rows.get(key) for rows in runs]
        ref = medians[0]
        changes = [None if (m is None or ref is None) else m / ref - 1.0 for m in medians]
        table.append((key[0], key[1], key[2], medians, changes))
    return table


def cell(median, change, first):
    if median is None:
        return "missing"
    if first:
        return f"{median:.1f}"
    return f"{median:.1f} (no reference)" if change is None else \
        f"{median:.1f} ({100.0 * change:+.1f}%)"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="JSON")
    parser.add_argument("--labels", help="comma-separated column names, one per file")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args(argv)
    if len(args.files) < 2:
        raise BadInput("give the reference run and at least one other")
    loaded = [load_run(path) for path in args.files]
    check_configs(args.files, [config for _, config, _ in loaded])
    labels = [label for label, _, _ in loaded]
    if args.labels is not None:
        labels = args.labels.split(",")
        if len(labels) != len(args.files):
            raise BadInput(f"--labels names {len(labels)} columns for {len(args.files)} files")
    table = compare([rows for _, _, rows in loaded])
    header = ["point"] + labels
    lines = [[f"{t} x {b} {kv}"] + [cell(m, c, i == 0) for i, (m, c) in enumerate(zip(ms, cs))]
             for t, b, kv, ms, cs in table]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(row[i]) for row in [header] + lines) for i in range(len(header))]
        for row in [header] + lines:
            print("  ".join(text.rjust(width) if i else text.ljust(width)
                            for i, (text, width) in enumerate(zip(row, widths))).rstrip())
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        print(f"compare_bench.py: {e}", file=sys.stderr)
        sys.exit(2)
