// Lease fencing end to end (issue 11 item 3): two agents of a --nnodes=1:2 job
// and musterd, the "victim" agent in its own network namespace. Its link to
// musterd is cut with iptables DROP (no FIN, no RST: the stream stays open on
// both sides). The victim must stop its workers (lease fence) before the
// survivor's next round starts workers. Timestamps come from files the
// workers write (one clock: the same machine). Skips visibly where
// namespaces cannot be made (not root, no ip or iptables); NetnsPair deletes
// its namespaces even when the test fails.
#include <csignal>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/doctor/netns.h"
#include "tests/doctor/netns_fixture.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::NetnsPair;
using ::muster::testing::Subprocess;

constexpr int kRdzvPort = 29461;

// One line per event: "<what> <node> <round> <unix ns>".
constexpr char kWorker[] = R"sh(#!/bin/bash
trap 'echo "stop $NODE $MUSTER_ROUND $(date +%s%N)" >> "$EVENTS"; exit 0' TERM
echo "start $NODE $MUSTER_ROUND $(date +%s%N)" >> "$EVENTS"
while [ ! -e "$DONE" ]; do sleep 0.02; done
echo "done $NODE $MUSTER_ROUND $(date +%s%N)" >> "$EVENTS"
)sh";

struct Event {
  std::string what, node;
  int round = 0;
  int64_t ns = 0;
};

std::vector<Event> ReadEvents(const std::string& path) {
  std::vector<Event> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    Event e;
    if (f.size() != 4 || !absl::SimpleAtoi(f[2], &e.round) ||
        !absl::SimpleAtoi(f[3], &e.ns))
      continue;
    e.what = f[0];
    e.node = f[1];
    out.push_back(e);
  }
  return out;
}

// The time of the first event matching, or 0.
int64_t FindEvent(const std::vector<Event>& events, const std::string& what,
                  const std::string& node, int round) {
  for (const Event& e : events) {
    if (e.what == what && e.node == node && (round < 0 || e.round == round))
      return e.ns;
  }
  return 0;
}

// A fresh pair of namespaces for each test, or a visible skip.
using PartitionE2eTest = testing::NetnsFixture;

TEST_F(PartitionE2eTest,
       ACutOffNodeStopsItsWorkersBeforeTheSurvivorsNextRound) {
  const std::string dir = testing::MakeTempDir("partition");
  const std::string worker = dir + "/worker.sh";
  { std::ofstream(worker) << kWorker; }
  ASSERT_EQ(testing::RunCommand({"chmod", "+x", worker}), 0);
  const std::string events = dir + "/events";
  const std::string endpoint = absl::StrCat(NetnsPair::kAddrA, ":", kRdzvPort);

  Subprocess musterd(
      pair_->In(pair_->a(), {BinPath("musterd"), "--listen=" + endpoint}));
  auto agent = [&](const std::string& ns, const std::string& node,
                   const std::string& addr) {
    std::map<std::string, std::string> env = testing::EnvWithoutLauncher();
    env["NODE"] = node;
    env["EVENTS"] = events;
    env["DONE"] = dir + "/done";
    return std::make_unique<Subprocess>(
        pair_->In(ns, {BinPath("muster"), "--nnodes=1:2", "--nproc-per-node=1",
                       "--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint,
                       "--rdzv-id=partition", "--local-addr=" + addr,
                       // A 2 s lease (settable down to 1 s); a short
                       // reconnect window so the cut-off agent gives up soon.
                       "--rdzv-conf=lease_timeout=2,reconnect_timeout=3",
                       "--shutdown-timeout=5", "--no-python", worker}),
        env);
  };
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        return testing::RunCommand(
                   pair_->In(pair_->a(),
                             {"bash", "-c",
                              absl::StrCat("exec 3<>/dev/tcp/",
                                           NetnsPair::kAddrA, "/", kRdzvPort)}),
                   nullptr, absl::Seconds(5)) == 0;
      },
      absl::Seconds(30), absl::Milliseconds(100)))
      << musterd.Output();
  auto survivor = agent(pair_->a(), "survivor", NetnsPair::kAddrA);
  auto victim = agent(pair_->b(), "victim", NetnsPair::kAddrB);

  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        auto e = ReadEvents(events);
        return FindEvent(e, "start", "survivor", 1) != 0 &&
               FindEvent(e, "start", "victim", 1) != 0;
      },
      absl::Seconds(60)))
      << "round 1 did not start on both nodes\n--- survivor\n"
      << survivor->Output() << "\n--- victim\n"
      << victim->Output() << "\n--- musterd\n"
      << musterd.Output();
  absl::SleepFor(absl::Seconds(1));  // a few renewals

  // The cut: the victim's packets to and from musterd's host are dropped.
  for (const char* chain : {"OUTPUT", "INPUT"}) {
    ASSERT_TRUE(
        pair_
            ->ExecIn(pair_->b(), {"iptables", "-A", chain, "-p", "tcp",
                                  std::string(chain) == "OUTPUT" ? "-d" : "-s",
                                  NetnsPair::kAddrA, "-j", "DROP"})
            .ok());
  }
  const int64_t cut_ns = absl::ToUnixNanos(absl::Now());

  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        auto e = ReadEvents(events);
        return FindEvent(e, "start", "survivor", 2) != 0 &&
               FindEvent(e, "stop", "victim", 1) != 0;
      },
      absl::Seconds(60)))
      << "--- survivor\n"
      << survivor->Output() << "\n--- victim\n"
      << victim->Output() << "\n--- musterd\n"
      << musterd.Output();
  const auto e = ReadEvents(events);
  const int64_t victim_stop = FindEvent(e, "stop", "victim", 1);
  const int64_t survivor_round2 = FindEvent(e, "start", "survivor", 2);
  std::cout << "after the cut: the victim's worker stopped in "
            << (victim_stop - cut_ns) / 1000000
            << " ms, the survivor's round 2 started in "
            << (survivor_round2 - cut_ns) / 1000000 << " ms\n";
  EXPECT_LT(victim_stop, survivor_round2)
      << "two rounds ran at once: the cut-off node's worker stopped "
      << (victim_stop - survivor_round2) / 1000000
      << " ms after the survivor's next round started";
  // Generous deadlines for a loaded machine: the lease is 2 s.
  EXPECT_LT(victim_stop - cut_ns, absl::ToInt64Nanoseconds(absl::Seconds(20)));
  EXPECT_LT(survivor_round2 - cut_ns,
            absl::ToInt64Nanoseconds(absl::Seconds(30)));
  EXPECT_EQ(FindEvent(e, "start", "victim", 2), 0)
      << "the cut-off node started workers again";
  EXPECT_TRUE(victim->WaitForOutput("lease fence", absl::Seconds(5)))
      << victim->Output();

  // The survivor's job ends well; the victim gives up reconnecting.
  { std::ofstream(dir + "/done") << "done"; }
  EXPECT_EQ(survivor->WaitOrKill(absl::Seconds(60)), 0) << survivor->Output();
  EXPECT_EQ(victim->WaitOrKill(absl::Seconds(60)), 3) << victim->Output();
  musterd.Signal(SIGTERM);
  musterd.WaitOrKill(absl::Seconds(10));
}

}  // namespace
}  // namespace muster
