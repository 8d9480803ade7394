// musterd --state-dir (rendezvous/src/server/state_journal.h): a real server
// writes its Store keys and jobs to DIR/state.json, a second server on the same
// directory has the keys back; restored keys no job comes back for are
// dropped; bad directories and files are refused with the path named, and
// nothing but a regular file is ever written.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/state_file.h"
#include "muster/rendezvous/server.h"
#include "tests/testing/subprocess.h"

namespace muster::rendezvous {
namespace {

using ::testing::HasSubstr;

ServerOptions Options(const std::string& dir) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.state_dir = dir;
  o.coordinator.adoption_grace = absl::Milliseconds(300);
  return o;
}

TEST(StateJournalTest, StoreKeysSurviveARestartAndUnclaimedOnesAreDropped) {
  const std::string dir = testing::MakeTempDir("state") + "/state";
  {
    auto server = RendezvousServer::Start(Options(dir));
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_TRUE(
        (*server)->store().Set("job/2", "rank0", std::string("a\0b", 3)).ok());
    ASSERT_TRUE(testing::WaitUntil(
        [&] { return std::filesystem::exists(dir + "/state.json"); },
        absl::Seconds(10)));
    (*server)->Shutdown();
  }
  struct stat st;
  ASSERT_EQ(stat((dir + "/state.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/.state.json.tmp"));

  auto again = RendezvousServer::Start(Options(dir));
  ASSERT_TRUE(again.ok()) << again.status();
  auto value = (*again)->store().Get("job/2", "rank0");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("a\0b", 3));
  // No agent claims job "job" within twice the grace: its keys go.
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return !(*again)->store().Get("job/2", "rank0").ok(); },
      absl::Seconds(10)));
}

TEST(StateJournalTest, BadDirectoriesAndFilesAreRefusedNamingThePath) {
  const std::string base = testing::MakeTempDir("state-bad");
  { std::ofstream(base + "/file") << "x"; }
  auto s = RendezvousServer::Start(Options(base + "/file"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("not a directory"));

  // A FIFO where the state file goes: refused, and left a FIFO.
  std::filesystem::create_directory(base + "/fifo");
  ASSERT_EQ(mkfifo((base + "/fifo/state.json").c_str(), 0600), 0);
  s = RendezvousServer::Start(Options(base + "/fifo"));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("not a regular file"));
  EXPECT_FALSE(
      platform::WriteStateFile(base + "/fifo", "state.json", "{}").ok());
  EXPECT_TRUE(std::filesystem::is_fifo(base + "/fifo/state.json"));

  // Not musterd's JSON.
  std::filesystem::create_directory(base + "/junk");
  { std::ofstream(base + "/junk/state.json") << "not json"; }
  s = RendezvousServer::Start(Options(base + "/junk"));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("is not musterd's state"));

  // A symbolic link as the directory.
  std::filesystem::create_directory_symlink(base + "/junk", base + "/link");
  EXPECT_FALSE(platform::PrepareStateDir(base + "/link").ok());
}

}  // namespace
}  // namespace muster::rendezvous
