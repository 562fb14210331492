// The kind of HistoryError a call throws, for the history's tests (a test failure when it throws
// none); `message`, when given, receives the error's text.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kvgate/history/history_db.h"

namespace kvgate::history::testing {

inline HistoryError::Kind KindOf(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const HistoryError& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "expected a HistoryError";
  return HistoryError::Kind::kSql;
}

}  // namespace kvgate::history::testing
