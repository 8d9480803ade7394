// test_worker: a stand-in for a training program, for the worker group's tests
// and the end-to-end tests. Every flag is optional; they combine. Order of what
// it does:
//   1. --pid-dir: write DIR/<RANK>.pid        2. --print-env        3. --stderr
//   4. --sleep                                5. fail, if this rank and restart
//   count should:
//        --lines output, --error-message file, then --signal or --exit-code
//   6. otherwise: "test_worker rank R done" on stdout, then the --lines output,
//   exit 0.
// The --lines output comes last so that its unterminated last line really is
// the stream's end.
//
// Flags:
//   --print-env            one line `env NAME=VALUE` per contract variable
//   (`<unset>` if absent)
//   --sleep=SECONDS        sleep (float) before exiting
//   --exit-code=N          exit with N ...
//   --fail-rank=R          ... only on global rank R (others exit 0); default:
//   every rank
//   --fail-restart-count=K fail only while TORCHELASTIC_RESTART_COUNT == K
//   --error-message=TEXT   before failing, write TORCHELASTIC_ERROR_FILE
//   (PyTorch @record format)
//   --signal=NAME|NUM      before failing, raise that signal instead of exiting
//   --ignore-sigterm       ignore SIGTERM
//   --pid-dir=DIR          write DIR/<RANK>.pid with our pid at start
//   --lines=N --line-len=L N lines of L 'x' to stdout, each in several small
//   write()s, the last
//                          one without '\n'
//   --stderr=TEXT          print TEXT on stderr
// Standard library and POSIX only.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include "tests/workers/worker_env_names.h"

namespace {

struct Options {
  bool print_env = false;
  double sleep_s = 0;
  bool has_exit_code = false;
  int exit_code = 0;
  long fail_rank = -1;
  long fail_restart_count = -1;
  bool has_error_message = false;
  std::string error_message;
  int signal = 0;
  bool ignore_sigterm = false;
  std::string pid_dir;
  long lines = 0;
  long line_len = 80;
  bool has_stderr = false;
  std::string stderr_text;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "test_worker: %s\n", why.c_str());
  std::exit(2);
}

// Writes all of `s` with as few write() calls as the kernel allows.
void WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

long ParseLong(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0)
    Usage(flag + ": not an integer: '" + v + "'");
  return n;
}

int ParseSignal(const std::string& v) {
  if (!v.empty() && v[0] >= '0' && v[0] <= '9')
    return static_cast<int>(ParseLong("--signal", v));
  std::string name = v;
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  static const struct {
    const char* name;
    int sig;
  } kSignals[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},
                  {"ILL", SIGILL},   {"TRAP", SIGTRAP}, {"ABRT", SIGABRT},
                  {"BUS", SIGBUS},   {"FPE", SIGFPE},   {"KILL", SIGKILL},
                  {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
                  {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}};
  for (const auto& s : kSignals) {
    if (name == s.name) return s.sig;
  }
  Usage("--signal: unknown signal '" + v + "'");
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    const bool has_value = eq != std::string::npos;
    const std::string value = has_value ? arg.substr(eq + 1) : "";
    auto need = [&]() {
      if (!has_value) Usage(flag + " needs a value (" + flag + "=...)");
    };
    if (flag == "--print-env") {
      o.print_env = true;
    } else if (flag == "--ignore-sigterm") {
      o.ignore_sigterm = true;
    } else if (flag == "--sleep") {
      need();
      char* end = nullptr;
      o.sleep_s = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || o.sleep_s < 0)
        Usage("--sleep: bad seconds: " + value);
    } else if (flag == "--exit-code") {
      need();
      o.has_exit_code = true;
      o.exit_code = static_cast<int>(ParseLong(flag, value));
    } else if (flag == "--fail-rank") {
      need();
      o.fail_rank = ParseLong(flag, value);
    } else if (flag == "--fail-restart-count") {
      need();
      o.fail_restart_count = ParseLong(flag, value);
    } else if (flag == "--error-message") {
      need();
      o.has_error_message = true;
      o.error_message = value;
    } else if (flag == "--signal") {
      need();
      o.signal = ParseSignal(value);
    } else if (flag == "--pid-dir") {
      need();
      o.pid_dir = value;
    } else if (flag == "--lines") {
      need();
      o.lines = ParseLong(flag, value);
    } else if (flag == "--line-len") {
      need();
      o.line_len = ParseLong(flag, value);
    } else if (flag == "--stderr") {
      need();
      o.has_stderr = true;
      o.stderr_text = value;
    } else {
      Usage("unknown flag '" + arg + "'");
    }
  }
  return o;
}

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

void SleepSeconds(double s) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const double end = static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9 + s;
  while (true) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double left =
        end - (static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9);
    if (left <= 0) return;
    timespec ts;
    ts.tv_sec = static_cast<time_t>(left);
    ts.tv_nsec =
        static_cast<long>((left - static_cast<double>(ts.tv_sec)) * 1e9);
    nanosleep(&ts, nullptr);  // EINTR (an ignored or handled signal) just loops
  }
}

// Each line in about four write()s, the '\n' with the last: a reader that
// forwards whatever it read at once would tear lines.
void PrintLines(long count, long len) {
  const std::string x(static_cast<size_t>(len), 'x');
  const size_t piece = std::max<size_t>(1, static_cast<size_t>(len) / 4);
  for (long i = 0; i < count; ++i) {
    std::string_view rest(x);
    const bool last = i + 1 == count;
    while (!rest.empty()) {
      const size_t n = std::min(piece, rest.size());
      if (n == rest.size() && !last) {
        WriteAll(1, std::string(rest) + "\n");
      } else {
        WriteAll(1, rest.substr(0, n));
      }
      rest.remove_prefix(n);
      if (i % 16 == 0)
        sched_yield();  // let other workers' pieces land in between
    }
  }
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

// PyTorch's @record format (torch.distributed.elastic.multiprocessing.errors).
void WriteErrorFile(const std::string& message, const std::string& rank) {
  const std::string path = Env("TORCHELASTIC_ERROR_FILE", "");
  if (path.empty()) return;
  const std::string callstack =
      "Traceback (most recent call last):\n  File \"test_worker\", in "
      "main\ntest_worker: rank " +
      rank + " failed on purpose: " + message;
  const std::string json =
      "{\"message\": {\"message\": \"" + JsonEscape(message) +
      "\", \"extraInfo\": {\"py_callstack\": \"" + JsonEscape(callstack) +
      "\", \"timestamp\": \"" + std::to_string(std::time(nullptr)) + "\"}}}";
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "test_worker: cannot write error file %s: %s\n",
                 path.c_str(), std::strerror(errno));
    return;
  }
  WriteAll(fd, json);
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  const std::string rank = Env("RANK", "unknown");

  if (o.ignore_sigterm) signal(SIGTERM, SIG_IGN);
  if (!o.pid_dir.empty()) {
    const std::string path = o.pid_dir + "/" + rank + ".pid";
    const std::string tmp = path + ".tmp";
    // Written whole, then renamed: a test that sees the file sees the whole
    // pid.
    const int fd =
        open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      Usage("--pid-dir: cannot write " + tmp + ": " + std::strerror(errno));
    WriteAll(fd, std::to_string(getpid()) + "\n");
    close(fd);
    if (rename(tmp.c_str(), path.c_str()) != 0)
      Usage("--pid-dir: cannot rename to " + path);
  }
  if (o.print_env) {
    std::string out;
    for (const char* name : muster::testing::kWorkerEnvNames) {
      out += std::string("env ") + name + "=" + Env(name, "<unset>") + "\n";
    }
    WriteAll(1, out);
  }
  if (o.has_stderr) WriteAll(2, o.stderr_text + "\n");
  if (o.sleep_s > 0) SleepSeconds(o.sleep_s);

  bool fail = (o.has_exit_code && o.exit_code != 0) || o.signal != 0;
  if (o.fail_rank >= 0 && rank != std::to_string(o.fail_rank)) fail = false;
  if (o.fail_restart_count >= 0 && Env("TORCHELASTIC_RESTART_COUNT", "") !=
                                       std::to_string(o.fail_restart_count)) {
    fail = false;
  }
  if (fail) {
    if (o.lines > 0) PrintLines(o.lines, o.line_len);
    if (o.has_error_message) WriteErrorFile(o.error_message, rank);
    if (o.signal != 0) {
      signal(o.signal, SIG_DFL);
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, o.signal);
      sigprocmask(SIG_UNBLOCK, &set, nullptr);
      raise(o.signal);
      // Only when the signal did not end us (SIGCHLD, ...): fall through to the
      // exit code.
    }
    _exit(o.has_exit_code ? o.exit_code : 1);
  }
  WriteAll(1, "test_worker rank " + rank + " done\n");
  if (o.lines > 0) PrintLines(o.lines, o.line_len);
  return 0;
}
