// Scenario "model_upgrade" (issue 6, failure 2): a prefix cache written by a server of the
// built-in model is offered to servers of upgraded copies of it, each recalibrated honestly with
// `kvgate calibrate` (a calibration is bound to the weights digest, and post-RoPE K/V statistics
// change with the model):
//   rope      config.json rope_theta 10000 -> 20000 (same weights)
//   weights   every value of model.norm.weight nudged by one bf16 step (new weights digest)
//   geometry  the last decoder layer dropped (num_hidden_layers 4 -> 3, weights rewritten)
// Objects are named by the writer's identity: for each, the upgraded server on (a copy of) the
// stale cache must read none of the old objects (no loads, no refusals) and leave them whole,
// and answer as a fresh server of the same copy on an empty cache directory; then, the old
// objects copied under the upgraded identity's names must each be refused as identity_mismatch
// (counted per object, quarantined, the warning naming the field: rope_theta for rope,
// weights_digest otherwise) with the answers again equal to the fresh server's.
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "child_process.h"
#include "kvgate/failure_tests/scenario.h"
#include "kvgate/suite/server_process.h"
#include "prefix_cache_servers.h"

namespace kvgate::failure_tests {
namespace {

namespace fs = std::filesystem;
namespace pc = prefix_cache;

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// model.safetensors: u64 header length, JSON header {name: {dtype, shape, data_offsets}}, data.
struct Safetensors {
  nlohmann::json header;
  std::string data;

  static Safetensors Read(const fs::path& path) {
    const std::string bytes = ReadBytes(path);
    uint64_t n = 0;
    if (bytes.size() < 8) throw std::runtime_error(path.string() + ": too short");
    std::memcpy(&n, bytes.data(), 8);
    if (n > bytes.size() - 8) throw std::runtime_error(path.string() + ": bad header length");
    return {nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
  }
  void Write(const fs::path& path) const {
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // data 8-byte aligned, as writers do
    std::string bytes(8, '\0');
    const uint64_t n = text.size();
    std::memcpy(bytes.data(), &n, 8);
    WriteBytes(path, bytes + text + data);
  }
};

void NudgeNormWeights(const fs::path& weights) {
  Safetensors file = Safetensors::Read(weights);
  const auto& entry = file.header.at("model.norm.weight");
  if (entry.at("dtype") != "BF16") throw std::runtime_error("model.norm.weight is not BF16");
  const auto begin = entry.at("data_offsets")[0].get<size_t>();
  const auto end = entry.at("data_offsets")[1].get<size_t>();
  for (size_t i = begin; i + 1 < end; i += 2) {
    uint16_t v = 0;
    std::memcpy(&v, file.data.data() + i, 2);
    ++v;  // one bf16 step away from the trained value
    std::memcpy(file.data.data() + i, &v, 2);
  }
  file.Write(weights);
}

void DropLastLayer(const fs::path& model_dir) {
  nlohmann::json config = nlohmann::json::parse(ReadBytes(model_dir / "config.json"));
  const int layers = config.at("num_hidden_layers").get<int>();
  if (layers < 2) throw std::runtime_error("the model has too few layers to drop one");
  config["num_hidden_layers"] = layers - 1;
  WriteBytes(model_dir / "config.json", config.dump(2));
  const Safetensors in = Safetensors::Read(model_dir / "model.safetensors");
  const std::string dropped = "model.layers." + std::to_string(layers - 1) + ".";
  Safetensors out;
  out.header = nlohmann::json::object();
  for (const auto& [name, entry] : in.header.items()) {
    if (name == "__metadata__") {
      out.header[name] = entry;
      continue;
    }
    if (name.rfind(dropped, 0) == 0) continue;
    const auto begin = entry.at("data_offsets")[0].get<size_t>();
    const auto end = entry.at("data_offsets")[1].get<size_t>();
    nlohmann::json kept = entry;
    kept["data_offsets"] = {out.data.size(), out.data.size() + (end - begin)};
    out.data += in.data.substr(begin, end - begin);
    out.header[name] = kept;
  }
  out.Write(model_dir / "model.safetensors");
}

struct Variant {
  const char* name;
  const char* field;  // the identity field the refusal must name
};

ScenarioResult RunModelUpgrade(const ScenarioContext& context) {
  ScenarioResult result;
  nlohmann::json& ev = result.evidence;
  try {
    const fs::path work = context.work_dir;
    const std::string cache = (work / "cache").string();
    const std::vector<std::string> prompts = pc::Prompts(2, 2);
    ev["prompts"] = prompts.size();
    {
      auto writer = pc::StartServer(context, "writer", {context.model_dir, cache, 8, 4.0});
      pc::Complete(writer->url(), prompts);
      writer->Stop();
    }
    const std::map<std::string, std::string> stale_objects = pc::ObjectDigests(cache);
    const auto stale = static_cast<int64_t>(stale_objects.size());
    ev["stale_objects"] = stale;
    if (stale == 0) return result.Done(false, "the original model's server stored no objects");

    const Variant variants[] = {
        {"rope", "rope_theta"}, {"weights", "weights_digest"}, {"geometry", "weights_digest"}};
    for (const Variant& v : variants) {
      const fs::path model = work / (std::string("model_") + v.name);
      pc::CopyFiles(context.model_dir, model.string());
      fs::remove(model / "calibration.json");
      if (std::string(v.name) == "rope") {
        nlohmann::json config = nlohmann::json::parse(ReadBytes(model / "config.json"));
        config["rope_theta"] = config.value("rope_theta", 10000.0) * 2.0;
        WriteBytes(model / "config.json", config.dump(2));
      } else if (std::string(v.name) == "weights") {
        NudgeNormWeights(model / "model.safetensors");
      } else {
        DropLastLayer(model);
      }
      pc::Progress(context, std::string(v.name) + ": recalibrating the upgraded copy");
      const CommandOutcome calibrated = RunCommand(
          {context.kvgate_binary, "calibrate", "--model", model.string(), "--samples", "2",
           "--max-bytes", "1024", "--threads", std::to_string(std::max(1, context.threads))},
          context.work_dir, std::string("calibrate_") + v.name, std::chrono::seconds(120));
      const std::string stale_copy = (work / (std::string("cache_") + v.name)).string();
      pc::CopyFiles(cache, stale_copy);
      const pc::ServeSettings upgraded_settings{model.string(), stale_copy, 8, 4.0};
      auto fresh = pc::StartServer(
          context, std::string("fresh_") + v.name,
          {model.string(), (work / (std::string("fresh_cache_") + v.name)).string(), 8, 4.0});
      const auto expected = pc::Complete(fresh->url(), prompts);
      fresh->Stop();
      nlohmann::json& entry = ev["variants"][v.name];
      // 1. Beside the old objects: none read, none touched.
      {
        auto upgraded = pc::StartServer(context, std::string("upgraded_") + v.name,
                                        upgraded_settings);
        const auto got = pc::Complete(upgraded->url(), prompts);
        const auto rejections = pc::Rejections(upgraded->url());
        upgraded->Stop();
        const pc::PrefixLog log = pc::ReadPrefixLog(upgraded->log_path());
        entry["beside"] = {{"rejections", rejections},
                           {"log", log.ToJson()},
                           {"answers_equal", pc::FirstDifference(got, expected) < 0}};
        if (pc::RejectionCount(rejections, "identity_mismatch") != 0.0 ||
            pc::RejectionCount(rejections, "corrupt") != 0.0 || log.loaded != 0) {
          return result.Done(false, std::string(v.name) +
                                        ": the upgraded server read the old model's objects (" +
                                        log.ToJson().dump() + ")");
        }
        if (!pc::Untouched(stale_copy, stale_objects)) {
          return result.Done(false, std::string(v.name) +
                                        ": the upgraded server removed or rewrote old objects");
        }
        if (const int i = pc::FirstDifference(got, expected); i >= 0) {
          return result.Done(false, std::string(v.name) + ": prompt " + std::to_string(i) +
                                        " answered differently from a fresh server of the upgrade");
        }
      }
      // 2. Behind the name: the old objects under the upgraded identity's names.
      const std::string identity = pc::NewIdentity(stale_copy, stale_objects);
      if (identity.empty()) {
        return result.Done(false, std::string(v.name) +
                                      ": could not tell the upgraded server's objects by name");
      }
      const int64_t planted = pc::PlantUnderIdentity(stale_copy, stale_objects, identity);
      auto misnamed = pc::StartServer(context, std::string("misnamed_") + v.name,
                                      upgraded_settings);
      const auto got = pc::Complete(misnamed->url(), prompts);
      const auto rejections = pc::Rejections(misnamed->url());
      misnamed->Stop();
      const pc::PrefixLog log = pc::ReadPrefixLog(misnamed->log_path());
      const double mismatches = pc::RejectionCount(rejections, "identity_mismatch");
      entry["misnamed"] = {{"planted", planted},
                           {"rejections", rejections},
                           {"quarantined", pc::CountQuarantined(stale_copy)},
                           {"log", log.ToJson()},
                           {"answers_equal", pc::FirstDifference(got, expected) < 0}};
      if (mismatches != static_cast<double>(planted) ||
          pc::RejectionCount(rejections, "corrupt") != 0.0) {
        return result.Done(false, std::string(v.name) + ": " + std::to_string(mismatches) +
                                      " identity_mismatch rejections, expected " +
                                      std::to_string(planted));
      }
      if (pc::CountQuarantined(stale_copy) != planted || log.loaded != 0) {
        return result.Done(false, std::string(v.name) +
                                      ": misnamed objects were not all quarantined, or some were "
                                      "loaded");
      }
      const auto named = log.refused_fields.find(v.field);
      if (named == log.refused_fields.end() || named->second != planted) {
        return result.Done(false, std::string(v.name) + ": the refusals do not name " + v.field +
                                      " (log: " + log.ToJson().dump() + ")");
      }
      if (const int i = pc::FirstDifference(got, expected); i >= 0) {
        return result.Done(false, std::string(v.name) + ": prompt " + std::to_string(i) +
                                      " answered differently from a fresh server of the upgrade");
      }
    }
    return result.Done(true, "rope_theta, weights and geometry upgrades each read none of the " +
                                 std::to_string(stale) +
                                 " old objects and left them whole, refused them by header "
                                 "(identity_mismatch, quarantined) under their own names, and "
                                 "answered as a fresh server of the upgraded model");
  } catch (const std::exception& e) {
    return result.Done(false, std::string("error: ") + e.what());
  }
}

KVGATE_REGISTER_SCENARIO("model_upgrade",
                         "weights, geometry or RoPE change between restarts: no stale cache "
                         "object is read (each refused by header when misnamed) and answers "
                         "equal a fresh server's",
                         &RunModelUpgrade);

}  // namespace
}  // namespace kvgate::failure_tests
