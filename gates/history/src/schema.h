// The history's schema as an ordered list of migrations (private to gates/history).
//
// Version n of the schema is the result of applying migrations 1..n in order to an empty file;
// PRAGMA user_version holds n. A migration is never edited once released: a change is a new one.
#pragma once

#include <cstdint>
#include <span>

#include "sqlite_connection.h"

namespace kvgate::history::schema {

// PRAGMA application_id of a kvgate history: "KVGT".
inline constexpr int32_t kApplicationId = 0x4B564754;

struct Migration {
  int version;      // 1, 2, … without gaps
  const char* sql;  // statements run inside the migration's transaction
};

std::span<const Migration> Migrations();

// Brings the file to the last version of `migrations`, one IMMEDIATE transaction per migration
// (re-reading the version inside it, so two processes opening a new file at once apply each
// migration exactly once). Throws HistoryError kNewerSchema when the file is ahead, and rolls the
// failing migration back (leaving the earlier ones applied) when one fails.
// Returns the resulting version.
int Migrate(sqlite::Connection& connection, std::span<const Migration> migrations);

}  // namespace kvgate::history::schema
