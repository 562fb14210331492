#include "token_sizer.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "kvgate/loadgen/schedule.h"
#include "kvgate/secrets/redact.h"
#include "kvgate/stats/random.h"

namespace kvgate::loadgen::internal {
namespace {

namespace bhttp = boost::beast::http;
constexpr std::chrono::milliseconds kTimeout{30000};

}  // namespace

TokenSizer::TokenSizer(const http::Url& url, const Target& target, std::string model)
    : url_(url),
      target_(target),
      model_(std::move(model)),
      tls_(url, target.client),
      connection_(url, tls_, kTimeout, kTimeout, uint64_t{64} << 20) {}

std::optional<int64_t> TokenSizer::TryCount(const std::string& text, bool bare,
                                            std::string* error) {
  nlohmann::json body = {{"model", model_}};
  if (bare) {
    body["prompt"] = text;
    body["add_special_tokens"] = false;
  } else if (target_.endpoint == http::Endpoint::kChat) {
    body["messages"] = {{{"role", "user"}, {"content", text}}};
  } else {
    body["prompt"] = text;
  }
  http::Request request =
      http::MakeRequest(url_, target_.client, bhttp::verb::post, "/tokenize", "kvgate-loadgen");
  request.set(bhttp::field::content_type, "application/json");
  request.body() = body.dump();
  request.prepare_payload();
  ++calls_;
  http::Response response;
  try {
    response = connection_.Send(request);
  } catch (const http::TransportError& e) {
    *error = e.what();
    return std::nullopt;
  }
  if (response.result_int() != 200) {
    *error = "HTTP " + std::to_string(response.result_int()) + ": " +
             secrets::RedactText(http::ErrorText(response.body()));
    return std::nullopt;
  }
  nlohmann::json answer = nlohmann::json::parse(response.body(), nullptr, false);
  if (answer.is_object() && answer.contains("count") && answer["count"].is_number_integer()) {
    return answer["count"].get<int64_t>();
  }
  *error = "the answer has no integer \"count\"";
  return std::nullopt;
}

bool TokenSizer::Available() {
  if (!available_) {
    std::string error;
    available_ = TryCount("kvgate", /*bare=*/false, &error).has_value();
  }
  return *available_;
}

int64_t TokenSizer::Count(const std::string& text) {
  std::string error;
  std::optional<int64_t> count = TryCount(text, /*bare=*/false, &error);
  if (!count) throw TargetError("POST " + url_.Join("/tokenize") + ": " + error);
  return *count;
}

int64_t TokenSizer::CountText(const std::string& text) {
  std::string error;
  std::optional<int64_t> count = TryCount(text, /*bare=*/true, &error);
  if (!count) throw TargetError("POST " + url_.Join("/tokenize") + ": " + error);
  return *count;
}

TokenSizer::Fitted TokenSizer::Fit(std::string text, int64_t target, uint64_t seed) {
  int64_t count = Count(text);
  // Too short: append more synthetic words (a byte-level model needs few, BPE about one a token).
  for (uint64_t round = 1; count < target && round <= 16; ++round) {
    const int64_t missing = target - count;
    text += " " + SyntheticText(static_cast<int>(std::min<int64_t>(missing + 8, 1 << 20)),
                                stats::DeriveSeed(seed, 0x70c5, round));
    count = Count(text);
  }
  if (count <= target) return {text, count, count == target};
  // Smallest prefix length whose count reaches the target: lo's count < target <= hi's.
  size_t lo = 0, hi = text.size();
  int64_t lo_count = 0, hi_count = count;
  for (int step = 0; hi - lo > 1; ++step) {
    size_t mid = lo + (hi - lo) / 2;
    if (step % 2 == 0 && hi_count > lo_count) {  // interpolate, then bisect, alternately
      const double share = static_cast<double>(target - lo_count) /
                           static_cast<double>(hi_count - lo_count);
      mid = lo + static_cast<size_t>(share * static_cast<double>(hi - lo));
      mid = std::clamp(mid, lo + 1, hi - 1);
    }
    const int64_t mid_count = Count(text.substr(0, mid));
    if (mid_count >= target) {
      hi = mid;
      hi_count = mid_count;
    } else {
      lo = mid;
      lo_count = mid_count;
    }
  }
  text.resize(hi);
  return {text, hi_count, hi_count == target};
}

}  // namespace kvgate::loadgen::internal
