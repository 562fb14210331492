#!/usr/bin/env python3
"""Gaussian MSE of plane-linear reads of embedded codes at depth t, against the Lloyd tree.

A plane-linear read reconstructs from the first t plane bits as x = sum_p v_p(t) s_p, s_p = +-1:
the form a reader needs to take the bit planes as b1 operands of AND-popcount MMAs and decode
nothing (docs/performance-notes.md, "Planes as binary operands"); v(t) is the least-squares fit
to the t-bit prefix cells' means (exact integrals of N(0, 1) over the cells). Printed per depth:
- tree: ReadKV's Lloyd tree read at its node centroids (today's reads; codebook.h's splits);
- tree, linear: the same cells (the same stored bits) read plane-linearly;
- uniform, linear: cells of the uniform grid on [-A, A], i.e. written to the nearest of the
  points sum_p w_p s_p with w_p = A 2^-(p+1), read plane-linearly;
- searched, linear: the same with weights w searched (Nelder-Mead from the uniform grid) for
  the least sum over depths 1..W of MSE_t / tree_t.
The Lloyd tree is exactly plane-linear at depths 1 and 2 (a symmetric 4-point set is
+-v_0 +- v_1); the full multilinear expansion in the signs (2^(t-1) odd terms) is exact at every
depth. No dependencies.

    python3 readkv/cuda/bench/additive_code_mse.py [--bits 8] [--range 4.0] [--iters 3000]
"""
import argparse
import math

from embedded_code_mse import cell


def nearest_cells(weights):
    """Each of the 2^W codes (plane 0 = most significant bit): its point and the mass, first and
    second moments of N(0, 1) over its nearest-neighbour cell."""
    w_bits = len(weights)
    points = []
    for code in range(1 << w_bits):
        x = sum(w * (1 if (code >> (w_bits - 1 - p)) & 1 else -1) for p, w in enumerate(weights))
        points.append((x, code))
    points.sort()
    out = {}
    for i, (x, code) in enumerate(points):
        lo = -math.inf if i == 0 else (points[i - 1][0] + x) / 2
        hi = math.inf if i + 1 == len(points) else (x + points[i + 1][0]) / 2
        m0, m1, m2 = cell(lo, hi) if hi > lo else (0.0, 0.0, 0.0)
        prev = out.get(code, (0.0, 0.0, 0.0))
        out[code] = (prev[0] + m0, prev[1] + m1, prev[2] + m2)
    return out


def solve(a, b):
    """Solves a x = b (small, symmetric positive semi-definite; Gaussian elimination with a
    ridge so that planes with no mass get weight 0)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for i in range(n):
        m[i][i] += 1e-12
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col and m[col][col] != 0:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] if m[i][i] != 0 else 0.0 for i in range(n)]


def refit_mse(cells, w_bits, depth):
    """MSE at `depth` with the least-squares plane-linear reconstruction of the prefix cells."""
    prefix = {}
    for code, (m0, m1, m2) in cells.items():
        key = code >> (w_bits - depth)
        p = prefix.get(key, (0.0, 0.0, 0.0))
        prefix[key] = (p[0] + m0, p[1] + m1, p[2] + m2)
    signs = {k: [1 if (k >> (depth - 1 - p)) & 1 else -1 for p in range(depth)] for k in prefix}
    a = [[sum(prefix[k][0] * signs[k][i] * signs[k][j] for k in prefix) for j in range(depth)]
         for i in range(depth)]
    b = [sum(prefix[k][1] * signs[k][i] for k in prefix) for i in range(depth)]
    v = solve(a, b)
    total = 0.0
    for k, (m0, m1, m2) in prefix.items():
        x = sum(vi * si for vi, si in zip(v, signs[k]))
        total += m2 - 2 * x * m1 + x * x * m0
    return total


def profile(weights):
    cells = nearest_cells(weights)
    return [refit_mse(cells, len(weights), t) for t in range(1, len(weights) + 1)]


def tree_leaves(w_bits):
    """The Lloyd tree's 2^W leaf cells as codebook.h builds it: a node (a, b) splits at the tau of
    the two-cell Lloyd condition inside it, tau = (E[Z | a < Z < tau] + E[Z | tau < Z < b]) / 2."""
    def split(a, b):
        lo = a if not math.isinf(a) else b - 4.0
        hi = b if not math.isinf(b) else a + 4.0
        tau = 0.0 if math.isinf(a) and math.isinf(b) else (lo + hi) / 2
        for _ in range(200):
            left, right = cell(a, tau), cell(tau, b)
            tau = (left[1] / left[0] + right[1] / right[0]) / 2
        return tau
    nodes = [(-math.inf, math.inf)]
    for _ in range(w_bits):
        nodes = [half for a, b in nodes for half in ((a, split(a, b)), (split(a, b), b))]
    return {code: cell(a, b) for code, (a, b) in enumerate(nodes)}


def tree_profile(w_bits):
    """Per depth: the tree read at its centroids, and the same cells read plane-linearly."""
    leaves = tree_leaves(w_bits)
    out = []
    for t in range(1, w_bits + 1):
        nodes = {}
        for code, (m0, m1, m2) in leaves.items():
            n = nodes.get(code >> (w_bits - t), (0.0, 0.0, 0.0))
            nodes[code >> (w_bits - t)] = (n[0] + m0, n[1] + m1, n[2] + m2)
        centroid = sum(m2 - m1 * m1 / m0 for m0, m1, m2 in nodes.values())
        out.append((centroid, refit_mse(leaves, w_bits, t)))
    return out


def nelder_mead(f, x0, iters, step=0.1):
    n = len(x0)
    simplex = [x0[:]] + [[x + (step * x0[i] if j == i else 0) for j, x in enumerate(x0)]
                         for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: values[i])
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        centroid = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        refl = [c + (c - w) for c, w in zip(centroid, worst)]
        fr = f(refl)
        if fr < values[0]:
            exp = [c + 2 * (c - w) for c, w in zip(centroid, worst)]
            fe = f(exp)
            simplex[-1], values[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            fc = f(con)
            if fc < values[-1]:
                simplex[-1], values[-1] = con, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, s)]
                                    for s in simplex[1:]]
                values = [values[0]] + [f(s) for s in simplex[1:]]
    i = min(range(n + 1), key=lambda k: values[k])
    return simplex[i], values[i]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=8, help="W, the planes stored")
    parser.add_argument("--range", type=float, default=4.0, help="the uniform grid's A")
    parser.add_argument("--iters", type=int, default=3000, help="Nelder-Mead iterations")
    args = parser.parse_args()
    w_bits = args.bits
    tree = tree_profile(w_bits)
    ref = [centroid for centroid, _ in tree]
    uniform = [args.range * 2.0 ** -(p + 1) for p in range(w_bits)]
    uni = profile(uniform)

    def objective(w):
        if any(x <= 0 for x in w):
            return math.inf
        return sum(m / r for m, r in zip(profile(w), ref))

    best, _ = nelder_mead(objective, uniform, args.iters)
    opt = profile(best)
    print("searched weights: " + ", ".join(f"{x:.4f}" for x in best))
    print("MSE (x the tree's)  tree      tree, linear      uniform, linear   searched, linear")
    for t in range(w_bits):
        lin = tree[t][1]
        print(f"depth {t + 1}:           {ref[t]:.6f}  {lin:.6f} ({lin / ref[t]:5.2f})  "
              f"{uni[t]:.6f} ({uni[t] / ref[t]:4.2f})  {opt[t]:.6f} ({opt[t] / ref[t]:4.2f})")


if __name__ == "__main__":
    main()
