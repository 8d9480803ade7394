#include "tests/testing/files.h"

#include <sys/stat.h>

#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace muster::testing {
namespace {

TEST(FilesTest, WritesWithTheModeAndReadsBack) {
  const std::string dir = MakeTempDir("files");
  const std::string path =
      WriteFile(dir + "/run.sh", "#!/bin/sh\nexit 3\n", 0755);
  EXPECT_EQ(path, dir + "/run.sh");
  EXPECT_EQ(ReadFile(path), "#!/bin/sh\nexit 3\n");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  Subprocess script({path});
  EXPECT_EQ(script.WaitOrKill(absl::Seconds(30)), 3);
  // Replaced, not appended; binary bytes survive.
  const std::string bytes("a\0b", 3);
  WriteFile(path, bytes, 0600);
  EXPECT_EQ(ReadFile(path), bytes);
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadFile(dir + "/absent"), "");
}

}  // namespace
}  // namespace muster::testing
