// One lane's share of a tile-layout plane stack (readkv/codec/tile_planes.h) decoded into the
// f16 A fragment of mma.sync.m16n8k16: the tile reader's inner loop, as plain integer code that
// compiles for the host (tests/tile_fragment_test.cc proves it bit-exact against the codec's
// DecodeTileCodes + LloydTree centroids) and for the device (the tile kernels).
//
// Input: the lane's byte of each plane read, b[p] = plane p's byte `lane` (bit k = fragment
// element a_k, TileElement(lane, k) of tile_planes.h), p < t. Output: out[j] = f16x2 of
// (C_t(code_{2j}), C_t(code_{2j+1})), element 2j in the low half: exactly the four A registers
// of the MMA (a0a1, a2a3, a4a5, a6a7). C_t is the standard-Gaussian Lloyd tree's depth-t table,
// rounded to f16 (round to nearest even); the tree is antisymmetric (codebook.cc), so
// C_t(~code) = -C_t(code) exactly, in f16 too.
//
// Byte keys (a second key format, below) have a fourth path of their own: DecodeByteKeys.
//
// Three paths, chosen at compile time by the depth (callers dispatch once per run of equal
// depths, never per element):
// - t = 1 (sign trick): C_1(b) = (b ? +c : -c). Per f16x2: one multiply that moves the pair's two
//   bits to the half's sign bits (bits 15 and 31) and one lop3 (and-mask, xor into -c|-c):
//   2 instructions per pair, 1 per element, no table.
// - t = 2 (sign trick): codes 00, 01, 10, 11 are -c_b, -c_a, +c_a, +c_b (c_a < c_b): the sign is
//   p0 and the magnitude c_a where p0 != p1. Per lane u = b0 ^ b1 is spread so that element k's
//   bit is the top bit of byte k (one xor and two multiply-spreads per 8 elements); per f16x2
//   the depth-1 trick on -c_b|-c_b (multiply, lop3) and one sign-replicating byte permute whose
//   16-bit masks pick the bits c_b and c_a differ in (lop3 and-xor): 4 instructions a pair plus
//   5 per 8 elements, ~2.6 per element, no table.
// - t >= 3 (small table): the eight t-bit codes are the bytes of the lane's 8 x 8 bit matrix
//   (its rows the planes) transposed, ~2.6 instructions per element at t > 4 and ~1.4 at t <= 4;
//   each element is then one table read of the f16 bits and a pack (a pair table would halve the
//   reads for t = 3, 4: not done yet).
#pragma once

#include <cstdint>

#include "host_device.h"
#include "readkv/cuda/tile_centroids.h"

namespace readkv::cuda::tile {

// ---- Bit movers (one or two instructions each on the device) ---------------------------------

// Bits 2j and 2j + 1 of byte b at bits 15 and 31 (the two halves' sign bits), nothing else: one
// multiply by 0x8001 << (15 - 2j) (b then sits at bit 15 - 2j and again at bit 30 - 2j) and one
// mask.
template <int J>
KVGATE_TILE_HD uint32_t PairSignBits(uint32_t b) {
  static_assert(J >= 0 && J < 4, "a fragment has four pairs");
  return (b * (0x8001u << (15 - 2 * J))) & 0x80008000u;
}

// Element k (0..3) of a 4-bit nibble x at bit 7 of byte k (the other bits are junk): the four
// copies x << 7, << 14, << 21, << 28 do not overlap, so the multiply carries nothing.
KVGATE_TILE_HD uint32_t NibbleToByteTops(uint32_t x) { return x * 0x10204080u; }

// f16x2 masks of pair j from byte tops: low half 0xffff where the top bit of byte 2j of (lo, hi)
// (bytes 0-3 of lo, 4-7 of hi) is set, high half where that of byte 2j + 1 is. A sign-replicating
// byte permute on the device.
template <int J>
KVGATE_TILE_HD uint32_t PairMasks(uint32_t lo, uint32_t hi) {
#if defined(__CUDA_ARCH__)
  constexpr unsigned kLow = 8u | (2u * J), kHigh = 8u | (2u * J + 1u);
  constexpr unsigned kSelector = kLow | (kLow << 4) | (kHigh << 8) | (kHigh << 12);
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(lo), "r"(hi), "n"(kSelector));
  return out;
#else
  const uint64_t bytes = (static_cast<uint64_t>(hi) << 32) | lo;
  const uint32_t low = ((bytes >> (16 * J + 7)) & 1u) ? 0x0000ffffu : 0u;
  const uint32_t high = ((bytes >> (16 * J + 15)) & 1u) ? 0xffff0000u : 0u;
  return low | high;
#endif
}

// ---- The three paths ---------------------------------------------------------------------------

KVGATE_TILE_HD void DecodeDepth1(uint32_t b0, uint32_t negative, uint32_t (&out)[4]) {
  out[0] = negative ^ PairSignBits<0>(b0);
  out[1] = negative ^ PairSignBits<1>(b0);
  out[2] = negative ^ PairSignBits<2>(b0);
  out[3] = negative ^ PairSignBits<3>(b0);
}

// Pair j of depth 2: -c_b, its sign flipped where p0 is set (PairSignBits: one multiply, and the
// mask and the xor in one lop3), then its magnitude bits flipped to c_a's where p0 != p1 (the
// pair's masks from the byte tops of b0 ^ b1: one prmt; and-xor: one lop3).
template <int J>
KVGATE_TILE_HD uint32_t Depth2Pair(uint32_t b0, uint32_t u_lo, uint32_t u_hi, uint32_t base,
                                   uint32_t flip) {
  const uint32_t signed_base = base ^ PairSignBits<J>(b0);
  return signed_base ^ (PairMasks<J>(u_lo, u_hi) & flip);
}

KVGATE_TILE_HD void DecodeDepth2(uint32_t b0, uint32_t b1, uint32_t base, uint32_t flip,
                                 uint32_t (&out)[4]) {
  const uint32_t u = b0 ^ b1;  // bit k: p0 != p1, the magnitude c_a
  const uint32_t u_lo = NibbleToByteTops(u & 0xfu), u_hi = NibbleToByteTops(u >> 4);
  out[0] = Depth2Pair<0>(b0, u_lo, u_hi, base, flip);
  out[1] = Depth2Pair<1>(b0, u_lo, u_hi, base, flip);
  out[2] = Depth2Pair<2>(b0, u_lo, u_hi, base, flip);
  out[3] = Depth2Pair<3>(b0, u_lo, u_hi, base, flip);
}

// Swaps the bits of w under mask with those `shift` places above them (a delta swap: shift, lop3,
// shift, lop3 on the device).
template <int Shift>
KVGATE_TILE_HD uint32_t DeltaSwap(uint32_t w, uint32_t mask) {
  const uint32_t t = (w ^ (w >> Shift)) & mask;
  return w ^ t ^ (t << Shift);
}

// The eight depth-T codes of a lane: code k in byte k % 4 of codes[k / 4]. b: T plane bytes.
// The T bytes are the rows of an 8 x 8 bit matrix (row r, byte r of lo:hi, is plane T - 1 - r;
// rows T..7 are zero) and its transpose, in three delta swaps (2 x 2, 4 x 4, 8 x 8 blocks), puts
// element k's bits in byte k with plane 0 on top: its code. ~21 instructions for the eight codes
// at T > 4 and ~11 at T <= 4 (the high rows are zero), where building them a plane at a time took
// ~8 per plane.
template <int T>
KVGATE_TILE_HD void LaneCodes(const uint32_t* b, uint32_t (&codes)[2]) {
  uint32_t lo = 0, hi = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 0; r < T; ++r) {
    const uint32_t row = b[T - 1 - r];
    if (r < 4) {
      lo |= row << (8 * r);
    } else {
      hi |= row << (8 * (r - 4));
    }
  }
  lo = DeltaSwap<14>(DeltaSwap<7>(lo, 0x00aa00aau), 0x0000ccccu);
  if constexpr (T > 4) {
    hi = DeltaSwap<14>(DeltaSwap<7>(hi, 0x00aa00aau), 0x0000ccccu);
  }
  // The 8 x 8 step across the words: rows 0-3's columns 4-7 with rows 4-7's columns 0-3.
  const uint32_t t = (lo ^ (hi << 4)) & 0xf0f0f0f0u;
  codes[0] = lo ^ t;
  codes[1] = hi ^ (t >> 4);
}

// Depth T >= 3: table(entry) returns the f16 bits of TileCentroids::table[entry] (a shared-memory
// read on the device, the array itself on the host).
template <int T, typename Table>
KVGATE_TILE_HD void DecodeByTable(const uint32_t* b, const Table& table, uint32_t (&out)[4]) {
  uint32_t codes[2];
  LaneCodes<T>(b, codes);
  constexpr uint32_t kBase = (1u << T) - 1u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < 4; ++j) {
    const uint32_t word = codes[j / 2];
    const uint32_t shift = 16u * static_cast<uint32_t>(j % 2);
    const uint32_t first = table(kBase + ((word >> shift) & 0xffu));
    const uint32_t second = table(kBase + ((word >> (shift + 8u)) & 0xffu));
    out[j] = (first & 0xffffu) | (second << 16);
  }
}

// ---- Byte keys (codec::PlaneLayout::kTilesByteKeys; codec/key_bytes.h) ----------------------
//
// A byte-key tile holds its 256 codes in fragment order: bytes 8 l .. 8 l + 7 are lane l's
// elements a_0 .. a_7, one 8-byte load. The grid reads code k at (k - 127.5) / 32; the decode
// below gives (k - 128) / 32, exact in f16, in two instructions a pair: one byte permute puts
// each code under the byte 0x64 (the f16 1024 + k), one f16x2 fma takes x / 32 - 36. The half
// cell it leaves out, +1/64 on every element, is the same for every token: the Logits kernel
// starts each tile's accumulator at (1/64) sum_c q_c per head (KeyByteBias) instead of adding it
// per element.

// f16 bits of (code - 128) / 32 for a code < 256: exact (|code - 128| <= 128 needs 8 mantissa
// bits). The host's reference for the device's permute and fma.
KVGATE_TILE_HD uint32_t KeyByteHalfBits(uint32_t code) {
  const int s = static_cast<int>(code) - 128;
  if (s == 0) return 0u;
  const uint32_t sign = s < 0 ? 0x8000u : 0u;
  const auto m = static_cast<uint32_t>(s < 0 ? -s : s);  // 1..128: m 2^-5
  int e = 0;
  while ((m >> (e + 1)) != 0u) ++e;  // floor(log2 m)
  const auto exponent = static_cast<uint32_t>(e + 10);  // 2^(e - 5), bias 15
  return sign | (exponent << 10) | ((m - (1u << e)) << (10 - e));
}

// Pair j (elements 2j, 2j + 1) of the lane's codes: lo holds codes 0-3, hi codes 4-7.
template <int J>
KVGATE_TILE_HD uint32_t KeyBytePair(uint32_t lo, uint32_t hi) {
  static_assert(J >= 0 && J < 4, "a fragment has four pairs");
  const uint32_t word = J < 2 ? lo : hi;
#if defined(__CUDA_ARCH__)
  constexpr unsigned kFirst = 2u * (J % 2);
  constexpr unsigned kSelector = kFirst | (4u << 4) | ((kFirst + 1u) << 8) | (4u << 12);
  uint32_t x, out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(x) : "r"(word), "r"(0x64646464u), "n"(kSelector));
  // x / 32 - 36 (f16 1/32 = 0x2800, -36 = 0xD080): exact, one rounding of an exact value.
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(out) : "r"(x), "r"(0x28002800u), "r"(0xD080D080u));
  return out;
#else
  const uint32_t shift = 16u * static_cast<uint32_t>(J % 2);
  return KeyByteHalfBits((word >> shift) & 0xffu) |
         (KeyByteHalfBits((word >> (shift + 8u)) & 0xffu) << 16);
#endif
}

KVGATE_TILE_HD void DecodeByteKeys(uint32_t lo, uint32_t hi, uint32_t (&out)[4]) {
  out[0] = KeyBytePair<0>(lo, hi);
  out[1] = KeyBytePair<1>(lo, hi);
  out[2] = KeyBytePair<2>(lo, hi);
  out[3] = KeyBytePair<3>(lo, hi);
}

// The half cell per element, times the folded query: what a byte-key logit adds to the MMA's
// sum over (k - 128) / 32 (k the code), so that it is the sum over the grid's values.
inline constexpr float kKeyByteHalfCell = 1.0f / 64.0f;
// The grid's extreme codes' value (codec::kKeyByteOutermost): what a listed key corrects against.
inline constexpr float kKeyByteOuter = 127.5f / 32.0f;

// The lane's fragment at compile-time depth T in [1, 8]; b: T plane bytes (each < 256).
template <int T, typename Table>
KVGATE_TILE_HD void DecodeFragment(const uint32_t* b, [[maybe_unused]] const TileCentroids& c,
                                   [[maybe_unused]] const Table& table, uint32_t (&out)[4]) {
  static_assert(T >= 1 && T <= kMaxTileDepth, "depths 1..8 (depth 0 reads nothing)");
  if constexpr (T == 1) {
    DecodeDepth1(b[0], c.depth1_negative, out);
  } else if constexpr (T == 2) {
    DecodeDepth2(b[0], b[1], c.depth2_base, c.depth2_flip, out);
  } else {
    DecodeByTable<T>(b, table, out);
  }
}

}  // namespace readkv::cuda::tile
