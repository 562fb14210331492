// Scenario 4, crash recovery of the server (issue 6). Three parts, each a real crash:
//  1. load: `kill -9` a server in the middle of a closed-loop load run (loadgen API). Every
//     scheduled request must have a record; the ones in flight at the kill must be errors whose
//     cause says the connection broke ("reset"/"incomplete", never "timeout": nothing may hang);
//     the ones after it errors too; the run must end promptly; a restarted server must serve the
//     same greedy output as before the crash.
//  2. suite: `kill -9` the candidate server in the middle of a `kvgate run` load pair. The run
//     must end `interrupted` (exit 3) with a reason naming the dead server, with everything
//     recorded so far intact in the history (quality items, the finished load run, the cut one
//     with a record per scheduled request) and its other server stopped.
//  3. torn cache: a server with `--cache-dir` writes prefix-cache objects; one is truncated (what
//     a crash mid-write leaves); a restarted server must count it as a cache rejection with
//     reason="corrupt" (kCacheRejectionsSeries) and answer exactly as a fresh server does.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "kvgate/checks/completion_client.h"
#include "kvgate/checks/prometheus_text.h"
#include "kvgate/failure_tests/scenario.h"
#include "kvgate/loadgen/run_load.h"
#include "kvgate/suite/server_process.h"
#include "raw_sqlite.h"
#include "reference_server.h"
#include "tiny_policy.h"

namespace kvgate::failure_tests {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::chrono::seconds kStartupTimeout{120};

// Failed expectations of one part, in the order found; the scenario's reason is the first.
class Findings {
 public:
  void Expect(bool condition, const std::string& what) {
    if (!condition) failures_.push_back(what);
  }
  bool ok() const { return failures_.empty(); }
  const std::vector<std::string>& failures() const { return failures_; }

 private:
  std::vector<std::string> failures_;
};

// One greedy completion; throws with the server's error when it fails.
std::string Complete(const std::string& url, const std::string& prompt, int max_tokens) {
  checks::ClientOptions options;
  options.concurrency = 1;
  options.request_timeout = std::chrono::seconds(60);
  checks::CompletionClient client(url, options);
  client.Probe();
  std::vector<checks::CompletionOutcome> out = client.CompleteAll({{prompt, max_tokens, {}}});
  if (!out.at(0).ok()) throw std::runtime_error("completion on " + url + ": " + out[0].error);
  return out[0].text;
}

// The value of one series on the server's /metrics (0 when it is not exposed).
double MetricValue(const std::string& url, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  const std::string text = checks::HttpGet(checks::ServerUrl::Parse(url), "/metrics");
  double total = 0.0;
  for (const checks::MetricSample& sample : checks::ParsePrometheusText(text).samples) {
    if (sample.name != name) continue;
    bool match = true;
    for (const auto& [label, value] : labels) match = match && sample.Label(label) == value;
    if (match) total += sample.value;
  }
  return total;
}

// A long-enough prompt (the byte-level model: one token per byte) to fill several 256-token
// prefix-cache blocks, in the form the built-in model was trained on.
std::string PasskeyPrompt() {
  std::string prompt =
      "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
      "it. I will quiz you about the important information there.";
  for (int i = 0; i < 8; ++i) {
    prompt +=
        " The grass is green. The sky is blue. The sun is yellow. Here we go. There and "
        "back again.";
    if (i == 4) prompt += " The pass key is 48213. Remember it. 48213 is the pass key.";
  }
  return prompt + " What is the pass key? The pass key is";
}

// --- part 1: SIGKILL in the middle of a load run -------------------------------------------

// Four equal closed-loop streams at a time, sixteen in all: short prompts, longer outputs, so the
// waves are mostly decoding and mid-wave means mid-stream.
loadgen::LoadSettings CrashLoadSettings() {
  loadgen::LoadSettings settings;
  settings.mode = loadgen::LoadMode::kClosedLoop;
  settings.concurrency = 4;
  settings.requests = 16;
  settings.request_timeout_s = 30;
  settings.seed = 4;
  settings.spin_us = 0;  // a closed loop has no send times to hit; do not burn a shared core
  settings.workload.input = {loadgen::LengthDistributionKind::kConstant, 8, 0.0, 1 << 20};
  settings.workload.output = {loadgen::LengthDistributionKind::kConstant, 40, 0.0, 1 << 20};
  return settings;
}

json LoadCrash(const ScenarioContext& context, Findings& findings) {
  json evidence;
  const std::vector<std::string> argv = ServeCommand(context, {"--kv", "fp8", "--max-batch", "4"});
  const std::string prompt = PasskeyPrompt();
  const std::string log = (fs::path(context.work_dir) / "load-server.log").string();
  auto server = std::make_unique<suite::ServerProcess>(argv, kStartupTimeout, log);
  const std::string before = Complete(server->url(), prompt, 12);

  const loadgen::LoadSettings settings = CrashLoadSettings();
  loadgen::LiveCounters counters;
  const loadgen::Target target{server->url()};
  std::future<loadgen::LoadResult> load =
      std::async(std::launch::async, [&] { return loadgen::RunLoad(settings, target, &counters); });

  // The kill lands in the middle of the second wave's streams: the four equal requests of the
  // first wave finish together, the next four are sent at once, and half a wave later they are
  // all streaming tokens.
  const Clock::time_point load_start = Clock::now();
  const Clock::time_point wait_until = load_start + std::chrono::seconds(120);
  while (counters.finished.load() < settings.concurrency &&
         load.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready &&
         Clock::now() < wait_until) {
  }
  const auto wave = Clock::now() - load_start;
  load.wait_for(wave / 2);
  const int64_t finished_at_kill = counters.finished.load();
  const int64_t sent_at_kill = counters.sent.load();
  const Clock::time_point kill_start = Clock::now();
  server->Kill();
  const Clock::time_point kill_done = Clock::now();
  if (load.wait_for(std::chrono::duration<double>(settings.request_timeout_s + 30)) !=
      std::future_status::ready) {
    findings.Expect(false, "load: the load generator had not ended " +
                               std::to_string(static_cast<int>(settings.request_timeout_s + 30)) +
                               " s after the server was killed (hangs)");
    return evidence;  // the future's destructor still waits; the runner's watchdog bounds that
  }
  const double end_after_kill_s = std::chrono::duration<double>(Clock::now() - kill_start).count();
  loadgen::LoadResult result = load.get();

  const auto to_run_ns = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() -
           result.start_steady_ns;
  };
  const int64_t kill_start_ns = to_run_ns(kill_start);
  std::map<std::string, int> causes, in_flight_causes, after_kill_causes;
  int ok = 0, short_ok = 0, unfinished = 0, in_flight = 0, after_kill = 0;
  int mid_stream = 0, mid_stream_broken = 0, unanswered_broken = 0, completed_during_kill = 0;
  std::set<std::string> in_flight_texts;
  for (const loadgen::RequestRecord& r : result.records) {
    causes[r.ok() ? "ok" : r.error_cause] += 1;
    if (r.end_ns < 0) ++unfinished;
    if (r.ok()) {
      ++ok;
      if (r.completion_tokens != r.max_tokens) ++short_ok;
    }
    // In flight: sent before the kill began, not ended before it. (Kill() returns once the
    // process is reaped; by then the kernel has reset its sockets and the generator may already
    // have recorded every failure, so "ended after the kill returned" would miss them.)
    if (r.sent_ns >= 0 && r.sent_ns < kill_start_ns && r.end_ns >= kill_start_ns) {
      ++in_flight;
      in_flight_causes[r.ok() ? "ok" : r.error_cause] += 1;
      if (r.ok() && r.completion_tokens == r.max_tokens) {
        ++completed_during_kill;  // its last token left before the signal landed
      } else if (r.first_token_ns >= 0) {
        ++mid_stream;
        if (r.error_cause == "reset" || r.error_cause == "incomplete") ++mid_stream_broken;
      } else if (r.error_cause == "reset" || r.error_cause == "connect") {
        // No response byte yet: the generator retries a request of a pooled connection once on
        // a fresh one (a stale keep-alive is the pool's fault), which the dead server refuses.
        ++unanswered_broken;
      }
      in_flight_texts.insert(r.error_cause + ": " + r.error_text);
    }
    if (r.issued_ns >= kill_start_ns || (r.issued_ns < 0 && r.scheduled_ns >= kill_start_ns)) {
      ++after_kill;
      after_kill_causes[r.ok() ? "ok" : r.error_cause] += 1;
    }
  }
  evidence = {{"scheduled", settings.requests},
              {"records", result.records.size()},
              {"finished_at_kill", finished_at_kill},
              {"sent_at_kill", sent_at_kill},
              {"ok", ok},
              {"causes", causes},
              {"in_flight_at_kill", in_flight},
              {"in_flight_causes", in_flight_causes},
              {"in_flight_streaming", mid_stream},
              {"in_flight_completed_as_the_kill_landed", completed_during_kill},
              {"in_flight_errors", in_flight_texts},
              {"issued_after_kill", after_kill},
              {"after_kill_causes", after_kill_causes},
              {"load_ended_s_after_kill", end_after_kill_s},
              {"kill_and_reap_s", std::chrono::duration<double>(kill_done - kill_start).count()}};
  findings.Expect(static_cast<int64_t>(result.records.size()) == settings.requests,
                  "load: " + std::to_string(result.records.size()) + " records for " +
                      std::to_string(settings.requests) + " scheduled requests (lost some)");
  findings.Expect(unfinished == 0, "load: " + std::to_string(unfinished) +
                                       " records have no end time (left hanging)");
  findings.Expect(in_flight > 0,
                  "load: no request was in flight at the kill (the crash missed "
                  "the load; sent " +
                      std::to_string(sent_at_kill) + ", finished " +
                      std::to_string(finished_at_kill) + ")");
  findings.Expect(mid_stream > 0,
                  "load: no request was streaming at the kill (the crash "
                  "missed the streams; " +
                      std::to_string(in_flight) + " in flight)");
  findings.Expect(mid_stream_broken == mid_stream,
                  "load: of " + std::to_string(mid_stream) +
                      " requests streaming at the kill, only " + std::to_string(mid_stream_broken) +
                      " are errors with cause reset/incomplete (causes " +
                      json(in_flight_causes).dump() + ")");
  const int accounted = mid_stream_broken + unanswered_broken + completed_during_kill;
  findings.Expect(accounted == in_flight,
                  "load: of " + std::to_string(in_flight) + " requests in flight at the kill, " +
                      std::to_string(in_flight - accounted) +
                      " are not connection errors (causes " + json(in_flight_causes).dump() + ")");
  findings.Expect(after_kill_causes.count("ok") == 0,
                  "load: a request issued after the kill is recorded as a success");
  findings.Expect(causes.count("timeout") == 0,
                  "load: " + std::to_string(causes.count("timeout") ? causes["timeout"] : 0) +
                      " requests ended in 'timeout' (something hung until the request timeout)");
  findings.Expect(short_ok == 0, "load: " + std::to_string(short_ok) +
                                     " successful requests have fewer tokens than asked");
  findings.Expect(end_after_kill_s < 10.0, "load: the run took " +
                                               std::to_string(end_after_kill_s) +
                                               " s after the kill to end (expected < 10 s)");
  std::string errors_without_text;
  for (const auto& r : result.records) {
    if (!r.ok() && r.error_text.empty()) errors_without_text = std::to_string(r.index);
  }
  findings.Expect(errors_without_text.empty(),
                  "load: error record " + errors_without_text + " has no error text");

  // The restarted server serves, and serves the same (greedy, deterministic) answer.
  server.reset();
  const Clock::time_point restart = Clock::now();
  suite::ServerProcess restarted(argv, kStartupTimeout, log);
  const std::string after = Complete(restarted.url(), prompt, 12);
  evidence["restart_s"] = std::chrono::duration<double>(Clock::now() - restart).count();
  evidence["restarted_output_matches"] = after == before;
  findings.Expect(after == before, "load: the restarted server answered '" + after +
                                       "' where the crashed one answered '" + before + "'");
  restarted.Stop();
  return evidence;
}

// --- part 2: a server dies in the middle of `kvgate run` -----------------------------------

constexpr int kRunRequests = 6;

json SuiteServerCrash(const ScenarioContext& context, Findings& findings) {
  json evidence;
  const fs::path dir = fs::path(context.work_dir) / "run";
  fs::create_directories(dir);
  const std::string policy = (dir / "policy.toml").string();
  const std::string db = (dir / "history.db").string();
  TinyPolicy tiny;
  tiny.name = "failure-server-crash";
  tiny.pairs = 2;  // a second pair that must never run
  tiny.requests = kRunRequests;
  std::ofstream(policy) << TinyPolicyToml(context, tiny);
  ChildProcess run({context.kvgate_binary, "run", "--policy", policy, "--db", db, "--out",
                    (dir / "out").string()},
                   (dir / "run.out").string(), (dir / "run.err").string());

  // Wait until the first load run (pair 0, baseline) is stored: the candidate's is next.
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(150);
  while (run.Running() && Clock::now() < give_up &&
         run.Stderr().find("pair 0 baseline:") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!run.Running() || Clock::now() >= give_up) {
    findings.Expect(
        false, "suite: `kvgate run` never reached its first load pair (" +
                   (run.Running() ? std::string("still running after 150 s")
                                  : DescribeWaitStatus(*run.status())) +
                   "); stderr tail: " +
                   run.Stderr().substr(run.Stderr().size() > 400 ? run.Stderr().size() - 400 : 0));
    return evidence;
  }
  // Its servers are its children; the candidate is the one serving readkv.
  std::optional<history::ProcessIdentity> candidate, baseline;
  for (const history::ProcessIdentity& p : Descendants(run.pid())) {
    std::ifstream in("/proc/" + std::to_string(p.pid) + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(" serve ") == std::string::npos) continue;
    (cmdline.find("--kv readkv") != std::string::npos ? candidate : baseline) = p;
  }
  if (!candidate || !baseline) {
    findings.Expect(false, "suite: could not find both servers among the children of `kvgate run`");
    return evidence;
  }
  // Into the candidate's load run: its first requests are under way after ~1 s at 1.5 req/s.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  KillIfAlive(*candidate);
  const std::optional<int> status = run.Wait(std::chrono::seconds(90));
  if (!status) {
    run.Kill();
    KillIfAlive(*baseline);
    findings.Expect(false,
                    "suite: `kvgate run` was still running 90 s after its candidate "
                    "server was killed");
    return evidence;
  }
  evidence["run_exit"] = DescribeWaitStatus(*status);
  findings.Expect(ExitCode(*status) == 3, "suite: `kvgate run` ended with " +
                                              DescribeWaitStatus(*status) +
                                              " after its candidate server died, expected exit 3");
  // Give the baseline's SIGTERM drain a moment; it must not outlive the run.
  bool baseline_stopped = false;
  for (int i = 0; i < 100 && !baseline_stopped; ++i) {
    baseline_stopped = history::CheckLiveness(*baseline) != history::Liveness::kAlive;
    if (!baseline_stopped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!baseline_stopped) KillIfAlive(*baseline);
  evidence["baseline_server_stopped_by_run"] = baseline_stopped;
  findings.Expect(baseline_stopped, "suite: the run left its baseline server running");

  RawSqlite raw(db);
  const std::string run_id = raw.One("SELECT max(id) FROM runs");
  const std::string where = " WHERE run_id = " + run_id;
  const std::string status_text = raw.One("SELECT status FROM runs WHERE id = " + run_id);
  const std::string reason = raw.One("SELECT status_reason FROM runs WHERE id = " + run_id);
  const std::vector<std::string> load_runs =
      raw.Column("SELECT label || ':' || pair_index || ':' || request_count FROM load_runs" +
                 where + " ORDER BY id");
  const std::string quality = raw.One("SELECT count(*) FROM quality_items" + where);
  const std::string cut_errors =
      raw.One("SELECT count(*) FROM load_requests r JOIN load_runs l ON l.id = r.load_run_id" +
              where + " AND l.label = 'candidate' AND r.error_cause <> ''");
  const std::string integrity = raw.One("PRAGMA integrity_check");
  evidence.update({{"status", status_text},
                   {"status_reason", reason},
                   {"load_runs", load_runs},
                   {"quality_items", quality},
                   {"candidate_errors", cut_errors},
                   {"integrity_check", integrity}});
  findings.Expect(status_text == "interrupted",
                  "suite: the run's status is '" + status_text + "', expected 'interrupted'");
  findings.Expect(reason.find("candidate") != std::string::npos,
                  "suite: the interrupted run's reason does not name the dead candidate server ('" +
                      reason + "')");
  // 1 passkey + 1 QA item per system.
  findings.Expect(quality == "4", "suite: " + quality + " quality items kept, expected 4");
  const std::string full = std::to_string(kRunRequests);
  findings.Expect(
      load_runs == std::vector<std::string>{"baseline:0:" + full, "candidate:0:" + full},
      "suite: load runs kept " + json(load_runs).dump() +
          ", expected the finished baseline run and the cut candidate run, each with "
          "all " +
          full + " records");
  findings.Expect(cut_errors != "0" && !cut_errors.empty(),
                  "suite: the cut candidate load run records no error");
  findings.Expect(integrity == "ok", "suite: PRAGMA integrity_check says '" + integrity + "'");
  return evidence;
}

// --- part 3: a torn prefix-cache object ----------------------------------------------------

// The cache objects (*.rkv) directly in `dir`, in name order; not what the server quarantined.
std::vector<fs::path> CacheObjects(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(dir, ignored)) {
    if (entry.is_regular_file() && entry.path().extension() == ".rkv") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

size_t QuarantinedFiles(const fs::path& dir) {
  size_t count = 0;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(dir / "quarantine", ignored)) {
    count += entry.is_regular_file() ? 1 : 0;
  }
  return count;
}

json TornCache(const ScenarioContext& context, Findings& findings) {
  json evidence;
  // Written against helper A's `kvgate serve --cache-dir DIR`; without it this part cannot run.
  CommandOutcome help = RunCommand({context.kvgate_binary, "serve", "--help"}, context.work_dir,
                                   "serve-help", std::chrono::seconds(30));
  if (help.out.find("--cache-dir") == std::string::npos) {
    findings.Expect(false,
                    "cache: `kvgate serve` has no --cache-dir option, so a torn cache "
                    "object cannot be staged");
    return evidence;
  }
  const fs::path cache = fs::path(context.work_dir) / "cache";
  const fs::path empty_cache = fs::path(context.work_dir) / "cache-fresh";
  fs::create_directories(cache);
  fs::create_directories(empty_cache);
  const std::vector<std::string> backend = {"--kv", "readkv",      "--store-bits",
                                            "8",    "--read-bits", "4"};
  auto with_cache = [&](const fs::path& dir) {
    std::vector<std::string> argv = ServeCommand(context, backend);
    argv.insert(argv.end(), {"--cache-dir", dir.string()});
    return argv;
  };
  const std::string prompt = PasskeyPrompt();
  const std::string log = (fs::path(context.work_dir) / "cache-server.log").string();
  const std::map<std::string, std::string> corrupt = {{"reason", "corrupt"}};
  const std::string rejections = kCacheRejectionsSeries;

  std::string first;
  pid_t writer_pid = 0;
  {
    suite::ServerProcess writer(with_cache(cache), kStartupTimeout, log);
    writer_pid = writer.pid();
    first = Complete(writer.url(), prompt, 8);
    writer.Stop();  // a clean stop: every object it meant to write is on disk
  }
  std::vector<fs::path> objects = CacheObjects(cache);
  evidence["objects_written"] = objects.size();
  if (objects.empty()) {
    findings.Expect(false, "cache: the server wrote no *.rkv object under --cache-dir for a " +
                               std::to_string(prompt.size()) + "-byte prompt");
    return evidence;
  }
  // Tear the largest object: keep its first half, as a crash in the middle of writing it would.
  const fs::path torn = *std::max_element(objects.begin(), objects.end(), [](auto& a, auto& b) {
    return fs::file_size(a) < fs::file_size(b);
  });
  const auto full_size = fs::file_size(torn);
  fs::resize_file(torn, full_size / 2);
  evidence["torn_object"] = {{"file", fs::relative(torn, cache).string()},
                             {"bytes", full_size},
                             {"kept_bytes", full_size / 2}};
  // What a writer killed before its rename leaves under the server's write protocol (temporary
  // ".<name>.tmp.<pid>.<n>", then rename): half a temporary of the dead writer. Evidence only —
  // the naming is the server's own business, not a contract.
  const fs::path leftover =
      cache / ("." + torn.filename().string() + ".tmp." + std::to_string(writer_pid) + ".0");
  fs::copy_file(torn, leftover);

  std::string after_tear, again;
  double corrupt_at_start = 0, corrupt_after = 0, corrupt_after_again = 0;
  {
    suite::ServerProcess reader(with_cache(cache), kStartupTimeout, log);
    corrupt_at_start = MetricValue(reader.url(), rejections, corrupt);
    after_tear = Complete(reader.url(), prompt, 8);
    corrupt_after = MetricValue(reader.url(), rejections, corrupt);
    again = Complete(reader.url(), prompt, 8);
    corrupt_after_again = MetricValue(reader.url(), rejections, corrupt);
    reader.Stop();
  }
  std::string fresh;
  {
    suite::ServerProcess clean(with_cache(empty_cache), kStartupTimeout, log);
    fresh = Complete(clean.url(), prompt, 8);
    clean.Stop();
  }
  evidence.update({{"corrupt_rejections_at_start", corrupt_at_start},
                   {"corrupt_rejections_after_request", corrupt_after},
                   {"corrupt_rejections_after_second_request", corrupt_after_again},
                   {"torn_file_still_present", fs::exists(torn)},
                   {"quarantined_files", QuarantinedFiles(cache)},
                   {"dead_writers_temporary_removed", !fs::exists(leftover)},
                   {"torn_file_bytes_now", fs::exists(torn) ? fs::file_size(torn) : 0},
                   {"output_matches_fresh_server", after_tear == fresh},
                   {"output_matches_before_tear", first == fresh}});
  findings.Expect(corrupt_after >= 1, "cache: after the torn object was offered, " + rejections +
                                          "{reason=\"corrupt\"} is " +
                                          std::to_string(corrupt_after) + ", expected >= 1");
  findings.Expect(after_tear == fresh, "cache: with the torn object the server answered '" +
                                           after_tear + "', a fresh server '" + fresh + "'");
  findings.Expect(again == fresh, "cache: the second answer after the tear '" + again +
                                      "' differs from a fresh server's '" + fresh + "'");
  findings.Expect(first == fresh, "cache: the server that wrote the cache answered '" + first +
                                      "', a fresh server '" + fresh + "'");
  return evidence;
}

ScenarioResult RunServerCrash(const ScenarioContext& context) {
  ScenarioResult result;
  result.name = "server_crash";
  Findings findings;
  auto say = [&context](const std::string& line) {
    if (context.progress) context.progress(line);
  };
  // Each part runs even when an earlier one failed: the evidence of all three is worth having.
  auto part = [&](const char* name, auto&& body) {
    say(std::string(name) + ": start");
    try {
      result.evidence[name] = body(context, findings);
    } catch (const std::exception& e) {
      findings.Expect(false, std::string(name) + ": " + e.what());
    }
    say(std::string(name) + ": done");
  };
  part("load", LoadCrash);
  part("suite", SuiteServerCrash);
  part("cache", TornCache);
  result.evidence["failures"] = findings.failures();
  result.passed = findings.ok();
  result.reason =
      result.passed
          ? "kill -9 mid-load: every request recorded, in-flight ones failed with a broken "
            "connection, restart serves the same output; kvgate run ends interrupted with its "
            "data; a torn cache object is rejected as corrupt and the answer equals a fresh "
            "server's"
          : findings.failures().front() +
                (findings.failures().size() > 1
                     ? " (+" + std::to_string(findings.failures().size() - 1) + " more)"
                     : "");
  return result;
}

}  // namespace

KVGATE_REGISTER_SCENARIO("server_crash",
                         "kill -9 the server mid-load and mid-run, and tear a cache object: "
                         "nothing lost, nothing hanging, nothing wrong served",
                         RunServerCrash);

}  // namespace kvgate::failure_tests
