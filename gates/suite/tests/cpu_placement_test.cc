#include "kvgate/suite/cpu_placement.h"

#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

namespace kvgate::suite {
namespace {

using Mode = policy::PlacementSpec::Mode;

CpuList Range(int first, int last) {
  CpuList cpus;
  for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  return cpus;
}

policy::PlacementSpec Split(int suite_cpus = 0) { return {Mode::kSplit, suite_cpus}; }

// What the kernel says of the calling thread, as /proc prints it.
std::string ProcCpusAllowed() {
  std::ifstream status("/proc/thread-self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0)
      return line.substr(line.find_first_not_of(" \t", 18));
  }
  return "?";
}

TEST(CpuPlacementTest, FormatsRunsAsRanges) {
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList({0}), "0");
  EXPECT_EQ(FormatCpuList({1, 2, 3}), "1-3");
  EXPECT_EQ(FormatCpuList({0, 2, 3, 4, 5}), "0,2-5");
  EXPECT_EQ(FormatCpuList({0, 1, 3, 7, 8}), "0-1,3,7-8");
}

TEST(CpuPlacementTest, AllowedCpusAreWhatTheKernelSays) {
  const CpuList cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_EQ(FormatCpuList(cpus), ProcCpusAllowed());
}

TEST(CpuPlacementTest, OneCpuIsSharedByEverything) {
  const CpuPlacement plan = PlanPlacement(Split(), {3});
  EXPECT_TRUE(plan.pinned);
  EXPECT_EQ(plan.suite, CpuList{3});
  EXPECT_EQ(plan.servers, CpuList{3});
  EXPECT_NE(plan.Describe().find("one CPU (3): the suite, its load generator and the local "
                                 "servers share it"),
            std::string::npos)
      << plan.Describe();
}

TEST(CpuPlacementTest, TwoCpusGiveTheSuiteOneAndTheServersTheOther) {
  const CpuPlacement plan = PlanPlacement(Split(), {0, 1});
  EXPECT_TRUE(plan.pinned);
  EXPECT_EQ(plan.suite, CpuList{0});
  EXPECT_EQ(plan.servers, CpuList{1});
  EXPECT_EQ(plan.Describe(),
            "placement: the suite and its load generator on CPUs 0, local servers on CPUs 1 "
            "(of 0-1)");
}

TEST(CpuPlacementTest, TheSuiteGetsAQuarterRoundedDownButAtLeastOne) {
  const CpuPlacement three = PlanPlacement(Split(), {0, 1, 2});
  EXPECT_EQ(three.suite, CpuList{0});
  EXPECT_EQ(three.servers, (CpuList{1, 2}));
  const CpuPlacement sixteen = PlanPlacement(Split(), Range(0, 15));
  EXPECT_EQ(sixteen.suite, Range(0, 3));
  EXPECT_EQ(sixteen.servers, Range(4, 15));
  // The CPUs this process may use, in order, whatever their numbers (a taskset, a cgroup).
  const CpuPlacement sparse = PlanPlacement(Split(), {2, 5, 7, 9, 11});
  EXPECT_EQ(sparse.suite, CpuList{2});
  EXPECT_EQ(sparse.servers, (CpuList{5, 7, 9, 11}));
  EXPECT_EQ(sparse.Describe(),
            "placement: the suite and its load generator on CPUs 2, local servers on CPUs "
            "5,7,9,11 (of 2,5,7,9,11)");
}

TEST(CpuPlacementTest, AnExplicitSuiteShareIsTakenAsGiven) {
  const CpuPlacement plan = PlanPlacement(Split(6), Range(0, 15));
  EXPECT_EQ(plan.suite, Range(0, 5));
  EXPECT_EQ(plan.servers, Range(6, 15));
  const CpuPlacement last = PlanPlacement(Split(3), Range(0, 3));
  EXPECT_EQ(last.servers, CpuList{3});
}

TEST(CpuPlacementTest, ASuiteShareLeavingNoServerCpuIsRefusedNamingKeyValueAndCpus) {
  try {
    PlanPlacement(Split(4), {0, 1});
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "placement.suite_cpus = 4 leaves no CPU for the servers: this process may run on "
              "2 CPUs (0-1)");
  }
  try {
    PlanPlacement(Split(1), {5});  // taken as given, even where one CPU would be shared
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "placement.suite_cpus = 1 leaves no CPU for the servers: this process may run on "
              "1 CPU (5)");
  }
  EXPECT_THROW(PlanPlacement(Split(2), {0, 1}), std::invalid_argument);
}

TEST(CpuPlacementTest, SharedPinsNothing) {
  const CpuPlacement plan = PlanPlacement({Mode::kShared, 0}, {0, 1});
  EXPECT_FALSE(plan.pinned);
  EXPECT_EQ(plan.suite, (CpuList{0, 1}));
  EXPECT_EQ(plan.servers, (CpuList{0, 1}));
  EXPECT_NE(plan.Describe().find("shared (placement.mode = \"shared\")"), std::string::npos);
}

TEST(CpuPlacementTest, AThreadRunsOnTheGivenCpusAndItsThreadsInheritThemUntilRestored) {
  const CpuList before = AllowedCpus();
  if (before.size() < 2) GTEST_SKIP() << "needs 2 CPUs; this process may run on " << before.size();
  {
    ScopedThreadAffinity pinned({before.back()});
    EXPECT_EQ(AllowedCpus(), CpuList{before.back()});
    CpuList in_child_thread;
    std::thread([&] { in_child_thread = AllowedCpus(); }).join();
    EXPECT_EQ(in_child_thread, CpuList{before.back()});
  }
  EXPECT_EQ(AllowedCpus(), before);
}

TEST(CpuPlacementTest, CpusTheKernelRefusesThrowAndChangeNothing) {
  const CpuList before = AllowedCpus();
  EXPECT_THROW(ScopedThreadAffinity({100000}), std::system_error);  // no such CPU
  EXPECT_EQ(AllowedCpus(), before);
}

}  // namespace
}  // namespace kvgate::suite
