// Typed errors of kvgate::checks. Host APIs throw these; a failure of one item during a check is
// not an exception but data (the item's record carries the error text).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kvgate::checks {

// A setting or argument is out of range. `field()` names it ("lengths", "depths", "url", ...), so
// a CLI can say which flag is wrong.
class InvalidSetting : public std::invalid_argument {
 public:
  InvalidSetting(std::string field, const std::string& what)
      : std::invalid_argument(field + ": " + what), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// The server could not be reached at all (refused, unresolvable, no answer in time). The message
// names the URL. `kvgate check` exits 3 with it; the suite reports the run as unable to run.
class ServerUnreachable : public std::runtime_error {
 public:
  ServerUnreachable(std::string url, const std::string& why)
      : std::runtime_error("cannot reach server at " + url + ": " + why), url_(std::move(url)) {}
  const std::string& url() const { return url_; }

 private:
  std::string url_;
};

// A server answered, but not usefully for a whole-run request (e.g. /metrics gave HTTP 404 or a
// body that is not Prometheus text). The message names the URL.
class ServerError : public std::runtime_error {
 public:
  ServerError(std::string url, int http_status, const std::string& what)
      : std::runtime_error(url + ": " + what), url_(std::move(url)), http_status_(http_status) {}
  const std::string& url() const { return url_; }
  int http_status() const { return http_status_; }  // 0 when the failure was not an HTTP status

 private:
  std::string url_;
  int http_status_;
};

// A user dataset line is malformed. The message reads "FILE:LINE: field: what is wrong".
class DatasetError : public std::runtime_error {
 public:
  DatasetError(const std::string& source, int64_t line, const std::string& what)
      : std::runtime_error(source + ":" + std::to_string(line) + ": " + what), line_(line) {}
  int64_t line() const { return line_; }  // 1-based; 0 when the file itself could not be read

 private:
  int64_t line_;
};

// Prometheus text exposition that does not follow the format. The message names the line.
class ExpositionError : public std::runtime_error {
 public:
  ExpositionError(int64_t line, const std::string& what)
      : std::runtime_error("metrics text line " + std::to_string(line) + ": " + what),
        line_(line) {}
  int64_t line() const { return line_; }  // 1-based

 private:
  int64_t line_;
};

}  // namespace kvgate::checks
