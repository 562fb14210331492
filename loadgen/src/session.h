// Internal: multi-turn sessions (WorkloadSettings::multi_turn > 1; docs/workloads.md). A session
// is one conversation: turn 1 sends the workload's request of its index; each later turn sends
// the whole conversation so far (every earlier prompt and the server's reply as returned) plus a
// new user message, the workload's request of that turn's own index (so the messages come from
// the same seeded stream as single-turn requests). Chat grows a `messages` list of user and
// assistant entries; completions grow one text: turn k's prompt, its reply, kTurnSeparator, the
// new message.
//
// A session ends after `multi_turn` turns, when a turn failed (there is no reply to continue),
// or before a turn that would pass `max_context_tokens`. The Run (run_loop.h) decides whether the
// run's request budget allows the next turn; Sessions only builds the requests.
//
// Thread-safety: none; used on the Run's event-loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvgate/http/endpoint.h"
#include "kvgate/loadgen/record.h"
#include "kvgate/loadgen/schedule.h"
#include "kvgate/loadgen/settings.h"
#include "run_loop.h"

namespace kvgate::loadgen::internal {

// One turn ready to send.
struct SessionTurn {
  PreparedRequest request;
  int64_t session = 0;
  int turn = 1;
};

class Sessions {
 public:
  // The workload's request of request index i (a text prompt; RunLoad checks that first).
  using SpecSource = std::function<RequestSpec(int64_t index)>;

  Sessions(const LoadSettings& settings, http::Endpoint endpoint, std::string model,
           SpecSource spec_of);

  // Starts the next session; its first turn is request `index`.
  SessionTurn Start(int64_t index);

  // Turn `record.turn` of session `record.session` ended; `reply` is the text the server
  // returned. Returns the pause before the session's next turn (nanoseconds, 0 = none; seeded by
  // session and turn) or nullopt when the session is over (its state is then dropped).
  std::optional<int64_t> OnReply(const RequestRecord& record, std::string_view reply);

  // The next turn of `session` as request `index`, whose workload request is the new user
  // message; nullopt when that turn would pass max_context_tokens (the session then ends).
  std::optional<SessionTurn> Next(int64_t session, int64_t index);

  // Drops a session whose next turn will not be sent (the run's budget or time is spent).
  void End(int64_t session) { open_.erase(session); }

  // Sessions that ended before their last turn because the context limit was reached.
  int64_t ended_at_context_limit() const { return ended_at_context_limit_; }

 private:
  struct State {
    nlohmann::json conversation;  // the last turn's prompt (string) or messages (array)
    int turn = 1;
    std::string reply;           // the last turn's reply, until the next turn takes it
    int64_t context_tokens = -1;  // the last turn's prompt + completion tokens (usage), -1 unknown
    int64_t approx_tokens = 0;    // ApproximateTokens of the conversation's texts, kept as it grows
  };

  SessionTurn Render(int64_t session, const State& state, int max_tokens) const;

  const LoadSettings& settings_;
  http::Endpoint endpoint_;
  std::string model_;
  SpecSource spec_of_;
  int64_t started_ = 0;
  std::unordered_map<int64_t, State> open_;
  int64_t ended_at_context_limit_ = 0;
};

// The workload requests a multi-turn run draws its messages from, checked before the run: a
// prompt file's prompts must be text (a turn appends to them; SettingsError("multi-turn", ...)
// names the line otherwise). With token-true lengths (InputUnit::kTokens) the requests are
// fitted here, through `spec_at`, never inside the event loop: the run's distinct prompts or its
// --requests (SettingsError("input-unit", ...) when it has neither). Otherwise empty: requests
// are drawn as the run goes.
std::vector<RequestSpec> SessionSpecs(const LoadSettings& settings, const Workload& workload,
                                      const std::function<RequestSpec(int64_t)>& spec_at);

}  // namespace kvgate::loadgen::internal
