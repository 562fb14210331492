#!/usr/bin/env python3
"""Gaussian MSE of embedded (progressive) scalar codes read at depth t: the Lloyd-Max code of
2^t levels (ReadKV's tree reads at depth t with its own centroids, which is what a 2^t-level
Lloyd-Max quantiser gives at the cells it keeps), against a uniform W-bit grid on [-A, A] whose
t-bit prefix cells are read at their centroid (a table, as today) or their midpoint (affine in
the plane bits: what a table-free, Marlin-style decode could compute). Exact integrals of the
standard normal, no dependencies. Cited by docs/performance-notes.md ("The tile reader's bound").

    python3 readkv/cuda/bench/embedded_code_mse.py [--range 4.0] [--depths 1,2,3,4,5]
"""
import argparse
import math


def phi(x):
    return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def big_phi(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def cell(a, b):
    """Mass, first and second moments of N(0, 1) on [a, b]."""
    def x_phi(x):
        return 0.0 if math.isinf(x) else x * phi(x)
    mass = big_phi(b) - big_phi(a)
    return mass, phi(a) - phi(b), mass + x_phi(a) - x_phi(b)


def mse(bounds, points):
    total = 0.0
    for i, r in enumerate(points):
        m0, m1, m2 = cell(bounds[i], bounds[i + 1])
        total += m2 - 2 * r * m1 + r * r * m0
    return total


def lloyd(levels, iters=2000):
    points = [-3 + 6 * (i + 0.5) / levels for i in range(levels)]
    for _ in range(iters):
        bounds = [-math.inf] + [(points[i] + points[i + 1]) / 2 for i in range(levels - 1)]
        bounds.append(math.inf)
        points = [cell(bounds[i], bounds[i + 1])[1] / cell(bounds[i], bounds[i + 1])[0]
                  for i in range(levels)]
    return mse(bounds, points)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--range", type=float, default=4.0, help="A: the grid covers [-A, A]")
    parser.add_argument("--depths", default="1,2,3,4,5")
    args = parser.parse_args()
    print("depth  lloyd      uniform-centroid  uniform-midpoint")
    for t in (int(x) for x in args.depths.split(",")):
        levels, a = 2 ** t, args.range
        step = 2 * a / levels
        bounds = [-math.inf] + [-a + step * i for i in range(1, levels)] + [math.inf]
        mid = [-a + step * (i + 0.5) for i in range(levels)]
        cen = [cell(bounds[i], bounds[i + 1])[1] / cell(bounds[i], bounds[i + 1])[0]
               for i in range(levels)]
        print(f"{t:5d}  {lloyd(levels):.5f}    {mse(bounds, cen):.5f}           {mse(bounds, mid):.5f}")


if __name__ == "__main__":
    main()
