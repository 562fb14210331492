#!/usr/bin/env python3
"""Gaussian MSE of the byte formats a key read whole could be stored in, per standardised
element z ~ N(0, 1) (the codec's transformed, mean-removed, sigma-scaled domain): the Lloyd tree
at depth 8 (today's codes, a table read per element), a uniform 8-bit grid on [-A, A] read at its
midpoints (affine in the byte: a byte permute and one f16 fma a pair, no table), and FP8 e4m3 of
z (one `cvt.rn.f16x2.e4m3x2` a pair, FP8's own decode; its error is relative, so a scale s z
changes nothing while N(0, 1) stays in its normal range). Values past a
format's range are clipped to its outermost point (the outlier lists correct the keys they
list). Exact integrals of the standard normal; cited by docs/performance-notes.md ("The served
geometry's keys").

    python3 readkv/cuda/bench/key_byte_formats_mse.py [--range 4.0]
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embedded_code_mse import lloyd, mse  # noqa: E402


def quantiser_mse(points):
    """MSE of rounding to the nearest of the sorted points (the ends take the tails)."""
    bounds = [-math.inf] + [(points[i] + points[i + 1]) / 2 for i in range(len(points) - 1)]
    return mse(bounds + [math.inf], points)


def e4m3_values():
    """Every finite FP8 e4m3 (fn) value: subnormals m 2^-9, normals (1 + m/8) 2^(e-7), max 448."""
    positive = [m * 2.0 ** -9 for m in range(1, 8)]
    for e in range(1, 16):
        for m in range(8):
            if e == 15 and m == 7:
                continue  # NaN
            positive.append((1 + m / 8) * 2.0 ** (e - 7))
    return sorted([-v for v in positive] + [0.0] + positive)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--range", type=float, default=4.0, help="A: the uniform grid's [-A, A]")
    args = parser.parse_args()
    a = args.range
    uniform = [-a + 2 * a * (i + 0.5) / 256 for i in range(256)]
    rows = [("Lloyd tree, depth 8 (table)", lloyd(256)),
            (f"uniform 8-bit on [-{a:g}, {a:g}], midpoints (affine)", quantiser_mse(uniform))]
    # e4m3's error is relative: any s that keeps N(0, 1) inside its normal range gives this.
    rows.append(("FP8 e4m3 of z", quantiser_mse(e4m3_values())))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  MSE {value:.3e}  ({value / rows[0][1]:.1f}x the tree's)")


if __name__ == "__main__":
    main()
