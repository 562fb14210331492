#include "sqlite_connection.h"

#include <utility>

namespace kvgate::history::sqlite {
namespace {

HistoryError::Kind Classify(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
      return HistoryError::Kind::kNotADatabase;
    case SQLITE_CORRUPT:
      return HistoryError::Kind::kCorrupt;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return HistoryError::Kind::kBusy;
    case SQLITE_CONSTRAINT:
      return HistoryError::Kind::kConstraint;
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return HistoryError::Kind::kCannotOpen;
    default:
      return HistoryError::Kind::kSql;
  }
}

}  // namespace

Connection::Connection(const std::filesystem::path& path, bool create, int busy_timeout_ms)
    : path_(path) {
  int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw HistoryError(Classify(rc), path_, "cannot open: " + message);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, busy_timeout_ms);
}

Connection::~Connection() { sqlite3_close_v2(db_); }

void Connection::Fail(int rc, std::string_view context) const {
  std::string message(context);
  message += ": ";
  // The connection's message is specific ("CHECK constraint failed: …"); fall back to the
  // generic text when the connection holds none for this code.
  message +=
      (db_ && sqlite3_extended_errcode(db_) == rc) ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  HistoryError::Kind kind = Classify(rc);
  if (kind == HistoryError::Kind::kNotADatabase || kind == HistoryError::Kind::kCorrupt) {
    message += " (kvgate never rewrites such a file: move it aside or restore it from a backup)";
  }
  throw HistoryError(kind, path_, message);
}

void Connection::Exec(const std::string& sql, std::string_view context) {
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) Fail(sqlite3_extended_errcode(db_), context);
}

std::optional<int64_t> Connection::QueryInt(const std::string& sql, std::string_view context) {
  Statement stmt(*this, sql, context);
  if (!stmt.Step()) return std::nullopt;
  return stmt.Int(0);
}

std::optional<std::string> Connection::QueryText(const std::string& sql, std::string_view context) {
  Statement stmt(*this, sql, context);
  if (!stmt.Step()) return std::nullopt;
  return stmt.Text(0);
}

Statement::Statement(Connection& connection, std::string_view sql, std::string_view context)
    : connection_(connection), context_(context) {
  int rc = sqlite3_prepare_v2(connection_.handle(), sql.data(), static_cast<int>(sql.size()),
                              &stmt_, nullptr);
  if (rc != SQLITE_OK) connection_.Fail(sqlite3_extended_errcode(connection_.handle()), context_);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::Bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}

Statement& Statement::BindBlob(int index, std::span<const uint8_t> bytes) {
  sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindNull(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

bool Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  std::string context = context_;
  if (!row_context_.empty()) context += " (" + row_context_ + ")";
  sqlite3_reset(stmt_);
  connection_.Fail(rc, context);
}

void Statement::Run() {
  while (Step()) {
  }
  Reset();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Statement::IsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}
int64_t Statement::Int(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::Double(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::Text(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  if (!text) return "";
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::span<const uint8_t> Statement::Blob(int column) const {
  const auto* data = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_, column));
  auto size = static_cast<size_t>(sqlite3_column_bytes(stmt_, column));
  return data ? std::span<const uint8_t>(data, size) : std::span<const uint8_t>();
}

std::optional<int64_t> Statement::OptionalInt(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Int(column);
}
std::optional<double> Statement::OptionalDouble(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Double(column);
}
std::optional<std::string> Statement::OptionalText(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Text(column);
}

Transaction::Transaction(Connection& connection) : connection_(connection) {
  connection_.Exec("BEGIN IMMEDIATE", "begin transaction");
}

Transaction::~Transaction() {
  if (!done_) sqlite3_exec(connection_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::Commit() {
  connection_.Exec("COMMIT", "commit");
  done_ = true;
}

}  // namespace kvgate::history::sqlite
