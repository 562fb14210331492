#include "raw_sqlite.h"

#include <sqlite3.h>

#include <stdexcept>

namespace kvgate::failure_tests {

RawSqlite::RawSqlite(const std::string& path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error("cannot open '" + path + "' read-only: " + message);
  }
  // A crashed writer's WAL is replayed by the next reader; another live writer may hold a lock.
  sqlite3_busy_timeout(db_, 5000);
}

RawSqlite::~RawSqlite() { sqlite3_close(db_); }

std::vector<std::string> RawSqlite::Column(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    throw std::runtime_error("SQL '" + sql + "': " + sqlite3_errmsg(db_));
  }
  std::vector<std::string> values;
  int rc = SQLITE_OK;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(stmt, 0);
    values.emplace_back(text ? reinterpret_cast<const char*>(text) : "");
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) throw std::runtime_error("SQL '" + sql + "': " + sqlite3_errmsg(db_));
  return values;
}

std::string RawSqlite::One(const std::string& sql) {
  std::vector<std::string> values = Column(sql);
  return values.empty() ? "" : values.front();
}

}  // namespace kvgate::failure_tests
