// Multi-turn sessions (session.h): the growing conversation of each open session.
#include "session.h"

#include "http_target.h"
#include "kvgate/loadgen/datasets.h"
#include "kvgate/stats/random.h"

namespace kvgate::loadgen::internal {
namespace {

// DeriveSeed stream of the think times (schedule.cc's streams are 1..5).
constexpr uint64_t kThinkTimeStream = 6;

}  // namespace

Sessions::Sessions(const LoadSettings& settings, http::Endpoint endpoint, std::string model,
                   SpecSource spec_of)
    : settings_(settings),
      endpoint_(endpoint),
      model_(std::move(model)),
      spec_of_(std::move(spec_of)) {}

SessionTurn Sessions::Start(int64_t index) {
  const int64_t session = started_++;
  RequestSpec spec = spec_of_(index);
  State state;
  state.approx_tokens = ApproximateTokens(spec.prompt.get_ref<const std::string&>());
  state.conversation = endpoint_ == http::Endpoint::kChat
                           ? nlohmann::json::array({{{"role", "user"}, {"content", spec.prompt}}})
                           : spec.prompt;
  SessionTurn turn = Render(session, state, spec.max_tokens);
  open_.emplace(session, std::move(state));
  return turn;
}

std::optional<int64_t> Sessions::OnReply(const RequestRecord& record, std::string_view reply) {
  auto it = open_.find(record.session);
  if (it == open_.end()) return std::nullopt;
  State& state = it->second;
  if (!record.ok() || state.turn >= settings_.workload.multi_turn) {
    open_.erase(it);
    return std::nullopt;
  }
  state.reply.assign(reply);
  // The context so far is exactly what the server counted, when it said.
  state.context_tokens = record.prompt_tokens >= 0 && record.completion_tokens >= 0
                             ? int64_t{record.prompt_tokens} + record.completion_tokens
                             : -1;
  const int mean = settings_.workload.think_time_ms;
  if (mean == 0) return int64_t{0};
  // Seeded by (session, turn), so a pause does not depend on how the run's timing went.
  const LengthDistribution pause{LengthDistributionKind::kUniform, mean, 1.0, 2 * mean};
  const uint64_t draw = static_cast<uint64_t>(record.session) * kMaxMultiTurn +
                        static_cast<uint64_t>(state.turn);
  return int64_t{SampleLength(pause, stats::DeriveSeed(settings_.seed, kThinkTimeStream, draw))} *
         1'000'000;
}

std::optional<SessionTurn> Sessions::Next(int64_t session, int64_t index) {
  auto it = open_.find(session);
  if (it == open_.end()) return std::nullopt;
  State& state = it->second;
  RequestSpec next = spec_of_(index);
  const std::string& message = next.prompt.get_ref<const std::string&>();
  if (const int limit = settings_.workload.max_context_tokens; limit > 0) {
    const int64_t so_far = state.context_tokens >= 0
                               ? state.context_tokens
                               : state.approx_tokens + ApproximateTokens(state.reply);
    if (so_far + ApproximateTokens(message) + next.max_tokens > limit) {
      ++ended_at_context_limit_;
      open_.erase(it);
      return std::nullopt;
    }
  }
  state.approx_tokens += ApproximateTokens(state.reply) + ApproximateTokens(message);
  if (endpoint_ == http::Endpoint::kChat) {
    state.conversation.push_back({{"role", "assistant"}, {"content", std::move(state.reply)}});
    state.conversation.push_back({{"role", "user"}, {"content", message}});
  } else {
    std::string& text = state.conversation.get_ref<std::string&>();
    text.append(state.reply);
    text.append(kTurnSeparator);
    text.append(message);
  }
  state.reply.clear();
  ++state.turn;
  return Render(session, state, next.max_tokens);
}

SessionTurn Sessions::Render(int64_t session, const State& state, int max_tokens) const {
  SessionTurn turn;
  turn.session = session;
  turn.turn = state.turn;
  turn.request.max_tokens = max_tokens;
  turn.request.body = std::make_shared<const std::string>(
      RenderConversationBody(model_, state.conversation, max_tokens, settings_, endpoint_));
  return turn;
}

std::vector<RequestSpec> SessionSpecs(const LoadSettings& settings, const Workload& workload,
                                      const std::function<RequestSpec(int64_t)>& spec_at) {
  for (size_t line = 0; line < workload.file_lines(); ++line) {
    if (!workload.At(static_cast<int64_t>(line)).prompt.is_string()) {
      throw SettingsError("multi-turn", "prompt " + std::to_string(line + 1) + " of " +
                                            settings.workload.prompt_file +
                                            " is token ids: a session appends its turns as text, "
                                            "so every prompt must be a string");
    }
  }
  std::vector<RequestSpec> specs;
  if (settings.workload.input_unit != InputUnit::kTokens) return specs;
  const int64_t count = settings.workload.distinct_prompts > 0 ? settings.workload.distinct_prompts
                                                               : settings.requests;
  if (count <= 0) {
    throw SettingsError("input-unit", "tokens sizes prompts before the run: multi-turn sessions "
                                      "need --requests (or --distinct-prompts)");
  }
  specs.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) specs.push_back(spec_at(i));
  return specs;
}

}  // namespace kvgate::loadgen::internal
