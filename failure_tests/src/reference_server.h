// What the failure scenarios know of the reference server beyond the contract. They start
// `kvgate serve` on purpose, with its --cache-dir, so they may name the one counter of its cache
// layout that the contract leaves to each server (docs/contract.md, "Optional pieces": a cache
// directory); everything else they read is the contract.
#pragma once

namespace kvgate::failure_tests {

// Prefix-cache objects refused on load, by label reason ("corrupt", "identity_mismatch"):
// `kvgate serve`'s <ledger prefix>cache_rejections_total.
inline constexpr char kCacheRejectionsSeries[] = "readkv_cache_rejections_total";

}  // namespace kvgate::failure_tests
