// `kvgate bench attention`'s configuration: the --kv specs, positive lists and the checks that
// name the offending flag (attention_bench.h). Host code, every build.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "readkv/codec/errors.h"
#include "readkv/cuda/attention_bench.h"
#include "readkv/cuda/tile_attention.h"

namespace readkv::cuda {

using codec::InvalidArgument;
using codec::KvBackend;
using codec::ReaderKind;

// ---- Configuration ---------------------------------------------------------------------------

namespace {
constexpr const char* kByteKeysSuffix = "-kbytes";  // "tile-kbytes": the tile reader on byte keys
}  // namespace

std::string KvSpec::Name() const {
  std::ostringstream text;
  switch (backend) {
    case KvBackend::kDense:
    case KvBackend::kFp8:
      return std::string(codec::KvBackendName(backend));
    case KvBackend::kReadKv: {
      // ReadKV on the GPU is the tile reader, named by its reader.
      text << codec::ReaderName(ReaderKind::kTile);
      if (byte_keys) text << kByteKeysSuffix;
      text << ":" << store_bits << ":" << read_bits;
      if (key_bits != read_bits || value_bits != read_bits) {
        text << ":" << key_bits << ":" << value_bits;
      }
      return text.str();
    }
  }
  return "?";
}

namespace {

// A whole-string number parse; false on trailing characters or an empty string.
template <typename T>
bool ParseNumber(const std::string& text, T& value) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  try {
    size_t used = 0;
    if constexpr (std::is_floating_point_v<T>) {
      value = static_cast<T>(std::stod(text, &used));
    } else {
      value = static_cast<T>(std::stoll(text, &used));
    }
    return used == text.size();
  } catch (const std::logic_error&) {
    return false;
  }
}

// Every field between separators, empty ones included ("a,,b" -> a, "", b).
std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t at = text.find(separator, begin);
    parts.push_back(text.substr(begin, at == std::string::npos ? std::string::npos : at - begin));
    if (at == std::string::npos) break;
    begin = at + 1;
  }
  return parts;
}

// The forms --kv takes (ParseKvSpec's usage).
constexpr const char* kKvForms =
    "dense, fp8, tile:W:R or tile:W:R:RK:RV (the tile reader, e.g. tile:8:4 or tile:8:4:6:2), "
    "tile-kbytes:8:R:8:RV (the tile reader on byte keys)";

}  // namespace

KvSpec ParseKvSpec(const std::string& text) {
  const std::string usage = std::string("expected ") + kKvForms + ", got '" + text + "'";
  std::vector<std::string> parts = Split(text, ':');
  KvSpec spec;
  const std::string tile_head(codec::ReaderName(ReaderKind::kTile));
  if (parts.front() == tile_head + kByteKeysSuffix) {
    parts.front() = tile_head;
    spec.byte_keys = true;
  }
  if (parts.front() == tile_head) {
    spec.backend = KvBackend::kReadKv;  // the tile reader: ReadKV's one GPU reader
  } else {
    try {
      spec.backend = codec::ParseKvBackend(parts.front());  // the backend's one name
    } catch (const InvalidArgument&) {
      throw InvalidArgument("--kv", usage);
    }
  }
  switch (spec.backend) {
    case KvBackend::kDense:
    case KvBackend::kFp8:  // per-tensor scales, no parameters
      if (parts.size() != 1) throw InvalidArgument("--kv", usage);
      return spec;
    case KvBackend::kReadKv:
      if (parts.front() != tile_head) {
        // "readkv:W:R": the constrained reader's GPU kernels were deleted (issue 37).
        throw InvalidArgument("--kv", "'" + text + "': the constrained GPU reader (readkv:W:R) "
                                      "was removed, the tile reader being faster; expected " +
                                          kKvForms);
      }
      break;
  }
  parts.erase(parts.begin());
  if (parts.size() != 2 && parts.size() != 4) throw InvalidArgument("--kv", usage);
  int64_t store_bits = 0;
  if (!ParseNumber(parts[0], store_bits) || !ParseNumber(parts[1], spec.read_bits)) {
    throw InvalidArgument("--kv", usage);
  }
  if (store_bits < 2 || store_bits > kMaxStoreBits) {
    throw InvalidArgument("--kv", "W must be in [2, 8] in '" + text + "'");
  }
  spec.store_bits = static_cast<int>(store_bits);
  if (!(spec.read_bits >= 1.0 && spec.read_bits <= spec.store_bits)) {
    throw InvalidArgument("--kv", "R must be in [1, W] (the tile reader reads at least one plane) "
                                  "in '" + text + "'");
  }
  spec.key_bits = spec.read_bits;
  spec.value_bits = spec.read_bits;
  if (parts.size() == 4) {
    if (!ParseNumber(parts[2], spec.key_bits) || !ParseNumber(parts[3], spec.value_bits)) {
      throw InvalidArgument("--kv", usage);
    }
    for (double part : {spec.key_bits, spec.value_bits}) {
      if (!(part >= 1.0 && part <= spec.store_bits)) {
        throw InvalidArgument("--kv", "RK and RV must be in [1, W] in '" + text + "'");
      }
    }
    if (std::abs(0.5 * (spec.key_bits + spec.value_bits) - spec.read_bits) > 1e-9) {
      throw InvalidArgument("--kv", "(RK + RV) / 2 must equal R in '" + text + "'");
    }
  }
  if (spec.byte_keys && (spec.store_bits != 8 || spec.key_bits != 8.0)) {
    throw InvalidArgument("--kv", "byte keys are read whole: W and RK must be 8 in '" + text +
                                      "' (e.g. tile-kbytes:8:5:8:2)");
  }
  return spec;
}

std::vector<KvSpec> ParseKvSpecs(const std::string& text) {
  std::vector<KvSpec> specs;
  std::set<std::string> seen;
  for (const std::string& part : Split(text, ',')) {
    KvSpec spec = ParseKvSpec(part);
    if (!seen.insert(spec.Name()).second) {
      throw InvalidArgument("--kv", "'" + part + "' is listed twice");
    }
    specs.push_back(spec);
  }
  return specs;
}

std::vector<int64_t> ParsePositiveList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> values;
  for (const std::string& part : Split(text, ',')) {
    int64_t value = 0;
    if (!ParseNumber(part, value) || value < 1) {
      throw InvalidArgument(flag, "expected comma-separated positive integers, got '" + text + "'");
    }
    values.push_back(value);
  }
  return values;
}

void BenchConfig::Validate() const {
  if (!split.valid()) {
    throw InvalidArgument("--split-cluster", "must be auto, off, 1, 2, 4 or 8 (cluster " +
                                                 std::to_string(split.cluster) + ")");
  }
  if (tokens.empty()) throw InvalidArgument("--tokens", "needs at least one value");
  for (int64_t t : tokens) {
    if (t < 1 || t > (int64_t{1} << 30)) {
      throw InvalidArgument("--tokens", "must be in [1, 2^30], got " + std::to_string(t));
    }
  }
  if (batches.empty()) throw InvalidArgument("--batch", "needs at least one value");
  for (int64_t b : batches) {
    if (b < 1 || b > 65535) {
      throw InvalidArgument("--batch", "must be in [1, 65535], got " + std::to_string(b));
    }
  }
  if (heads_kv < 1) throw InvalidArgument("--heads-kv", "must be >= 1");
  if (heads_q < 1) throw InvalidArgument("--heads-q", "must be >= 1");
  if (heads_q % heads_kv != 0) {
    throw InvalidArgument("--heads-kv", "must divide --heads-q (" + std::to_string(heads_q) +
                                            " % " + std::to_string(heads_kv) + " != 0)");
  }
  const int group = heads_q / heads_kv;
  if (group != 1 && group != 2 && group != 4 && group != 8) {
    throw InvalidArgument("--heads-kv",
                          "the GQA group --heads-q / --heads-kv must be 1, 2, 4 or "
                          "8, got " +
                              std::to_string(group));
  }
  if (head_dim != 64 && head_dim != 128) {
    throw InvalidArgument("--head-dim", "must be 64 or 128, got " + std::to_string(head_dim));
  }
  if (kv.empty()) throw InvalidArgument("--kv", "needs at least one backend");
  const bool any_tile = std::any_of(
      kv.begin(), kv.end(), [](const KvSpec& s) { return s.backend == KvBackend::kReadKv; });
  if (any_tile) {
    // The calibration needs two tokens of the shortest sequence (ragged: T/2).
    for (int64_t t : tokens) {
      if (t < 4) throw InvalidArgument("--tokens", "must be >= 4 with a tile: backend");
    }
  }
  if (iters < 20 || iters > 100000) {
    throw InvalidArgument("--iters", "must be in [20, 100000], got " + std::to_string(iters));
  }
  if (chunk_tokens != 0 && (chunk_tokens < 0 || chunk_tokens % kTileChunkStep != 0 ||
                            chunk_tokens > kTileMaxChunk)) {
    throw InvalidArgument("--chunk-tokens",
                          "the tile reader's rows take 512, 1024, 1536 or 2048 (0: "
                          "PlanTileDecode's choice), got " +
                              std::to_string(chunk_tokens));
  }
  if (outlier_cap < 0 || outlier_cap > codec::kMaxOutlierCap) {
    throw InvalidArgument("--outlier-cap", "must be in [0, " +
                                               std::to_string(codec::kMaxOutlierCap) + "], got " +
                                               std::to_string(outlier_cap));
  }
  if (value_window != 0) {
    if (value_window < kTileChunkStep || value_window > kTileMaxChunk ||
        value_window % kTileChunkStep != 0) {
      throw InvalidArgument("--value-window", "must be 0 (the row) or 512, 1024, 1536 or 2048, "
                                              "got " + std::to_string(value_window));
    }
    if (!any_tile) {
      throw InvalidArgument("--value-window",
                            "only the tile reader's rows have Value windows: give a tile: spec "
                            "in --kv");
    }
    if (chunk_tokens != 0 && chunk_tokens != value_window) {
      throw InvalidArgument("--value-window", "a Value window is the tile rows' chunk: give "
                                              "--chunk-tokens 0 or the same number");
    }
  }
  if (one_pass == OnePassMode::kOn && value_window == 0) {
    throw InvalidArgument("--one-pass", "one pass is for byte-key tile rows in Value windows: "
                                        "give --value-window too");
  }
  if (outlier_cap > 0 && !any_tile) {
    throw InvalidArgument("--outlier-cap",
                          "only the tile reader's rows read outlier lists: give a tile: spec "
                          "in --kv");
  }
}

}  // namespace readkv::cuda
