#!/usr/bin/env python3
"""Tests of compare_bench.py on bench JSON written here, shaped as `kvgate bench attention`
writes it (the fields the script reads; a real file of results/ in the last test)."""
import glob
import os
import unittest

from script_test_case import ScriptTestCase

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "compare_bench.py")
CONFIG = {"batch": [1, 16], "chunk_tokens": 0, "head_dim": 128, "heads_kv": 8, "heads_q": 32,
          "iters": 30, "kv": ["fp8", "tile:8:4"], "min_total_ms": 200.0, "ragged": False,
          "seed": 1, "tokens": [8192]}


def bench_doc(commit, medians, **config_changes):
    """A bench JSON document with one row per ((tokens, batch, kv), median_us)."""
    rows = [{"tokens": t, "batch": b, "kv": kv, "time": {"median_us": us, "mean_us": us + 1.0}}
            for (t, b, kv), us in medians.items()]
    return {"bench": "attention", "git_commit": commit, "config": dict(CONFIG, **config_changes),
            "rows": rows}


class CompareBenchTest(ScriptTestCase):
    SCRIPT = SCRIPT

    def test_changes_are_each_run_against_the_reference(self):
        ref = self.write("a.json", bench_doc("aaa", {(8192, 1, "fp8"): 28.0,
                                                     (8192, 16, "tile:8:4"): 200.0}))
        other = self.write("b.json", bench_doc("bbb", {(8192, 1, "fp8"): 28.0,
                                                       (8192, 16, "tile:8:4"): 190.0}))
        third = self.write("c.json", bench_doc("ccc", {(8192, 1, "fp8"): 29.4,
                                                       (8192, 16, "tile:8:4"): 210.0}))
        result = self.run_script(ref, other, third)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["point", "aaa", "bbb", "ccc"])
        self.assertEqual(lines[1].split(), ["8192", "x", "1", "fp8", "28.0", "28.0", "(+0.0%)",
                                            "29.4", "(+5.0%)"])
        self.assertEqual(lines[2].split(), ["8192", "x", "16", "tile:8:4", "200.0", "190.0",
                                            "(-5.0%)", "210.0", "(+5.0%)"])

    def test_markdown_and_labels(self):
        ref = self.write("a.json", bench_doc("aaa", {(8192, 1, "fp8"): 40.0}))
        other = self.write("b.json", bench_doc("bbb", {(8192, 1, "fp8"): 30.0}))
        result = self.run_script(ref, other, "--markdown", "--labels", "main,tree")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines(), ["| point | main | tree |", "|---|---|---|",
                                                      "| 8192 x 1 fp8 | 40.0 | 30.0 (-25.0%) |"])

    def test_a_point_missing_from_a_run_is_shown_not_dropped(self):
        ref = self.write("a.json", bench_doc("aaa", {(8192, 1, "fp8"): 28.0,
                                                     (8192, 1, "tile:8:4"): 60.0}))
        other = self.write("b.json", bench_doc("bbb", {(8192, 1, "fp8"): 28.0,
                                                       (8192, 1, "tile:8:2"): 50.0}))
        result = self.run_script(ref, other)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), 4)
        self.assertEqual(lines[2].split(), ["8192", "x", "1", "tile:8:4", "60.0", "missing"])
        self.assertEqual(lines[3].split(), ["8192", "x", "1", "tile:8:2", "missing", "50.0",
                                            "(no", "reference)"])

    def test_runs_of_different_configs_are_refused_with_the_fields(self):
        ref = self.write("a.json", bench_doc("aaa", {(8192, 1, "fp8"): 28.0}))
        other = self.write("b.json", bench_doc("bbb", {(8192, 1, "fp8"): 28.0}, heads_q=8,
                                               iters=50))
        result = self.run_script(ref, other)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stdout, "")
        self.assertIn("heads_q = 8 (reference 32)", result.stderr)
        self.assertIn("iters = 50 (reference 30)", result.stderr)

    def test_bad_files_are_named(self):
        ref = self.write("a.json", bench_doc("aaa", {(8192, 1, "fp8"): 28.0}))
        cases = {
            "broken.json": ("{\"bench\": ", "broken.json: not JSON"),
            "other.json": ({"bench": "decode", "rows": []}, "not a `kvgate bench attention` JSON"),
            "norows.json": ({"bench": "attention", "rows": []}, "norows.json: no rows"),
            "notime.json": ({"bench": "attention", "rows": [{"tokens": 1, "batch": 1,
                                                             "kv": "fp8"}]},
                            "notime.json: row 0 lacks tokens, batch, kv or time.median_us"),
        }
        for name, (doc, message) in cases.items():
            result = self.run_script(ref, self.write(name, doc))
            self.assertEqual(result.returncode, 2, name)
            self.assertIn(message, result.stderr, name)
        result = self.run_script(ref, os.path.join(self.dir.name, "absent.json"))
        self.assertEqual(result.returncode, 2)
        self.assertIn("absent.json: cannot read", result.stderr)
        result = self.run_script(ref)
        self.assertEqual(result.returncode, 2)
        self.assertIn("at least one other", result.stderr)
        other = self.write("b.json", bench_doc("bbb", {(8192, 1, "fp8"): 28.0}))
        result = self.run_script(ref, other, "--labels", "one")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--labels names 1 columns for 2 files", result.stderr)

    def test_reads_the_rounds_recorded_in_results(self):
        # A recorded H200 run against itself: every point present, every change 0.
        recorded = sorted(glob.glob(os.path.join(HERE, "results", "*-attention-eleventh-*.json")))
        self.assertTrue(recorded, "results/ holds the eleventh round's JSON")
        result = self.run_script(recorded[0], recorded[0])
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()[1:]
        self.assertTrue(lines)
        for line in lines:
            self.assertTrue(line.endswith("(+0.0%)"), line)


if __name__ == "__main__":
    unittest.main()
