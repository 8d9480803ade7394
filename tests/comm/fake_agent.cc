#include "tests/comm/fake_agent.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "comm/src/control_channel.h"
#include "gtest/gtest.h"
#include "muster/common/control_round.h"
#include "muster/platform/files.h"
#include "muster/store/grpc_store.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/subprocess.h"

namespace muster::comm_testing {

FakeAgent::FakeAgent()
    : server_(testing::StartLoopbackServer()),
      root_(testing::MakeTempDir("comm_recover")) {}

std::string FakeAgent::endpoint() const {
  return absl::StrCat("127.0.0.1:", server_->port());
}

std::string FakeAgent::Dir(int w) {
  const std::string dir = absl::StrCat(root_, "/", w, "/control");
  std::filesystem::create_directories(dir);
  return dir;
}

std::shared_ptr<store::Store> FakeAgent::Store(const std::string& prefix) {
  store::GrpcStoreOptions options;
  options.endpoint = endpoint();
  options.prefix = prefix;
  absl::StatusOr<std::unique_ptr<store::Store>> store =
      store::NewGrpcStore(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::shared_ptr<store::Store>(std::move(*store))
                    : nullptr;
}

void FakeAgent::Write(int w, bool running, int64_t round, int rank, int world,
                      const std::string& reason) {
  comm::internal::RoundInfo info;
  info.seq = ++seq_[w];
  info.running = running;
  info.round = round;
  info.rank = rank;
  info.world_size = world;
  info.local_rank = rank;
  info.local_world_size = world;
  info.store_endpoint = endpoint();
  info.store_prefix = absl::StrCat("round", round);
  info.store_token = "s3cret-token";
  info.reason = reason;
  EXPECT_TRUE(platform::WriteFileAtomically(
                  Dir(w) + "/round", common::FormatControlRound(info), 0600)
                  .ok());
}

comm::CommOptions FakeAgent::Options(int w, const std::string& host) {
  comm::CommOptions options;
  options.timeout = absl::Seconds(30);
  options.control_dir = Dir(w);
  options.host_id = host;
  options.hostname = "127.0.0.1";
  return options;
}

}  // namespace muster::comm_testing
