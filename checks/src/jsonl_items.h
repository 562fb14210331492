// Internal: the line loop that every user dataset of the checks shares (QA, passkey): one JSON
// item a line, blank lines skipped, CRLF tolerated, ids unique, an empty file refused, every
// problem a DatasetError naming the file and line.
#pragma once

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "kvgate/checks/errors.h"

namespace kvgate::checks::internal {

// `parse_line(text, source, line)` returns an item with a string `id` or throws DatasetError.
template <typename Item, typename ParseLine>
std::vector<Item> ParseJsonlItems(std::istream& input, const std::string& source,
                                  ParseLine parse_line) {
  std::vector<Item> items;
  std::set<std::string> ids;
  std::string text;
  int64_t line = 0;
  while (std::getline(input, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    Item item = parse_line(text, source, line);
    if (!ids.insert(item.id).second) {
      throw DatasetError(source, line, "id: '" + item.id + "' appears on an earlier line too");
    }
    items.push_back(std::move(item));
  }
  if (input.bad()) throw DatasetError(source, line, "read error");
  if (items.empty()) throw DatasetError(source, 0, "no items (the file is empty)");
  return items;
}

template <typename Item, typename ParseLine>
std::vector<Item> LoadJsonlItems(const std::filesystem::path& path, ParseLine parse_line) {
  std::ifstream input(path, std::ios::binary);
  if (!input) throw DatasetError(path.string(), 0, "cannot open the file");
  return ParseJsonlItems<Item>(input, path.string(), parse_line);
}

}  // namespace kvgate::checks::internal
