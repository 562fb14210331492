// DescribeMachine: the host fingerprint stored with each run, so that `history compare` can say
// "the machine changed" when two runs' numbers differ for that reason.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "kvgate/history/history_db.h"
#include "kvgate/history/process_identity.h"

namespace kvgate::history {
namespace {

// The first "key : value" line of a /proc file whose key is `key`.
std::string ProcField(const std::filesystem::path& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

}  // namespace

std::vector<std::string> ListNvidiaGpus(const std::filesystem::path& driver_dir) {
  std::vector<std::string> gpus;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(driver_dir, ec)) {
    std::string model = ProcField(entry.path() / "information", "Model");
    if (!model.empty()) gpus.push_back(model);
  }
  std::sort(gpus.begin(), gpus.end());
  return gpus;
}

std::string HardwareChange(const nlohmann::json& before, const nlohmann::json& now) {
  std::string change;
  for (const char* key : {"cpu_model", "logical_cores", "gpus"}) {
    const nlohmann::json a = before.is_object() ? before.value(key, nlohmann::json()) : nlohmann::json();
    const nlohmann::json b = now.is_object() ? now.value(key, nlohmann::json()) : nlohmann::json();
    if (a == b) continue;
    if (!change.empty()) change += "; ";
    change += std::string(key) + " " + (a.is_null() ? "(none)" : a.dump()) + " -> " +
              (b.is_null() ? "(none)" : b.dump());
  }
  return change;
}

nlohmann::json DescribeMachine() {
  nlohmann::json out = nlohmann::json::object();
  out["host"] = ProcessIdentity::Current().host;
  utsname uts{};
  if (uname(&uts) == 0) {
    out["os"] = std::string(uts.sysname) + " " + uts.release;
    out["arch"] = uts.machine;
  }
  if (std::string cpu = ProcField("/proc/cpuinfo", "model name"); !cpu.empty()) {
    out["cpu_model"] = cpu;
  }
  if (unsigned cores = std::thread::hardware_concurrency(); cores > 0) out["logical_cores"] = cores;
  // "MemTotal:  131072 kB"
  if (std::string mem = ProcField("/proc/meminfo", "MemTotal"); !mem.empty()) {
    try {
      out["memory_bytes"] = std::stoll(mem) * 1024;
    } catch (const std::exception&) {
      // Leave it out rather than record a wrong number.
    }
  }
  // The accelerators, so a run served on a GPU says which one (an H100 and an H200 time apart).
  if (std::vector<std::string> gpus = ListNvidiaGpus(); !gpus.empty()) out["gpus"] = gpus;
  return out;
}

}  // namespace kvgate::history
