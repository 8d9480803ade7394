#include "agent/src/stack_capture.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "muster/platform/stack_reader.h"

namespace muster::agent {
namespace {

std::string ReadFrom(const std::string& path, int64_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(offset);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t FileSize(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return in ? static_cast<int64_t>(in.tellg()) : -1;
}

struct ReadyLine {
  uint64_t main = 0;     // 0: the bootstrap has not registered (yet)
  uint64_t watcher = 0;  // the dumping thread (Windows), else 0
};

uint64_t HexIdent(absl::string_view hex) {
  absl::ConsumePrefix(&hex, "0x");
  uint64_t ident = 0;
  return absl::SimpleHexAtoi(hex, &ident) ? ident : 0;
}

// The bootstrap's ready line: "muster-stacks-ready main=HEX[ watcher=HEX]".
ReadyLine ReadReadyLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = absl::StripTrailingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&rest, kStacksReadyMarker)) continue;
    ReadyLine ready;
    const size_t space = rest.find(' ');
    ready.main = HexIdent(rest.substr(0, space));
    if (space != absl::string_view::npos) {
      absl::string_view watcher = rest.substr(space + 1);
      if (absl::ConsumePrefix(&watcher, "watcher="))
        ready.watcher = HexIdent(watcher);
    }
    if (ready.main != 0) return ready;
  }
  return {};
}

v1::RankStacks NativeStacks(const CaptureTarget& t, v1::RankStacks r) {
  r.set_kind("native");
  absl::StatusOr<std::vector<platform::NativeThreadStack>> threads =
      platform::ReadNativeStacks(t.pid);
  if (!threads.ok()) {
    r.set_error(std::string(threads.status().message()));
    return r;
  }
  for (const platform::NativeThreadStack& n : *threads) {
    v1::ThreadStack* s = r.add_threads();
    s->set_tid(n.tid);
    s->set_name(n.name);
    s->set_main(n.main);
    for (const std::string& f : n.frames) s->add_frames(f);
  }
  return r;
}

}  // namespace

void AddStacksEnv(const std::string& stacks_file,
                  std::map<std::string, std::string>* env) {
  if (stacks_file.empty()) return;
  if (platform::StacksSignal() != 0) {
    (*env)[kStacksSignalVariable] = absl::StrCat(platform::StacksSignal());
  } else if (!platform::StacksEventPrefix().empty()) {
    (*env)[kStacksEventVariable] = platform::StacksEventPrefix();
  } else {
    return;
  }
  (*env)[kStacksFileVariable] = stacks_file;
}

std::vector<CaptureTarget> CaptureTargets(
    const std::vector<int>& pids, int rank_offset,
    const std::vector<std::string>& stacks_files) {
  std::vector<CaptureTarget> targets;
  for (size_t i = 0; i < pids.size(); ++i) {
    CaptureTarget t;
    t.pid = pids[i];
    t.local_rank = static_cast<int>(i);
    t.global_rank = rank_offset + static_cast<int>(i);
    if (i < stacks_files.size()) t.python_dump_file = stacks_files[i];
    targets.push_back(std::move(t));
  }
  return targets;
}

std::vector<v1::ThreadStack> ParsePythonDump(const std::string& text,
                                             uint64_t main_ident,
                                             uint64_t watcher_ident) {
  // faulthandler's layout (all_threads=True):
  //   Thread 0x00007f55fd43a6c0 (most recent call first):
  //     File "x.py", line 5 in wait_in_allreduce
  //   <blank>
  //   Current thread 0x00007f55fd6f5040 (most recent call first):
  //     File "<string>", line 7 in <module>
  std::vector<v1::ThreadStack> threads;
  bool skipping = false;  // in the watcher's stack
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (absl::ConsumePrefix(&l, "Current thread ") ||
        absl::ConsumePrefix(&l, "Thread ")) {
      v1::ThreadStack t;
      absl::string_view id = l.substr(0, l.find(' '));
      absl::ConsumePrefix(&id, "0x");
      uint64_t ident = 0;
      (void)absl::SimpleHexAtoi(id, &ident);
      skipping = watcher_ident != 0 && ident == watcher_ident;
      if (skipping) continue;
      t.set_tid(static_cast<int64_t>(ident));
      t.set_main(ident != 0 && ident == main_ident);
      threads.push_back(std::move(t));
      continue;
    }
    if (skipping || threads.empty() || !absl::ConsumePrefix(&l, "File \""))
      continue;
    const size_t quote = l.find('"');
    if (quote == absl::string_view::npos) continue;
    const absl::string_view file = l.substr(0, quote);
    const size_t in = l.rfind(" in ");
    if (in == absl::string_view::npos) continue;
    // The bootstrap's frames (runpy, the -c code) are the launcher's, not
    // the user's: left out.
    if (file == "<string>" || file == "<frozen runpy>" ||
        absl::EndsWith(file, "/runpy.py") || absl::EndsWith(file, "\\runpy.py"))
      continue;
    threads.back().add_frames(std::string(l.substr(in + 4)));
  }
  std::stable_partition(threads.begin(), threads.end(),
                        [](const v1::ThreadStack& t) { return t.main(); });
  return threads;
}

v1::RankStacks CaptureWorker(const CaptureTarget& t, absl::Time deadline) {
  v1::RankStacks r;
  r.set_global_rank(t.global_rank);
  r.set_local_rank(t.local_rank);
  r.set_pid(t.pid);
  const ReadyLine ready = t.python_dump_file.empty()
                              ? ReadyLine()
                              : ReadReadyLine(t.python_dump_file);
  if (ready.main == 0) return NativeStacks(t, std::move(r));
  r.set_kind("python");
  const int64_t before = FileSize(t.python_dump_file);
  if (absl::Status sent = platform::SignalForStacks(t.pid); !sent.ok()) {
    r.set_error(std::string(sent.message()));
    return r;
  }
  // faulthandler writes the dump from its signal handler in one go, thread
  // by thread: it is complete once the file stops growing.
  int64_t size = before;
  const absl::Time started = absl::Now();
  absl::Time changed = started;
  const absl::Time until = std::min(deadline, absl::Now() + absl::Seconds(3));
  while (absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
    const int64_t now_size = FileSize(t.python_dump_file);
    if (now_size != size) {
      size = now_size;
      changed = absl::Now();
    } else if (size > before &&
               absl::Now() - changed > absl::Milliseconds(150)) {
      break;
    }
  }
  if (size <= before && platform::StacksSignal() == 0) {
    // Windows: the dumping thread needs the GIL, which a thread stuck in C
    // code may hold; the native stacks show where that is.
    return NativeStacks(t, std::move(r));
  }
  if (size <= before) {
    r.set_error(absl::StrCat("the Python interpreter of process ", t.pid,
                             " wrote no stacks within ",
                             absl::FormatDuration(absl::Trunc(
                                 until - started, absl::Milliseconds(1))),
                             " (does the program block or replace the "
                             "handler of signal ",
                             platform::StacksSignal(), "?)"));
    return r;
  }
  for (v1::ThreadStack& s : ParsePythonDump(
           ReadFrom(t.python_dump_file, before), ready.main, ready.watcher))
    *r.add_threads() = std::move(s);
  return r;
}

void StackCapturer::SetWorkers(std::vector<CaptureTarget> workers,
                               std::string hostname, std::string node_id) {
  absl::MutexLock lock(&mu_);
  workers_ = std::move(workers);
  hostname_ = std::move(hostname);
  node_id_ = std::move(node_id);
}

v1::StacksReport StackCapturer::Capture(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::StacksReport report;
  absl::MutexLock one(&capture_mu_);
  std::vector<CaptureTarget> workers;
  std::string hostname;
  std::string node_id;
  {
    absl::MutexLock lock(&mu_);
    workers = workers_;
    hostname = hostname_;
    node_id = node_id_;
  }
  if (workers.empty()) {
    report.set_error("no workers are running on this node now");
    return report;
  }
  for (const CaptureTarget& t : workers) {
    v1::RankStacks r;
    if (absl::Now() >= deadline) {
      r.set_global_rank(t.global_rank);
      r.set_local_rank(t.local_rank);
      r.set_pid(t.pid);
      r.set_error("not read: the capture's time was up");
    } else {
      r = CaptureWorker(t, deadline);
    }
    r.set_hostname(hostname);
    r.set_node_id(node_id);
    *report.add_ranks() = std::move(r);
  }
  return report;
}

}  // namespace muster::agent
