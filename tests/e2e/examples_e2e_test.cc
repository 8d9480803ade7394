// The examples under the launcher: the C++ data-parallel SGD on libmuster_comm,
// and the PyTorch DDP script, unchanged, on the gloo backend.
#include <filesystem>
#include <optional>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::SourceDir;
using ::muster::testing::Subprocess;
using ::testing::HasSubstr;

// The distinct values of a "checksum <hex>" field across the lines of the
// output.
std::set<std::string> Checksums(const std::string& output) {
  static const std::regex kChecksum(
      R"((?:checksum|sha256) ((?:0x)?[0-9a-fA-F]+))");
  std::set<std::string> out;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::string s(line);
    std::smatch m;
    if (std::regex_search(s, m, kChecksum)) out.insert(m[1]);
  }
  return out;
}

TEST(ExamplesE2eTest, CppTrainerAgreesOnParametersAcrossFourRanks) {
  // --prefix-output: each rank's lines are told apart by "[rank<N>]:".
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=4",
                "--prefix-output", BinPath("train")});
  ASSERT_EQ(p.WaitOrKill(absl::Seconds(120)), 0) << p.Output();
  const std::string out = p.Output();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(out, HasSubstr("[rank" + std::to_string(rank) + "]:rank " +
                               std::to_string(rank) + "/4"))
        << out;
  }
  EXPECT_EQ(Checksums(out).size(), 1u) << out;
  EXPECT_THAT(out, HasSubstr("all 4 ranks agree"));
}

TEST(ExamplesE2eTest, PytorchDdpScriptRunsUnchanged) {
  if (!std::filesystem::exists("/usr/bin/python3"))
    GTEST_SKIP() << "no /usr/bin/python3";
  Subprocess probe({"/usr/bin/python3", "-c", "import torch.distributed"});
  if (probe.WaitOrKill(absl::Seconds(60)) != 0) {
    GTEST_SKIP() << "python3-torch is not installed: " << probe.Output();
  }
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=2",
                "--prefix_output", SourceDir() + "/examples/ddp_train.py"},
               {{"PYTHON_EXEC", "/usr/bin/python3"}});
  const std::optional<int> rc = p.Wait(absl::Seconds(120));
  if (!rc.has_value()) {
    // A hang: say where every process of the job is before killing it (the
    // python workers' own stacks, through gdb, when it is installed).
    Subprocess where(
        {"/bin/sh", "-c",
         absl::StrCat("ps -e -o pid,ppid,stat,wchan:30,args | grep -E "
                      "'muster|python|PID' | grep -v grep; for t in $(pgrep -f "
                      "ddp_train.py); do [ $t = $$ ] && continue; "
                      "command -v gdb >/dev/null && timeout 20 gdb -p $t "
                      "-batch -ex 'thread apply all bt 8' 2>/dev/null "
                      "| grep -E '^(Thread|#)'; done")});
    where.WaitOrKill(absl::Seconds(60));
    p.WaitOrKill(absl::ZeroDuration());
    FAIL() << "the job did not end within 120 s; its processes:\n"
           << where.Output() << "\noutput:\n"
           << p.Output();
  }
  ASSERT_EQ(*rc, 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_THAT(out, HasSubstr("[rank0]:"));
  EXPECT_THAT(out, HasSubstr("[rank1]:"));
  EXPECT_EQ(Checksums(out).size(), 1u) << out;
  EXPECT_THAT(out, HasSubstr("all 2 ranks agree"));
}

}  // namespace
}  // namespace muster
