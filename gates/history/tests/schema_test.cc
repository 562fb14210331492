#include "schema.h"

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace kvgate::history::schema {
namespace {

TEST(SchemaTest, MigrationVersionsAreContiguousFromOne) {
  int expected = 1;
  for (const Migration& m : Migrations()) EXPECT_EQ(m.version, expected++);
  EXPECT_GE(Migrations().size(), 1u);
}

TEST(SchemaTest, AFailingMigrationRollsBackWholeAndKeepsTheEarlierOnes) {
  testing::TempDir dir;
  sqlite::Connection connection(dir.File("m.db"), true, 1000);
  const Migration migrations[] = {
      {1, "CREATE TABLE a (x INTEGER);"},
      {2, "CREATE TABLE b (y INTEGER); INSERT INTO no_such_table VALUES (1);"},
  };
  EXPECT_THROW(Migrate(connection, migrations), HistoryError);
  EXPECT_EQ(connection.QueryInt("PRAGMA user_version", "test"), 1);
  EXPECT_EQ(connection.QueryInt("SELECT count(*) FROM sqlite_master WHERE name = 'b'", "test"), 0);
  EXPECT_EQ(connection.QueryInt("SELECT count(*) FROM sqlite_master WHERE name = 'a'", "test"), 1);
}

TEST(SchemaTest, MigratingTwiceIsANoOpAndANewerFileIsRefused) {
  testing::TempDir dir;
  sqlite::Connection connection(dir.File("m.db"), true, 1000);
  const Migration migrations[] = {{1, "CREATE TABLE a (x INTEGER);"}};
  EXPECT_EQ(Migrate(connection, migrations), 1);
  EXPECT_EQ(Migrate(connection, migrations), 1);  // would fail if it re-created table a
  connection.Exec("PRAGMA user_version = 7", "test");
  try {
    Migrate(connection, migrations);
    FAIL() << "expected HistoryError";
  } catch (const HistoryError& e) {
    EXPECT_EQ(e.kind(), HistoryError::Kind::kNewerSchema);
    EXPECT_NE(std::string(e.what()).find("7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvgate::history::schema
