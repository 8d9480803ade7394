// The tree's two structural rules (issue 13), so that they cannot regress:
// 1. Only code in a posix/, windows/ or platform/ folder includes an operating
//    system header (tests, bench and examples aside): everything else reaches
//    the OS through the platform layer (platform/include/muster/platform/).
// 2. No source file in cli/, agent/, doctor/, common/, platform/ or rendezvous/
//    is longer than 800 lines.
// A failure names the file, the line and the rule. Reads the source tree at
// $MUSTER_SOURCE_DIR (set by muster_test).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace muster {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxLines = 800;

// Headers of the operating system (POSIX, Linux, Windows); the C and C++
// standard headers (<csignal>, <cerrno>, <thread>) are not among them.
// clang-format off
const char* const kOsHeaders =
    R"(unistd\.h|sys/[^>]+|signal\.h|netinet/[^>]+|arpa/[^>]+|ifaddrs\.h|)"
    R"(fcntl\.h|poll\.h|dirent\.h|pthread\.h|netdb\.h|sched\.h|spawn\.h|)"
    R"(termios\.h|syslog\.h|linux/[^>]+|net/[^>]+|dlfcn\.h|pwd\.h|grp\.h|)"
    R"(semaphore\.h|systemd/[^>]+|windows\.h|winsock2\.h|ws2tcpip\.h|)"
    R"(iphlpapi\.h|winsvc\.h|io\.h|process\.h)";
// clang-format on

std::string SourceDir() {
  const char* dir = std::getenv("MUSTER_SOURCE_DIR");
  return dir == nullptr ? "" : dir;
}

bool IsSource(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".cc" || ext == ".h" || ext == ".c" || ext == ".cpp" ||
         ext == ".hpp";
}

// The source files below the tree's top-level folder `top` (all of them when
// empty), as paths relative to the tree; build output, hidden and vendored
// folders are skipped.
std::vector<std::string> SourceFiles(const std::string& top = "") {
  std::vector<std::string> out;
  const fs::path root = SourceDir();
  const fs::path start = top.empty() ? root : root / top;
  std::error_code ec;
  if (!fs::is_directory(start, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(start, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_directory(ec)) {
      if (name.rfind("build", 0) == 0 || name.rfind('.', 0) == 0 ||
          name == "third_party" || name == "vendor") {
        it.disable_recursion_pending();
      }
      continue;
    }
    if (it->is_regular_file(ec) && IsSource(it->path())) {
      out.push_back(fs::relative(it->path(), root).generic_string());
    }
  }
  return out;
}

// Whether `rel` is exempt from rule 1: in tests/, bench/ or examples/ at the
// top, or in a posix/, windows/ or platform/ folder at any depth.
bool MayIncludeOsHeaders(const std::string& rel) {
  const fs::path p(rel);
  bool first = true;
  for (const fs::path& part : p.parent_path()) {
    const std::string s = part.string();
    if (first && (s == "tests" || s == "bench" || s == "examples")) return true;
    if (s == "posix" || s == "windows" || s == "platform") return true;
    first = false;
  }
  return false;
}

TEST(LayoutTest, FindsTheSourceTree) {
  ASSERT_FALSE(SourceDir().empty()) << "MUSTER_SOURCE_DIR is not set";
  // Guards against a rule that passes because it read nothing.
  EXPECT_GT(SourceFiles("agent").size(), 5u) << SourceDir();
  EXPECT_TRUE(MayIncludeOsHeaders("platform/posix/env.cc"));
  EXPECT_TRUE(MayIncludeOsHeaders("comm/gloo/posix/pair.cc"));
  EXPECT_TRUE(MayIncludeOsHeaders("tests/agent/x_test.cc"));
  EXPECT_FALSE(MayIncludeOsHeaders("agent/src/elastic_agent.cc"));
  EXPECT_FALSE(MayIncludeOsHeaders("cli/tests/x.cc"));
}

TEST(LayoutTest, OsHeadersOnlyInPosixWindowsOrPlatformFolders) {
  const std::regex include(
      absl::StrCat(R"(^\s*#\s*include\s*<()", kOsHeaders, R"()>)"));
  std::vector<std::string> offenders;
  for (const std::string& rel : SourceFiles()) {
    if (MayIncludeOsHeaders(rel)) continue;
    std::ifstream in(fs::path(SourceDir()) / rel);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (std::regex_search(line, m, include)) {
        offenders.push_back(
            absl::StrCat(rel, ":", n, ": includes <", m[1].str(), ">"));
      }
    }
  }
  EXPECT_TRUE(offenders.empty())
      << "rule: only files in a posix/, windows/ or platform/ folder (tests, "
         "bench and examples aside) include an operating system header; move "
         "the OS call behind platform/include/muster/platform/:\n  "
      << absl::StrJoin(offenders, "\n  ");
}

TEST(LayoutTest, NoSourceFileOver800LinesInTheCoreModules) {
  std::vector<std::string> offenders;
  for (const char* module :
       {"cli", "agent", "doctor", "common", "platform", "rendezvous"}) {
    const std::vector<std::string> files = SourceFiles(module);
    EXPECT_FALSE(files.empty()) << module << "/ has no source files";
    for (const std::string& rel : files) {
      std::ifstream in(fs::path(SourceDir()) / rel);
      std::string line;
      int lines = 0;
      while (std::getline(in, line)) ++lines;
      if (lines > kMaxLines) {
        offenders.push_back(absl::StrCat(rel, ": ", lines, " lines"));
      }
    }
  }
  EXPECT_TRUE(offenders.empty())
      << "rule: no source file in cli/, agent/, doctor/, common/, platform/ or "
         "rendezvous/ is longer than "
      << kMaxLines << " lines; split it by concern:\n  "
      << absl::StrJoin(offenders, "\n  ");
}

}  // namespace
}  // namespace muster
