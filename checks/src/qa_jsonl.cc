// The JSONL loader of qa_set.h: user datasets are checked line by line so that a bad line is
// reported with its number instead of failing a whole run later or scoring against nothing.
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "jsonl_items.h"
#include "kvgate/checks/errors.h"
#include "kvgate/checks/f1.h"
#include "kvgate/checks/qa_set.h"

namespace kvgate::checks {
namespace {

std::string StringField(const nlohmann::json& object, const char* field, const std::string& source,
                        int64_t line) {
  auto it = object.find(field);
  if (it == object.end()) throw DatasetError(source, line, std::string(field) + ": missing");
  if (!it->is_string()) {
    throw DatasetError(source, line,
                       std::string(field) + ": expected a string, got " + it->type_name());
  }
  return it->get<std::string>();
}

QaItem ParseLine(const std::string& text, const std::string& source, int64_t line) {
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw DatasetError(source, line, std::string("not valid JSON: ") + e.what());
  }
  if (!object.is_object()) {
    throw DatasetError(source, line,
                       std::string("expected a JSON object, got ") + object.type_name());
  }
  for (const auto& [key, value] : object.items()) {
    if (key != "id" && key != "context" && key != "question" && key != "answers" &&
        key != "subset") {
      throw DatasetError(source, line,
                         key + ": unknown field (expected id, context, question, answers, subset)");
    }
  }
  QaItem item;
  auto id = object.find("id");
  if (id == object.end()) throw DatasetError(source, line, "id: missing");
  if (id->is_string()) {
    item.id = id->get<std::string>();
  } else if (id->is_number_integer()) {
    item.id = std::to_string(id->get<int64_t>());
  } else {
    throw DatasetError(source, line,
                       std::string("id: expected a string or an integer, got ") + id->type_name());
  }
  if (item.id.empty()) throw DatasetError(source, line, "id: must not be empty");
  item.context = StringField(object, "context", source, line);
  item.question = StringField(object, "question", source, line);
  if (item.question.empty()) throw DatasetError(source, line, "question: must not be empty");

  auto answers = object.find("answers");
  if (answers == object.end()) throw DatasetError(source, line, "answers: missing");
  if (!answers->is_array() || answers->empty()) {
    throw DatasetError(source, line, "answers: expected a non-empty array of strings");
  }
  for (size_t i = 0; i < answers->size(); ++i) {
    const nlohmann::json& answer = (*answers)[i];
    std::string where = "answers[" + std::to_string(i) + "]";
    if (!answer.is_string()) {
      throw DatasetError(source, line, where + ": expected a string, got " + answer.type_name());
    }
    if (NormalizeAnswer(answer.get<std::string>()).empty()) {
      throw DatasetError(
          source, line,
          where + ": '" + answer.get<std::string>() + "' is empty after SQuAD normalisation");
    }
    item.answers.push_back(answer.get<std::string>());
  }

  auto subset = object.find("subset");
  if (subset != object.end()) {
    if (subset->is_string()) {
      item.subsets.push_back(subset->get<std::string>());
    } else if (subset->is_array()) {
      for (const nlohmann::json& name : *subset) {
        if (!name.is_string()) {
          throw DatasetError(source, line, "subset: expected strings in the array");
        }
        item.subsets.push_back(name.get<std::string>());
      }
    } else {
      throw DatasetError(source, line,
                         std::string("subset: expected a string or an array of "
                                     "strings, got ") +
                             subset->type_name());
    }
    for (const std::string& name : item.subsets) {
      if (name.empty() || name == "all") {
        throw DatasetError(source, line, "subset: '" + name + "' is reserved or empty");
      }
    }
  }
  return item;
}

}  // namespace

std::vector<QaItem> ParseQaJsonl(std::istream& input, const std::string& source) {
  return internal::ParseJsonlItems<QaItem>(input, source, ParseLine);
}

std::vector<QaItem> LoadQaJsonl(const std::filesystem::path& path) {
  return internal::LoadJsonlItems<QaItem>(path, ParseLine);
}

}  // namespace kvgate::checks
