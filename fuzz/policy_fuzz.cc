// TOML text as a user writes it in policies/*.toml, through ParsePolicy. The contract: a valid
// Policy or a PolicyError naming the line and key; no other exception, no crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kvgate/policy/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)kvgate::policy::ParsePolicy(text, "fuzz.toml");
  } catch (const kvgate::policy::PolicyError& e) {
    if (e.key().empty()) __builtin_trap();  // every refusal names what is wrong
  }
  return 0;
}
