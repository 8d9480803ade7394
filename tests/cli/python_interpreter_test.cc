// The workers' Python: what one probe of the interpreter tells (its path,
// whether it finds `muster`), and the PYTHONPATH that makes `import
// muster.torch` work in every worker (cli/python_interpreter.cc).
#include "cli/python_interpreter.h"

#include <filesystem>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/files.h"
#include "tests/testing/subprocess.h"

namespace muster::cli {
namespace {

using ::muster::testing::MakeTempDir;

// A launcher at DIR/bin/muster with the package at
// DIR/lib/muster/python/muster (the build tree's layout and an install's).
std::string FakeInstall(bool with_package) {
  const std::string dir = MakeTempDir("python_interpreter");
  std::filesystem::create_directories(dir + "/bin");
  testing::WriteFile(dir + "/bin/muster", "", 0755);
  if (with_package) {
    std::filesystem::create_directories(dir + "/lib/muster/python/muster");
    testing::WriteFile(dir + "/lib/muster/python/muster/torch.py", "", 0644);
  }
  return dir;
}

TEST(MusterPythonDirTest, FindsThePackageNextToTheLauncher) {
  const std::string dir = FakeInstall(true);
  EXPECT_EQ(
      MusterPythonDir(dir + "/bin/muster"),
      std::filesystem::weakly_canonical(dir).string() + "/lib/muster/python");
  EXPECT_EQ(MusterPythonDir(FakeInstall(false) + "/bin/muster"), "");
  EXPECT_EQ(MusterPythonDir(""), "");
}

TEST(WorkerPythonPathTest, AddsThePackageWhenPythonDoesNotFindIt) {
  const std::string d = "/opt/muster/lib/muster/python";
  EXPECT_EQ(WorkerPythonPath(std::nullopt, d, true, false), d);
  EXPECT_EQ(WorkerPythonPath("", d, true, false), d);
  // After the user's entries, which win.
  EXPECT_EQ(WorkerPythonPath("/mine:/other", d, true, false),
            "/mine:/other:" + d);
  // Found by the interpreter (installed, or on the user's PYTHONPATH): as is.
  EXPECT_EQ(WorkerPythonPath("/mine", d, true, true), std::nullopt);
  // Listed already, or no package to add.
  EXPECT_EQ(WorkerPythonPath("/a:" + d, d, true, false), std::nullopt);
  EXPECT_EQ(WorkerPythonPath("/a", "", true, false), std::nullopt);
}

TEST(WorkerPythonPathTest, ProgramsNotRunThroughPythonGetIt) {
  // --no-python python3 train.py: no interpreter to ask, and the directory
  // holds only muster, so adding it cannot shadow anything.
  EXPECT_EQ(
      WorkerPythonPath(std::nullopt, "/usr/lib/muster/python", false, false),
      "/usr/lib/muster/python");
  EXPECT_EQ(
      WorkerPythonPath(std::nullopt, "/usr/lib/muster/python", false, true),
      "/usr/lib/muster/python");
}

TEST(ResolvePythonTest, TellsWhetherThePackageIsFound) {
  if (!std::filesystem::exists("/usr/bin/python3")) {
    GTEST_SKIP() << "no /usr/bin/python3";
  }
  const std::string dir = FakeInstall(true);
  const std::string pkg = dir + "/lib/muster/python";
  testing::WriteFile(pkg + "/muster/__init__.py", "", 0644);
  absl::StatusOr<PythonFacts> with = ResolvePython(
      "/usr/bin/python3", {{"PYTHONPATH", pkg}}, absl::Seconds(60));
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_TRUE(with->finds_muster);
  EXPECT_TRUE(std::filesystem::path(with->executable).is_absolute());
  absl::StatusOr<PythonFacts> without = ResolvePython(
      "/usr/bin/python3", {{"PYTHONPATH", dir}}, absl::Seconds(60));
  ASSERT_TRUE(without.ok()) << without.status();
  // (Unless muster is installed system-wide on this machine: the .deb's
  // muster.pth, or a package of old.)
  if (!std::filesystem::exists("/usr/lib/python3/dist-packages/muster.pth") &&
      !std::filesystem::exists("/usr/lib/python3/dist-packages/muster")) {
    EXPECT_FALSE(without->finds_muster);
  }
}

}  // namespace
}  // namespace muster::cli
