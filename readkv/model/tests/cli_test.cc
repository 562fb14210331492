// RuntimeFlags (cli.h): --kv and --reader are parsed once, while CLI11 parses, into the typed
// KvCacheOptions through the codec's one parse function per enum; --help lists the names; a bad
// name (or the enum's number) is CLI11's error naming the flag, with the parse function's words.
#include "readkv/model/cli.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>

#include "readkv/codec/attention.h"
#include "readkv/codec/errors.h"
#include "readkv/codec/readers.h"

namespace readkv::model {
namespace {

// The options of one command line of runtime flags, resolved (validated) as a command does.
RuntimeOptions Parse(const std::string& line) {
  CLI::App app("runtime flags");
  RuntimeFlags flags(app);
  app.parse(line, false);
  return flags.Resolve();
}

// CLI11's message for a refused command line, or "" if it parses.
std::string ParseError(const std::string& line) {
  try {
    Parse(line);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(RuntimeFlagsTest, DefaultsAreDenseAndTheFlexibleReader) {
  const RuntimeOptions o = Parse("");
  EXPECT_EQ(o.kv.kind, codec::KvBackend::kDense);
  EXPECT_EQ(o.kv.reader, codec::ReaderKind::kFlexible);
}

TEST(RuntimeFlagsTest, EveryBackendNameParsesToItsValue) {
  for (const codec::KvBackend kind : codec::kKvBackends) {
    const std::string name(codec::KvBackendName(kind));
    EXPECT_EQ(Parse("--kv " + name).kv.kind, kind) << name;
  }
}

TEST(RuntimeFlagsTest, EveryServedReaderNameParsesToItsValue) {
  for (const codec::ReaderKind reader :
       {codec::ReaderKind::kFlexible, codec::ReaderKind::kConstrained, codec::ReaderKind::kTile}) {
    const std::string name(codec::ReaderName(reader));
    const RuntimeOptions o = Parse("--kv readkv --reader " + name);
    EXPECT_EQ(o.kv.kind, codec::KvBackend::kReadKv) << name;
    EXPECT_EQ(o.kv.reader, reader) << name;
  }
  // The full reader reads every plane: accepted with R = W, refused otherwise (as before the
  // options were typed), naming read_bits.
  EXPECT_EQ(Parse("--kv readkv --reader full --read-bits 8").kv.reader, codec::ReaderKind::kFull);
  try {
    Parse("--kv readkv --reader full");
    FAIL() << "the full reader at R = 4 was accepted";
  } catch (const codec::InvalidArgument& e) {
    EXPECT_EQ(e.field(), "read_bits");
  }
}

TEST(RuntimeFlagsTest, ABadNameIsCli11sErrorNamingTheFlag) {
  EXPECT_EQ(ParseError("--kv bogus"), "--kv: must be dense, fp8 or readkv, got 'bogus'");
  EXPECT_EQ(ParseError("--kv FP8"), "--kv: must be dense, fp8 or readkv, got 'FP8'");
  // The enum's number is not a name.
  EXPECT_EQ(ParseError("--kv 1"), "--kv: must be dense, fp8 or readkv, got '1'");
  EXPECT_EQ(ParseError("--kv readkv --reader sideways"),
            "--reader: must be flexible, constrained, full or tile, got 'sideways'");
  EXPECT_EQ(ParseError("--kv readkv --reader 0"),
            "--reader: must be flexible, constrained, full or tile, got '0'");
}

TEST(RuntimeFlagsTest, HelpListsTheNamesAndTheDefaults) {
  CLI::App app("runtime flags");
  RuntimeFlags flags(app);
  const std::string help = app.help();
  // CLI11 2.1 writes an option as NAME TYPE:{choices}=default.
  EXPECT_NE(help.find("--kv TEXT:{dense,fp8,readkv}=dense"), std::string::npos) << help;
  EXPECT_NE(help.find("--reader TEXT:{flexible,constrained,full,tile}=flexible"), std::string::npos)
      << help;
}

}  // namespace
}  // namespace readkv::model
