#!/usr/bin/env python3
"""Tests of ncu_kernel_ledger.py on ncu CSV written here in the shape `ncu --csv --metrics`
prints it (the profiled program's output around it), and on bench JSON shaped as
`kvgate bench attention --json` writes it."""
import csv
import io
import os
import unittest

from script_test_case import ScriptTestCase

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ncu_kernel_ledger.py")
HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
          "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
          "Metric Value"]
VALUES = ("void readkv::cuda::tile_kernels::TileValues<64, 4>(readkv::cuda::tile_kernels::TileArgs, "
          "readkv::cuda::tile::TileCentroids)")
PREPARE = "readkv::cuda::tile_kernels::TilePrepare(readkv::cuda::tile_kernels::TileArgs)"


def ncu_csv(launches, program_output="  8192 x 1 tile:8:4  63.9 us\n"):
    """launches: [(id, kernel, time (unit, value), read (unit, value), write (unit, value)
    [, L2 sectors written (unit, value) or {other metric: (unit, value)}]...)]."""
    out = io.StringIO()
    out.write("==PROF== Connected to process 4242\n" + program_output)
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(HEADER)
    for launch_id, kernel, time, read, write, *more in launches:
        metrics = [("gpu__time_duration.sum", time), ("dram__bytes_read.sum", read),
                   ("dram__bytes_write.sum", write)]
        for value in more:
            metrics += (list(value.items()) if isinstance(value, dict) else
                        [("lts__t_sectors_srcunit_tex_op_write.sum", value)])
        for metric, (unit, value) in metrics:
            writer.writerow([launch_id, 4242, "kvgate", "127.0.0.1", kernel, 1, 7, "(256, 1, 1)",
                             "(8, 8, 1)", 0, "9.0", "Command line profiler metrics", metric, unit,
                             value])
        out.write("  (the program prints between launches)\n")
    return out.getvalue()


def bench_doc(total, rows=1, kernels=None, stream_gbps=None):
    row = {"kv": "tile:8:4", "tokens": 8192, "batch": 1, "anchor": False,
           "traffic_bytes": {"total": total, "payload": total // 2}}
    if kernels is not None:
        row["traffic_kernels"] = kernels
    doc = {"bench": "attention", "rows": [dict(row) for _ in range(rows)]}
    if stream_gbps is not None:
        doc["stream"] = {"gbps": stream_gbps}
    return doc


def issue(inst, clock):
    """The instruction and clock metrics of a launch: each (unit, value)."""
    return {"smsp__inst_executed.sum": inst, "sm__cycles_elapsed.avg.per_second": clock}


class NcuKernelLedgerTest(ScriptTestCase):
    SCRIPT = SCRIPT

    def test_per_kernel_rates_call_sums_and_the_model_ratio(self):
        # Two calls of two kernels, units as ncu prints them by default (auto-scaled, with
        # thousands separators): the rates and the mean call are worked out by hand.
        launches = [
            (0, PREPARE, ("nsecond", "10,000"), ("Kbyte", "500"), ("byte", "0")),
            (1, VALUES, ("usecond", "20"), ("Mbyte", "3.5"), ("Mbyte", "1")),
            (2, PREPARE, ("usecond", "12"), ("Kbyte", "700"), ("byte", "0")),
            (3, VALUES, ("usecond", "18"), ("Mbyte", "3.3"), ("Mbyte", "1")),
        ]
        csv_path = self.write("ncu.csv", ncu_csv(launches))
        bench_path = self.write("bench.json", bench_doc(5_000_000))
        result = self.run_script(csv_path, "--bench", bench_path)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertIn("kernel", lines[0])
        prepare = lines[1].split()
        self.assertEqual(prepare[0], "TilePrepare")
        self.assertEqual(prepare[1:], ["10.0", "0.50", "0.00", "50"])  # 0.5 MB in 10 us
        values = lines[2].split()
        self.assertEqual(values[0:2], ["TileValues<64,", "4>"])
        self.assertEqual(values[2:], ["20.0", "3.50", "1.00", "225"])  # 4.5 MB in 20 us
        # One call: (10 + 20 + 12 + 18) / 2 us, (0.5 + 3.5 + 0.7 + 3.3) / 2 MB read, 1 MB written.
        self.assertTrue(lines[5].startswith("one call (mean of 2)"), lines[5])
        self.assertEqual(lines[5].split()[-3:], ["30.0", "4.00", "1.00"])
        self.assertEqual(lines[6], "model (tile:8:4 8192 x 1): 5.00 MB physical traffic per "
                                   "call; measured DRAM read + write 5.00 MB = 1.000x the model")

    def test_each_kernel_against_its_share_of_the_model(self):
        # Two calls; the model names TilePrepare, TileValues and TileCombine, the run also has a
        # TileLogits launch.
        launches = [
            (0, PREPARE, ("usecond", "10"), ("Kbyte", "500"), ("byte", "0")),
            (1, "void tile_kernels::TileLogits<64, 4, false>(TileArgs, TileCentroids)",
             ("usecond", "5"), ("byte", "0"), ("byte", "0")),
            (2, VALUES, ("usecond", "20"), ("Mbyte", "3.5"), ("Mbyte", "1")),
            (3, PREPARE, ("usecond", "12"), ("Kbyte", "700"), ("byte", "0")),
            (4, VALUES, ("usecond", "18"), ("Mbyte", "3.3"), ("Mbyte", "1")),
        ]
        model = [{"kernel": "TilePrepare", "read": 500_000, "write": 0},
                 {"kernel": "TileValues", "read": 4_000_000, "write": 500_000},
                 {"kernel": "TileCombine", "read": 1_000_000, "write": 2_000}]
        result = self.run_script(self.write("ncu.csv", ncu_csv(launches)), "--bench",
                                 self.write("bench.json", bench_doc(6_000_000, kernels=model)))
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("by kernel"))
        # Per call: TilePrepare read (0.5 + 0.7) / 2 MB; TileValues read (3.5 + 3.3) / 2, wrote 1.
        self.assertEqual(lines[at + 1].split(),
                         ["TilePrepare", "0.50", "0.60", "1.200x", "0.00", "0.00", "--"])
        self.assertEqual(lines[at + 2].split(),
                         ["TileValues", "4.00", "3.40", "0.850x", "0.50", "1.00", "2.000x"])
        self.assertEqual(lines[at + 3].split(),
                         ["TileCombine", "1.00", "0.00", "0.000x", "0.00", "0.00", "0.000x"])
        self.assertEqual(lines[at + 4], "TileLogits<64, 4, false>: profiled, but no kernel of the "
                                        "model's is a prefix of its name")
        self.assertEqual(len(lines), at + 5)
        # An entry that is not {kernel, read, write} is refused, named.
        bad = bench_doc(1000, kernels=[{"kernel": "TilePrepare", "read": "many", "write": 0}])
        result = self.run_script(self.write("ncu.csv", ncu_csv(launches)), "--bench",
                                 self.write("bad.json", bad))
        self.assertEqual(result.returncode, 2)
        self.assertIn("traffic_kernels entry", result.stderr)

    def test_l2_writes_when_the_csv_has_them(self):
        # The fourth metric (sectors of 32 bytes) adds a column, and the by-kernel writes are
        # then what the kernels wrote into L2 (3,000 sectors = 0.096 MB for TileValues, whose DRAM
        # writes were 1 MB: lines still dirty from before, say).
        launches = [
            (0, PREPARE, ("usecond", "10"), ("Kbyte", "500"), ("byte", "0"), ("sector", "1,000")),
            (1, VALUES, ("usecond", "20"), ("Mbyte", "3.5"), ("Mbyte", "1"), ("Ksector", "3")),
        ]
        model = [{"kernel": "TilePrepare", "read": 500_000, "write": 32_000},
                 {"kernel": "TileValues", "read": 3_500_000, "write": 48_000}]
        result = self.run_script(self.write("ncu.csv", ncu_csv(launches)), "--bench",
                                 self.write("bench.json", bench_doc(4_000_000, kernels=model)))
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertTrue(lines[0].endswith("L2 written MB"), lines[0])
        self.assertEqual(lines[1].split()[-1], "0.03")  # 1,000 sectors
        self.assertEqual(lines[2].split()[-1], "0.10")
        at = next(i for i, line in enumerate(lines) if line.startswith("by kernel"))
        self.assertIn("L2 written", lines[at])
        self.assertEqual(lines[at + 1].split(),
                         ["TilePrepare", "0.50", "0.50", "1.000x", "0.03", "0.03", "1.000x"])
        self.assertEqual(lines[at + 2].split(),
                         ["TileValues", "3.50", "3.50", "1.000x", "0.05", "0.10", "2.000x"])
        # Some launches with the L2 metric and some without: refused, not a silently dropped
        # column.
        partial = [launches[0], launches[1][:5]]
        result = self.run_script(self.write("partial.csv", ncu_csv(partial)))
        self.assertEqual(result.returncode, 2)
        self.assertIn("launch 1 (TileValues<64, 4>) lacks lts__t_sectors_srcunit_tex_op_write.sum",
                      result.stderr)

    def test_issue_floor_of_each_launch_and_of_a_call_beside_the_bytes_floor(self):
        # 132 SMs x 4 schedulers = 528 warp instructions a cycle. TilePrepare: 1.056M instructions
        # at 1 GHz = 2 us of its 10; TileValues: 5.28M at 1 GHz = 10 us of its 20. Units as ncu may
        # print them (scaled, or base with thousands separators).
        launches = [
            (0, PREPARE, ("usecond", "10"), ("Kbyte", "500"), ("byte", "0"),
             issue(("Minst", "1.056"), ("hz", "1,000,000,000"))),
            (1, VALUES, ("usecond", "20"), ("Mbyte", "3.5"), ("Mbyte", "1"),
             issue(("inst", "5,280,000"), ("Ghz", "1.00"))),
        ]
        csv_path = self.write("ncu.csv", ncu_csv(launches))
        # The model's 5 MB at a streaming read of 500 GB/s: 10 us of the call's 30.
        bench_path = self.write("bench.json", bench_doc(5_000_000, stream_gbps=500.0))
        result = self.run_script(csv_path, "--bench", bench_path)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertTrue(lines[0].endswith("M inst issue floor"), lines[0])
        self.assertEqual(lines[1].split()[-2:], ["1.06", "20.0%"])
        self.assertEqual(lines[2].split()[-2:], ["5.28", "50.0%"])
        self.assertEqual(lines[4], "issue floor of one call: 12.0 us, 40.0% of its time (132 SMs "
                                   "x 4 schedulers at each launch's SM clock)")
        self.assertEqual(lines[6], "bytes floor of one call: 10.0 us, 33.3% of its time (the "
                                   "model's bytes at the run's streaming read, 500 GB/s)")
        # Half the SMs: twice the floor.
        result = self.run_script(csv_path, "--sms", "66")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout.splitlines()[4].startswith(
            "issue floor of one call: 24.0 us, 80.0% of its time (66 SMs"))
        self.assertNotIn("bytes floor", result.stdout)  # no bench, no bytes floor

    def test_issue_metrics_come_as_a_pair_in_every_launch_or_are_refused(self):
        clock_only = [(0, PREPARE, ("usecond", "1"), ("byte", "1"), ("byte", "1"),
                       {"sm__cycles_elapsed.avg.per_second": ("Ghz", "1.9")})]
        inst = {"smsp__inst_executed.sum": ("inst", "100")}
        one_lacks = [(0, PREPARE, ("usecond", "1"), ("byte", "1"), ("byte", "1"),
                      issue(("inst", "100"), ("Ghz", "1.9"))),
                     (1, VALUES, ("usecond", "1"), ("byte", "1"), ("byte", "1"), inst)]
        cases = [
            ("clock alone", clock_only, "have sm__cycles_elapsed.avg.per_second but not "
                                        "smsp__inst_executed.sum: the issue floor needs both"),
            ("a launch lacks the clock", one_lacks,
             "launch 1 (TileValues<64, 4>) lacks sm__cycles_elapsed.avg.per_second"),
            ("unknown unit", [(0, PREPARE, ("usecond", "1"), ("byte", "1"), ("byte", "1"),
                               issue(("warps", "100"), ("Ghz", "1.9")))],
             "unit 'warps' of smsp__inst_executed.sum"),
        ]
        for what, launches, message in cases:
            with self.subTest(what):
                result = self.run_script(self.write("bad.csv", ncu_csv(launches)))
                self.assertEqual(result.returncode, 2)
                self.assertIn(message, result.stderr)
        good = self.write("good.csv", ncu_csv(one_lacks[:1]))
        result = self.run_script(good, "--sms", "0")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--sms must be positive", result.stderr)
        result = self.run_script(good, "--bench",
                                 self.write("b.json", bench_doc(1000, stream_gbps="fast")))
        self.assertEqual(result.returncode, 2)
        self.assertIn("stream.gbps is not a positive number: 'fast'", result.stderr)

    def test_base_units_short_names_and_no_bench(self):
        launches = [(5, PREPARE, ("nsecond", "2000"), ("byte", "4000000"), ("byte", "0")),
                    # ncu's forms of names in an anonymous namespace (as an H200's ncu printed
                    # them: inside template arguments and at a name's start), units as "ns"
                    (6, "void SplitDecodeKernel<unnamed>::Fp8Rows<3>, 64, 4, 4>(SplitArgs, T1)",
                     ("ns", "1,000"), ("MB", "1"), ("KB", "1")),
                    (7, "unnamed>::CombineSplits(int, int, const float *)",
                     ("ns", "500"), ("byte", "0"), ("byte", "0"))]
        result = self.run_script(self.write("ncu.csv", ncu_csv(launches)))
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(lines[1].split(), ["TilePrepare", "2.0", "4.00", "0.00", "2000"])
        self.assertEqual(lines[2].split(), ["SplitDecodeKernel<Fp8Rows<3>,", "64,", "4,", "4>",
                                            "1.0", "1.00", "0.00", "1001"])
        self.assertEqual(lines[3].split()[0], "CombineSplits")
        self.assertNotIn("model", result.stdout)

    def test_refusals_name_what_is_wrong(self):
        good = [(0, PREPARE, ("usecond", "1"), ("byte", "1"), ("byte", "1"))]
        cases = [
            ("no header", "==PROF== Disconnected\nno csv here\n", "no ncu CSV header"),
            ("unknown unit", ncu_csv([(0, PREPARE, ("fortnight", "1"), ("byte", "1"),
                                       ("byte", "1"))]), "unit 'fortnight'"),
            ("not a number", ncu_csv([(0, PREPARE, ("usecond", "n/a"), ("byte", "1"),
                                       ("byte", "1"))]), "is not a number"),
        ]
        for what, text, message in cases:
            with self.subTest(what):
                result = self.run_script(self.write("bad.csv", text))
                self.assertEqual(result.returncode, 2)
                self.assertIn(message, result.stderr)
        # A launch without one of the metrics (ncu printed only time for it).
        partial = ncu_csv(good).splitlines()
        partial = "\n".join(line for line in partial if "dram__bytes_write" not in line) + "\n"
        result = self.run_script(self.write("partial.csv", partial))
        self.assertEqual(result.returncode, 2)
        self.assertIn("lacks dram__bytes_write.sum", result.stderr)
        # A bench JSON of several points: which one was profiled is not known.
        result = self.run_script(self.write("ok.csv", ncu_csv(good)), "--bench",
                                 self.write("two.json", bench_doc(1000, rows=2)))
        self.assertEqual(result.returncode, 2)
        self.assertIn("2 kernel rows", result.stderr)
        result = self.run_script(self.write("ok.csv", ncu_csv(good)), "--bench",
                                 self.write("broken.json", "{not json"))
        self.assertEqual(result.returncode, 2)
        self.assertIn("not JSON", result.stderr)


if __name__ == "__main__":
    unittest.main()
