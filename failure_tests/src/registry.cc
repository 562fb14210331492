#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvgate/failure_tests/scenario.h"

namespace kvgate::failure_tests {
namespace {

// A function-local static, so registrations from other translation units' static initialisers
// never run before the vector exists (the static-initialisation-order problem).
std::vector<ScenarioInfo>& Registry() {
  static std::vector<ScenarioInfo> registry;
  return registry;
}

}  // namespace

bool RegisterScenario(ScenarioInfo info) {
  if (info.name.empty() || info.run == nullptr) {
    throw std::invalid_argument("RegisterScenario: a scenario needs a name and a function");
  }
  auto& registry = Registry();
  // Two scenarios under one name would make `--only NAME` ambiguous and the history rows clash;
  // failing at start-up points at the mistake at once.
  if (std::any_of(registry.begin(), registry.end(),
                  [&](const ScenarioInfo& other) { return other.name == info.name; })) {
    throw std::logic_error("RegisterScenario: scenario '" + std::string(info.name) +
                           "' is registered twice");
  }
  registry.push_back(info);
  return true;
}

std::vector<ScenarioInfo> Scenarios() {
  std::vector<ScenarioInfo> sorted = Registry();
  std::sort(sorted.begin(), sorted.end(),
            [](const ScenarioInfo& a, const ScenarioInfo& b) { return a.name < b.name; });
  return sorted;
}

}  // namespace kvgate::failure_tests
