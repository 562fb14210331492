#include "prefix_cache_servers.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "kvgate/checks/completion_client.h"
#include "kvgate/checks/prometheus_text.h"
#include "kvgate/stats/random.h"
#include "kvgate/suite/server_process.h"
#include "reference_server.h"

namespace kvgate::failure_tests::prefix_cache {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string FormatNumber(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

}  // namespace

void Progress(const ScenarioContext& context, const std::string& line) {
  if (context.progress) context.progress(line);
}

std::unique_ptr<suite::ServerProcess> StartServer(const ScenarioContext& context,
                                                  const std::string& name,
                                                  const ServeSettings& settings) {
  std::vector<std::string> argv = {context.kvgate_binary,
                                   "serve",
                                   "--model",
                                   settings.model_dir,
                                   "--kv",
                                   "readkv",
                                   "--store-bits",
                                   std::to_string(settings.store_bits),
                                   "--read-bits",
                                   FormatNumber(settings.read_bits),
                                   "--threads",
                                   std::to_string(std::max(1, context.threads)),
                                   "--max-batch",
                                   "1",
                                   "--log-level",
                                   "info"};
  if (!settings.cache_dir.empty()) {
    argv.push_back("--cache-dir");
    argv.push_back(settings.cache_dir);
  }
  Progress(context, "starting " + name);
  return std::make_unique<suite::ServerProcess>(
      std::move(argv), std::chrono::seconds(120),
      (fs::path(context.work_dir) / (name + ".log")).string());
}

// The DeriveSeed stream of the scenarios' prompts (stats/random.h).
constexpr uint64_t kPromptStream = 0x9c0d;

std::vector<std::string> Prompts(int count, uint64_t seed) {
  static const char* const kWords[] = {"the",     "river",  "stone",  "garden", "window", "morning",
                                       "silver",  "harbor", "quiet",  "letter", "market", "lantern",
                                       "bridge",  "north",  "copper", "meadow", "winter", "signal",
                                       "orchard", "candle", "valley", "paper",  "engine", "forest"};
  constexpr uint64_t kWordCount = sizeof kWords / sizeof kWords[0];
  stats::SplitMixRng rng(stats::DeriveSeed(seed, kPromptStream));
  std::vector<std::string> prompts;
  for (int p = 0; p < count; ++p) {
    const auto length = static_cast<size_t>(rng.UniformInt(600, 1200));
    std::string text;
    int sentence = 0;
    while (text.size() < length) {
      text += "The " + std::string(kWords[rng.UniformIndex(kWordCount)]) + " " +
              kWords[rng.UniformIndex(kWordCount)] + " of record " + std::to_string(++sentence) +
              " is " + std::to_string(rng.UniformIndex(10000)) + ". ";
    }
    text.resize(length);
    prompts.push_back(text + "\nThe code of record 1 is");
  }
  return prompts;
}

std::vector<std::string> Complete(const std::string& url, const std::vector<std::string>& prompts,
                                  const nlohmann::json& extra_body, int max_tokens) {
  checks::ClientOptions options;
  options.concurrency = 1;
  options.request_timeout = std::chrono::seconds(120);
  options.extra_body = extra_body;
  checks::CompletionClient client(url, options);
  client.Probe();
  std::vector<checks::CompletionRequest> requests;
  for (const std::string& prompt : prompts) requests.push_back({prompt, max_tokens, {}});
  const std::vector<checks::CompletionOutcome> outcomes = client.CompleteAll(requests);
  std::vector<std::string> texts;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (!outcomes[i].ok()) {
      throw std::runtime_error("request " + std::to_string(i) + " to " + url +
                               " failed: " + outcomes[i].error);
    }
    texts.push_back(outcomes[i].text);
  }
  return texts;
}

std::map<std::string, double> Rejections(const std::string& url) {
  const checks::Exposition metrics =
      checks::ParsePrometheusText(checks::HttpGet(checks::ServerUrl::Parse(url), "/metrics"));
  std::map<std::string, double> out;
  for (const checks::MetricSample& s : metrics.samples) {
    if (s.name != kCacheRejectionsSeries) continue;
    out[s.Label("reason").value_or("")] += s.value;
  }
  return out;
}

double RejectionCount(const std::map<std::string, double>& rejections, const std::string& reason) {
  const auto it = rejections.find(reason);
  return it == rejections.end() ? 0.0 : it->second;
}

nlohmann::json PrefixLog::ToJson() const {
  return {{"prompts", prompts},   {"prefix_blocks", blocks}, {"loaded", loaded},
          {"computed", computed}, {"stored", stored},        {"refused_fields", refused_fields}};
}

PrefixLog ReadPrefixLog(const std::string& log_path) {
  // The runtime's lines (readkv/model/runtime.h, prefix_cache_store.h), as `kvgate serve` logs
  // them through spdlog.
  static const std::regex kPrompt(
      R"(prefix cache: sequence \d+: (\d+) prefix blocks, (\d+) loaded, )"
      R"((\d+) computed, (\d+) stored)");
  static const std::regex kRefused(R"(prefix cache: refused .*\(identity_mismatch; field (\w+):)");
  PrefixLog log;
  std::istringstream lines(ReadFile(log_path));
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, kPrompt)) {
      ++log.prompts;
      log.blocks += std::stoll(m[1]);
      log.loaded += std::stoll(m[2]);
      log.computed += std::stoll(m[3]);
      log.stored += std::stoll(m[4]);
    } else if (std::regex_search(line, m, kRefused)) {
      ++log.refused_fields[m[1]];
    }
  }
  return log;
}

int64_t CountObjects(const std::string& cache_dir) {
  int64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache_dir, ec)) {
    const std::string name = e.path().filename().string();
    n += e.is_regular_file() && name[0] != '.' && e.path().extension() == ".rkv" ? 1 : 0;
  }
  return n;
}

int64_t CountQuarantined(const std::string& cache_dir) {
  int64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(cache_dir) / "quarantine", ec)) {
    n += e.is_regular_file() ? 1 : 0;
  }
  return n;
}

std::map<std::string, std::string> ObjectDigests(const std::string& cache_dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache_dir, ec)) {
    if (!e.is_regular_file() || e.path().extension() != ".rkv") continue;
    const std::string bytes = ReadFile(e.path().string());
    const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64));
    out[e.path().filename().string()] = hex;
  }
  return out;
}

void CopyFiles(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) {
    if (e.is_regular_file()) {
      fs::copy_file(e.path(), fs::path(to) / e.path().filename(),
                    fs::copy_options::overwrite_existing);
    }
  }
}

std::string NewIdentity(const std::string& cache_dir,
                        const std::map<std::string, std::string>& before) {
  std::string identity;
  for (const auto& [name, digest] : ObjectDigests(cache_dir)) {
    if (before.count(name) != 0) continue;
    const size_t dash = name.find('-');
    if (dash == std::string::npos) return "";
    const std::string id = name.substr(0, dash);
    if (!identity.empty() && id != identity) return "";
    identity = id;
  }
  return identity;
}

int64_t PlantUnderIdentity(const std::string& cache_dir,
                           const std::map<std::string, std::string>& from_names,
                           const std::string& identity) {
  int64_t planted = 0;
  for (const auto& [name, digest] : from_names) {
    const size_t dash = name.find('-');
    if (dash == std::string::npos) continue;
    fs::copy_file(fs::path(cache_dir) / name, fs::path(cache_dir) / (identity + name.substr(dash)),
                  fs::copy_options::overwrite_existing);
    ++planted;
  }
  return planted;
}

bool Untouched(const std::string& cache_dir, const std::map<std::string, std::string>& before) {
  const std::map<std::string, std::string> now = ObjectDigests(cache_dir);
  for (const auto& [name, digest] : before) {
    const auto it = now.find(name);
    if (it == now.end() || it->second != digest) return false;
  }
  return true;
}

int FirstDifference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (i >= a.size() || i >= b.size() || a[i] != b[i]) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace kvgate::failure_tests::prefix_cache
