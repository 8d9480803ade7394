// The tree's structural rules (issues 13 and 29), so that they cannot regress:
// 1. One OS layer: only code in platform/ includes an operating system header
//    (tests, bench and examples aside), and only platform/ has posix/ or
//    windows/ folders (tests/ and scripts/ aside): everything else reaches the
//    OS through platform/include/muster/platform/.
// 2. Modules keep their privates: a module (or bench/, examples/) includes
//    another only through its public headers, "muster/<module>/..."
//    (<module>/include/muster/<module>/); "comm/src/..." from cli/ or bench/
//    fails. Tests may include the internals they test.
// 3. No source file in a product module is longer than 800 lines.
// 4. libmuster_comm's folders are a one-way graph (docs/architecture.md,
//    "libmuster_comm"): the core (comm/src/) includes no backend, no backend
//    includes the selection layer or another backend, the kernels
//    (comm/reduce/) include no backend, and every folder of comm/ has its
//    place in that graph.
// 5. The modules keep the dependency order (docs/architecture.md): store/
//    includes nothing of rendezvous/, agent/, comm/ or cli/, and comm/
//    includes nothing of rendezvous/ (its Store is store/'s).
// 6. rendezvous/src/'s folders keep their directions (docs/architecture.md,
//    "rendezvous/"): core/ (the state machine) includes no gRPC and no other
//    folder; client/ includes no service/, server/ or local/; service/ no
//    client/, server/ or local/; every folder has its place.
// A failure names the file, the line and the rule. Reads the source tree at
// $MUSTER_SOURCE_DIR (set by muster_test).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// The product modules: top-level folders whose private files (everything but
// include/) are theirs alone.
const char* const kModules[] = {"agent",  "cli",      "comm",  "common",
                                "doctor", "platform", "store", "rendezvous"};

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

// An #include "path" line, the path in group 1.
const char* const kQuotedInclude = R"re(^\s*#\s*include\s*"([^"]+)")re";

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

// The top-level folder of `rel` ("comm" for "comm/src/core.cc").
std::string TopFolder(const std::string& rel) {
  return rel.substr(0, rel.find('/'));
}

// Whether `rel` is exempt from rule 1: in platform/, tests/, bench/ or
// examples/ at the top.
bool MayIncludeOsHeaders(const std::string& rel) {
  const std::string top = TopFolder(rel);
  return top == "platform" || top == "tests" || top == "bench" ||
         top == "examples";
}

bool IsModule(const std::string& name) {
  for (const char* m : kModules) {
    if (name == m) return true;
  }
  return false;
}

// Rule 2 for one #include "path" in file `rel`: whether it reaches into
// another module's private files.
bool IncludesAnotherModulesPrivates(const std::string& rel,
                                    const std::string& path) {
  const std::string top = TopFolder(rel);
  if (top == "tests") return false;
  const std::string target = TopFolder(path);
  return path.find('/') != std::string::npos && IsModule(target) &&
         target != top;
}

// Rule 4: each private folder of comm/ and the folders of comm/ it may
// include ("comm/<folder>/..."); its own always.
struct FolderRule {
  const char* name;
  std::vector<std::string> may_include;
};
const FolderRule kCommFolders[] = {
    {"c_api", {}},                                         // public API only
    {"api", {"src", "select", "store"}},                   // Communicator
    {"select", {"src", "gloo", "direct", "shm", "nccl"}},  // picks backends
    {"store", {"src"}},           // init methods: store URL -> Store
    {"gloo", {"src", "reduce"}},  // backends ...
    {"direct", {"src", "reduce"}},
    {"shm", {"src", "reduce"}},
    {"nccl", {"src"}},
    {"reduce", {}},  // kernels
    {"src", {}},     // the core
};

// The folder of comm/ that `rel` is in ("gloo" for "comm/gloo/x.cc"), or ""
// outside comm/'s folders.
std::string CommFolderOf(const std::string& rel) {
  if (rel.rfind("comm/", 0) != 0) return "";
  const std::string rest = rel.substr(5);
  const size_t slash = rest.find('/');
  return slash == std::string::npos ? "" : rest.substr(0, slash);
}

// Rule 4 for one #include "path" in file `rel`.
bool BreaksCommsGraph(const std::string& rel, const std::string& path) {
  const std::string from = CommFolderOf(rel);
  const std::string to = CommFolderOf(path);
  if (from.empty() || to.empty() || to == "include" || from == to) {
    return false;
  }
  for (const FolderRule& f : kCommFolders) {
    if (from != f.name) continue;
    return std::find(f.may_include.begin(), f.may_include.end(), to) ==
           f.may_include.end();
  }
  return false;
}

// Rule 5 for one #include "path" in file `rel`: the modules below a module
// that `rel`'s module must not include (its public headers included).
bool BreaksModuleOrder(const std::string& rel, const std::string& path) {
  const std::string from = TopFolder(rel);
  const std::string to = path.rfind("muster/", 0) == 0
                             ? TopFolder(path.substr(7))
                             : TopFolder(path);
  if (from == "store") {
    return to == "rendezvous" || to == "agent" || to == "comm" || to == "cli";
  }
  if (from == "comm") return to == "rendezvous";
  return false;
}

// Rule 6: rendezvous/src/'s folders and what each may include of the others.
const FolderRule kRendezvousFolders[] = {
    {"core", {}},                      // the state machine, no gRPC
    {"service", {"core"}},             // gRPC services over the core
    {"client", {"core"}},              // the agent's and CLI's clients
    {"replica", {"core", "service"}},  // etcd, the election
    {"server", {"core", "service", "replica"}},  // musterd's server
    {"local", {"core", "client"}},  // the standalone server an agent embeds
};

// The folder of rendezvous/src/ that `path` is in ("core" for
// "rendezvous/src/core/x.h"); "" outside them.
std::string RendezvousFolderOf(const std::string& path) {
  constexpr char kPrefix[] = "rendezvous/src/";
  if (path.rfind(kPrefix, 0) != 0) return "";
  const std::string rest = path.substr(sizeof(kPrefix) - 1);
  const size_t slash = rest.find('/');
  return slash == std::string::npos ? "." : rest.substr(0, slash);
}

bool BreaksRendezvousLayers(const std::string& rel, const std::string& path) {
  const std::string from = RendezvousFolderOf(rel);
  if (from.empty()) return false;
  // The core speaks protobuf messages, never gRPC.
  if (from == "core" && (path.rfind("grpcpp/", 0) == 0 ||
                         path.find(".grpc.pb.h") != std::string::npos)) {
    return true;
  }
  const std::string to = RendezvousFolderOf(path);
  if (to.empty() || to == from) return false;
  for (const FolderRule& f : kRendezvousFolders) {
    if (from != f.name) continue;
    return std::find(f.may_include.begin(), f.may_include.end(), to) ==
           f.may_include.end();
  }
  return true;  // a file directly in rendezvous/src/, or an unknown folder
}

TEST(LayoutTest, FindsTheSourceTree) {
  ASSERT_FALSE(SourceDir().empty()) << "MUSTER_SOURCE_DIR is not set";
  // Guards against a rule that passes because it read nothing.
  EXPECT_GT(SourceFiles("agent").size(), 5u) << SourceDir();
  EXPECT_TRUE(MayIncludeOsHeaders("platform/posix/env.cc"));
  EXPECT_FALSE(MayIncludeOsHeaders("comm/gloo/posix/pair.cc"));
  EXPECT_TRUE(MayIncludeOsHeaders("tests/agent/x_test.cc"));
  EXPECT_FALSE(MayIncludeOsHeaders("agent/src/elastic_agent.cc"));
  EXPECT_FALSE(MayIncludeOsHeaders("cli/tests/x.cc"));
  EXPECT_TRUE(IncludesAnotherModulesPrivates("bench/b.cc", "comm/src/core.h"));
  EXPECT_TRUE(
      IncludesAnotherModulesPrivates("cli/c.cc", "platform/windows/u.h"));
  EXPECT_FALSE(IncludesAnotherModulesPrivates("comm/a.cc", "comm/src/core.h"));
  EXPECT_FALSE(
      IncludesAnotherModulesPrivates("cli/c.cc", "muster/comm/comm.h"));
  EXPECT_FALSE(IncludesAnotherModulesPrivates("tests/t.cc", "comm/src/core.h"));
  EXPECT_TRUE(BreaksCommsGraph("comm/src/core.cc", "comm/gloo/gloo_device.h"));
  EXPECT_TRUE(
      BreaksCommsGraph("comm/shm/s.cc", "comm/gloo/gloo_communicator.h"));
  EXPECT_TRUE(BreaksCommsGraph("comm/gloo/g.cc", "comm/select/select.h"));
  EXPECT_TRUE(BreaksCommsGraph("comm/reduce/r.h", "comm/src/core.h"));
  EXPECT_FALSE(
      BreaksCommsGraph("comm/select/s.cc", "comm/nccl/nccl_backend.h"));
  EXPECT_FALSE(BreaksCommsGraph("comm/direct/d.cc", "comm/reduce/reduce.h"));
  EXPECT_FALSE(BreaksCommsGraph("comm/src/core.cc", "muster/comm/types.h"));
  EXPECT_FALSE(BreaksCommsGraph("tests/comm/t.cc", "comm/gloo/gloo_mesh.h"));
  EXPECT_TRUE(BreaksModuleOrder("store/src/s.cc", "muster/rendezvous/auth.h"));
  EXPECT_TRUE(BreaksModuleOrder("store/src/s.cc", "comm/src/os.h"));
  EXPECT_TRUE(BreaksModuleOrder("comm/api/i.cc", "muster/rendezvous/server.h"));
  EXPECT_TRUE(BreaksModuleOrder("comm/api/i.cc",
                                "rendezvous/src/service/leader_gate.h"));
  EXPECT_FALSE(BreaksModuleOrder("comm/api/i.cc", "muster/store/store.h"));
  EXPECT_FALSE(BreaksModuleOrder("rendezvous/src/r.cc", "muster/store/x.h"));
  EXPECT_FALSE(BreaksModuleOrder("store/src/s.cc", "muster/common/net.h"));
  EXPECT_TRUE(BreaksRendezvousLayers("rendezvous/src/core/c.cc",
                                     "rendezvous/src/service/leader_gate.h"));
  EXPECT_TRUE(
      BreaksRendezvousLayers("rendezvous/src/core/c.cc", "grpcpp/grpcpp.h"));
  EXPECT_TRUE(BreaksRendezvousLayers("rendezvous/src/core/c.cc",
                                     "muster/v1/rendezvous.grpc.pb.h"));
  EXPECT_TRUE(BreaksRendezvousLayers("rendezvous/src/client/c.cc",
                                     "rendezvous/src/service/metrics.h"));
  EXPECT_TRUE(BreaksRendezvousLayers("rendezvous/src/service/s.cc",
                                     "rendezvous/src/server/state_journal.h"));
  EXPECT_TRUE(BreaksRendezvousLayers("rendezvous/src/x.cc",
                                     "rendezvous/src/core/lease.h"));
  EXPECT_FALSE(BreaksRendezvousLayers("rendezvous/src/core/c.cc",
                                      "muster/v1/rendezvous.pb.h"));
  EXPECT_FALSE(BreaksRendezvousLayers("rendezvous/src/server/s.cc",
                                      "rendezvous/src/service/metrics.h"));
  EXPECT_FALSE(BreaksRendezvousLayers("rendezvous/src/local/l.cc",
                                      "rendezvous/src/client/session_inbox.h"));
  EXPECT_FALSE(BreaksRendezvousLayers("tests/rendezvous/t.cc",
                                      "rendezvous/src/server/state_journal.h"));
}

// Calls `check` with (file, line number, line) for every line of every source
// file of the tree.
template <typename F>
void ForEachLine(F check) {
  for (const std::string& rel : SourceFiles()) {
    std::ifstream in(fs::path(SourceDir()) / rel);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) check(rel, n, line);
  }
}

// Fails naming `rule` and every offender when there are any.
void ExpectNone(const std::vector<std::string>& offenders,
                const std::string& rule) {
  EXPECT_TRUE(offenders.empty())
      << "rule: " << rule << ":\n  " << absl::StrJoin(offenders, "\n  ");
}

// "<file>:<n>: includes <open><header><close>" for every include line that
// matches `include` (the header in group 1) and `offends(file, header)`.
template <typename F>
std::vector<std::string> IncludesThat(const std::regex& include, F offends,
                                      const char* open, const char* close) {
  std::vector<std::string> offenders;
  ForEachLine([&](const std::string& rel, int n, const std::string& line) {
    std::smatch m;
    if (std::regex_search(line, m, include) && offends(rel, m[1].str())) {
      offenders.push_back(
          absl::StrCat(rel, ":", n, ": includes ", open, m[1].str(), close));
    }
  });
  return offenders;
}

TEST(LayoutTest, OnlyPlatformHasPosixOrWindowsFolders) {
  std::vector<std::string> offenders;
  const fs::path root = SourceDir();
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string name = it->path().filename().string();
    const std::string rel = fs::relative(it->path(), root).generic_string();
    const std::string top = TopFolder(rel);
    if (name.rfind("build", 0) == 0 || name.rfind('.', 0) == 0 ||
        top == "tests" || top == "scripts" || top == "platform") {
      if (rel != "platform") it.disable_recursion_pending();
      continue;
    }
    if (name == "posix" || name == "windows") offenders.push_back(rel);
  }
  ExpectNone(
      offenders,
      "only platform/ has posix/ or windows/ folders; move the OS "
      "calls into platform/posix and platform/windows behind a header in "
      "platform/include/muster/platform/");
}

TEST(LayoutTest, ModulesIncludeOthersOnlyThroughTheirPublicHeaders) {
  const std::vector<std::string> offenders = IncludesThat(
      std::regex(kQuotedInclude), IncludesAnotherModulesPrivates, "\"", "\"");
  ExpectNone(
      offenders,
      "a module includes another only through its public headers "
      "(\"muster/<module>/...\", from <module>/include/muster/<module>/); "
      "make what is needed public there, or keep it in its module");
}

TEST(LayoutTest, CommsFoldersIncludeOneWay) {
  const std::vector<std::string> offenders =
      IncludesThat(std::regex(kQuotedInclude), BreaksCommsGraph, "\"", "\"");
  ExpectNone(offenders,
             "comm's folders include one way: api/ -> select/ -> the backends "
             "(gloo/, direct/, shm/, nccl/; none includes another) -> "
             "reduce/ (the kernels), and all of them -> src/ (the core, which "
             "includes no backend); hand a backend what it builds on as a "
             "BackendConnector from select/ (tests/layout_test.cc, "
             "kCommFolders)");
}

TEST(LayoutTest, EveryCommFolderHasItsPlaceInTheGraph) {
  std::vector<std::string> offenders;
  std::error_code ec;
  for (const auto& entry :
       fs::directory_iterator(fs::path(SourceDir()) / "comm", ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (name == "include") continue;
    bool known = false;
    for (const FolderRule& f : kCommFolders) known = known || name == f.name;
    if (!known) offenders.push_back(absl::StrCat("comm/", name, "/"));
  }
  ExpectNone(offenders,
             "every folder of comm/ has its place in the include graph: add "
             "it to kCommFolders with the folders it may include, and to "
             "docs/architecture.md's picture");
}

TEST(LayoutTest, StoreAndCommIncludeNothingAboveThem) {
  const std::vector<std::string> offenders =
      IncludesThat(std::regex(kQuotedInclude), BreaksModuleOrder, "\"", "\"");
  ExpectNone(offenders,
             "store/ includes nothing of rendezvous/, agent/, comm/ or cli/, "
             "and comm/ nothing of rendezvous/ (docs/architecture.md's "
             "dependency order); declare a hook in store/ that the module "
             "above implements");
}

TEST(LayoutTest, RendezvousFoldersKeepTheirDirections) {
  std::vector<std::string> offenders = IncludesThat(
      std::regex(kQuotedInclude), BreaksRendezvousLayers, "\"", "\"");
  const std::vector<std::string> system =
      IncludesThat(std::regex(R"(^\s*#\s*include\s*<([^>]+)>)"),
                   BreaksRendezvousLayers, "<", ">");
  offenders.insert(offenders.end(), system.begin(), system.end());
  // Every file of rendezvous/src/ is in one of the folders.
  for (const std::string& rel : SourceFiles("rendezvous")) {
    const std::string folder = RendezvousFolderOf(rel);
    bool known = folder.empty();
    for (const FolderRule& f : kRendezvousFolders) {
      known = known || folder == f.name;
    }
    if (!known) offenders.push_back(absl::StrCat(rel, ": not in a folder"));
  }
  ExpectNone(offenders,
             "rendezvous/src/: core/ includes no gRPC and no other folder, "
             "client/ and service/ include only core/, and every file is in "
             "a folder of kRendezvousFolders (docs/architecture.md, "
             "\"rendezvous/\")");
}

TEST(LayoutTest, OsHeadersOnlyInPlatform) {
  const std::vector<std::string> offenders = IncludesThat(
      std::regex(absl::StrCat(R"(^\s*#\s*include\s*<()", kOsHeaders, R"()>)")),
      [](const std::string& rel, const std::string&) {
        return !MayIncludeOsHeaders(rel);
      },
      "<", ">");
  ExpectNone(offenders,
             "only files in platform/ (tests, bench and examples aside) "
             "include an operating system header; move the OS call behind "
             "platform/include/muster/platform/");
}

TEST(LayoutTest, NoSourceFileOver800LinesInAProductModule) {
  std::vector<std::string> offenders;
  for (const char* module : kModules) {
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
  ExpectNone(offenders,
             absl::StrCat("no source file in a product module is longer than ",
                          kMaxLines, " lines; split it by concern"));
}

}  // namespace
}  // namespace muster
