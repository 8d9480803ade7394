#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "muster/common/net.h"
#include "muster/platform/net.h"
#include "tests/testing/ports.h"

extern char** environ;

namespace muster::testing {

std::string BinDir() {
  const char* dir = std::getenv("MUSTER_BIN_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  char buf[4096] = {0};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buf, static_cast<size_t>(n)))
      .parent_path()
      .string();
}

std::string BinPath(const std::string& name) { return BinDir() + "/" + name; }

std::vector<std::string> MusterArgv(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {BinPath("muster")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

std::string FastRdzvConf(double last_call_s, int max_attempts) {
  return absl::StrCat(
      "last_call_timeout=", last_call_s,
      ",keep_alive_interval=0.25,keep_alive_max_attempt=", max_attempts);
}

std::string SourceDir() {
  const char* dir = std::getenv("MUSTER_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() /
                      ("muster-test-" + tag + "-XXXXXX"))
                         .string();
  if (mkdtemp(tmpl.data()) == nullptr) return "/tmp";
  return tmpl;
}

std::map<std::string, std::string> EnvWithoutLauncher() {
  std::map<std::string, std::string> env;
  for (const char* name :
       {"MUSTER_STORE_ENDPOINT", "MUSTER_STORE_PREFIX", "RANK", "WORLD_SIZE",
        "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "MUSTER_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    env[name] = "";
  }
  return env;
}

namespace {

// The first port of the kernel's ephemeral range (32768 by default).
int EphemeralLow() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (f >> low && low > 2048) return low;
  return 32768;
}

}  // namespace

int FreePort() {
  // Random tries in the 12,000 ports below the ephemeral range, away from the
  // defaults that tests run on unchanged (musterd 29400, torch 29500).
  static std::mt19937 random(static_cast<uint32_t>(
      std::random_device{}() ^ static_cast<uint32_t>(getpid())));
  const int high = EphemeralLow();
  const int low = std::max(1024, high - 12000);
  std::uniform_int_distribution<int> pick(low, high - 1);
  platform::Net& net = platform::SystemNet();
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(random);
    if (std::abs(port - 29400) < 16 || std::abs(port - 29500) < 16) continue;
    if (net.TryBind("127.0.0.1", port, /*reuse_address=*/false) == 0 &&
        net.TryBind("0.0.0.0", port, /*reuse_address=*/false) == 0)
      return port;
  }
  auto port = PickFreePort("127.0.0.1");
  return port.ok() ? *port : 0;
}

Subprocess::Subprocess(std::vector<std::string> argv,
                       std::map<std::string, std::string> env) {
  output_path_ = MakeTempDir("out") + "/output.log";
  std::map<std::string, std::string> full;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) full[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (auto& [k, v] : env) full[k] = v;
  std::vector<std::string> env_strings;
  for (auto& [k, v] : full) env_strings.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);

#ifdef __linux__
  const pid_t parent = getpid();
#endif
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
#ifdef __linux__
    // A test binary that is killed (a ctest timeout) takes its children along;
    // the agents' own workers follow them (their parent-death signal).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
#endif
    int fd = open(output_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND,
                  0644);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(cargv[0], cargv.data(), cenv.data());
    dprintf(2, "exec %s: %s\n", cargv[0], strerror(errno));
    _exit(127);
  }
  if (pid_ > 0) setpgid(pid_, pid_);
}

Subprocess::~Subprocess() {
  if (!exit_code_.has_value()) Kill();
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  if (exit_code_.has_value()) return exit_code_;
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ =
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR) {
      exit_code_ = -2;
      return exit_code_;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

int Subprocess::WaitOrKill(absl::Duration timeout) {
  std::optional<int> rc = Wait(timeout);
  if (rc.has_value()) return *rc;
  Kill();
  return -1;
}

void Subprocess::Signal(int sig) {
  if (!exit_code_.has_value()) kill(pid_, sig);
}

void Subprocess::Kill() {
  if (exit_code_.has_value() || pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  exit_code_ = -1;
}

bool Subprocess::Running() { return !Wait(absl::ZeroDuration()).has_value(); }

std::string Subprocess::Output() const {
  std::ifstream f(output_path_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Subprocess::WaitForOutput(const std::string& text,
                               absl::Duration timeout) const {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (Output().find(text) != std::string::npos) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return Output().find(text) != std::string::npos;
}

std::vector<std::string> LinesWith(const std::string& text,
                                   const std::string& needle) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.find(needle) != absl::string_view::npos) out.emplace_back(line);
  }
  return out;
}

bool ProcessAlive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string content((std::istreambuf_iterator<char>(stat)),
                      std::istreambuf_iterator<char>());
  size_t close = content.rfind(')');
  if (close == std::string::npos || close + 2 >= content.size()) return false;
  return content[close + 2] != 'Z';
}

int AwaitPortFile(const std::string& path, Subprocess& proc,
                  absl::Duration timeout) {
  int port = 0;
  WaitUntil(
      [&] {
        port = ReadPortFile(path);
        // Once it exited, waiting longer cannot help.
        return port > 0 || proc.Wait(absl::ZeroDuration()).has_value();
      },
      timeout, absl::Milliseconds(10));
  return port;
}

std::vector<pid_t> PidsInDir(const std::string& dir) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".pid") continue;
    std::ifstream f(entry.path());
    int pid = 0;
    if (f >> pid && pid > 0) pids.push_back(pid);
  }
  return pids;
}

bool AllExited(const std::vector<pid_t>& pids, absl::Duration timeout) {
  return WaitUntil(
      [&] {
        for (pid_t p : pids) {
          if (ProcessAlive(p)) return false;
        }
        return true;
      },
      timeout);
}

DutyCycle::DutyCycle(pid_t pid, absl::Duration stopped, absl::Duration running)
    : pid_(pid) {
  thread_ = std::thread([this, stopped, running] {
    while (!stop_.load()) {
      if (kill(pid_, SIGSTOP) != 0) return;
      absl::SleepFor(stopped);
      kill(pid_, SIGCONT);
      absl::SleepFor(running);
    }
  });
}

DutyCycle::~DutyCycle() {
  stop_.store(true);
  thread_.join();
  kill(pid_, SIGCONT);
}

}  // namespace muster::testing
