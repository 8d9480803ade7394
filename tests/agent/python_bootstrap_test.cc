// The Python bootstrap of `muster stacks` (agent/src/python_prelude.cc) run by
// a real Python: its Windows branch too, on Linux, with sys.platform set to
// "win32" and a stand-in ctypes whose kernel32 events are threading.Events
// (no Windows Python runs here; win_python_stacks_test checks the agent's
// side of the protocol under wine). The dump it writes is what
// ParsePythonDump reads: the main thread first, its dumping thread left out.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/src/python_prelude.h"
#include "agent/src/stack_capture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace muster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs before the bootstrap: Windows as far as the bootstrap can tell.
constexpr char kFakeWindows[] =
    "import sys, types, threading\n"
    "_events = {}\n"
    "class _Fn:\n"
    "    def __init__(self, f): self.f = f\n"
    "    def __call__(self, *a): return self.f(*a)\n"
    "def _create(attrs, manual, initial, name):\n"
    "    _events[name] = threading.Event()\n"
    "    return name\n"
    "def _wait(h, ms):\n"
    "    _events[h].wait(); _events[h].clear(); return 0\n"
    "class _Kernel32:\n"
    "    CreateEventW = _Fn(_create)\n"
    "    WaitForSingleObject = _Fn(_wait)\n"
    "_ct = types.ModuleType('ctypes')\n"
    "_ct.WinDLL = lambda name, use_last_error=False: _Kernel32()\n"
    "_ct.c_void_p = _ct.c_int = _ct.c_wchar_p = _ct.c_uint32 = object\n"
    "_ct._events = _events\n"
    "sys.modules['ctypes'] = _ct\n"
    "sys.platform = 'win32'\n";

// The user's script: sets the event (as the agent's SignalForStacks would)
// while stuck in a named function, and says which events there are.
constexpr char kProgram[] =
    "import ctypes, os, sys, time\n"
    "def stuck_in_data_loader():\n"
    "    print('events', sorted(ctypes._events), flush=True)\n"
    "    for e in ctypes._events.values(): e.set()\n"
    "    time.sleep(1)\n"
    "stuck_in_data_loader()\n"
    "print('left', [k for k in os.environ if k.startswith('MUSTER_STACKS')])\n";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PythonBootstrapTest, WindowsBranchDumpsWhenTheEventIsSet) {
  if (access("/usr/bin/python3", X_OK) != 0)
    GTEST_SKIP() << "no /usr/bin/python3";
  char dir_template[] = "/tmp/muster-bootstrap-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string file = absl::StrCat(dir_template, "/stacks.txt");
  const std::string script = absl::StrCat(dir_template, "/train.py");
  std::ofstream(script) << kProgram;
  bool applied = false;
  const std::vector<std::string> argv = WithStacksPrelude(
      {"/usr/bin/python3", "-u", script}, "/usr/bin/python3", {}, &applied);
  ASSERT_TRUE(applied);
  ASSERT_EQ(argv.size(), 5u);
  EXPECT_EQ(argv[3].find('"'), std::string::npos)
      << "a double quote in the bootstrap";
  testing::Subprocess python({"/usr/bin/python3", "-u", "-c",
                              absl::StrCat(kFakeWindows, argv[3]), script},
                             {{kStacksFileVariable, file},
                              {kStacksEventVariable, "Local\\muster-stacks-"}});
  ASSERT_EQ(python.WaitOrKill(absl::Seconds(30)), 0) << python.Output();
  // The event is named after the worker's pid; the variables are gone.
  EXPECT_THAT(python.Output(),
              HasSubstr(absl::StrCat("events ['Local\\\\muster-stacks-",
                                     python.pid(), "']")));
  EXPECT_THAT(python.Output(), HasSubstr("left []"));
  const std::string text = ReadAll(file);
  // "muster-stacks-ready main=HEX watcher=HEX", then the dump.
  const std::string first = text.substr(0, text.find('\n'));
  absl::string_view rest = first;
  ASSERT_TRUE(absl::ConsumePrefix(&rest, kStacksReadyMarker)) << text;
  std::vector<std::string> idents = absl::StrSplit(rest, " watcher=");
  ASSERT_EQ(idents.size(), 2u) << text;
  uint64_t main = 0, watcher = 0;
  ASSERT_TRUE(absl::SimpleHexAtoi(idents[0], &main)) << text;
  ASSERT_TRUE(absl::SimpleHexAtoi(idents[1], &watcher)) << text;
  EXPECT_NE(watcher, 0u);
  EXPECT_THAT(text, HasSubstr(absl::StrCat("Current thread 0x")));
  std::vector<v1::ThreadStack> threads =
      ParsePythonDump(text.substr(first.size()), main, watcher);
  ASSERT_EQ(threads.size(), 1u) << text;
  EXPECT_TRUE(threads[0].main());
  EXPECT_THAT(threads[0].frames(),
              ElementsAre("stuck_in_data_loader", "<module>"))
      << text;
  std::remove(file.c_str());
  std::remove(script.c_str());
  rmdir(dir_template);
}

}  // namespace
}  // namespace muster::agent
