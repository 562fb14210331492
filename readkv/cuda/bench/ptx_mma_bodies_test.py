#!/usr/bin/env python3
"""Tests of ptx_mma_bodies.py on PTX written here in the shape nvcc -ptx prints it: two entries,
predicated and braced instructions, labels, directives and moves (left out of the counts)."""
import os
import unittest

from script_test_case import ScriptTestCase

HERE = os.path.dirname(os.path.abspath(__file__))

PTX = """
//
.version 9.0
.target sm_90a
	// .globl	_Z5OtherPv
.entry _Z5OtherPv(
	.param .u64 _Z5OtherPv_param_0
)
{
	mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f1};
	ret;
}
	// .globl	_Z10TileLogitsILi64ELi4EEvv
.visible .entry _Z10TileLogitsILi64ELi4EEvv(
)
{
	.reg .b32 %r<9>;
	mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f1};
$L__BB1_2:
	ld.shared.u8 	%r3, [%r4];
	mov.u32 	%r5, 7;
	@%p1 bra 	$L__BB1_3;
	xor.b32  	%r6, %r3, %r5;
	{  cvt.rn.f16.f32 %rs1, %f2;}
	mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f1};
	shl.b32 	%r7, %r6, 1;
	mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f1};
	ret;
}
"""


class PtxMmaBodiesTest(ScriptTestCase):
    SCRIPT = os.path.join(HERE, "ptx_mma_bodies.py")

    def test_counts_the_instructions_between_mmas_without_moves(self):
        path = self.write("k.ptx", PTX)
        done = self.run_script(path, "--kernel", "TileLogits", "--show", "0", "1")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("_Z10TileLogitsILi64ELi4EEvv: 9 instructions, 3 mma", done.stdout)
        self.assertNotIn("_Z5OtherPv", done.stdout)
        other = self.run_script(path, "--kernel", "Other")  # an entry of internal linkage
        self.assertIn("_Z5OtherPv: 2 instructions, 1 mma", other.stdout)
        self.assertIn("spans: 5 2", done.stdout)
        self.assertIn("span 0: ld 1, bra 1, xor 1, cvt 1, mma 1", done.stdout)
        self.assertIn("span 1: shl 1, mma 1", done.stdout)

    def test_refuses_a_kernel_it_cannot_find_and_a_span_out_of_range(self):
        path = self.write("k.ptx", PTX)
        done = self.run_script(path, "--kernel", "TileValues")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("no entry of", done.stderr)
        done = self.run_script(path, "--kernel", "TileLogits", "--show", "5")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("--show 5: there are 2 spans", done.stderr)


if __name__ == "__main__":
    unittest.main()
