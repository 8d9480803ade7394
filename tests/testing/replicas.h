// Two musterd replicas over a 3-member etcd cluster on loopback, as a gtest
// fixture: the setting of the replica end-to-end tests. Header only (it is
// a ::testing::Test); the processes go with the fixture.
#ifndef MUSTER_TESTS_TESTING_REPLICAS_H_
#define MUSTER_TESTS_TESTING_REPLICAS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/etcd.h"
#include "tests/testing/http.h"
#include "tests/testing/musterd.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/wait.h"

namespace muster::testing {

class TwoReplicasOnEtcd : public ::testing::Test {
 protected:
  // Starts etcd and both replicas, and waits until one leads.
  void SetUp() override {
    ASSERT_FALSE(EtcdCluster::Binary().empty())
        << "no etcd binary: apt-get install etcd-server "
           "(scripts/install-deps.sh)";
    etcd_ = std::make_unique<EtcdCluster>(3);
    ASSERT_TRUE(etcd_->ok()) << etcd_->Logs();
    for (int i = 0; i < 2; ++i) {
      http_[i] = FreePort();
      replicas_[i] = std::make_unique<MusterdProcess>(FreePort(), Flags(i));
      ASSERT_TRUE(replicas_[i]->ready()) << replicas_[i]->proc().Output();
    }
    ASSERT_TRUE(WaitUntil([&] { return Leading() >= 0; }, absl::Seconds(20)))
        << Logs();
  }

  // Replica i's flags after --listen: etcd, its HTTP port, info logs.
  std::vector<std::string> Flags(int i) const {
    return {"--etcd-endpoints=" + etcd_->Endpoints(),
            absl::StrCat("--http-listen=127.0.0.1:", http_[i]),
            "--log-level=info"};
  }

  // The replica whose /readyz answers 200, or -1.
  int Leading() {
    for (int i = 0; i < 2; ++i) {
      if (replicas_[i] == nullptr || !replicas_[i]->proc().Running()) continue;
      if (absl::StrContains(HttpGet(http_[i], "/readyz"), "200 OK")) return i;
    }
    return -1;
  }

  // Both replicas' output (of their current runs), for failure messages.
  std::string Logs() {
    std::string out;
    for (int i = 0; i < 2; ++i) {
      if (replicas_[i] != nullptr) {
        absl::StrAppend(&out, "--- musterd ", i, " (", replicas_[i]->endpoint(),
                        ") ---\n", replicas_[i]->proc().Output());
      }
    }
    return out;
  }

  std::unique_ptr<EtcdCluster> etcd_;
  std::unique_ptr<MusterdProcess> replicas_[2];
  int http_[2] = {0, 0};
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_REPLICAS_H_
