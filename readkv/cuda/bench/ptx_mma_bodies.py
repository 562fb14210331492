#!/usr/bin/env python3
"""The instructions between a kernel's tensor-core MMAs, counted in its PTX: a static look at
what feeds each MMA (a decode, a conversion, the epilogue around it) that needs no GPU. Compile
the file to PTX first, as the build does but with -ptx, e.g.

  nvcc -DKVGATE_HAVE_CUDA=1 -Ireadkv/cuda/include -Ireadkv/codec/include -Istats/include -O2 \
       -DNDEBUG -std=c++17 --generate-code=arch=compute_90a,code=[compute_90a] -x cu -ptx \
       readkv/cuda/src/tile_attention.cu -o tile.ptx
  readkv/cuda/bench/ptx_mma_bodies.py tile.ptx --kernel 'TileLogitsILi64ELi4E'

For each entry whose mangled name contains --kernel it prints the PTX instructions between each
MMA and the next (the MMA included; labels, directives and `mov` left out: ptxas drops most moves)
and the opcode counts of the spans it names with --show. PTX is not SASS: ptxas fuses logic
operations (lop3) and schedules, so a count is an upper bound of what issues, and a ratio
between kernels compiled alike is the reading to trust; Nsight Compute's SASS profile is the
measurement (scripts/gpu_kernels.sh SOURCE_PROFILE).
"""
import argparse
import collections
import re
import sys

ENTRY = re.compile(r"^(?:\.visible\s+)?\.entry\s+(\S+?)\(")


def entries(lines):
    """[(mangled name, [instruction lines])] of every kernel entry in the PTX."""
    out, name, body = [], None, []
    for line in lines:
        match = ENTRY.match(line.strip())
        if match:
            if name is not None:
                out.append((name, body))
            name, body = match.group(1), []
        elif name is not None:
            body.append(line)
    if name is not None:
        out.append((name, body))
    return out


def opcodes(body):
    """The opcodes of the instruction lines, predicates stripped, moves left out."""
    ops = []
    for line in body:
        text = line.strip()
        if (not text or text.startswith("//") or text.startswith(".") or text.endswith(":")
                or text in ("{", "}", ")")):
            continue
        words = text.lstrip("{").split()  # inline asm: "{  cvt.rn.f16.f32 %rs1, %f2;}"
        if words and words[0].startswith("@"):  # a predicate
            words = words[1:]
        if not words or words[0].startswith("mov"):
            continue
        ops.append(words[0].rstrip(";"))
    return ops


def spans(ops):
    """Lengths of the spans from one mma to the next (the closing mma counted), in order."""
    at = [k for k, op in enumerate(ops) if op.startswith("mma")]
    return [at[j + 1] - at[j] for j in range(len(at) - 1)], at


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ptx")
    parser.add_argument("--kernel", required=True, help="a substring of the mangled entry name")
    parser.add_argument("--show", type=int, nargs="*", default=[],
                        help="span indices whose opcode counts to print")
    args = parser.parse_args(argv)
    with open(args.ptx) as f:
        found = [(n, b) for n, b in entries(f.read().split("\n")) if args.kernel in n]
    if not found:
        sys.exit(f"error: no entry of {args.ptx} contains '{args.kernel}'")
    for name, body in found:
        ops = opcodes(body)
        lengths, at = spans(ops)
        print(f"{name}: {len(ops)} instructions, {len(at)} mma")
        print("  spans:", " ".join(str(n) for n in lengths))
        for k in args.show:
            if not 0 <= k < len(lengths):
                sys.exit(f"error: --show {k}: there are {len(lengths)} spans")
            counts = collections.Counter(op.split(".")[0] for op in ops[at[k] + 1:at[k + 1] + 1])
            print(f"  span {k}:", ", ".join(f"{op} {n}" for op, n in counts.most_common()))


if __name__ == "__main__":
    main(sys.argv[1:])
