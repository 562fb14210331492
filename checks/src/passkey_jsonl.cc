// The JSONL loader of passkey.h's user datasets: each line is checked so that a bad line is
// reported with its number instead of failing a run later or scoring against nothing.
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "jsonl_items.h"
#include "kvgate/checks/errors.h"
#include "kvgate/checks/passkey.h"

namespace kvgate::checks {
namespace {

std::string IdOrKey(const nlohmann::json& object, const char* field, const std::string& source,
                    int64_t line) {
  auto it = object.find(field);
  if (it == object.end()) throw DatasetError(source, line, std::string(field) + ": missing");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0) return std::to_string(it->get<int64_t>());
  throw DatasetError(source, line,
                     std::string(field) + ": expected a string or an integer >= 0, got " +
                         it->type_name());
}

PasskeyItem ParsePasskeyLine(const std::string& text, const std::string& source, int64_t line) {
  const nlohmann::json object = nlohmann::json::parse(text, nullptr, false);
  if (object.is_discarded()) throw DatasetError(source, line, "not valid JSON");
  if (!object.is_object()) {
    throw DatasetError(source, line, std::string("expected a JSON object, got ") +
                                         object.type_name());
  }
  for (const auto& [key, value] : object.items()) {
    if (key != "id" && key != "prompt" && key != "key" && key != "subset") {
      throw DatasetError(source, line, key + ": unknown field (expected id, prompt, key, subset)");
    }
  }
  PasskeyItem item;
  item.id = IdOrKey(object, "id", source, line);
  if (item.id.empty()) throw DatasetError(source, line, "id: must not be empty");
  auto prompt = object.find("prompt");
  if (prompt == object.end()) throw DatasetError(source, line, "prompt: missing");
  if (!prompt->is_string() || prompt->get_ref<const std::string&>().empty()) {
    throw DatasetError(source, line, "prompt: expected a non-empty string");
  }
  item.prompt = prompt->get<std::string>();
  item.target_length = static_cast<int64_t>(item.prompt.size());
  item.key = IdOrKey(object, "key", source, line);
  if (item.key.empty() || item.key.find_first_not_of("0123456789") != std::string::npos) {
    throw DatasetError(source, line, "key: '" + item.key + "' is not decimal digits");
  }
  auto subset = object.find("subset");
  if (subset != object.end()) {
    if (!subset->is_string() || subset->get_ref<const std::string&>().empty() ||
        subset->get<std::string>() == "all") {
      throw DatasetError(source, line, "subset: expected a non-empty string other than 'all'");
    }
    item.subsets.push_back(subset->get<std::string>());
  }
  return item;
}

}  // namespace

std::vector<PasskeyItem> ParsePasskeyJsonl(std::istream& input, const std::string& source) {
  return internal::ParseJsonlItems<PasskeyItem>(input, source, ParsePasskeyLine);
}

std::vector<PasskeyItem> LoadPasskeyJsonl(const std::filesystem::path& path) {
  return internal::LoadJsonlItems<PasskeyItem>(path, ParsePasskeyLine);
}

}  // namespace kvgate::checks
