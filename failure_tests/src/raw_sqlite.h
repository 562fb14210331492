// A history file read with plain SQLite, not through kvgate::history: what any other tool (or
// the sqlite3 shell) sees in it, which is the point when checking that a crash left the file
// sound. Read-only; one owner; not thread-safe.
#pragma once

#include <string>
#include <vector>

struct sqlite3;

namespace kvgate::failure_tests {

class RawSqlite {
 public:
  // Opens `path` read-only (it must exist). Throws std::runtime_error naming the file.
  explicit RawSqlite(const std::string& path);
  ~RawSqlite();
  RawSqlite(const RawSqlite&) = delete;
  RawSqlite& operator=(const RawSqlite&) = delete;

  // The first column of every row as text ("" for NULL). Throws naming the SQL on error.
  std::vector<std::string> Column(const std::string& sql);
  // The first column of the first row; "" when there is no row.
  std::string One(const std::string& sql);

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace kvgate::failure_tests
