// A gtest fixture with a NetnsPair: skipped with a visible message where this
// process cannot make namespaces (not root, no ip or iptables), else a fresh
// pair for each test, removed after it (derived members, such as listeners
// inside the namespaces, go first).
#ifndef MUSTER_TESTS_DOCTOR_NETNS_FIXTURE_H_
#define MUSTER_TESTS_DOCTOR_NETNS_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/doctor/netns.h"

namespace muster::testing {

class NetnsFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = NetnsUnavailable();
    if (!why.empty()) {
      GTEST_SKIP() << "SKIPPED: needs root and network namespaces with "
                      "iptables: "
                   << why;
    }
    auto pair = NetnsPair::Create();
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = std::move(*pair);
  }

  // Runs argv in namespace b() (a()); a test failure when it fails.
  void InB(std::vector<std::string> argv) { In(pair_->b(), std::move(argv)); }
  void InA(std::vector<std::string> argv) { In(pair_->a(), std::move(argv)); }

  std::unique_ptr<NetnsPair> pair_;

 private:
  void In(const std::string& ns, std::vector<std::string> argv) {
    absl::Status s = pair_->ExecIn(ns, std::move(argv));
    ASSERT_TRUE(s.ok()) << s;
  }
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_DOCTOR_NETNS_FIXTURE_H_
