// What the three prefix-cache scenarios (codebook_mismatch, model_upgrade, budget_change) share:
// starting `kvgate serve --kv readkv [--cache-dir DIR]` children, sending them greedy completions
// of prompts longer than one 256-token block, and reading back what they did — over HTTP
// (/metrics: the cache-rejection counter, reference_server.h) and from their logs (the per-prompt
// "prefix cache: ..." line and the refusal warnings) — plus the cache directory's files.
// Internal to failure_tests/; HTTP only, never readkv/.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvgate/failure_tests/scenario.h"

namespace kvgate::suite {
class ServerProcess;  // kvgate/suite/server_process.h
}  // namespace kvgate::suite

namespace kvgate::failure_tests::prefix_cache {

struct ServeSettings {
  std::string model_dir;
  std::string cache_dir;  // empty: no --cache-dir
  int store_bits = 8;
  double read_bits = 4.0;
};

// Starts the server (log: <work_dir>/<name>.log) and waits until it answers /health. Throws
// suite::ServerStartError with the command line and the tail of its output.
std::unique_ptr<suite::ServerProcess> StartServer(const ScenarioContext& context,
                                                  const std::string& name,
                                                  const ServeSettings& settings);

// `count` seeded English-like prompts of 600–1200 bytes (2–4 prefix blocks with the byte
// tokenizer). The same seed gives the same prompts.
std::vector<std::string> Prompts(int count, uint64_t seed);

// Greedy completions (temperature 0, one request at a time, so no batch changes the numerics),
// `extra_body` merged into each request (e.g. {"readkv": {"read_bits": 6}}). Throws
// std::runtime_error naming the server and the error of the first failed request.
std::vector<std::string> Complete(const std::string& url, const std::vector<std::string>& prompts,
                                  const nlohmann::json& extra_body = nullptr, int max_tokens = 12);

// kCacheRejectionsSeries (reference_server.h) by reason, from GET /metrics.
std::map<std::string, double> Rejections(const std::string& url);
double RejectionCount(const std::map<std::string, double>& rejections, const std::string& reason);

// Sums of the server's per-prompt "prefix cache: sequence N: B prefix blocks, H loaded, C
// computed, S stored" log lines, and the identity fields its refusal warnings name.
struct PrefixLog {
  int64_t prompts = 0, blocks = 0, loaded = 0, computed = 0, stored = 0;
  std::map<std::string, int64_t> refused_fields;  // "store_bits" -> 12, ...
  nlohmann::json ToJson() const;
};
PrefixLog ReadPrefixLog(const std::string& log_path);

// Objects (*.rkv) in DIR, and files in DIR/quarantine.
int64_t CountObjects(const std::string& cache_dir);
int64_t CountQuarantined(const std::string& cache_dir);
// name -> content digest of every object, to show storage was (or was not) rewritten.
std::map<std::string, std::string> ObjectDigests(const std::string& cache_dir);

// Copies a directory's regular files (not sub-folders) into a new folder.
void CopyFiles(const std::string& from, const std::string& to);

// Objects are named "<identity digest>-<prefix digest>.rkv" (the store's contract): the
// identity part of the objects in DIR that `before` (an earlier ObjectDigests) did not hold; ""
// if none or several identities appeared. How a scenario learns a restarted server's identity.
std::string NewIdentity(const std::string& cache_dir,
                        const std::map<std::string, std::string>& before);
// Copies every object of `from_names` (names in DIR) to the same prefix under `identity`,
// replacing what is there: objects of one identity misnamed as another's, as a copy or a bug
// might leave them. Returns how many were planted.
int64_t PlantUnderIdentity(const std::string& cache_dir,
                           const std::map<std::string, std::string>& from_names,
                           const std::string& identity);
// Whether every object of `before` is still in DIR with the same bytes.
bool Untouched(const std::string& cache_dir, const std::map<std::string, std::string>& before);

// Index of the first differing output, or -1 when both lists are equal.
int FirstDifference(const std::vector<std::string>& a, const std::vector<std::string>& b);

void Progress(const ScenarioContext& context, const std::string& line);

}  // namespace kvgate::failure_tests::prefix_cache
