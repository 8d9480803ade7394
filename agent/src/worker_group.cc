// WorkerGroup on a platform::ProcessLauncher: torchrun's -r/-t routing turned
// into each process's stream routes, ranks into names and line prefixes, and a
// failed worker's error file read into its WorkerExit. No OS call here: the
// processes, pipes and signals are the launcher's (platform/posix/).
#include "muster/agent/worker_group.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace muster::agent {
namespace {

int StreamsFor(const std::map<int, int>& by_rank, int local_rank) {
  auto it = by_rank.find(local_rank);
  if (it != by_rank.end()) return it->second;
  it = by_rank.find(-1);
  return it != by_rank.end() ? it->second : kStdNone;
}

bool IsIdentifierChar(char c, bool first) {
  return c == '_' || absl::ascii_isalpha(static_cast<unsigned char>(c)) ||
         (!first && absl::ascii_isdigit(static_cast<unsigned char>(c)));
}

}  // namespace

std::string ExpandLinePrefix(const std::string& line_template,
                             const std::string& role_name, int rank,
                             int local_rank, const std::string& hostname) {
  const std::map<std::string, std::string> values = {
      {"role_name", role_name},
      {"rank", std::to_string(rank)},
      {"local_rank", std::to_string(local_rank)},
      {"hostname", hostname}};
  std::string out;
  const std::string& t = line_template;
  size_t i = 0;
  while (i < t.size()) {
    if (t[i] != '$') {
      out.push_back(t[i++]);
      continue;
    }
    if (i + 1 < t.size() && t[i + 1] == '$') {  // $$
      out.push_back('$');
      i += 2;
      continue;
    }
    const bool braced = i + 1 < t.size() && t[i + 1] == '{';
    size_t start = i + (braced ? 2 : 1);
    size_t end = start;
    while (end < t.size() && IsIdentifierChar(t[end], end == start)) ++end;
    const bool complete =
        end > start && (!braced || (end < t.size() && t[end] == '}'));
    auto it =
        complete ? values.find(t.substr(start, end - start)) : values.end();
    if (it == values.end()) {  // safe_substitute leaves it as written
      out.push_back('$');
      ++i;
      continue;
    }
    out.append(it->second);
    i = end + (braced ? 1 : 0);
  }
  return out;
}

std::string ReadErrorFile(const std::string& path) {
  return ReadErrorFileContents(path).message;
}

ErrorFileContents ReadErrorFileContents(const std::string& path) {
  ErrorFileContents out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  auto it = j.find("message");
  if (it == j.end()) return out;
  if (it->is_string()) {
    out.message = it->get<std::string>();
    return out;
  }
  if (it->is_object()) {
    auto inner = it->find("message");
    if (inner != it->end() && inner->is_string())
      out.message = inner->get<std::string>();
    auto extra = it->find("extraInfo");
    if (extra != it->end() && extra->is_object()) {
      auto stack = extra->find("py_callstack");
      if (stack != extra->end() && stack->is_string()) {
        out.traceback = stack->get<std::string>();
        // The root cause travels to every agent: keep its tail (where the
        // error is) when a traceback is very long.
        constexpr size_t kMaxTraceback = 16 * 1024;
        if (out.traceback.size() > kMaxTraceback) {
          out.traceback = absl::StrCat(
              "...\n",
              out.traceback.substr(out.traceback.size() - kMaxTraceback));
        }
      }
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(
    std::vector<WorkerSpec> workers, OutputOptions output) {
  return Start(platform::ProcessLauncher::Default(), std::move(workers),
               std::move(output));
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(
    platform::ProcessLauncher* launcher, std::vector<WorkerSpec> workers,
    OutputOptions output, std::function<void()> on_exit) {
  if (workers.empty()) return absl::InvalidArgumentError("no workers to start");
  bool any_files = false;
  for (const auto* m : {&output.redirects, &output.tees}) {
    for (const auto& [rank, streams] : *m) {
      if (streams < kStdNone || streams > kStdAll) {
        return absl::InvalidArgumentError(
            absl::StrCat("redirect/tee value ", streams, " for local rank ",
                         rank, " is not 0, 1, 2 or 3"));
      }
      any_files = any_files || streams != kStdNone;
    }
  }
  if (any_files && output.attempt_dir.empty()) {
    return absl::InvalidArgumentError(
        "redirects or tee need a log directory (attempt_dir is empty); give "
        "--log-dir");
  }
  for (const WorkerSpec& w : workers) {
    if (w.argv.empty() || w.argv[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker local_rank ", w.local_rank,
                       " has no program to run (empty argv)"));
    }
  }

  platform::LaunchOptions options;
  options.console_stdout = output.console_stdout_fd;
  options.console_stderr = output.console_stderr_fd;
  options.on_exit = std::move(on_exit);
  if (!output.attempt_dir.empty()) {
    const std::filesystem::path dir(output.attempt_dir);
    options.filtered_stdout_file = (dir / "filtered_stdout.log").string();
    options.filtered_stderr_file = (dir / "filtered_stderr.log").string();
    options.stdout_filters = output.duplicate_stdout_filters;
    options.stderr_filters = output.duplicate_stderr_filters;
  }
  std::vector<platform::ProcessSpec> specs;
  for (const WorkerSpec& w : workers) {
    platform::ProcessSpec p;
    p.argv = w.argv;
    p.env = w.env;
    p.cpu_affinity = w.cpu_affinity;
    p.name = absl::StrCat("worker local_rank ", w.local_rank);
    p.line_prefix = ExpandLinePrefix(
        output.line_prefix_template.empty() ? kDefaultLinePrefix
                                            : output.line_prefix_template,
        output.role, w.global_rank, w.local_rank, output.hostname);
    const int redirected = StreamsFor(output.redirects, w.local_rank);
    const int teed = StreamsFor(output.tees, w.local_rank);
    const bool console_ok = output.console_local_ranks.empty() ||
                            output.console_local_ranks.count(w.local_rank) > 0;
    for (int which : {kStdOut, kStdErr}) {
      platform::StreamRoute& r =
          which == kStdOut ? p.stdout_route : p.stderr_route;
      // tee wins over redirect for the console (as torchrun: tee = redirect +
      // tail).
      r.console = console_ok && (!(redirected & which) || (teed & which));
      // As torchrun: a teed line is tailed from the log file with a header;
      // one that is not teed is the worker's own output on the console.
      r.prefixed = (teed & which) || output.prefix_all_lines;
      // As torchrun: the filtered files copy what is teed to the console
      // (--local-ranks-filter removes a rank's tee there too).
      r.filtered = (teed & which) && console_ok;
      if ((redirected | teed) & which) {
        r.file = (std::filesystem::path(output.attempt_dir) /
                  std::to_string(w.local_rank) /
                  (which == kStdOut ? "stdout.log" : "stderr.log"))
                     .string();
      }
    }
    // A stale error file (an earlier attempt's) must not be taken for this
    // attempt's.
    if (!w.error_file.empty()) {
      std::error_code ec;
      std::filesystem::remove(w.error_file, ec);
    }
    specs.push_back(std::move(p));
  }
  auto group = launcher->Start(std::move(specs), std::move(options));
  if (!group.ok()) return group.status();
  return std::unique_ptr<WorkerGroup>(
      new WorkerGroup(*std::move(group), std::move(workers)));
}

WorkerGroup::WorkerGroup(std::unique_ptr<platform::ProcessGroup> group,
                         std::vector<WorkerSpec> workers)
    : group_(std::move(group)), workers_(std::move(workers)) {}

WorkerGroup::~WorkerGroup() = default;

GroupStatus WorkerGroup::Convert(platform::GroupStatus status) {
  GroupStatus out;
  out.state = status.state;
  for (platform::ProcessExit& e : status.exits) {
    const WorkerSpec& spec = workers_[e.index];
    WorkerExit w;
    static_cast<platform::ProcessExit&>(w) = std::move(e);
    w.local_rank = spec.local_rank;
    w.global_rank = spec.global_rank;
    // Why the agent killed it (the watchdog) is reported instead of its error
    // file.
    w.error_message = std::exchange(w.kill_reason, std::string());
    if (!w.succeeded() && !spec.error_file.empty() && w.error_message.empty()) {
      absl::MutexLock lock(&mu_);
      auto it = error_files_.find(w.index);
      if (it == error_files_.end()) {
        it = error_files_
                 .emplace(w.index, ReadErrorFileContents(spec.error_file))
                 .first;
      }
      w.error_message = it->second.message;
      w.traceback = it->second.traceback;
    }
    out.exits.push_back(std::move(w));
  }
  return out;
}

GroupStatus WorkerGroup::Poll() { return Convert(group_->Poll()); }
GroupStatus WorkerGroup::Wait(absl::Duration timeout) {
  return Convert(group_->Wait(timeout));
}
GroupStatus WorkerGroup::Stop(int signal, absl::Duration grace) {
  return Convert(group_->Stop(signal, grace));
}
void WorkerGroup::Signal(int signal) { group_->Signal(signal); }
bool WorkerGroup::Kill(int local_rank, const std::string& reason) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].local_rank == local_rank) return group_->Kill(i, reason);
  }
  return false;
}
std::vector<int> WorkerGroup::pids() const { return group_->pids(); }

}  // namespace muster::agent
