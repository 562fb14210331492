// A thin RAII layer over the SQLite C API for the history (private to gates/history): one
// connection, prepared statements and IMMEDIATE transactions, every failure turned into a
// HistoryError that names the file.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvgate/history/history_db.h"

namespace kvgate::history::sqlite {

class Connection {
 public:
  Connection(const std::filesystem::path& path, bool create, int busy_timeout_ms);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* handle() const { return db_; }
  const std::filesystem::path& path() const { return path_; }

  // Runs one or more statements without results.
  void Exec(const std::string& sql, std::string_view context);
  // Runs a statement that yields one row of one column; nullopt when it yields no row.
  std::optional<int64_t> QueryInt(const std::string& sql, std::string_view context);
  std::optional<std::string> QueryText(const std::string& sql, std::string_view context);

  // Throws a HistoryError for SQLite result code `rc` (classifying it) with `context`.
  [[noreturn]] void Fail(int rc, std::string_view context) const;

 private:
  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
};

class Statement {
 public:
  Statement(Connection& connection, std::string_view sql, std::string_view context);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binding is 1-based, as in SQLite.
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Statement& Bind(int index, double value);
  Statement& Bind(int index, std::string_view text);
  Statement& Bind(int index, const char* text) { return Bind(index, std::string_view(text)); }
  Statement& Bind(int index, const std::string& text) {
    return Bind(index, std::string_view(text));
  }
  Statement& BindBlob(int index, std::span<const uint8_t> bytes);
  Statement& BindNull(int index);
  template <typename T>
  Statement& Bind(int index, const std::optional<T>& value) {
    return value ? Bind(index, *value) : BindNull(index);
  }

  // Steps once: true when a row is available, false when done. Throws on error.
  bool Step();
  // Steps a statement expected to finish without rows, then resets it for reuse.
  void Run();
  void Reset();

  bool IsNull(int column) const;
  int64_t Int(int column) const;
  double Double(int column) const;
  std::string Text(int column) const;
  std::span<const uint8_t> Blob(int column) const;
  std::optional<int64_t> OptionalInt(int column) const;
  std::optional<double> OptionalDouble(int column) const;
  std::optional<std::string> OptionalText(int column) const;

  // Appends context (e.g. which row) to the next error message.
  void SetRowContext(std::string context) { row_context_ = std::move(context); }

 private:
  Connection& connection_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string context_;
  std::string row_context_;
};

// BEGIN IMMEDIATE (take the write lock up front, so that a busy wait happens here and not as a
// failed lock upgrade midway); rolls back unless Commit() was called.
class Transaction {
 public:
  explicit Transaction(Connection& connection);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void Commit();

 private:
  Connection& connection_;
  bool done_ = false;
};

}  // namespace kvgate::history::sqlite
