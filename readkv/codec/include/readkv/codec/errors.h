// Typed errors of the ReadKV codec. Host APIs throw these; kernels return status instead.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace readkv::codec {

// A configuration or argument is out of range. `field()` names the offending input
// (e.g. "head_dim", "store_bits"), so a CLI can say which argument is wrong.
class InvalidArgument : public std::invalid_argument {
 public:
  InvalidArgument(std::string field, const std::string& what)
      : std::invalid_argument(field + ": " + what), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// A stored cache object was written under a different identity than the reader's.
// `field()` is the identity field that differs ("codebook_version", "weights_digest", ...).
class IdentityMismatch : public std::runtime_error {
 public:
  IdentityMismatch(std::string field, std::string expected, std::string found)
      : std::runtime_error("cache identity mismatch on " + field + ": expected '" + expected +
                           "', found '" + found + "'"),
        field_(std::move(field)),
        expected_(std::move(expected)),
        found_(std::move(found)) {}
  const std::string& field() const { return field_; }
  const std::string& expected() const { return expected_; }
  const std::string& found() const { return found_; }

 private:
  std::string field_, expected_, found_;
};

// A stored cache object is damaged: bad magic, truncated, unknown format version, or a
// checksum that does not match. `where()` names the part ("header", "block 3", ...).
class CorruptObject : public std::runtime_error {
 public:
  CorruptObject(std::string where, const std::string& what)
      : std::runtime_error("corrupt cache object (" + where + "): " + what),
        where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

}  // namespace readkv::codec
